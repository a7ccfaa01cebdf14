/* streamcheck.c - stream semantics as an application observes them, for the
 * differential test: run once over kernel TCP and once under librsock (RDMA),
 * the outputs must be identical.
 *
 * usage: streamcheck SERVER_ADDR CLIENT_ADDR [PORT]
 * The parent is the server (listens on SERVER_ADDR), a forked child is the
 * client (binds CLIENT_ADDR). Each scenario uses a fresh connection. Output:
 * one line per observation, server lines then client lines; nothing that
 * varies between runs (no ports, no timings beyond pass/fail bounds). With
 * RSOCK_EXPECT_TRANSPORT=N set, every connected stream must report that
 * rsock_fd_transport() value (3 = RDMA), else the program fails. */
#include "pair.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>



static const char *en(int e)
{
	switch (e) {
	case 0: return "0";
	case EAGAIN: return "EAGAIN";
	case EPIPE: return "EPIPE";
	case ECONNRESET: return "ECONNRESET";
	case ENOTCONN: return "ENOTCONN";
	case EBADF: return "EBADF";
	case EINVAL: return "EINVAL";
	default: return strerrorname_np(e) ? strerrorname_np(e) : "E?";
	}
}









static volatile sig_atomic_t alarms;
static volatile int bad_count = -1; /* an iovec count the kernel refuses (EINVAL) */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
static struct pollfd *volatile null_fds; /* NULL, unknown to the compiler */
static volatile nfds_t huge_nfds = (nfds_t)1 << 30; /* beyond RLIMIT_NOFILE: EINVAL */
#endif
/* Say what a call returned, with its errno when it failed. */
#define SAY_CALL(what, call)                                                     \
	do {                                                                     \
		errno = 0;                                                       \
		long r_ = (long)(call);                                          \
		say(what " %ld %s", r_, en(r_ < 0 ? errno : 0));                 \
	} while (0)

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static void fill(uint8_t *b, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		b[i] = (uint8_t)(seed >> 16);
	}
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

#define BIG (8u << 20)

/* ---- server side ---- */
static void server(int lfd)
{
	char b[256];
	int fd;
	ssize_t r;
	int v;

	/* 1: echo */
	fd = take(lfd);
	r = read_full(fd, b, 4);
	say("S echo read %zd '%.4s'", r, b);
	say("S echo write %zd", write(fd, b, 4));
	union pair_sa pa, la, sa = addr_of(srv_addr, port), ca = addr_of(cli_addr, 0);
	socklen_t pl = sizeof(pa), ll = sizeof(la);
	getpeername(fd, &pa.sa, &pl);
	getsockname(fd, &la.sa, &ll);
	if (ca.sa.sa_family == AF_INET6)
		ca.in6.sin6_port = pa.in6.sin6_port;
	else
		ca.in4.sin_port = pa.in4.sin_port;
	say("S names same-family %d lengths-ok %d local-is-server %d peer-is-client %d",
	    pa.sa.sa_family == sa.sa.sa_family && la.sa.sa_family == sa.sa.sa_family,
	    pl == addr_len(&sa) && ll == addr_len(&sa), same_addr(&la, &sa), same_addr(&pa, &ca));
	r = read(fd, b, 1);
	say("S echo eof %zd", r);
	close(fd);

	/* 2: bulk with odd read sizes */
	fd = take(lfd);
	{
		uint8_t *buf = malloc(70000);
		size_t total = 0, step = 1;
		uint32_t h = 2166136261u;
		while ((r = read(fd, buf, step)) > 0) {
			h = fnv(h, buf, (size_t)r);
			total += (size_t)r;
			step = step * 7 % 69997 + 1;
		}
		say("S bulk total %zu hash %08x end %zd", total, h, r);
		free(buf);
	}
	close(fd);

	/* 3: peek, partial, FIONREAD, waitall */
	fd = take(lfd);
	await(c2s);
	usleep(200000);
	r = recv(fd, b, 4, MSG_PEEK);
	say("S peek %zd '%.*s'", r, (int)(r > 0 ? r : 0), b);
	r = recv(fd, b, 3, 0);
	say("S partial %zd '%.*s'", r, (int)(r > 0 ? r : 0), b);
	v = -1;
	ioctl(fd, FIONREAD, &v);
	say("S fionread %d", v);
	r = recv(fd, b, 12, MSG_WAITALL);
	say("S waitall %zd '%.*s'", r, (int)(r > 0 ? r : 0), b);
	close(fd);

	/* 4: writev/readv with many iovecs */
	fd = take(lfd);
	{
		char x[7][40];
		struct iovec iv[7];
		size_t lens[7] = {1, 3, 40, 0, 17, 2, 40};
		for (int i = 0; i < 7; i++)
			iv[i] = (struct iovec){x[i], lens[i]};
		size_t total = 0;
		uint32_t h = 2166136261u;
		while ((r = readv(fd, iv, 7)) > 0) {
			size_t left = (size_t)r;
			for (int i = 0; i < 7 && left; i++) {
				size_t n = left < lens[i] ? left : lens[i];
				h = fnv(h, (uint8_t *)x[i], n);
				left -= n;
			}
			total += (size_t)r;
		}
		say("S readv total %zu hash %08x", total, h);
	}
	close(fd);

	/* 5: non-blocking and poll */
	fd = take(lfd);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	r = recv(fd, b, 1, 0);
	say("S nonblock empty %zd %s", r, en(r < 0 ? errno : 0));
	struct pollfd p = {.fd = fd, .events = POLLIN};
	say("S poll empty %d", poll(&p, 1, 100));
	sig(s2c);
	p.revents = 0;
	r = poll(&p, 1, 5000);
	say("S poll data %zd revents-in %d", r, !!(p.revents & POLLIN));
	r = recv(fd, b, sizeof(b), 0);
	say("S nonblock data %zd", r);
	p.revents = 0;
	p.events = POLLOUT;
	say("S poll out %d revents-out %d", poll(&p, 1, 1000), !!(p.revents & POLLOUT));
	close(fd);

	/* 6: half-close */
	fd = take(lfd);
	r = read(fd, b, sizeof(b));
	say("S halfclose eof %zd", r);
	say("S halfclose write %zd", write(fd, "bye", 3));
	close(fd);

	/* 7: close with unread data */
	fd = take(lfd);
	await(c2s);
	usleep(200000);
	close(fd);
	sig(s2c);

	/* 8: peer killed */
	any_transport = 1;
	fd = take(lfd);
	any_transport = 0;
	r = read_full(fd, b, 5);
	say("S kill got %zd", r);
	sig(s2c); /* the client kills its helper now */
	double t0 = now();
	r = read(fd, b, sizeof(b));
	say("S kill end %zd %s fast %d", r, en(r < 0 ? errno : 0), now() - t0 < 1.5);
	close(fd);

	/* 9: writes after the peer closed */
	fd = take(lfd);
	close(fd);
	sig(s2c);

	/* 10: a late reader of many small writes: they all arrive before the
	 * first read, then are read in pieces (credits must follow what is
	 * read, not what arrived: this once stalled after 64 KiB) */
	fd = take(lfd);
	usleep(300000);
	{
		size_t total = 0;
		uint32_t h = 2166136261u;
		while ((r = read(fd, b, 200)) > 0) {
			h = fnv(h, (uint8_t *)b, (size_t)r);
			total += (size_t)r;
		}
		say("S late reader total %zu hash %08x end %zd", total, h, r);
	}
	close(fd);

	/* 11: splice: an echo through a pipe (socket -> pipe -> socket), then
	 * a splice out of a non-blocking socket */
	fd = take(lfd);
	{
		int pp[2], fl = fcntl(fd, F_GETFL);
		size_t total = 0;
		if (pipe(pp))
			pp[0] = pp[1] = -1;
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
		r = splice(fd, NULL, pp[1], NULL, 4096, 0);
		say("S splice empty %zd %s", r, en(r < 0 ? errno : 0));
		fcntl(fd, F_SETFL, fl);
		sig(s2c);
		/* a time-out of 292 years waits for the data (added to the
		 * monotonic clock, its nanoseconds do not fit in 64 bits) */
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		struct timespec forever = {.tv_sec = 9223372036, .tv_nsec = 0};
		r = ppoll(&pf, 1, &forever, NULL);
		say("S splice ppoll 292 years %zd revents-in %d", r, !!(pf.revents & POLLIN));
		/* SPLICE_F_NONBLOCK on blocking pipes: into a full one, out of an
		 * empty one, EAGAIN (and the data stays in the socket) */
		int pq[2];
		if (pipe(pq) == 0) {
			fcntl(pq[1], F_SETFL, O_NONBLOCK);
			while (write(pq[1], b, sizeof(b)) > 0)
				;
			fcntl(pq[1], F_SETFL, 0);
			r = splice(fd, NULL, pq[1], NULL, 4096, SPLICE_F_NONBLOCK);
			say("S splice into full pipe %zd %s", r, en(r < 0 ? errno : 0));
			close(pq[0]);
			close(pq[1]);
		}
		if (pipe(pq) == 0) {
			r = splice(pq[0], NULL, fd, NULL, 4096, SPLICE_F_NONBLOCK);
			say("S splice from empty pipe %zd %s", r, en(r < 0 ? errno : 0));
			close(pq[0]);
			close(pq[1]);
		}
		/* into a blocking pipe with one free slot, its first page
		 * read down to one byte: its capacity less the bytes it holds
		 * is 8191, yet one page is all it takes. The splice returns
		 * what fitted, never blocks; those bytes are echoed first. */
		if (pipe(pq) == 0) {
			static char held[15 * 4096], took[8191];
			ssize_t k = write(pq[1], held, sizeof(held));
			k -= read(pq[0], held, 4095);
			r = splice(fd, NULL, pq[1], NULL, sizeof(took), 0);
			say("S splice into a pipe with one free slot %d", r > 0 && r <= (ssize_t)sizeof(took));
			if (k > 0 && read_full(pq[0], held, (size_t)k) == k && r > 0 &&
			    read_full(pq[0], took, (size_t)r) == r && write_full(fd, took, (size_t)r) == r)
				total += (size_t)r;
			close(pq[0]);
			close(pq[1]);
		}
		while ((r = splice(fd, NULL, pp[1], NULL, 65536, 0)) > 0) {
			ssize_t left = r, w = 0;
			while (left > 0 && (w = splice(pp[0], NULL, fd, NULL, (size_t)left, 0)) > 0)
				left -= w;
			if (left)
				break;
			total += (size_t)r;
		}
		say("S splice echoed %zu end %zd", total, r);
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
		r = write(pp[1], "tail", 4);
		say("S splice nonblock out %zd %zd", r, splice(pp[0], NULL, fd, NULL, 4, 0));
		close(pp[0]);
		close(pp[1]);
	}
	close(fd);

	/* 12: SO_RCVTIMEO and SO_SNDTIMEO on blocking calls: an empty read
	 * times out with EAGAIN, MSG_WAITALL returns what it got, a send to a
	 * peer that does not read returns what it could send, then EAGAIN */
	fd = take(lfd);
	{
		struct timeval tv = {.tv_sec = 0, .tv_usec = 200000}, got = {0, 0};
		socklen_t gl = sizeof(got);
		say("S timeo set %d %d", setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)),
		    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)));
		getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &got, &gl);
		say("S timeo get %ld.%06ld", (long)got.tv_sec, (long)got.tv_usec);
		t0 = now();
		r = recv(fd, b, sizeof(b), 0);
		say("S timeo empty recv %zd %s waited %d", r, en(r < 0 ? errno : 0),
		    now() - t0 > 0.15 && now() - t0 < 1.5);
		t0 = now();
		r = read(fd, b, 1);
		say("S timeo empty read %zd %s waited %d", r, en(r < 0 ? errno : 0),
		    now() - t0 > 0.15 && now() - t0 < 1.5);
		sig(s2c);
		t0 = now();
		r = recv(fd, b, 10, MSG_WAITALL);
		say("S timeo waitall %zd '%.*s' waited %d", r, (int)(r > 0 ? r : 0), b,
		    now() - t0 > 0.15 && now() - t0 < 1.5);
		/* the client reads nothing until told: fill both sides' buffers */
		size_t big = 64u << 20;
		uint8_t *buf = malloc(big);
		fill(buf, big, 12);
		t0 = now();
		r = send(fd, buf, big, MSG_NOSIGNAL);
		say("S timeo send partial %d waited %d", r > 0 && (size_t)r < big,
		    now() - t0 > 0.15 && now() - t0 < 5);
		size_t sent = r > 0 ? (size_t)r : 0;
		uint32_t h = fnv(2166136261u, buf, sent);
		/* more sends, until one sends nothing (the kernel may still
		 * grow its receive window for a while) */
		for (int i = 0; i < 40; i++) {
			t0 = now();
			r = send(fd, buf + sent, big - sent, MSG_NOSIGNAL);
			if (r <= 0)
				break;
			h = fnv(h, buf + sent, (size_t)r);
			sent += (size_t)r;
		}
		say("S timeo send full %zd %s waited %d", r, en(r < 0 ? errno : 0),
		    now() - t0 > 0.15 && now() - t0 < 1.5);
		/* the count and hash go to the client through the pipe: it
		 * reads the stream to its end and says whether they match */
		struct { uint64_t n; uint32_t h; } rec = {sent, h};
		if (write(s2c[1], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
			abort();
		shutdown(fd, SHUT_WR);
		free(buf);
	}
	close(fd);

	/* 13: urgent data (MSG_OOB): none yet is EINVAL; the byte sent urgent
	 * is read out of band (POLLPRI says it is there), the rest in band */
	fd = take(lfd);
	r = recv(fd, b, 1, MSG_OOB);
	say("S oob none %zd %s", r, en(r < 0 ? errno : 0));
	sig(s2c);
	{
		struct pollfd pp = {.fd = fd, .events = POLLPRI};
		int pr = poll(&pp, 1, 3000);
		say("S oob poll %d pri %d", pr, !!(pp.revents & POLLPRI));
		int ep = epoll_create1(0);
		struct epoll_event ee = {.events = EPOLLPRI}, got[2];
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ee);
		pr = epoll_wait(ep, got, 2, 3000);
		say("S oob epoll %d pri %d", pr, pr == 1 && (got[0].events & EPOLLPRI));
		close(ep);
		await(c2s); /* all sent */
		r = recv(fd, b, 1, MSG_OOB);
		say("S oob got %zd '%.*s'", r, (int)(r > 0 ? r : 0), b);
		char in[64];
		size_t n = 0;
		while (n < sizeof(in) && (r = read(fd, in + n, sizeof(in) - n)) > 0)
			n += (size_t)r;
		say("S oob in band '%.*s' end %zd", (int)n, in, r);
	}
	close(fd);

	/* 14: MSG_TRUNC discards what it reads (no buffer needed), with
	 * MSG_PEEK it only counts */
	fd = take(lfd);
	await(c2s);
	usleep(100000);
	r = recv(fd, NULL, 4, MSG_TRUNC);
	say("S trunc discard %zd", r);
	r = recv(fd, NULL, 3, MSG_TRUNC | MSG_PEEK);
	say("S trunc peek %zd", r);
	r = read_full(fd, b, 6);
	say("S trunc rest %zd '%.*s'", r, (int)(r > 0 ? r : 0), b);
	close(fd);

	/* 15: large writes (librsock sends them from the buffer itself,
	 * registered for the call): a buffer rewritten as soon as write()
	 * returns, a writev of two large buffers, a read-only mapping, a file
	 * mapping, and a mapping replaced by another at the same address */
	fd = take(lfd);
	{
		const size_t big = 3u << 20, m = 2u << 20;
		uint8_t *a = malloc(big), *v1 = malloc(1u << 20), *v2 = malloc(3u << 19);
		uint32_t h = 2166136261u;
		uint64_t sent = 0;
		int ok = 1;
		for (uint32_t seed = 15; seed < 17; seed++) {
			fill(a, big, seed);
			ok &= write_full(fd, a, big) == (ssize_t)big;
			h = fnv(h, a, big);
			sent += big;
		}
		fill(v1, 1u << 20, 17);
		fill(v2, 3u << 19, 18);
		struct iovec iv[2] = {{v1, 1u << 20}, {v2, 3u << 19}};
		r = writev(fd, iv, 2);
		if (r > 0 && (size_t)r < (1u << 20))
			ok &= write_full(fd, v1 + r, (1u << 20) - (size_t)r) > 0 &&
			      write_full(fd, v2, 3u << 19) > 0;
		else if (r > 0 && (size_t)r < (1u << 20) + (3u << 19))
			ok &= write_full(fd, v2 + (size_t)r - (1u << 20),
					 (3u << 19) - ((size_t)r - (1u << 20))) > 0;
		else
			ok &= r == (ssize_t)((1u << 20) + (3u << 19));
		h = fnv(fnv(h, v1, 1u << 20), v2, 3u << 19);
		sent += (1u << 20) + (3u << 19);
		uint8_t *ro = mmap(NULL, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		fill(ro, m, 19);
		mprotect(ro, m, PROT_READ);
		ok &= write_full(fd, ro, m) == (ssize_t)m;
		h = fnv(h, ro, m);
		sent += m;
		munmap(ro, m);
		uint8_t *again = mmap(ro, m, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		say("S zc same address %d", again == ro);
		fill(again, m, 20);
		ok &= write_full(fd, again, m) == (ssize_t)m;
		h = fnv(h, again, m);
		sent += m;
		munmap(again, m);
		char path[] = "/tmp/streamcheck-XXXXXX";
		int tf = mkstemp(path);
		fill(a, m, 21);
		ok &= tf >= 0 && write(tf, a, m) == (ssize_t)m;
		unlink(path);
		uint8_t *fm = mmap(NULL, m, PROT_READ, MAP_SHARED, tf, 0);
		ok &= fm != MAP_FAILED && write_full(fd, fm, m) == (ssize_t)m;
		h = fnv(h, a, m);
		sent += m;
		munmap(fm, m);
		close(tf);
		say("S zc sent %llu hash %08x ok %d", (unsigned long long)sent, h, ok);
		free(a);
		free(v1);
		free(v2);
	}
	close(fd);

	/* 16: a slow reader in odd pieces behind a writer that waits for
	 * POLLOUT before each 8 KiB write (socat's loop) */
	fd = take(lfd);
	{
		uint8_t *buf = malloc(5000);
		uint64_t n = 0;
		uint32_t h = 2166136261u;
		while ((r = read(fd, buf, 5000)) > 0) {
			h = fnv(h, buf, (size_t)r);
			n += (uint64_t)r;
			usleep(300);
		}
		say("S writable got %llu hash %08x end %zd", (unsigned long long)n, h, r);
		free(buf);
	}
	close(fd);

	/* 17: the client's blocking reads meet a signal; one byte comes late */
	fd = take(lfd);
	await(c2s);
	usleep(500000);
	say("S intr write %zd", write(fd, "x", 1));
	r = read(fd, b, 1);
	say("S intr eof %zd", r);
	close(fd);

	/* 18: SO_RCVLOWAT: poll, epoll and reads wait for that many bytes,
	 * or the end of the stream. Not tested: a read that finds fewer
	 * bytes than that, takes them and waits on; the kernel wakes it only
	 * once SO_RCVLOWAT more have come (tcp_data_ready counts from the
	 * bytes taken), librsock once they add up to it (doc/design.md,
	 * "Wire protocol"). */
	fd = take(lfd);
	{
		char big[4096];
		int lw = 1000, ep = epoll_create1(0);
		socklen_t vl = sizeof(v);
		struct pollfd lp = {.fd = fd, .events = POLLIN};
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd}, got;
		say("S lowat set %d", setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lw, sizeof(lw)));
		v = 0;
		getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &vl);
		say("S lowat get %d", v);
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
		sig(s2c);
		await(c2s); /* 600 bytes sent */
		usleep(200000);
		int pr = poll(&lp, 1, 100);
		say("S lowat 600: poll %d revents %x epoll %d", pr, lp.revents, epoll_wait(ep, &got, 1, 100));
		v = -1;
		ioctl(fd, FIONREAD, &v);
		say("S lowat 600: fionread %d", v);
		r = recv(fd, big, sizeof(big), MSG_PEEK | MSG_DONTWAIT);
		say("S lowat 600: nonblocking peek %zd", r);
		sig(s2c); /* 600 more in 200 ms */
		pr = poll(&lp, 1, 2000);
		say("S lowat 1200: poll %d revents %x", pr, lp.revents);
		r = recv(fd, big, sizeof(big), 0);
		say("S lowat read %zd", r);
		sig(s2c); /* 500, and 600 more 200 ms later */
		r = recv(fd, big, sizeof(big), MSG_PEEK);
		say("S lowat blocking peek %zd", r);
		r = recv(fd, big, sizeof(big), 0);
		say("S lowat read %zd", r);
		struct timeval tv = {0, 200000};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		sig(s2c); /* 300, and no more until we say */
		r = recv(fd, big, sizeof(big), 0);
		say("S lowat read with a time-out %zd", r);
		sig(s2c); /* 10, then the end */
		lp.events = POLLIN | POLLRDHUP;
		pr = poll(&lp, 1, 2000);
		say("S lowat eof poll %d revents %x", pr, lp.revents);
		r = recv(fd, big, sizeof(big), 0);
		say("S lowat before eof %zd", r);
		r = recv(fd, big, sizeof(big), 0);
		say("S lowat eof %zd", r);
		close(ep);
	}
	close(fd);

	/* 19: SO_RCVTIMEO set on the listener is the accepted socket's too
	 * (the kernel copies it); a read on it times out */
	{
		struct timeval tv = {.tv_sec = 0, .tv_usec = 200000}, none = {0, 0};
		/* the kernel copies it when the handshake completes: before the
		 * client connects */
		setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		sig(s2c);
		fd = take(lfd);
		setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
		r = read(fd, b, 1);
		say("S inherited read %zd '%.*s'", r, (int)(r > 0 ? r : 0), b);
		t0 = now();
		r = read(fd, b, 1);
		say("S inherited timeo read %zd %s waited %d", r, en(r < 0 ? errno : 0),
		    now() - t0 > 0.15 && now() - t0 < 1.5);
		sig(s2c);
		r = read(fd, b, 1);
		say("S inherited eof %zd", r);
	}
	close(fd);

	/* 20: buffers the kernel cannot use: EFAULT (or EINVAL), no crash,
	 * nothing lost */
	fd = take(lfd);
	SAY_CALL("S fault recv outside", recv(fd, (void *)-1, 10, 0)); /* at once */
	await(c2s);
	SAY_CALL("S fault recv null", recv(fd, NULL, 10, 0)); /* once bytes are there */
	{
		struct iovec iv = {b, 10};
		SAY_CALL("S fault readv count", readv(fd, &iv, bad_count));
		SAY_CALL("S fault recvmsg null", recvmsg(fd, NULL, 0));
		SAY_CALL("S fault fionread outside", ioctl(fd, FIONREAD, (void *)-1));
	}
	r = recv(fd, b, sizeof(b), 0);
	say("S fault then %zd '%.*s'", r, (int)(r > 0 ? r : 0), b);
	sig(s2c);
	{
		/* the client's batch of 1,025 one-byte messages: the kernel
		 * sends the first 1,024 (UIO_MAXIOV) */
		char m[1024];
		size_t ms = 0;
		r = read_full(fd, m, sizeof(m));
		for (size_t i = 0; i < sizeof(m); i++)
			ms += m[i] == 'm';
		say("S mmsg batch %zd of which 'm' %zu", r, ms);
	}
	r = read(fd, b, 1);
	say("S fault eof %zd", r);
	close(fd);
}

/* ---- client side ---- */
static void client(void)
{
	char b[256];
	int fd;
	ssize_t r;

	/* 1 */
	fd = dial();
	say("C echo write %zd", write(fd, "ping", 4));
	r = read_full(fd, b, 4);
	say("C echo read %zd '%.4s'", r, b);
	close(fd);

	/* 2 */
	fd = dial();
	{
		uint8_t *buf = malloc(BIG);
		uint32_t h = 2166136261u;
		size_t off = 0, chunk = 1;
		fill(buf, BIG, 7);
		while (off < BIG) {
			size_t n = chunk < BIG - off ? chunk : BIG - off;
			r = write(fd, buf + off, n);
			if (r <= 0)
				break;
			off += (size_t)r;
			chunk = chunk * 13 % 131071 + 1;
		}
		h = fnv(h, buf, BIG);
		say("C bulk sent %zu hash %08x", off, h);
		free(buf);
	}
	close(fd);

	/* 3 */
	fd = dial();
	say("C send %zd", send(fd, "abcdefghijklmno", 15, 0));
	sig(c2s);
	r = read(fd, b, 1);
	say("C peek-side eof %zd", r);
	close(fd);

	/* 4 */
	fd = dial();
	{
		static char src[4096];
		struct iovec iv[16];
		size_t off = 0;
		uint32_t h = 2166136261u;
		fill((uint8_t *)src, sizeof(src), 3);
		for (int i = 0; i < 16; i++) {
			size_t n = (size_t)(i * 37 % 251);
			iv[i] = (struct iovec){src + off, n};
			off += n;
		}
		r = writev(fd, iv, 16);
		h = fnv(h, (uint8_t *)src, off);
		say("C writev %zd of %zu hash %08x", r, off, h);
	}
	close(fd);

	/* 5 */
	fd = dial();
	await(s2c);
	say("C nb send %zd", send(fd, "x", 1, 0));
	r = read(fd, b, 1);
	say("C nb eof %zd", r);
	close(fd);

	/* 6 */
	fd = dial();
	say("C shutdown %d", shutdown(fd, SHUT_WR));
	r = read_full(fd, b, 3);
	say("C halfclose read %zd '%.3s'", r, b);
	r = read(fd, b, 1);
	say("C halfclose eof %zd", r);
	r = send(fd, "z", 1, MSG_NOSIGNAL);
	say("C send after shutdown %zd %s", r, en(r < 0 ? errno : 0));
	close(fd);

	/* 7 */
	fd = dial();
	say("C unread send %zd", send(fd, b, 100, 0));
	sig(c2s);
	await(s2c);
	usleep(300000);
	r = read(fd, b, sizeof(b));
	say("C after peer closed unread %zd %s", r, en(r < 0 ? errno : 0));
	close(fd);

	/* 8: a helper process holds the stream and is killed */
	pid_t k = fork();
	if (k == 0) {
		any_transport = 1;
		int f = dial();
		if (write(f, "hello", 5) != 5)
			_exit(1);
		pause();
		_exit(0);
	}
	await(s2c);
	kill(k, SIGKILL);
	waitpid(k, NULL, 0);

	/* 9 */
	fd = dial();
	await(s2c);
	usleep(300000);
	int e = 0;
	for (int i = 0; i < 50 && !e; i++) {
		if (send(fd, b, 10, MSG_NOSIGNAL) < 0)
			e = errno;
		usleep(20000);
	}
	say("C send to closed peer %s", en(e));
	r = read(fd, b, 1);
	say("C read closed peer %zd %s", r, en(r < 0 ? errno : 0));
	close(fd);

	/* 10 */
	fd = dial();
	{
		uint8_t m[1024];
		size_t sent = 0;
		for (int i = 0; i < 300; i++) {
			fill(m, sizeof(m), (uint32_t)i);
			if (write_full(fd, m, sizeof(m)) != (ssize_t)sizeof(m))
				break;
			sent += sizeof(m);
		}
		say("C small writes sent %zu", sent);
	}
	close(fd);

	/* 11 */
	fd = dial();
	await(s2c);
	usleep(300000); /* the server's ppoll must wait for it */
	{
		static uint8_t sent_b[40000], back[40100];
		size_t n = 0;
		fill(sent_b, sizeof(sent_b), 11);
		r = write_full(fd, sent_b, sizeof(sent_b));
		say("C splice sent %zd shutdown %d", r, shutdown(fd, SHUT_WR));
		while (n < sizeof(back) && (r = read(fd, back + n, sizeof(back) - n)) > 0)
			n += (size_t)r;
		say("C splice back %zu same %d tail '%.4s' end %zd", n,
		    n >= sizeof(sent_b) && !memcmp(sent_b, back, sizeof(sent_b)),
		    n == sizeof(sent_b) + 4 ? (char *)back + sizeof(sent_b) : "", r);
	}
	close(fd);

	/* 12 */
	fd = dial();
	await(s2c);
	say("C timeo send %zd", send(fd, "abc", 3, 0));
	{
		struct { uint64_t n; uint32_t h; } rec;
		uint8_t *buf = malloc(1 << 20);
		uint64_t n = 0;
		uint32_t h = 2166136261u;
		if (read(s2c[0], &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
			abort();
		while ((r = read(fd, buf, 1 << 20)) > 0) {
			h = fnv(h, buf, (size_t)r);
			n += (uint64_t)r;
		}
		say("C timeo received all %d end %zd", n == rec.n && h == rec.h, r);
		free(buf);
	}
	close(fd);

	/* 13 */
	fd = dial();
	await(s2c);
	say("C oob send %zd", send(fd, "ab", 2, 0));
	say("C oob urgent %zd", send(fd, "c", 1, MSG_OOB));
	say("C oob send after %zd", send(fd, "de", 2, 0));
	usleep(200000);
	sig(c2s);
	shutdown(fd, SHUT_WR);
	r = read(fd, b, 1);
	say("C oob eof %zd", r);
	close(fd);

	/* 14 */
	fd = dial();
	say("C trunc send %zd", send(fd, "0123456789", 10, 0));
	sig(c2s);
	close(fd);

	/* 15 */
	fd = dial();
	{
		uint8_t *buf = malloc(1 << 20);
		uint64_t n = 0;
		uint32_t h = 2166136261u;
		while ((r = read(fd, buf, 1 << 20)) > 0) {
			h = fnv(h, buf, (size_t)r);
			n += (uint64_t)r;
		}
		say("C zc got %llu hash %08x end %zd", (unsigned long long)n, h, r);
		free(buf);
	}
	close(fd);

	/* 16: POLLOUT means a write of 8 KiB goes through whole, as on TCP
	 * (writable once a third of the send buffer is free). librsock said
	 * writable with any room, so a blocking 8 KiB write then blocked on
	 * the peer: two socats around haproxy each ended blocked in such a
	 * write, the relay between them waiting for both */
	fd = dial();
	{
		const size_t total = 4u << 20;
		uint8_t *buf = malloc(total);
		size_t off = 0;
		int partial = 0, eagain = 0, stalls = 0;
		fill(buf, total, 22);
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		while (off < total) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			size_t n = total - off < 8192 ? total - off : 8192;
			if (poll(&p, 1, 10000) != 1) {
				stalls++;
				break;
			}
			r = send(fd, buf + off, n, 0);
			if (r < 0 && errno == EAGAIN) {
				eagain++;
				continue;
			}
			if (r <= 0)
				break;
			partial += (size_t)r < n;
			off += (size_t)r;
		}
		say("C writable sent %zu partial %d eagain %d stalls %d", off, partial, eagain, stalls);
		say("C writable hash %08x", fnv(2166136261u, buf, total));
		free(buf);
	}
	close(fd);

	/* 17: a signal handler without SA_RESTART ends a blocking read with
	 * EINTR; one with SA_RESTART lets it go on (the RDMA stream's reads
	 * slept on, and qperf, which ends its tests with SIGALRM, waited for
	 * ever) */
	fd = dial();
	{
		struct sigaction sa = {.sa_handler = on_alarm};
		struct itimerval it = {.it_value = {0, 200000}};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, NULL);
		setitimer(ITIMER_REAL, &it, NULL);
		r = recv(fd, b, 1, 0);
		say("C intr recv %zd %s alarms %d", r, en(r < 0 ? errno : 0), alarms);
		sa.sa_flags = SA_RESTART;
		sigaction(SIGALRM, &sa, NULL);
		sig(c2s);
		setitimer(ITIMER_REAL, &it, NULL);
		r = recv(fd, b, 1, 0);
		say("C intr restarted recv %zd '%.*s' alarms %d", r, (int)(r > 0 ? r : 0), b, alarms);
		signal(SIGALRM, SIG_DFL);
	}
	close(fd);

	/* 18: SO_RCVLOWAT at the server */
	fd = dial();
	{
		char big[1000];
		memset(big, 'l', sizeof(big));
		await(s2c);
		r = write_full(fd, big, 600);
		sig(c2s);
		await(s2c);
		usleep(200000);
		r += write_full(fd, big, 600);
		await(s2c);
		usleep(200000);
		r += write_full(fd, big, 500);
		usleep(200000);
		r += write_full(fd, big, 600);
		await(s2c);
		r += write_full(fd, big, 300);
		await(s2c);
		r += write_full(fd, big, 10);
		say("C lowat sent %zd", r);
	}
	close(fd);

	/* 19: a read on the server times out with the listener's SO_RCVTIMEO */
	await(s2c);
	fd = dial();
	say("C inherited write %zd", write(fd, "i", 1));
	await(s2c);
	close(fd);

	/* 20 */
	fd = dial();
	SAY_CALL("C fault send outside", send(fd, (void *)-1, 10, 0));
	SAY_CALL("C fault send null", send(fd, NULL, 10, 0));
	SAY_CALL("C fault send null empty", send(fd, NULL, 0, 0));
	{
		struct iovec iv[2] = {{"ab", 2}, {NULL, 5}}, one = {"x", 1};
		SAY_CALL("C fault writev then null", writev(fd, iv, 2));
		SAY_CALL("C fault writev count", writev(fd, &one, bad_count));
		SAY_CALL("C fault sendmsg null", sendmsg(fd, NULL, 0));
#ifndef SANITIZED
		/* the readiness calls with arrays the kernel refuses (not in a
		 * sanitizer build: its own poll and select read them first) */
		struct timeval tv0 = {0, 0};
		SAY_CALL("C fault poll outside", poll((struct pollfd *)-1, 1, 0));
		SAY_CALL("C fault poll null", poll(null_fds, 1, 0));
		struct pollfd one_fd = {.fd = fd, .events = POLLIN};
		struct pollfd *volatile one_p = &one_fd; /* its size unknown to the compiler */
		SAY_CALL("C fault poll count", poll(one_p, huge_nfds, 0));
		SAY_CALL("C fault select outside", select(fd + 1, (fd_set *)-1, NULL, NULL, &tv0));
		/* and the message calls' headers and vectors (their
		 * interceptors read them too) */
		SAY_CALL("C fault sendmsg outside", sendmsg(fd, (struct msghdr *)-1, 0));
		SAY_CALL("C fault sendmmsg outside", sendmmsg(fd, (struct mmsghdr *)-1, 2, 0));
		SAY_CALL("C fault sendmmsg null", sendmmsg(fd, NULL, 1, 0));
		SAY_CALL("C fault recvmmsg outside",
			 recvmmsg(fd, (struct mmsghdr *)-1, 2, MSG_DONTWAIT, NULL));
		SAY_CALL("C fault recvmsg outside", recvmsg(fd, (struct msghdr *)-1, MSG_DONTWAIT));
#endif
	}
	say("C fault write %zd", write(fd, "cd", 2));
	sig(c2s);
	await(s2c);
	{
		struct iovec m = {"m", 1};
		struct mmsghdr *vec = calloc(1025, sizeof(*vec));
		for (int i = 0; i < 1025; i++) {
			vec[i].msg_hdr.msg_iov = &m;
			vec[i].msg_hdr.msg_iovlen = 1;
		}
		r = sendmmsg(fd, vec, 1025, 0);
		say("C mmsg batch %zd last len %u", r, vec[1023].msg_len);
		free(vec);
	}
	close(fd);
}

int main(int argc, char **argv)
{
	return pair_main(argc, argv, "streamcheck", 7471, server, client);
}
