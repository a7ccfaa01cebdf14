/* spawnvm: a server that starts its children in its own memory, as libuv
 * and posix_spawn-like code do: clone(CLONE_VM | CLONE_VFORK), then, in the
 * child, close_range(3, ~0) or dup2 onto 0 and 1, then execve. It speaks
 * the protocol of subproc.py's client (test/rdma/forkexec.bats).
 *
 * Usage: spawnvm ADDR PORT
 *
 * It accepts one stream; five times it reads exactly 100000 bytes, runs
 * /bin/true in a child that closes every descriptor from 3, and sends the
 * bytes back in upper case. Then a child takes the stream as its stdin and
 * stdout and runs `head -c 6 | tr a-z A-Z`; the server then sends "end"
 * and closes. Exits 0 when every step succeeded.
 * Without librsock it is a plain server (and passes). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MSG 100000

extern char **environ;

struct job {
	int fd;		   /* the stream given as stdin and stdout, or -1 */
	char *const *argv; /* what to run */
};

static int child(void *arg)
{
	struct job *j = arg;

	if (j->fd >= 0 && (dup2(j->fd, 0) < 0 || dup2(j->fd, 1) < 0))
		_exit(126);
	close_range(3, ~0u, 0);
	execve(j->argv[0], j->argv, environ);
	_exit(127);
}

/* Run j in a child sharing our memory; its exit status, or -1. */
static int spawn(struct job *j)
{
	size_t sz = 256 * 1024;
	char *stack = malloc(sz);
	int st, pid;

	if (!stack)
		return -1;
	pid = clone(child, stack + sz, CLONE_VM | CLONE_VFORK | SIGCHLD, j);
	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		free(stack);
		return -1;
	}
	free(stack);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int read_exact(int fd, char *b, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static int write_all(int fd, const char *b, size_t n)
{
	while (n) {
		ssize_t r = write(fd, b, n);
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static char b[MSG];
	char *const t_argv[] = {"/bin/true", NULL};
	char *const sh_argv[] = {"/bin/sh", "-c", "head -c 6 | tr a-z A-Z", NULL};
	struct sockaddr_in a = {.sin_family = AF_INET};
	int l, c, one = 1;

	if (argc != 3 || inet_pton(AF_INET, argv[1], &a.sin_addr) != 1) {
		fprintf(stderr, "usage: spawnvm ADDR PORT\n");
		return 2;
	}
	a.sin_port = htons((unsigned short)atoi(argv[2]));
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4) ||
	    (c = accept(l, NULL, NULL)) < 0) {
		perror("spawnvm: listen or accept");
		return 1;
	}
	for (int i = 0; i < 5; i++) {
		struct job j = {-1, t_argv};
		if (read_exact(c, b, MSG)) {
			fprintf(stderr, "spawnvm: message %d: short read\n", i);
			return 1;
		}
		if (spawn(&j) != 0) {
			fprintf(stderr, "spawnvm: /bin/true failed\n");
			return 1;
		}
		for (int k = 0; k < MSG; k++)
			b[k] = (char)toupper((unsigned char)b[k]);
		if (write_all(c, b, MSG)) {
			perror("spawnvm: write");
			return 1;
		}
	}
	struct job j = {c, sh_argv};
	if (spawn(&j) != 0 || write_all(c, "end", 3)) {
		fprintf(stderr, "spawnvm: the child with the stream failed\n");
		return 1;
	}
	close(c);
	printf("spawnvm: 5 echoes, a child on the stream\n");
	return 0;
}
