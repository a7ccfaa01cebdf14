/* execserver.c - an inetd-style server: accept, fork, and in the child make
 * the connection standard input and output and exec a program on it.
 *
 * usage: execserver ADDR PORT COUNT PROGRAM [ARGS...]
 * Serves COUNT connections, then waits for the children and exits 0. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	int lfd, one = 1, n;

	if (argc < 5) {
		fprintf(stderr, "usage: execserver ADDR PORT COUNT PROGRAM [ARGS...]\n");
		return 2;
	}
	a.sin_port = htons((uint16_t)atoi(argv[2]));
	n = atoi(argv[3]);
	if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1)
		return 2;
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 16)) {
		perror("execserver: listen");
		return 2;
	}
	for (int i = 0; i < n; i++) {
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			perror("execserver: accept");
			return 3;
		}
		if (fork() == 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			close(fd);
			execvp(argv[4], argv + 4);
			_exit(127);
		}
		close(fd);
	}
	while (wait(NULL) > 0)
		;
	return 0;
}
