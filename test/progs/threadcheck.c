/* threadcheck.c - threads on streams as an application observes them, for
 * the differential test (kernel TCP versus librsock over RDMA):
 *   1. full duplex on one socket: one thread sends 32 MB while another
 *      receives 32 MB, at both ends at once (checksums compared);
 *   2. 8 threads, each with its own connection, 2000 echo round trips each;
 *   3. close() from another thread while one is blocked in recv(): as with
 *      TCP, the blocked call keeps the stream and still gets the peer's data;
 *   4. shutdown(SHUT_RD) from another thread wakes a blocked recv() with 0;
 *   5. one thread waits in epoll_wait() and reads while another takes the
 *      stream out of the instance and puts it back (EPOLL_CTL_DEL, ADD), and
 *      the peer keeps writing: the waiter gets only the application's own
 *      events (never a foreign data word) and every byte;
 *   6. full duplex as ruby does it: non-blocking sockets, one thread
 *      writing and one reading each, every wait a poll() of its own on the
 *      one socket, at both ends, 4 connections at once (a lost wake-up
 *      hangs it).
 *   7. a thread sleeps in epoll_wait() on an instance that holds only a
 *      pipe when another adds a stream with data waiting (apache's event
 *      MPM: its listener sleeps while a worker adds a kept-alive
 *      connection): the sleeper wakes with the stream's own data word.
 *   8. two threads sleep in epoll_wait() on one instance (edge-triggered);
 *      the one woken takes the byte and stops waiting; the next byte must
 *      wake the other (a stream left unarmed under a sleeper, lazy arming,
 *      hangs it).
 *
 * usage: threadcheck SERVER_ADDR CLIENT_ADDR [PORT]; output: one line per
 * observation (server's, then client's). With RSOCK_EXPECT_TRANSPORT=N every
 * connected stream must report that rsock_fd_transport() value. */
#include "pair.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define DUPLEX_BYTES (32u << 20)
#define NTHREADS 8
#define ROUNDS 2000










/* ---- 1: full duplex ---- */
struct duplex {
	int fd;
	uint32_t seed, hash;
	size_t bytes;
	size_t total; /* 0: DUPLEX_BYTES */
	int nb;       /* non-blocking: wait in poll() for EAGAIN */
};

/* For scenario 6: wait in poll() when the non-blocking call said EAGAIN. */
static int again(const struct duplex *d, ssize_t r, short ev)
{
	struct pollfd p = {.fd = d->fd, .events = ev};

	if (!d->nb || r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
		return 0;
	return poll(&p, 1, 20000) == 1;
}

static void *duplex_send(void *arg)
{
	struct duplex *d = arg;
	static __thread uint8_t buf[65536];
	uint32_t s = d->seed, h = 2166136261u;
	size_t left = d->total ? d->total : DUPLEX_BYTES;

	while (left) {
		size_t n = left < sizeof(buf) ? left : sizeof(buf);
		for (size_t i = 0; i < n; i++) {
			s = s * 1103515245u + 12345u;
			buf[i] = (uint8_t)(s >> 16);
		}
		h = fnv(h, buf, n);
		for (size_t off = 0; off < n;) {
			ssize_t w = write(d->fd, buf + off, n - off);
			if (again(d, w, POLLOUT))
				continue;
			if (w <= 0)
				return NULL;
			off += (size_t)w;
		}
		left -= n;
	}
	d->hash = h;
	return NULL;
}

static void *duplex_recv(void *arg)
{
	struct duplex *d = arg;
	static __thread uint8_t buf[65536];
	uint32_t h = 2166136261u;
	ssize_t r;

	size_t total = d->total ? d->total : DUPLEX_BYTES;

	while (d->bytes < total) {
		r = read(d->fd, buf, sizeof(buf));
		if (again(d, r, POLLIN))
			continue;
		if (r <= 0)
			break;
		h = fnv(h, buf, (size_t)r);
		d->bytes += (size_t)r;
	}
	d->hash = h;
	return NULL;
}

static void duplex(int fd, const char *who, uint32_t seed)
{
	struct duplex tx = {.fd = fd, .seed = seed}, rx = {.fd = fd};
	pthread_t a, b;

	pthread_create(&a, NULL, duplex_send, &tx);
	pthread_create(&b, NULL, duplex_recv, &rx);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	say("%s1 duplex sent-hash %08x got %zu bytes hash %08x", who, tx.hash, rx.bytes, rx.hash);
}

/* ---- 6: full duplex, non-blocking, a poll() per thread ---- */
#define NB_CONNS 4
#define NB_BYTES (4u << 20)

static void duplex_nb(const int *fds, const char *who, uint32_t seed)
{
	struct duplex tx[NB_CONNS], rx[NB_CONNS];
	pthread_t a[NB_CONNS], b[NB_CONNS];
	int ok = 0;

	for (int i = 0; i < NB_CONNS; i++) {
		fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
		tx[i] = (struct duplex){.fd = fds[i], .seed = seed + (uint32_t)i, .total = NB_BYTES, .nb = 1};
		rx[i] = (struct duplex){.fd = fds[i], .total = NB_BYTES, .nb = 1};
		pthread_create(&a[i], NULL, duplex_send, &tx[i]);
		pthread_create(&b[i], NULL, duplex_recv, &rx[i]);
	}
	for (int i = 0; i < NB_CONNS; i++) {
		pthread_join(a[i], NULL);
		pthread_join(b[i], NULL);
		ok += tx[i].hash != 0 && rx[i].bytes == NB_BYTES;
	}
	/* Each end's received hash must be the peer's sent hash: the peer
	 * seeds differently, so print them in connection order. */
	say("%s6 non-blocking duplex: %d of %d connections moved %u bytes each way", who, ok, NB_CONNS,
	    NB_BYTES);
	for (int i = 0; i < NB_CONNS; i++)
		say("%s6 conn %d sent-hash %08x got-hash %08x", who, i, tx[i].hash, rx[i].hash);
}

/* ---- 2: many threads, many sockets ---- */
static void *echo_client(void *arg)
{
	int fd = dial(), ok = 1;
	char b[64], e[64];

	(void)arg;
	for (int i = 0; i < ROUNDS && ok; i++) {
		int n = snprintf(b, sizeof(b), "msg %d", i);
		ok = write(fd, b, (size_t)n) == n && read_full(fd, e, (size_t)n) == n && !memcmp(b, e, (size_t)n);
	}
	close(fd);
	return (void *)(intptr_t)ok;
}

static void *echo_server(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char b[4096];
	ssize_t r;

	while ((r = read(fd, b, sizeof(b))) > 0)
		if (write(fd, b, (size_t)r) != r)
			break;
	close(fd);
	return NULL;
}

/* ---- 3, 4: a thread blocked in recv ---- */
struct blocked {
	int fd;
	ssize_t r;
	char b[16];
};

static void *blocked_recv(void *arg)
{
	struct blocked *k = arg;

	k->r = recv(k->fd, k->b, sizeof(k->b), 0);
	return NULL;
}

/* ---- 5: epoll_wait against EPOLL_CTL_DEL/ADD from another thread ---- */
#define CHURN_MSGS 4000
#define CHURN_LEN 16
#define CHURN_DATA 0x5eedf00dULL

struct churn {
	int fd, ep;
	_Atomic int done;
	size_t bytes;
	unsigned foreign;
};

static void *churn_wait(void *arg)
{
	struct churn *k = arg;
	struct epoll_event ev[8];
	char b[4096];

	while (!k->done) {
		int n = epoll_wait(k->ep, ev, 8, 20);
		for (int i = 0; i < n; i++) {
			if (ev[i].data.u64 != CHURN_DATA) {
				k->foreign++;
				continue;
			}
			for (;;) {
				ssize_t r = recv(k->fd, b, sizeof(b), MSG_DONTWAIT);
				if (r > 0) {
					k->bytes += (size_t)r;
					continue;
				}
				if (r == 0)
					k->done = 1;
				break;
			}
		}
	}
	return NULL;
}

static void churn(int fd)
{
	struct churn k = {.fd = fd, .ep = epoll_create1(EPOLL_CLOEXEC)};
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = CHURN_DATA};
	pthread_t t;
	unsigned cycles = 0, bad = 0;

	epoll_ctl(k.ep, EPOLL_CTL_ADD, fd, &ev);
	pthread_create(&t, NULL, churn_wait, &k);
	while (!k.done) {
		bad += epoll_ctl(k.ep, EPOLL_CTL_DEL, fd, NULL) != 0;
		/* Let other allocations take the freed memory. */
		free(malloc(200));
		sched_yield();
		bad += epoll_ctl(k.ep, EPOLL_CTL_ADD, fd, &ev) != 0;
		cycles++;
	}
	pthread_join(t, NULL);
	say("S5 epoll churn: foreign events %u, bytes %zu, failed ctl calls %u%s", k.foreign, k.bytes,
	    bad, cycles ? "" : ", no cycles");
	close(k.ep);
	close(fd);
}

#define LATE_DATA 0x1a7eadd0ULL
#define PIPE_DATA 0x919eULL

struct late {
	int ep;
	unsigned n, foreign;
	uint32_t events;
};

static void *late_wait(void *arg)
{
	struct late *k = arg;
	struct epoll_event ev[8];

	for (int tries = 0; tries < 100 && !k->n; tries++) {
		int n = epoll_wait(k->ep, ev, 8, 100);
		for (int i = 0; i < n; i++) {
			if (ev[i].data.u64 == LATE_DATA) {
				k->n++;
				k->events = ev[i].events;
			} else {
				k->foreign++;
			}
		}
	}
	return NULL;
}

/* 7: the stream joins an instance while another thread sleeps in it. */
static void late_add(int fd)
{
	struct late k = {.ep = epoll_create1(EPOLL_CLOEXEC)};
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = PIPE_DATA};
	int p[2];
	char b[16];
	pthread_t t;
	ssize_t r;

	if (pipe(p) || epoll_ctl(k.ep, EPOLL_CTL_ADD, p[0], &ev)) {
		fprintf(stderr, "threadcheck: pipe or epoll_ctl: %s\n", strerror(errno));
		exit(3);
	}
	pthread_create(&t, NULL, late_wait, &k);
	usleep(200000); /* the waiter sleeps in the kernel */
	ev.data.u64 = LATE_DATA;
	say("S7 add %d", epoll_ctl(k.ep, EPOLL_CTL_ADD, fd, &ev));
	pthread_join(t, NULL);
	r = recv(fd, b, sizeof(b), 0);
	say("S7 waiter: stream events %u (0x%x), foreign %u; read %zd '%.*s'", k.n, k.events,
	    k.foreign, r, (int)(r > 0 ? r : 0), b);
	close(p[0]);
	close(p[1]);
	close(k.ep);
	close(fd);
	sig(s2c);
}

/* 8: two threads asleep in one instance; the one woken (the kernel wakes
 * the latest sleeper first) takes the event and stops. */
struct share {
	int ep, fd;
	_Atomic unsigned bytes; /* read by either thread */
	_Atomic int last;       /* the sleeper read the final byte */
	_Atomic int timed_out;
};

static void share_read(struct share *k, int sleeper)
{
	char b[256];
	ssize_t r;

	while ((r = recv(k->fd, b, sizeof(b), MSG_DONTWAIT)) > 0) {
		for (ssize_t i = 0; i < r; i++) {
			if (b[i] == 'Z' && sleeper)
				atomic_store(&k->last, 1);
			else
				atomic_fetch_add(&k->bytes, 1);
		}
	}
}

static void *share_sleep(void *arg)
{
	struct share *k = arg;
	struct epoll_event ev[4];

	while (!atomic_load(&k->last)) {
		int n = epoll_wait(k->ep, ev, 4, 5000);
		if (n == 0) {
			k->timed_out = 1;
			break;
		}
		if (n > 0)
			share_read(k, 1);
	}
	return NULL;
}

static void share(int fd)
{
	struct share k = {.ep = epoll_create1(EPOLL_CLOEXEC), .fd = fd};
	/* Edge-triggered: nothing stays on a ready list whose bell would
	 * wake the sleeper anyway. */
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = fd}, got[4];
	pthread_t t;

	if (epoll_ctl(k.ep, EPOLL_CTL_ADD, fd, &ev)) {
		fprintf(stderr, "threadcheck: epoll_ctl: %s\n", strerror(errno));
		exit(3);
	}
	pthread_create(&t, NULL, share_sleep, &k);
	usleep(100000); /* the sleeper sleeps in the kernel */
	sig(s2c);
	/* The taker sleeps too, woken first, reads the byte and stops. */
	if (epoll_wait(k.ep, got, 4, 3000) > 0)
		share_read(&k, 0);
	for (int i = 0; i < 3000 && !atomic_load(&k.bytes); i++)
		usleep(1000); /* the sleeper took it */
	sig(s2c); /* now the final byte, for the sleeper alone */
	pthread_join(t, NULL);
	say("S8 bytes %u, the sleeper woke for the last one: %d", atomic_load(&k.bytes),
	    atomic_load(&k.last));
	close(k.ep);
	close(fd);
}

static void server(int lfd)
{
	int fd;
	pthread_t th[NTHREADS];

	fd = take(lfd);
	duplex(fd, "S", 7);
	close(fd);

	for (int i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, echo_server, (void *)(intptr_t)take(lfd));
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	say("S2 echo threads done");

	/* 3 */
	fd = take(lfd);
	{
		struct blocked k = {.fd = fd};
		pthread_t t;
		pthread_create(&t, NULL, blocked_recv, &k);
		usleep(200000);
		say("S3 close %d", close(fd));
		sig(s2c);
		pthread_join(t, NULL);
		say("S3 blocked recv got %zd '%.*s'", k.r, (int)(k.r > 0 ? k.r : 0), k.b);
	}

	/* 4 */
	fd = take(lfd);
	{
		struct blocked k = {.fd = fd};
		pthread_t t;
		pthread_create(&t, NULL, blocked_recv, &k);
		usleep(200000);
		say("S4 shutdown %d", shutdown(fd, SHUT_RD));
		pthread_join(t, NULL);
		say("S4 blocked recv got %zd", k.r);
		close(fd);
		sig(s2c);
	}

	/* 5 */
	churn(take(lfd));

	/* 6 */
	{
		int fds[NB_CONNS];
		for (int i = 0; i < NB_CONNS; i++)
			fds[i] = take(lfd);
		duplex_nb(fds, "S", 100);
		for (int i = 0; i < NB_CONNS; i++)
			close(fds[i]);
	}

	/* 7 */
	late_add(take(lfd));

	/* 8 */
	share(take(lfd));
}

static void client(void)
{
	int fd;
	pthread_t th[NTHREADS];
	int ok = 0;

	fd = dial();
	duplex(fd, "C", 11);
	close(fd);

	for (int i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, echo_client, NULL);
	for (int i = 0; i < NTHREADS; i++) {
		void *r;
		pthread_join(th[i], &r);
		ok += (int)(intptr_t)r;
	}
	say("C2 echo threads ok %d of %d", ok, NTHREADS);

	fd = dial();
	await(s2c);
	say("C3 write %zd", write(fd, "late", 4));
	close(fd);

	fd = dial();
	await(s2c);
	close(fd);

	fd = dial();
	{
		char b[CHURN_LEN];
		int wrote = 1;
		memset(b, 'c', sizeof(b));
		for (int i = 0; i < CHURN_MSGS && wrote; i++) {
			wrote = write(fd, b, sizeof(b)) == (ssize_t)sizeof(b);
			if (i % 8 == 0)
				usleep(100);
		}
		say("C5 wrote %d", wrote ? CHURN_MSGS * CHURN_LEN : -1);
	}
	close(fd);

	{
		int fds[NB_CONNS];
		for (int i = 0; i < NB_CONNS; i++)
			fds[i] = dial();
		duplex_nb(fds, "C", 200);
		for (int i = 0; i < NB_CONNS; i++)
			close(fds[i]);
	}

	fd = dial();
	say("C7 write %zd", write(fd, "late", 4));
	await(s2c);
	close(fd);

	fd = dial();
	await(s2c);
	usleep(100000); /* the taker sleeps too */
	{
		ssize_t w = write(fd, "m", 1);
		await(s2c);
		say("C8 wrote %zd, then the last: %zd", w, write(fd, "Z", 1));
	}
	close(fd);
}

int main(int argc, char **argv)
{
	return pair_main(argc, argv, "threadcheck", 7473, server, client);
}
