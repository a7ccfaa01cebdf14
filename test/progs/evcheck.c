/* evcheck.c - readiness as an application observes it (epoll level- and
 * edge-triggered, EPOLLONESHOT, EPOLLRDHUP, EPOLLOUT after a full send
 * buffer, nested instances, poll and select on an epoll descriptor, plain
 * descriptors mixed in, a registration made before connect(), dup and close
 * while registered, close from another thread, an instance waited on and
 * then polled from outside), for the differential test:
 * run once over kernel TCP and once under librsock (RDMA); the outputs must
 * be identical.
 *
 * usage: evcheck SERVER_ADDR CLIENT_ADDR [PORT]
 * The parent is the server, a forked child the client; each scenario uses a
 * fresh connection, and the two sides move in lockstep through pipes. With
 * RSOCK_EXPECT_TRANSPORT=N every connected stream must report that
 * rsock_fd_transport() value (3 = RDMA). */
#include "pair.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>









static void nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static const char *mask(uint32_t m)
{
	static char b[128];
	static const struct { uint32_t bit; const char *name; } names[] = {
		{EPOLLIN, "IN"}, {EPOLLPRI, "PRI"}, {EPOLLOUT, "OUT"}, {EPOLLRDNORM, "RDNORM"},
		{EPOLLWRNORM, "WRNORM"}, {EPOLLERR, "ERR"}, {EPOLLHUP, "HUP"}, {EPOLLRDHUP, "RDHUP"},
	};

	b[0] = 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (m & names[i].bit) {
			strcat(b, b[0] ? "|" : "");
			strcat(b, names[i].name);
		}
	if (!b[0])
		strcpy(b, "-");
	return b;
}

/* One epoll_wait, reported as "n tag:mask ..." with tags sorted. */
static const char *ew(int ep, int timeout)
{
	static char b[256];
	struct epoll_event ev[8];
	int n = epoll_wait(ep, ev, 8, timeout);

	if (n < 0) {
		snprintf(b, sizeof(b), "err %s", strerrorname_np(errno));
		return b;
	}
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (ev[j].data.u64 < ev[i].data.u64) {
				struct epoll_event t = ev[i];
				ev[i] = ev[j];
				ev[j] = t;
			}
	snprintf(b, sizeof(b), "%d", n);
	for (int i = 0; i < n; i++)
		snprintf(b + strlen(b), sizeof(b) - strlen(b), " %llu:%s",
			 (unsigned long long)ev[i].data.u64, mask(ev[i].events));
	return b;
}

/* A return value and, for -1, the errno name. */
static const char *res(int rc)
{
	static char b[64];

	snprintf(b, sizeof(b), "%d %s", rc, rc < 0 ? strerrorname_np(errno) : "ok");
	return b;
}

static void add(int ep, int fd, uint32_t events, uint64_t tag)
{
	struct epoll_event e = {.events = events, .data.u64 = tag};

	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e))
		say("add %d failed %s", (int)tag, strerrorname_np(errno));
}

static void mod(int ep, int fd, uint32_t events, uint64_t tag)
{
	struct epoll_event e = {.events = events, .data.u64 = tag};

	if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e))
		say("mod %d failed %s", (int)tag, strerrorname_np(errno));
}

static ssize_t drain(int fd)
{
	char b[65536];
	ssize_t r, total = 0;

	while ((r = recv(fd, b, sizeof(b), MSG_DONTWAIT)) > 0)
		total += r;
	return total;
}

struct waiter {
	int ep;
	const char *result;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;

	w->result = strdup(ew(w->ep, 600));
	return NULL;
}

/* ---- server ---- */
static void server(int lfd)
{
	int fd, ep, ep2, ep3;
	char b[64];

	/* 1: level-triggered, and the listener's readiness */
	ep = epoll_create1(EPOLL_CLOEXEC);
	add(ep, lfd, EPOLLIN, 100);
	say("S1 listener idle: %s", ew(ep, 100));
	sig(s2c);
	say("S1 listener pending: %s", ew(ep, 5000));
	fd = take(lfd);
	epoll_ctl(ep, EPOLL_CTL_DEL, lfd, NULL);
	add(ep, fd, EPOLLIN, 1);
	say("S1 empty: %s", ew(ep, 100));
	sig(s2c);
	say("S1 data: %s", ew(ep, 5000));
	say("S1 read %zd", recv(fd, b, 4, 0));
	say("S1 still: %s", ew(ep, 0));
	say("S1 drain %zd", drain(fd));
	say("S1 drained: %s", ew(ep, 100));
	mod(ep, fd, EPOLLIN | EPOLLOUT | EPOLLRDNORM | EPOLLWRNORM, 2);
	say("S1 mod out: %s", ew(ep, 100));
	close(fd);
	say("S1 closed: %s", ew(ep, 100));
	close(ep);
	sig(s2c);

	/* 2: edge-triggered */
	fd = take(lfd);
	ep = epoll_create1(0);
	add(ep, fd, EPOLLIN | EPOLLET, 1);
	say("S2 empty: %s", ew(ep, 100));
	sig(s2c);
	say("S2 edge: %s", ew(ep, 5000));
	say("S2 no new edge: %s", ew(ep, 100));
	sig(s2c);
	say("S2 second edge: %s", ew(ep, 5000));
	say("S2 drain %zd", drain(fd));
	say("S2 after drain: %s", ew(ep, 100));
	sig(s2c);
	say("S2 third edge: %s", ew(ep, 5000));
	sig(s2c);
	close(fd);
	close(ep);

	/* 3: one-shot */
	fd = take(lfd);
	ep = epoll_create1(0);
	add(ep, fd, EPOLLIN | EPOLLONESHOT, 1);
	sig(s2c);
	say("S3 shot: %s", ew(ep, 5000));
	sig(s2c);
	usleep(100000);
	say("S3 disabled: %s", ew(ep, 100));
	mod(ep, fd, EPOLLIN | EPOLLONESHOT, 2);
	say("S3 rearmed: %s", ew(ep, 1000));
	say("S3 drain %zd", drain(fd));
	mod(ep, fd, EPOLLIN | EPOLLONESHOT, 3);
	say("S3 rearmed empty: %s", ew(ep, 100));
	sig(s2c);
	close(fd);
	close(ep);

	/* 4: peer's shutdown(SHUT_WR), then ours */
	fd = take(lfd);
	ep = epoll_create1(0);
	add(ep, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP, 1);
	say("S4 open: %s", ew(ep, 100));
	sig(s2c);
	usleep(200000);
	say("S4 peer shut: %s", ew(ep, 5000));
	say("S4 read %zd", recv(fd, b, sizeof(b), 0));
	shutdown(fd, SHUT_WR);
	usleep(100000);
	say("S4 both shut: %s", ew(ep, 100));
	close(fd);
	close(ep);

	/* 5: EPOLLOUT once a full send buffer drains (the client writes) */
	fd = take(lfd);
	await(c2s); /* the client's buffer is full */
	usleep(100000);
	{
		char *big = malloc(1 << 20);
		ssize_t r, total = 0;
		int polls = 0;
		nonblock(fd);
		/* Read until the client says it saw EPOLLOUT. */
		struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = c2s[0], .events = POLLIN}};
		for (;;) {
			while ((r = recv(fd, big, 1 << 20, 0)) > 0)
				total += r;
			if (poll(p, 2, 5000) <= 0 || (p[1].revents & POLLIN))
				break;
			polls++;
		}
		await(c2s);
		say("S5 read some %d", total > 0);
		free(big);
	}
	close(fd);

	/* 6: a reset (the client closes with SO_LINGER 0) */
	fd = take(lfd);
	ep = epoll_create1(0);
	add(ep, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP, 1);
	say("S6 open: %s", ew(ep, 100));
	sig(s2c);
	await(c2s);
	usleep(200000);
	say("S6 reset: %s", ew(ep, 5000));
	{
		ssize_t r = recv(fd, b, sizeof(b), 0);
		say("S6 read %zd %s", r, r < 0 ? strerrorname_np(errno) : "0");
	}
	close(fd);
	close(ep);

	/* 7: nesting: poll, select and an outer epoll over the instance */
	fd = take(lfd);
	ep = epoll_create1(0);
	ep2 = epoll_create1(0);
	add(ep, fd, EPOLLIN, 1);
	add(ep2, ep, EPOLLIN, 7);
	{
		struct pollfd p = {.fd = ep, .events = POLLIN};
		int rc;
		say("S7 poll idle %d", poll(&p, 1, 100));
		sig(s2c);
		say("S7 outer: %s", ew(ep2, 5000));
		p.revents = 0;
		rc = poll(&p, 1, 1000);
		say("S7 poll data %d revents %s", rc, mask((uint16_t)p.revents));
		fd_set r;
		FD_ZERO(&r);
		FD_SET(ep, &r);
		struct timeval tv = {1, 0};
		rc = select(ep + 1, &r, NULL, NULL, &tv);
		say("S7 select %d isset %d", rc, FD_ISSET(ep, &r));
		say("S7 inner: %s", ew(ep, 0));
		say("S7 drain %zd", drain(fd));
		say("S7 inner drained: %s", ew(ep, 0));
		say("S7 outer drained: %s", ew(ep2, 100));
		sig(s2c);
	}
	close(fd);
	close(ep2);
	close(ep);

	/* 8: plain descriptors mixed in, epoll_pwait2's timeout */
	fd = take(lfd);
	{
		int pfd[2], efd = eventfd(0, EFD_NONBLOCK);
		uint64_t one = 1;
		struct timespec ts = {0, 50000000};
		struct epoll_event ev[4];
		if (pipe(pfd))
			abort();
		ep = epoll_create1(0);
		add(ep, fd, EPOLLIN, 1);
		add(ep, pfd[0], EPOLLIN, 2);
		add(ep, efd, EPOLLIN, 3);
		say("S8 pwait2 idle %d", epoll_pwait2(ep, ev, 4, &ts, NULL));
		if (write(efd, &one, sizeof(one)) != sizeof(one) || write(pfd[1], "x", 1) != 1)
			abort();
		say("S8 plain: %s", ew(ep, 1000));
		sig(s2c);
		usleep(200000);
		say("S8 all: %s", ew(ep, 1000));
		sig(s2c);
		/* timerfd and signalfd beside the stream (its 3 bytes stay unread) */
		{
			sigset_t m;
			char pb[8];
			struct signalfd_siginfo si;
			struct itimerspec it = {.it_value = {0, 300000000}};
			uint64_t v;
			int sfd, tfd;
			if (read(efd, &v, sizeof(v)) != sizeof(v) || read(pfd[0], pb, 1) != 1)
				abort();
			sigemptyset(&m);
			sigaddset(&m, SIGUSR1);
			sigprocmask(SIG_BLOCK, &m, NULL);
			sfd = signalfd(-1, &m, SFD_NONBLOCK | SFD_CLOEXEC);
			tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
			add(ep, tfd, EPOLLIN, 4);
			add(ep, sfd, EPOLLIN, 5);
			say("S8 timerfd and signalfd idle: %s", ew(ep, 0));
			timerfd_settime(tfd, 0, &it, NULL);
			kill(getpid(), SIGUSR1);
			say("S8 signal: %s", ew(ep, 1000));
			usleep(400000);
			say("S8 timer too: %s", ew(ep, 1000));
			say("S8 read signalfd %zd timerfd %zd", read(sfd, &si, sizeof(si)),
			    read(tfd, &v, sizeof(v)));
			say("S8 consumed: %s", ew(ep, 0));
			close(sfd);
			close(tfd);
			sigprocmask(SIG_UNBLOCK, &m, NULL);
		}
		close(pfd[0]);
		close(pfd[1]);
		close(efd);
	}
	close(fd);
	close(ep);

	/* 9: dup, then close the registered number: the registration stays */
	fd = take(lfd);
	ep = epoll_create1(0);
	add(ep, fd, EPOLLIN, 9);
	{
		int fd2 = dup(fd);
		close(fd);
		sig(s2c);
		say("S9 dup keeps it: %s", ew(ep, 5000));
		say("S9 drain %zd", drain(fd2));
		sig(s2c);
		close(fd2);
	}
	say("S9 all closed: %s", ew(ep, 100));
	close(ep);

	/* 10: close from another thread while one waits */
	fd = take(lfd);
	ep = epoll_create1(0);
	add(ep, fd, EPOLLIN, 10);
	{
		struct waiter w = {.ep = ep};
		pthread_t th;
		pthread_create(&th, NULL, wait_thread, &w);
		usleep(100000);
		close(fd);
		sig(s2c); /* the client writes to a closed peer now */
		pthread_join(th, NULL);
		say("S10 waiter: %s", w.result);
		free((void *)w.result);
	}
	close(ep);
	await(c2s);

	/* 11: the client registers before connect (nothing to do here but talk) */
	fd = take(lfd);
	await(c2s);
	say("S11 write %zd", write(fd, "hello", 5));
	await(c2s);
	close(fd);

	/* 12: errors the kernel gives */
	fd = take(lfd);
	ep = epoll_create1(0);
	ep3 = epoll_create1(0);
	{
		struct epoll_event e = {.events = EPOLLIN, .data.u64 = 1};
		add(ep, fd, EPOLLIN, 1);
		say("S12 add twice %s", res(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e)));
		say("S12 mod absent %s", res(epoll_ctl(ep3, EPOLL_CTL_MOD, fd, &e)));
		say("S12 del absent %s", res(epoll_ctl(ep3, EPOLL_CTL_DEL, fd, &e)));
		e.events = EPOLLIN | EPOLLEXCLUSIVE;
		say("S12 add exclusive %s", res(epoll_ctl(ep3, EPOLL_CTL_ADD, fd, &e)));
		say("S12 mod exclusive %s", res(epoll_ctl(ep3, EPOLL_CTL_MOD, fd, &e)));
		e.events = EPOLLIN | EPOLLONESHOT | EPOLLEXCLUSIVE;
		say("S12 oneshot exclusive %s", res(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e)));
		say("S12 wait maxevents 0 %s", res(epoll_wait(ep, &e, 0, 0)));
		say("S12 bad op %s", res(epoll_ctl(ep, 99, fd, &e)));
		say("S12 ctl on socket %s", res(epoll_ctl(fd, EPOLL_CTL_ADD, ep, &e)));
		say("S12 del %s", res(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL)));
	}
	sig(s2c);
	close(fd);
	close(ep);
	close(ep3);

	/* 13: a stream accepted but not used yet, waited on behind one in use
	 * (a broker's select): nothing is readable before its client writes.
	 * Its RDMA handshake waits for its first use, and its kernel socket
	 * held the client's hello meanwhile: the library reported it readable,
	 * the read said EAGAIN, and ncat --broker closed the stream. */
	{
		int a = take(lfd), b2, n;
		struct pollfd p[2];
		fd_set rs;
		struct timeval tv = {0, 200000};
		b2 = accept(lfd, NULL, NULL); /* (no transport check: that is a use) */
		FD_ZERO(&rs);
		FD_SET(a, &rs);
		FD_SET(b2, &rs);
		n = select((a > b2 ? a : b2) + 1, &rs, NULL, NULL, &tv);
		say("S13 select idle: %d", n);
		p[0] = (struct pollfd){.fd = a, .events = POLLIN};
		p[1] = (struct pollfd){.fd = b2, .events = POLLIN};
		say("S13 poll idle: %d", poll(p, 2, 200));
		sig(s2c);
		FD_ZERO(&rs);
		FD_SET(a, &rs);
		FD_SET(b2, &rs);
		tv = (struct timeval){5, 0};
		n = select((a > b2 ? a : b2) + 1, &rs, NULL, NULL, &tv);
		say("S13 select data: %d first %d second %d", n, FD_ISSET(a, &rs) != 0, FD_ISSET(b2, &rs) != 0);
		say("S13 read %zd", read(b2, b, sizeof(b)));
		check_transport(b2, "server");
		sig(s2c);
		close(a);
		close(b2);
	}

	/* 14: the instance's last stream changes hands (a splice into it while
	 * it is non-blocking moves an RDMA stream to TCP, which wakes every
	 * epoll instance) and is closed: the instance then reports the pipe
	 * it also holds, with the application's data and nothing else (the
	 * previous library handed its own wake-up to the application, a
	 * pointer that haproxy took for a descriptor and crashed on). */
	{
		int p[2], q[2];
		fd = take(lfd);
		nonblock(fd);
		ep = epoll_create1(0);
		add(ep, fd, EPOLLIN, 1);
		if (pipe(p) || pipe(q))
			abort();
		add(ep, p[0], EPOLLIN, 7);
		say("S14 write pipe %zd", write(p[1], "x", 1));
		say("S14 write q %zd", write(q[1], "abc", 3));
		say("S14 splice %zd", splice(q[0], NULL, fd, NULL, 3, SPLICE_F_NONBLOCK));
		close(fd);
		say("S14 after close: %s", ew(ep, 100));
		sig(s2c);
		close(ep);
		close(p[0]);
		close(p[1]);
		close(q[0]);
		close(q[1]);
	}

	/* 15: an instance the application first waits on itself, then polls
	 * from outside: a byte that comes while poll() sleeps wakes it (the
	 * library left the stream unarmed after the epoll_wait, lazy arming,
	 * and must arm it once the instance is nested). */
	fd = take(lfd);
	ep = epoll_create1(0);
	add(ep, fd, EPOLLIN, 15);
	sig(s2c);
	say("S15 first: %s", ew(ep, 5000));
	say("S15 drain %zd", drain(fd));
	say("S15 drained: %s", ew(ep, 0));
	sig(s2c);
	{
		struct pollfd p = {.fd = ep, .events = POLLIN};
		int rc = poll(&p, 1, 3000);
		say("S15 poll %d revents %s", rc, mask((uint16_t)p.revents));
	}
	say("S15 then: %s", ew(ep, 0));
	say("S15 drain %zd", drain(fd));
	sig(s2c);
	close(fd);
	close(ep);
}

/* ---- client ---- */
static void client(void)
{
	int fd, ep;
	char b[64];

	/* 1 */
	await(s2c);
	fd = dial();
	await(s2c);
	say("C1 write %zd", write(fd, "0123456789", 10));
	await(s2c);
	close(fd);

	/* 2 */
	fd = dial();
	await(s2c);
	say("C2 write %zd", write(fd, "abcdefghij", 10));
	await(s2c);
	say("C2 write %zd", write(fd, "klmno", 5));
	await(s2c);
	say("C2 write %zd", write(fd, "pq", 2));
	await(s2c);
	close(fd);

	/* 3 */
	fd = dial();
	await(s2c);
	say("C3 write %zd", write(fd, "one", 3));
	await(s2c);
	say("C3 write %zd", write(fd, "two", 3));
	await(s2c);
	close(fd);

	/* 4 */
	fd = dial();
	await(s2c);
	say("C4 shut %d", shutdown(fd, SHUT_WR));
	say("C4 read %zd", read(fd, b, sizeof(b)));
	close(fd);

	/* 5: fill the send buffer, then wait for EPOLLOUT */
	fd = dial();
	nonblock(fd);
	ep = epoll_create1(0);
	add(ep, fd, EPOLLOUT, 5);
	{
		static char chunk[65536];
		ssize_t r;
		int full = 0;
		for (int i = 0; i < 100000; i++) {
			r = send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL);
			if (r < 0) {
				full = errno == EAGAIN;
				break;
			}
		}
		say("C5 full %d", full);
		sig(c2s);
		say("C5 space: %s", ew(ep, 10000));
		sig(c2s);
	}
	close(ep);
	close(fd);

	/* 6 */
	fd = dial();
	await(s2c);
	{
		struct linger lg = {.l_onoff = 1, .l_linger = 0};
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(fd);
		sig(c2s);
	}

	/* 7 */
	fd = dial();
	await(s2c);
	say("C7 write %zd", write(fd, "nest", 4));
	await(s2c);
	close(fd);

	/* 8 */
	fd = dial();
	await(s2c);
	say("C8 write %zd", write(fd, "mix", 3));
	await(s2c);
	close(fd);

	/* 9 */
	fd = dial();
	await(s2c);
	say("C9 write %zd", write(fd, "dup", 3));
	await(s2c);
	close(fd);

	/* 10 */
	fd = dial();
	await(s2c);
	say("C10 write %zd", send(fd, "x", 1, MSG_NOSIGNAL));
	say("C10 read %zd", read(fd, b, sizeof(b)));
	close(fd);
	sig(c2s);

	/* 11: registered before connect(), non-blocking connect */
	fd = socket(pair_family(), SOCK_STREAM | SOCK_NONBLOCK, 0);
	ep = epoll_create1(0);
	add(ep, fd, EPOLLOUT, 11);
	{
		int rc = dial_fd(fd), err = -1;
		socklen_t el = sizeof(err);
		say("C11 connect %d %s", rc, rc ? strerrorname_np(errno) : "0");
		say("C11 connected: %s", ew(ep, 5000));
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
		say("C11 so_error %d", err);
		check_transport(fd, "client");
		mod(ep, fd, EPOLLIN, 12);
		sig(c2s);
		say("C11 data: %s", ew(ep, 5000));
		say("C11 read %zd", read(fd, b, sizeof(b)));
		sig(c2s);
	}
	close(ep);
	close(fd);

	/* 12 */
	fd = dial();
	await(s2c);
	close(fd);

	/* 13 */
	{
		int a = dial(), b2 = dial();
		await(s2c);
		say("C13 write %zd", write(b2, "late", 4));
		await(s2c);
		close(a);
		close(b2);
	}

	/* 14 */
	fd = dial();
	await(s2c);
	say("C14 read %zd", read_full(fd, b, 3));
	close(fd);

	/* 15 */
	fd = dial();
	await(s2c);
	say("C15 write %zd", write(fd, "one", 3));
	await(s2c);
	usleep(200000); /* the server sleeps in poll() on its instance */
	say("C15 write %zd", write(fd, "two", 3));
	await(s2c);
	close(fd);
}

int main(int argc, char **argv)
{
	return pair_main(argc, argv, "evcheck", 7472, server, client);
}
