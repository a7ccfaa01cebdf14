/* libearly.c - socket I/O from a shared library constructor.
 *
 * early_main links this library, so its constructor runs before main() and,
 * under LD_PRELOAD, typically before librsock's own constructor has run: the
 * first socket calls reach librsock while it is not initialised yet. The
 * constructor creates a loopback listener (or connects to the port in
 * EARLY_PORT, on 127.0.0.1, when set), connects, sends and receives a few
 * bytes and records every result in early_result for main() to print. The
 * connected descriptors stay open so that main() can keep using them. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The record libearly.c fills and early_main.c prints: the same definition
 * is in both files (keep them identical; no header, so that the sources
 * Makefile.am lists are complete). */
#define EARLY_MAX_STEPS 32

struct early_step {
	char name[32];
	long ret;
	int err;
};

struct early_result {
	int ran;
	int external;
	int listener, client, server; /* descriptors left open, -1 when none */
	int nsteps;
	struct early_step steps[EARLY_MAX_STEPS];
};

extern struct early_result early_result;

struct early_result early_result = {.listener = -1, .client = -1, .server = -1};

static void step(const char *name, long r)
{
	struct early_step *s;

	if (early_result.nsteps >= EARLY_MAX_STEPS)
		return;
	s = &early_result.steps[early_result.nsteps++];
	strncpy(s->name, name, sizeof(s->name) - 1);
	s->ret = r;
	s->err = r < 0 ? errno : 0;
}

static ssize_t read_full(int fd, char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -1 : (ssize_t)got;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

__attribute__((constructor)) static void early_ctor(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	const char *port = getenv("EARLY_PORT");
	char buf[32];
	int l = -1, c, s = -1;
	long r;

	early_result.ran = 1;
	if (port && *port) {
		/* an external echo-less server: only connect and send */
		a.sin_port = htons((uint16_t)atoi(port));
		early_result.external = 1;
	} else {
		step("socket.listener", (l = socket(AF_INET, SOCK_STREAM, 0)) < 0 ? -1 : 0);
		step("bind", bind(l, (struct sockaddr *)&a, sizeof(a)));
		step("listen", listen(l, 4));
		step("getsockname", getsockname(l, (struct sockaddr *)&a, &alen));
	}
	step("socket.client", (c = socket(AF_INET, SOCK_STREAM, 0)) < 0 ? -1 : 0);
	step("connect", connect(c, (struct sockaddr *)&a, sizeof(a)));
	if (!early_result.external) {
		step("accept", (s = accept(l, NULL, NULL)) < 0 ? -1 : 0);
		step("send", send(c, "early-bird", 10, 0));
		r = read_full(s, buf, 10);
		step("read", r);
		step("data.ok", r == 10 && !memcmp(buf, "early-bird", 10) ? 1 : 0);
		step("write.reply", write(s, "worm", 4));
		r = recv(c, buf, 4, MSG_WAITALL);
		step("recv.reply", r);
		step("reply.ok", r == 4 && !memcmp(buf, "worm", 4) ? 1 : 0);
	} else {
		step("send", send(c, "early-bird\n", 11, 0));
	}
	early_result.listener = l;
	early_result.client = c;
	early_result.server = s;
}
