/* passthrough.c - N calls of one intercepted function on a descriptor the
 * library does not track (a pipe or a UDP socket), for bench/passthrough.sh
 * to count instructions with and without the preload. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 2 ? strtol(argv[2], NULL, 10) : 100000;
	const char *what = argc > 1 ? argv[1] : "read";
	int p[2], u = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	char b[16] = {0};
	int v;
	socklen_t vl = sizeof(v);
	struct pollfd pfd;

	if (pipe2(p, O_NONBLOCK) || u < 0)
		return 1;
	pfd.fd = p[0];
	pfd.events = POLLIN;
	for (long i = 0; i < n; i++) {
		if (!strcmp(what, "read"))
			(void)!read(p[0], b, sizeof(b));          /* EAGAIN */
		else if (!strcmp(what, "write"))
			(void)!write(p[1], b, 0);                 /* 0 bytes */
		else if (!strcmp(what, "recv"))
			(void)!recv(u, b, sizeof(b), 0);          /* EAGAIN */
		else if (!strcmp(what, "getsockopt"))
			(void)!getsockopt(u, SOL_SOCKET, SO_TYPE, &v, &vl);
		else if (!strcmp(what, "fcntl"))
			(void)!fcntl(p[0], F_GETFL);
		else if (!strcmp(what, "poll"))
			(void)!poll(&pfd, 1, 0);
		else
			return 2;
	}
	return 0;
}
