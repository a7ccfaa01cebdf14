/* pair.h - what the differential programs (streamcheck, evcheck,
 * threadcheck) share. Each runs a server (the parent, listening on
 * SERVER_ADDR) and a client (a forked child, bound to CLIENT_ADDR) that move
 * in lockstep through two pipes and print one line per observation: the
 * server's lines, then the client's. Nothing that varies between runs is
 * printed, so a run over kernel TCP and a run under librsock (RDMA) must
 * give identical output. With RSOCK_EXPECT_TRANSPORT=N every connected
 * stream must report that rsock_fd_transport() value (3 = RDMA), else the
 * program fails.
 *
 * usage: PROGRAM SERVER_ADDR CLIENT_ADDR [PORT]   (IPv4 or IPv6 addresses)
 * A program defines server(lfd) and client() and calls pair_main(). */
#ifndef RSOCK_TEST_PAIR_H
#define RSOCK_TEST_PAIR_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAIR_UNUSED __attribute__((unused))

static FILE *out;
static int s2c[2], c2s[2] PAIR_UNUSED;   /* server -> client, client -> server */
static const char *srv_addr, *cli_addr;
static int port, failures;
static const char *pair_name = "pair";
/* Set around a connection whose transport is not checked (a client that is
 * a forked child of a process that already uses the RDMA device). */
static int any_transport PAIR_UNUSED;

static inline void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
	fflush(out);
}

static inline void sig(int p[2])
{
	char c = 1;

	if (write(p[1], &c, 1) != 1)
		abort();
}

static inline void await(int p[2])
{
	char c;

	if (read(p[0], &c, 1) != 1)
		abort();
}

static inline void check_transport(int fd, const char *who)
{
	const char *want = getenv("RSOCK_EXPECT_TRANSPORT");
	int (*ft)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "rsock_fd_transport");
	int got;

	if (!want || any_transport)
		return;
	got = ft ? ft(fd) : -2;
	if (got != atoi(want)) {
		fprintf(stderr, "%s: %s fd %d transport %d, expected %s\n", pair_name, who, fd, got, want);
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	}
}

/* An IPv4 or IPv6 socket address; the family follows the text. */
union pair_sa {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
};

static inline union pair_sa addr_of(const char *ip, int p)
{
	union pair_sa a;

	memset(&a, 0, sizeof(a));
	if (inet_pton(AF_INET, ip, &a.in4.sin_addr) == 1) {
		a.in4.sin_family = AF_INET;
		a.in4.sin_port = htons((uint16_t)p);
	} else if (inet_pton(AF_INET6, ip, &a.in6.sin6_addr) == 1) {
		a.in6.sin6_family = AF_INET6;
		a.in6.sin6_port = htons((uint16_t)p);
	} else {
		fprintf(stderr, "%s: bad address %s\n", pair_name, ip);
		exit(2);
	}
	return a;
}

static inline socklen_t addr_len(const union pair_sa *a)
{
	return a->sa.sa_family == AF_INET6 ? sizeof(a->in6) : sizeof(a->in4);
}

/* The family of the test's addresses (the server's). */
static inline int pair_family(void)
{
	return addr_of(srv_addr, 0).sa.sa_family;
}

/* Whether a and b are the same address and port. */
static inline int same_addr(const union pair_sa *a, const union pair_sa *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return 0;
	if (a->sa.sa_family == AF_INET6)
		return a->in6.sin6_port == b->in6.sin6_port &&
		       !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, sizeof(a->in6.sin6_addr));
	return a->in4.sin_port == b->in4.sin_port && a->in4.sin_addr.s_addr == b->in4.sin_addr.s_addr;
}

/* Bind fd to the client address and connect it to the server: connect's result. */
static inline int dial_fd(int fd)
{
	union pair_sa me = addr_of(cli_addr, 0), peer = addr_of(srv_addr, port);

	if (bind(fd, &me.sa, addr_len(&me)))
		return -1;
	return connect(fd, &peer.sa, addr_len(&peer));
}

/* A connected client stream (exits on failure). */
static inline int dial(void)
{
	int fd = socket(pair_family(), SOCK_STREAM, 0);

	if (fd < 0 || dial_fd(fd)) {
		fprintf(stderr, "%s: connect: %s\n", pair_name, strerror(errno));
		exit(3);
	}
	check_transport(fd, "client");
	return fd;
}

/* The next accepted stream (exits on failure). */
static inline int take(int lfd)
{
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0) {
		fprintf(stderr, "%s: accept: %s\n", pair_name, strerror(errno));
		exit(3);
	}
	check_transport(fd, "server");
	return fd;
}

static inline ssize_t read_full(int fd, void *b, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, (char *)b + got, n - got);
		if (r <= 0)
			return r < 0 ? r : (ssize_t)got;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static inline ssize_t write_full(int fd, const void *b, size_t n)
{
	size_t put = 0;

	while (put < n) {
		ssize_t r = write(fd, (const char *)b + put, n - put);
		if (r <= 0)
			return r < 0 ? r : (ssize_t)put;
		put += (size_t)r;
	}
	return (ssize_t)put;
}

static inline uint32_t fnv(uint32_t h, const uint8_t *p, size_t n)
{
	while (n--)
		h = (h ^ *p++) * 16777619u;
	return h;
}

/* Parse the arguments, listen, fork the client, run both sides, print the
 * client's lines after the server's. Returns main's exit status. */
static inline int pair_main(int argc, char **argv, const char *name, int default_port,
			    void (*server)(int lfd), void (*client)(void))
{
	union pair_sa a;
	int lfd, one = 1, status, cfd;
	char path[] = "/tmp/pair-XXXXXX", line[512];
	pid_t pid;
	FILE *f;

	pair_name = name;
	if (argc < 3) {
		fprintf(stderr, "usage: %s SERVER_ADDR CLIENT_ADDR [PORT]\n", name);
		return 2;
	}
	srv_addr = argv[1];
	cli_addr = argv[2];
	port = argc > 3 ? atoi(argv[3]) : default_port;
	signal(SIGPIPE, SIG_IGN);
	if (pipe(s2c) || pipe(c2s))
		return 2;
	cfd = mkstemp(path);
	if (cfd < 0)
		return 2;
	/* The client is forked before anything starts a thread in this process
	 * (librsock's connection-manager thread starts at listen()): a fork
	 * from a multithreaded process may inherit a lock another thread holds
	 * (ASan's allocator has no fork handler). It waits for the listener. */
	pid = fork();
	if (pid == 0) {
		out = fdopen(cfd, "w");
		await(s2c);
		client();
		fflush(out);
		_exit(failures ? 1 : 0);
	}
	a = addr_of(srv_addr, port);
	lfd = socket(a.sa.sa_family, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, &a.sa, addr_len(&a)) || listen(lfd, 64)) {
		fprintf(stderr, "%s: listen: %s\n", name, strerror(errno));
		kill(pid, SIGKILL);
		return 2;
	}
	sig(s2c);
	out = stdout;
	server(lfd);
	waitpid(pid, &status, 0);
	fflush(stdout);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		fputs(line, stdout);
	if (f)
		fclose(f);
	unlink(path);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		failures++;
	return failures ? 1 : 0;
}

#endif
