/* early_main.c - prints what libearly's constructor did, then keeps using
 * the descriptors it opened (they were created before librsock finished its
 * own initialisation, when preloaded).
 *
 * usage: early_main [--expect-preload]
 *   --expect-preload: the connected streams must report RSOCK_TRANSPORT_TCP
 *   through rsock_fd_transport (looked up with dlsym); mismatches go to
 *   stderr and the exit status. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
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

static const char *ename(int e)
{
	const char *n = e ? strerrorname_np(e) : "0";
	return n ? n : "E?";
}

int main(int argc, char **argv)
{
	int expect_preload = argc > 1 && !strcmp(argv[1], "--expect-preload");
	int failures = 0;
	char buf[16];

	alarm(30);
	printf("early: constructor ran: %d\n", early_result.ran);
	for (int i = 0; i < early_result.nsteps; i++) {
		const struct early_step *s = &early_result.steps[i];
		if (s->ret < 0)
			printf("early: %s: -1 %s\n", s->name, ename(s->err));
		else
			printf("early: %s: %ld\n", s->name, s->ret);
		if (s->ret < 0 || (strstr(s->name, ".ok") && s->ret != 1))
			failures++;
	}
	if (expect_preload) {
		int (*tr)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "rsock_fd_transport");
		/* RSOCK_EXPECT_TRANSPORT, else 4 (RSOCK_TRANSPORT_SHM): both ends
		 * run the library on this host */
		const char *w = getenv("RSOCK_EXPECT_TRANSPORT");
		int want = w && *w ? atoi(w) : 4;
		if (!tr) {
			fprintf(stderr, "early_main: rsock_fd_transport not found (no preload?)\n");
			failures++;
		} else {
			if (tr(early_result.client) != want) {
				fprintf(stderr, "early_main: client fd transport %d\n", tr(early_result.client));
				failures++;
			}
			if (!early_result.external && tr(early_result.server) != want) {
				fprintf(stderr, "early_main: server fd transport %d\n", tr(early_result.server));
				failures++;
			}
		}
	}
	if (!early_result.external && early_result.server >= 0) {
		/* the early descriptors still work from main() */
		ssize_t w = write(early_result.client, "from-main", 9);
		ssize_t r = recv(early_result.server, buf, 9, MSG_WAITALL);
		printf("main: write: %zd\n", w);
		printf("main: recv: %zd %s\n", r, r == 9 && !memcmp(buf, "from-main", 9) ? "ok" : "BAD");
		if (r != 9 || memcmp(buf, "from-main", 9))
			failures++;
		shutdown(early_result.client, SHUT_WR);
		r = read(early_result.server, buf, sizeof(buf));
		printf("main: eof: %zd\n", r);
		close(early_result.server);
		close(early_result.listener);
	}
	close(early_result.client);
	printf("early: %s\n", failures ? "FAILED" : "ok");
	return failures ? 1 : 0;
}
