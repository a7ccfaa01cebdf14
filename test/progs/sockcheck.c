/* sockcheck.c - deterministic socket semantics, for the differential test.
 *
 * Exercises every libc entry point librsock interposes over loopback and
 * prints one line per step: the step name, the return value (descriptors as
 * "fd", never their numbers when they may vary) and the errno name. Nothing
 * that varies between runs (ports, pids, addresses) is printed, so the output
 * of a plain run and of a run under LD_PRELOAD=librsock.so must be identical.
 *
 * usage: sockcheck [--expect-preload] [--noop] [--close-all] [--fsize0] [--threads]
 *   --expect-preload  also check through the public API (looked up with
 *                     dlsym, so the program runs without the library) that
 *                     connected streams report RSOCK_EXPECT_TRANSPORT
 *                     (default 4, RSOCK_TRANSPORT_SHM: both ends are in this
 *                     process), pipes and AF_UNIX sockets
 *                     RSOCK_TRANSPORT_NONE, and that the path's counters
 *                     count the bytes. Prints nothing extra to stdout;
 *                     mismatches go to stderr and the exit status.
 *   --noop            exit 0 at once (for LD_DEBUG=bindings with LD_BIND_NOW).
 *   --close-all       only close descriptors 3..4095 one by one, print counts.
 *   --fsize0          set RLIMIT_FSIZE to 0 (as a sandbox does), make a socket, exit 0.
 *   --threads         only the concurrency scenario: 4 threads open, use, dup
 *                     and close 250 streams each.
 * Exit status: 0, or 1 when a check failed. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rsock/rsock.h"

static int failures;
static int expect_preload;
static int stream_path = RSOCK_TRANSPORT_SHM; /* RSOCK_EXPECT_TRANSPORT */
static int (*api_transport)(int);
static int (*api_stats)(struct rsock_stats *, size_t);

/* ---- output ------------------------------------------------------------- */

static const char *ename(int e)
{
	const char *n = e ? strerrorname_np(e) : "0";
	return n ? n : "E?";
}

/* name: the return value, errno name when it failed. */
static long R(const char *name, long r)
{
	int e = errno;

	if (r < 0)
		printf("%s: -1 %s\n", name, ename(e));
	else
		printf("%s: %ld\n", name, r);
	fflush(stdout);
	errno = e;
	return r;
}

/* Same for calls returning a new descriptor: "fd" instead of the number. */
static int F(const char *name, int r)
{
	int e = errno;

	if (r < 0)
		printf("%s: -1 %s\n", name, ename(e));
	else
		printf("%s: fd\n", name);
	fflush(stdout);
	errno = e;
	return r;
}

static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* A check that must hold in every run: printed as ok / FAIL. */
static void expect(const char *name, int cond)
{
	say("%s: %s", name, cond ? "ok" : "FAIL");
	if (!cond)
		failures++;
}

static void die(const char *what)
{
	fprintf(stderr, "sockcheck: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* ---- --expect-preload checks (stderr and exit status only) --------------- */

static void want_transport(const char *what, int fd, int want)
{
	int got;

	if (!expect_preload)
		return;
	got = api_transport ? api_transport(fd) : -2;
	if (got != want) {
		fprintf(stderr, "sockcheck: --expect-preload: %s: rsock_fd_transport = %d, expected %d\n",
			what, got, want);
		failures++;
	}
}

/* The counters of the expected path (stream_path): streams, bytes sent, received. */
static unsigned long long st_pick(const struct rsock_stats *s, int which)
{
	const uint64_t v[3][3] = {{s->streams_tcp, s->tx_bytes_tcp, s->rx_bytes_tcp},
				  {s->streams_rdma, s->tx_bytes_rdma, s->rx_bytes_rdma},
				  {s->streams_shm, s->tx_bytes_shm, s->rx_bytes_shm}};
	int p = stream_path == RSOCK_TRANSPORT_SHM ? 2 : stream_path == RSOCK_TRANSPORT_RDMA;

	return v[p][which];
}
#define st_streams(s) st_pick(s, 0)
#define st_tx(s) st_pick(s, 1)
#define st_rx(s) st_pick(s, 2)

static void stats_now(struct rsock_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (expect_preload && api_stats && api_stats(st, sizeof(*st)) != 0) {
		fprintf(stderr, "sockcheck: --expect-preload: rsock_stats_get failed: %s\n",
			strerror(errno));
		failures++;
	}
}

/* Exact counter deltas over a scenario (both ends of every stream live in
 * this process, so every byte is counted once sent and once received). */
static struct rsock_stats acct0;

static void acct_begin(void)
{
	stats_now(&acct0);
}

static void acct_end(const char *what, unsigned long long streams, unsigned long long tx,
		     unsigned long long rx)
{
	struct rsock_stats s;

	if (!expect_preload)
		return;
	stats_now(&s);
	if (st_streams(&s) - st_streams(&acct0) != streams || st_tx(&s) - st_tx(&acct0) != tx ||
	    st_rx(&s) - st_rx(&acct0) != rx) {
		fprintf(stderr,
			"sockcheck: --expect-preload: %s: counters moved by streams %llu tx %llu rx %llu, "
			"expected streams %llu tx %llu rx %llu\n",
			what, (st_streams(&s) - st_streams(&acct0)),
			(st_tx(&s) - st_tx(&acct0)),
			(st_rx(&s) - st_rx(&acct0)), streams, tx, rx);
		failures++;
	}
}

/* ---- helpers -------------------------------------------------------------- */

union addr {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
	struct sockaddr_storage ss;
};

static socklen_t loopback(int family, union addr *a)
{
	memset(a, 0, sizeof(*a));
	if (family == AF_INET6) {
		a->in6.sin6_family = AF_INET6;
		a->in6.sin6_addr = in6addr_loopback;
		return sizeof(a->in6);
	}
	a->in4.sin_family = AF_INET;
	a->in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sizeof(a->in4);
}

static int same_addr(const union addr *x, const union addr *y)
{
	if (x->sa.sa_family != y->sa.sa_family)
		return 0;
	if (x->sa.sa_family == AF_INET)
		return x->in4.sin_port == y->in4.sin_port &&
		       x->in4.sin_addr.s_addr == y->in4.sin_addr.s_addr;
	if (x->sa.sa_family == AF_INET6)
		return x->in6.sin6_port == y->in6.sin6_port &&
		       !memcmp(&x->in6.sin6_addr, &y->in6.sin6_addr, sizeof(struct in6_addr));
	return 0;
}

static int port_of(const union addr *a)
{
	return ntohs(a->sa.sa_family == AF_INET6 ? a->in6.sin6_port : a->in4.sin_port);
}

/* Wait (at most 3 s) until fd has at least n bytes queued for reading. */
static int wait_bytes(int fd, int n)
{
	for (int i = 0; i < 3000; i++) {
		int q = 0;
		if (ioctl(fd, FIONREAD, &q) == 0 && q >= n)
			return q;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return -1;
}

/* Wait (at most 3 s) for any of events on fd. Returns revents. */
static int wait_ev(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};

	if (poll(&p, 1, 3000) <= 0)
		return 0;
	return p.revents;
}

static int read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -1 : (int)got;
		got += (size_t)r;
	}
	return (int)got;
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		b[i] = (unsigned char)(seed >> 16);
	}
}

/* A connected stream over loopback: listener l, client c, accepted a. The
 * steps are printed under prefix. Returns 0, or -1 when the family is not
 * available here (printed too, identically in every run). */
struct pair {
	int l, c, a;
	union addr laddr; /* the listener's address */
};

static int make_pair(const char *prefix, int family, struct pair *p)
{
	union addr a, peer, self, acc_peer, acc_self;
	socklen_t alen, len;
	char name[96];

	p->l = p->c = p->a = -1;
	snprintf(name, sizeof(name), "%s.socket.listener", prefix);
	if (F(name, p->l = socket(family, SOCK_STREAM, 0)) < 0)
		return -1;
	alen = loopback(family, &a);
	snprintf(name, sizeof(name), "%s.bind", prefix);
	if (R(name, bind(p->l, &a.sa, alen)) < 0) {
		close(p->l);
		return -1;
	}
	snprintf(name, sizeof(name), "%s.listen", prefix);
	R(name, listen(p->l, 16));
	len = sizeof(p->laddr);
	snprintf(name, sizeof(name), "%s.getsockname.listener", prefix);
	R(name, getsockname(p->l, &p->laddr.sa, &len));
	snprintf(name, sizeof(name), "%s.listener.port_assigned", prefix);
	expect(name, port_of(&p->laddr) != 0);

	snprintf(name, sizeof(name), "%s.socket.client", prefix);
	F(name, p->c = socket(family, SOCK_STREAM, 0));
	want_transport("fresh client socket", p->c, RSOCK_TRANSPORT_UNDECIDED);
	snprintf(name, sizeof(name), "%s.connect", prefix);
	R(name, connect(p->c, &p->laddr.sa, len));
	snprintf(name, sizeof(name), "%s.accept", prefix);
	alen = sizeof(acc_peer);
	F(name, p->a = accept(p->l, &acc_peer.sa, &alen));

	len = sizeof(peer);
	snprintf(name, sizeof(name), "%s.getpeername.client", prefix);
	R(name, getpeername(p->c, &peer.sa, &len));
	snprintf(name, sizeof(name), "%s.getpeername.client_is_listener", prefix);
	expect(name, same_addr(&peer, &p->laddr));
	len = sizeof(self);
	snprintf(name, sizeof(name), "%s.getsockname.client", prefix);
	R(name, getsockname(p->c, &self.sa, &len));
	snprintf(name, sizeof(name), "%s.accept.addr_is_client", prefix);
	expect(name, same_addr(&self, &acc_peer));
	len = sizeof(acc_self);
	snprintf(name, sizeof(name), "%s.getsockname.accepted_is_listener", prefix);
	expect(name, getsockname(p->a, &acc_self.sa, &len) == 0 && same_addr(&acc_self, &p->laddr));
	len = sizeof(peer);
	snprintf(name, sizeof(name), "%s.getpeername.accepted_is_client", prefix);
	expect(name, getpeername(p->a, &peer.sa, &len) == 0 && same_addr(&peer, &self));
	want_transport("connected client", p->c, stream_path);
	want_transport("accepted stream", p->a, stream_path);
	return 0;
}

static void close_pair(const char *prefix, struct pair *p)
{
	char name[96];

	snprintf(name, sizeof(name), "%s.close.client", prefix);
	R(name, close(p->c));
	snprintf(name, sizeof(name), "%s.close.accepted", prefix);
	R(name, close(p->a));
	snprintf(name, sizeof(name), "%s.close.listener", prefix);
	R(name, close(p->l));
}

/* ---- scenarios ------------------------------------------------------------ */

static void basic_io(int family, const char *prefix)
{
	struct pair p;
	char buf[256], name[96];

	acct_begin();
	if (make_pair(prefix, family, &p) < 0)
		return;
	snprintf(name, sizeof(name), "%s.write", prefix);
	R(name, write(p.c, "hello, world", 12));
	snprintf(name, sizeof(name), "%s.read", prefix);
	memset(buf, 0, sizeof(buf));
	R(name, read_full(p.a, buf, 12));
	snprintf(name, sizeof(name), "%s.read.data", prefix);
	expect(name, !memcmp(buf, "hello, world", 12));
	snprintf(name, sizeof(name), "%s.send.reply", prefix);
	R(name, send(p.a, "pong", 4, 0));
	snprintf(name, sizeof(name), "%s.recv.reply", prefix);
	R(name, recv(p.c, buf, 4, MSG_WAITALL));
	snprintf(name, sizeof(name), "%s.recv.reply.data", prefix);
	expect(name, !memcmp(buf, "pong", 4));
	close_pair(prefix, &p);
	acct_end(prefix, 2, 16, 16);
}

static void vector_io(void)
{
	struct pair p;
	char a[8], b[8], c[16], big[64];
	struct iovec iv[2];
	struct msghdr m;
	struct mmsghdr mm[2];
	struct iovec mv[2];
	union addr from;
	socklen_t flen;

	acct_begin();
	if (make_pair("vec", AF_INET, &p) < 0)
		return;
	/* writev / readv */
	iv[0] = (struct iovec){"abcd", 4};
	iv[1] = (struct iovec){"efghij", 6};
	R("vec.writev", writev(p.c, iv, 2));
	wait_bytes(p.a, 10);
	iv[0] = (struct iovec){a, 3};
	iv[1] = (struct iovec){b, 7};
	R("vec.readv", readv(p.a, iv, 2));
	expect("vec.readv.data", !memcmp(a, "abc", 3) && !memcmp(b, "defghij", 7));

	/* sendto on a connected stream (address ignored as NULL) / recvfrom */
	R("vec.sendto", sendto(p.a, "0123456789", 10, 0, NULL, 0));
	wait_bytes(p.c, 10);
	flen = sizeof(from);
	R("vec.recvfrom", recvfrom(p.c, big, sizeof(big), 0, &from.sa, &flen));
	expect("vec.recvfrom.data", !memcmp(big, "0123456789", 10));
	R("vec.recvfrom.null_addr", (sendto(p.a, "xy", 2, 0, NULL, 0),
				      wait_bytes(p.c, 2), recvfrom(p.c, big, sizeof(big), 0, NULL, NULL)));

	/* sendmsg / recvmsg */
	iv[0] = (struct iovec){"msg-", 4};
	iv[1] = (struct iovec){"part2", 5};
	memset(&m, 0, sizeof(m));
	m.msg_iov = iv;
	m.msg_iovlen = 2;
	R("vec.sendmsg", sendmsg(p.c, &m, 0));
	wait_bytes(p.a, 9);
	memset(c, 0, sizeof(c));
	iv[0] = (struct iovec){c, 5};
	iv[1] = (struct iovec){c + 5, 11};
	memset(&m, 0, sizeof(m));
	m.msg_iov = iv;
	m.msg_iovlen = 2;
	R("vec.recvmsg", recvmsg(p.a, &m, 0));
	expect("vec.recvmsg.data", !memcmp(c, "msg-part2", 9));
	say("vec.recvmsg.flags: %d", m.msg_flags);

	/* sendmmsg / recvmmsg: two messages, then exactly-sized receive vectors */
	memset(mm, 0, sizeof(mm));
	mv[0] = (struct iovec){"0123456789", 10};
	mv[1] = (struct iovec){"abcdefghijklmnopqrst", 20};
	mm[0].msg_hdr.msg_iov = &mv[0];
	mm[0].msg_hdr.msg_iovlen = 1;
	mm[1].msg_hdr.msg_iov = &mv[1];
	mm[1].msg_hdr.msg_iovlen = 1;
	R("vec.sendmmsg", sendmmsg(p.a, mm, 2, 0));
	say("vec.sendmmsg.lens: %u %u", mm[0].msg_len, mm[1].msg_len);
	wait_bytes(p.c, 30);
	memset(mm, 0, sizeof(mm));
	memset(big, 0, sizeof(big));
	mv[0] = (struct iovec){big, 10};
	mv[1] = (struct iovec){big + 10, 20};
	mm[0].msg_hdr.msg_iov = &mv[0];
	mm[0].msg_hdr.msg_iovlen = 1;
	mm[1].msg_hdr.msg_iov = &mv[1];
	mm[1].msg_hdr.msg_iovlen = 1;
	R("vec.recvmmsg", recvmmsg(p.c, mm, 2, MSG_DONTWAIT, NULL));
	say("vec.recvmmsg.lens: %u %u", mm[0].msg_len, mm[1].msg_len);
	expect("vec.recvmmsg.data", !memcmp(big, "0123456789abcdefghijklmnopqrst", 30));
	close_pair("vec", &p);
	acct_end("vec (readv writev sendto recvfrom sendmsg recvmsg sendmmsg recvmmsg)", 2, 61, 61);
}

static void flags_and_partial(void)
{
	struct pair p;
	char buf[200];
	int n;

	if (make_pair("flags", AF_INET, &p) < 0)
		return;
	/* partial reads */
	char data[100];
	fill((unsigned char *)data, sizeof(data), 7);
	R("flags.send.100", send(p.c, data, 100, 0));
	say("flags.fionread.wait: %d", wait_bytes(p.a, 100));
	n = 0;
	R("flags.ioctl.FIONREAD", ioctl(p.a, FIONREAD, &n));
	say("flags.ioctl.FIONREAD.value: %d", n);
	acct_begin();
	R("flags.recv.peek", recv(p.a, buf, 10, MSG_PEEK));
	acct_end("recv(MSG_PEEK) of 10 bytes (peeked bytes are not received yet)", 0, 0, 0);
	expect("flags.recv.peek.data", !memcmp(buf, data, 10));
	R("flags.read.partial30", read(p.a, buf, 30));
	expect("flags.read.partial30.data", !memcmp(buf, data, 30));
	R("flags.read.rest", read(p.a, buf, sizeof(buf)));
	expect("flags.read.rest.data", !memcmp(buf, data + 30, 70));

	/* MSG_WAITALL across two sends separated in time (a forked sender) */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		struct timespec ts = {0, 50 * 1000000};
		if (send(p.c, data, 50, 0) != 50)
			_exit(1);
		nanosleep(&ts, NULL);
		if (send(p.c, data + 50, 50, 0) != 50)
			_exit(1);
		_exit(0);
	}
	R("flags.recv.waitall", recv(p.a, buf, 100, MSG_WAITALL));
	expect("flags.recv.waitall.data", !memcmp(buf, data, 100));
	int st = 0;
	waitpid(pid, &st, 0);
	say("flags.waitall.sender.exit: %d", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));

	/* MSG_DONTWAIT on an empty stream */
	R("flags.recv.dontwait.empty", recv(p.a, buf, sizeof(buf), MSG_DONTWAIT));

	/* options */
	int v = 0;
	socklen_t vl = sizeof(v);
	R("flags.getsockopt.SO_TYPE", getsockopt(p.c, SOL_SOCKET, SO_TYPE, &v, &vl));
	say("flags.getsockopt.SO_TYPE.value: %s", v == SOCK_STREAM ? "SOCK_STREAM" : "other");
	v = -1;
	vl = sizeof(v);
	R("flags.getsockopt.SO_ERROR", getsockopt(p.c, SOL_SOCKET, SO_ERROR, &v, &vl));
	say("flags.getsockopt.SO_ERROR.value: %d", v);
	v = -1;
	vl = sizeof(v);
	R("flags.getsockopt.TCP_NODELAY.before", getsockopt(p.c, IPPROTO_TCP, TCP_NODELAY, &v, &vl));
	say("flags.getsockopt.TCP_NODELAY.before.value: %d", v != 0);
	v = 1;
	R("flags.setsockopt.TCP_NODELAY", setsockopt(p.c, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)));
	v = 0;
	vl = sizeof(v);
	R("flags.getsockopt.TCP_NODELAY.after", getsockopt(p.c, IPPROTO_TCP, TCP_NODELAY, &v, &vl));
	say("flags.getsockopt.TCP_NODELAY.after.value: %d", v != 0);
	v = 1;
	R("flags.setsockopt.SO_KEEPALIVE", setsockopt(p.c, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v)));
	R("flags.setsockopt.bad_level", setsockopt(p.c, 12345, 1, &v, sizeof(v)));
	R("flags.getsockopt.badfd", getsockopt(-1, SOL_SOCKET, SO_TYPE, &v, &vl));
	close_pair("flags", &p);
}

static void nonblocking(void)
{
	struct pair p;
	char buf[64];
	int fl, v;

	if (make_pair("nb", AF_INET, &p) < 0)
		return;
	fl = (int)R("nb.fcntl.F_GETFL", fcntl(p.a, F_GETFL));
	say("nb.fcntl.F_GETFL.nonblock: %d", !!(fl & O_NONBLOCK));
	say("nb.fcntl.F_GETFL.accmode_rdwr: %d", (fl & O_ACCMODE) == O_RDWR);
	R("nb.fcntl.F_SETFL.O_NONBLOCK", fcntl(p.a, F_SETFL, fl | O_NONBLOCK));
	fl = (int)fcntl(p.a, F_GETFL);
	say("nb.fcntl.F_GETFL.after: %d", !!(fl & O_NONBLOCK));
	R("nb.read.empty", read(p.a, buf, sizeof(buf)));
	R("nb.recv.empty", recv(p.a, buf, sizeof(buf), 0));
	R("nb.fcntl.F_SETFL.blocking", fcntl(p.a, F_SETFL, fl & ~O_NONBLOCK));
	fl = (int)fcntl64(p.a, F_GETFL);
	R("nb.fcntl64.F_GETFL", fl >= 0 ? 0 : -1);
	say("nb.fcntl64.F_GETFL.nonblock: %d", !!(fl & O_NONBLOCK));
	R("nb.fcntl64.F_SETFL.O_NONBLOCK", fcntl64(p.a, F_SETFL, fl | O_NONBLOCK));
	R("nb.read.empty.fcntl64", read(p.a, buf, sizeof(buf)));
	R("nb.fcntl64.F_SETFL.blocking", fcntl64(p.a, F_SETFL, fl & ~O_NONBLOCK));

	/* FIONBIO */
	v = 1;
	R("nb.ioctl.FIONBIO.on", ioctl(p.c, FIONBIO, &v));
	say("nb.FIONBIO.F_GETFL.nonblock: %d", !!(fcntl(p.c, F_GETFL) & O_NONBLOCK));
	R("nb.readv.empty", readv(p.c, &(struct iovec){buf, sizeof(buf)}, 1));
	v = 0;
	R("nb.ioctl.FIONBIO.off", ioctl(p.c, FIONBIO, &v));
	say("nb.FIONBIO.F_GETFL.nonblock.off: %d", !!(fcntl(p.c, F_GETFL) & O_NONBLOCK));

	/* fill the send buffer of a non-blocking socket until EAGAIN */
	v = 1;
	ioctl(p.c, FIONBIO, &v);
	static char chunk[65536];
	long total = 0;
	ssize_t w;
	int rounds = 0;
	while ((w = send(p.c, chunk, sizeof(chunk), MSG_NOSIGNAL)) > 0 && rounds++ < 10000)
		total += w;
	say("nb.send.until_full: %s", w < 0 ? ename(errno) : "no-EAGAIN");
	/* drain it on the other side */
	long got = 0;
	while (got < total) {
		ssize_t r = read(p.a, chunk, sizeof(chunk));
		if (r <= 0)
			break;
		got += r;
	}
	expect("nb.drain.all_bytes", got == total);
	v = 0;
	ioctl(p.c, FIONBIO, &v);

	/* accept on a non-blocking listener with nothing pending */
	fl = fcntl(p.l, F_GETFL);
	fcntl(p.l, F_SETFL, fl | O_NONBLOCK);
	R("nb.accept.empty", accept(p.l, NULL, NULL));
	R("nb.accept4.empty", accept4(p.l, NULL, NULL, 0));
	fcntl(p.l, F_SETFL, fl);

	/* accept4 flags */
	int c2 = socket(AF_INET, SOCK_STREAM, 0);
	R("nb.connect.second", connect(c2, &p.laddr.sa, sizeof(p.laddr.in4)));
	int a2 = F("nb.accept4.flags", accept4(p.l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
	say("nb.accept4.nonblock: %d", !!(fcntl(a2, F_GETFL) & O_NONBLOCK));
	R("nb.accept4.F_GETFD", fcntl(a2, F_GETFD));
	R("nb.accept4.read.empty", read(a2, buf, sizeof(buf)));
	want_transport("accept4 stream", a2, stream_path);
	close(a2);
	close(c2);

	/* a non-blocking connect */
	int c3 = F("nb.socket.nonblock", socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	R("nb.connect.nonblock", connect(c3, &p.laddr.sa, sizeof(p.laddr.in4)));
	int rev = wait_ev(c3, POLLOUT);
	say("nb.connect.nonblock.pollout: %d", !!(rev & POLLOUT));
	v = -1;
	socklen_t vl = sizeof(v);
	R("nb.connect.nonblock.SO_ERROR", getsockopt(c3, SOL_SOCKET, SO_ERROR, &v, &vl));
	say("nb.connect.nonblock.SO_ERROR.value: %s", ename(v));
	R("nb.connect.again", connect(c3, &p.laddr.sa, sizeof(p.laddr.in4)));
	int a3 = F("nb.accept.nonblock_peer", accept(p.l, NULL, NULL));
	R("nb.send.nonblock_client", send(c3, "abc", 3, 0));
	wait_bytes(a3, 3);
	R("nb.recv.nonblock_client", recv(a3, buf, sizeof(buf), 0));
	/* used before its peer was accepted, by this one thread: the
	 * non-blocking client gave up waiting for the answer (TCP) */
	want_transport("non-blocking connected stream", c3, RSOCK_TRANSPORT_TCP);
	close(a3);
	close(c3);
	close_pair("nb", &p);
}

static void errors(void)
{
	char buf[16];
	int fd, v = 0;
	union addr a, b;
	socklen_t len;

	/* EBADF on a closed descriptor */
	fd = F("err.socket", socket(AF_INET, SOCK_STREAM, 0));
	R("err.close", close(fd));
	R("err.close.again", close(fd));
	R("err.read.closed", read(fd, buf, sizeof(buf)));
	R("err.write.closed", write(fd, "x", 1));
	R("err.recv.closed", recv(fd, buf, sizeof(buf), 0));
	R("err.send.closed", send(fd, "x", 1, MSG_NOSIGNAL));
	R("err.shutdown.closed", shutdown(fd, SHUT_RDWR));
	R("err.fcntl.closed", fcntl(fd, F_GETFL));
	R("err.dup.closed", dup(fd));
	R("err.listen.closed", listen(fd, 1));
	R("err.ioctl.closed", ioctl(fd, FIONREAD, &v));
	R("err.readv.badfd", readv(-5, &(struct iovec){buf, 1}, 1));
	R("err.writev.badfd", writev(-5, &(struct iovec){buf, 1}, 1));
	if (expect_preload && api_transport) {
		errno = 0;
		int t = api_transport(fd);
		if (t != -1 || errno != EBADF) {
			fprintf(stderr, "sockcheck: --expect-preload: closed fd: transport %d errno %s\n", t,
				ename(errno));
			failures++;
		}
	}

	/* ENOTCONN on a socket that was never connected */
	memset(&a, 0, sizeof(a));
	fd = F("err.socket.unconnected", socket(AF_INET, SOCK_STREAM, 0));
	len = sizeof(a);
	R("err.getpeername.unconnected", getpeername(fd, &a.sa, &len));
	R("err.shutdown.unconnected", shutdown(fd, SHUT_RDWR));
	R("err.recv.unconnected", recv(fd, buf, sizeof(buf), 0));
	R("err.read.unconnected", read(fd, buf, sizeof(buf)));
	R("err.send.unconnected", send(fd, "x", 1, MSG_NOSIGNAL));
	R("err.shutdown.badhow", shutdown(fd, 42));
	R("err.accept.not_listening", accept(fd, NULL, NULL));
	R("err.connect.unspec_len", connect(fd, &a.sa, 1));
	close(fd);

	/* ECONNREFUSED: a port that was bound but never listened on */
	int hold = socket(AF_INET, SOCK_STREAM, 0);
	len = loopback(AF_INET, &a);
	bind(hold, &a.sa, len);
	len = sizeof(b);
	getsockname(hold, &b.sa, &len);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	R("err.connect.refused", connect(fd, &b.sa, len));
	v = -1;
	socklen_t vl = sizeof(v);
	R("err.connect.refused.SO_ERROR", getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &vl));
	say("err.connect.refused.SO_ERROR.value: %s", ename(v));
	close(fd);
	/* the same, non-blocking: EINPROGRESS, then SO_ERROR ECONNREFUSED */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int r = connect(fd, &b.sa, len);
	say("err.connect.refused.nonblock: %s", r == 0 ? "0" : (errno == EINPROGRESS || errno == ECONNREFUSED) ? "EINPROGRESS-or-ECONNREFUSED" : ename(errno));
	wait_ev(fd, POLLOUT);
	v = -1;
	vl = sizeof(v);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &vl);
	say("err.connect.refused.nonblock.SO_ERROR: %s", r < 0 && errno == ECONNREFUSED ? "ECONNREFUSED" : ename(v));
	close(fd);
	close(hold);

	/* bad arguments */
	R("err.socket.badfamily", socket(12345, SOCK_STREAM, 0));
	R("err.bind.badfd", bind(-1, &a.sa, sizeof(a.in4)));
	R("err.connect.badfd", connect(-1, &a.sa, sizeof(a.in4)));
	R("err.sendmsg.badfd", sendmsg(-1, &(struct msghdr){0}, 0));
	R("err.recvmsg.badfd", recvmsg(-1, &(struct msghdr){0}, 0));
	R("err.sendmmsg.badfd", sendmmsg(-1, NULL, 0, 0));
	R("err.recvmmsg.badfd", recvmmsg(-1, NULL, 0, 0, NULL));
	R("err.sendto.badfd", sendto(-1, "x", 1, 0, NULL, 0));
	R("err.recvfrom.badfd", recvfrom(-1, buf, 1, 0, NULL, NULL));
	int np[2];
	if (pipe(np) == 0) {
		R("err.setsockopt.notsock", setsockopt(np[0], SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v)));
		R("err.getsockopt.notsock", getsockopt(np[0], SOL_SOCKET, SO_TYPE, &v, &(socklen_t){sizeof(v)}));
		R("err.getsockname.notsock", getsockname(np[0], &a.sa, &(socklen_t){sizeof(a)}));
		R("err.send.notsock", send(np[1], "x", 1, 0));
		R("err.recv.notsock", recv(np[0], buf, 1, MSG_DONTWAIT));
		R("err.ioctl.FIONREAD.pipe", ioctl(np[0], FIONREAD, &v));
		close(np[0]);
		close(np[1]);
	}
	R("err.epoll_ctl.badfd", epoll_ctl(-1, EPOLL_CTL_ADD, 0, &(struct epoll_event){0}));
	R("err.epoll_wait.badfd", epoll_wait(-1, &(struct epoll_event){0}, 1, 0));
	R("err.sendfile.badfd", sendfile(-1, -1, NULL, 1));
	R("err.sendfile64.badfd", sendfile64(-1, -1, NULL, 1));
	R("err.splice.badfd", splice(-1, NULL, -1, NULL, 1, 0));
	R("err.dup2.badfd", dup2(-1, 100));
	R("err.dup3.same", dup3(1, 1, 0));
	R("err.close_range.inverted", close_range(10, 5, 0));
	R("err.socketpair.inet", socketpair(AF_INET, SOCK_STREAM, 0, (int[2]){0, 0}));
}

/* EOF, half-close, EPIPE, reset. */
static void shutdowns(void)
{
	struct pair p;
	char buf[64];
	int rev;

	if (make_pair("shut", AF_INET, &p) < 0)
		return;
	R("shut.send.before", send(p.c, "before", 6, 0));
	R("shut.shutdown.SHUT_WR", shutdown(p.c, SHUT_WR));
	R("shut.read.data", read_full(p.a, buf, 6));
	R("shut.read.eof", read(p.a, buf, sizeof(buf)));
	R("shut.read.eof.again", recv(p.a, buf, sizeof(buf), 0));
	/* the other direction still flows */
	R("shut.send.reverse", send(p.a, "still-flowing", 13, 0));
	R("shut.recv.reverse", recv(p.c, buf, 13, MSG_WAITALL));
	expect("shut.recv.reverse.data", !memcmp(buf, "still-flowing", 13));
	R("shut.send.after_shut_wr", send(p.c, "x", 1, MSG_NOSIGNAL));
	R("shut.shutdown.SHUT_RD", shutdown(p.c, SHUT_RD));
	close(p.c);
	/* the accepted side now sees EOF from a closed peer; a write provokes a
	 * reset; afterwards EPIPE (MSG_NOSIGNAL: no signal). */
	R("shut.send.to_closed", send(p.a, "zzz", 3, MSG_NOSIGNAL));
	rev = wait_ev(p.a, POLLHUP | POLLERR | POLLRDHUP);
	say("shut.poll.after_rst.hup: %d", !!(rev & POLLHUP));
	R("shut.send.epipe", send(p.a, "zzz", 3, MSG_NOSIGNAL));
	R("shut.sendto.epipe", sendto(p.a, "zzz", 3, MSG_NOSIGNAL, NULL, 0));
	R("shut.read.after_rst", read(p.a, buf, sizeof(buf)));
	/* write() with SIGPIPE ignored: EPIPE too */
	struct sigaction sa = {.sa_handler = SIG_IGN}, old;
	sigaction(SIGPIPE, &sa, &old);
	R("shut.write.epipe", write(p.a, "zzz", 3));
	R("shut.writev.epipe", writev(p.a, &(struct iovec){"z", 1}, 1));
	sigaction(SIGPIPE, &old, NULL);
	R("shut.close.accepted", close(p.a));
	R("shut.close.listener", close(p.l));

	/* SIGPIPE is delivered without MSG_NOSIGNAL: observed in a child */
	if (make_pair("sigpipe", AF_INET, &p) < 0)
		return;
	close(p.a);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		for (int i = 0; i < 50; i++) {
			send(p.c, "x", 1, 0);
			struct timespec ts = {0, 10 * 1000000};
			nanosleep(&ts, NULL);
		}
		_exit(0);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	say("sigpipe.child: %s", WIFSIGNALED(st) && WTERMSIG(st) == SIGPIPE ? "SIGPIPE" : "no-signal");
	close(p.c);
	close(p.l);
}

static void polling(void)
{
	struct pair p;
	char buf[64];
	struct pollfd pf[2];
	fd_set rs, ws;
	struct timeval tv;
	struct timespec ts;
	sigset_t mask;

	if (make_pair("poll", AF_INET, &p) < 0)
		return;
	sigemptyset(&mask);
	pf[0] = (struct pollfd){.fd = p.a, .events = POLLIN};
	pf[1] = (struct pollfd){.fd = p.c, .events = POLLOUT};
	R("poll.poll.idle", poll(pf, 1, 0));
	R("poll.poll.writable", poll(pf + 1, 1, 0));
	say("poll.poll.writable.revents: %#x", pf[1].revents);
	send(p.c, "ping", 4, 0);
	wait_bytes(p.a, 4);
	R("poll.poll.readable", poll(pf, 2, 1000));
	say("poll.poll.readable.revents: %#x %#x", pf[0].revents, pf[1].revents);
	ts = (struct timespec){0, 0};
	R("poll.ppoll.readable", ppoll(pf, 1, &ts, &mask));
	say("poll.ppoll.readable.revents: %#x", pf[0].revents);
	R("poll.ppoll.null_mask", ppoll(pf, 1, &ts, NULL));

	FD_ZERO(&rs);
	FD_SET(p.a, &rs);
	tv = (struct timeval){0, 0};
	R("poll.select.readable", select(p.a + 1, &rs, NULL, NULL, &tv));
	say("poll.select.readable.isset: %d", FD_ISSET(p.a, &rs));
	FD_ZERO(&rs);
	FD_ZERO(&ws);
	FD_SET(p.c, &rs);
	FD_SET(p.c, &ws);
	tv = (struct timeval){0, 0};
	R("poll.select.client", select(p.c + 1, &rs, &ws, NULL, &tv));
	say("poll.select.client.isset: r=%d w=%d", FD_ISSET(p.c, &rs), FD_ISSET(p.c, &ws));
	FD_ZERO(&rs);
	FD_SET(p.a, &rs);
	ts = (struct timespec){0, 0};
	R("poll.pselect.readable", pselect(p.a + 1, &rs, NULL, NULL, &ts, &mask));
	say("poll.pselect.readable.isset: %d", FD_ISSET(p.a, &rs));
	R("poll.read", read(p.a, buf, sizeof(buf)));
	FD_ZERO(&rs);
	FD_SET(p.a, &rs);
	ts = (struct timespec){0, 1000000};
	R("poll.pselect.idle", pselect(p.a + 1, &rs, NULL, NULL, &ts, NULL));
	tv = (struct timeval){0, 1000};
	FD_ZERO(&rs);
	FD_SET(p.a, &rs);
	R("poll.select.timeout", select(p.a + 1, &rs, NULL, NULL, &tv));
	/* poll and select on a closed descriptor: POLLNVAL, EBADF */
	int dead = socket(AF_INET, SOCK_STREAM, 0);
	close(dead);
	FD_ZERO(&rs);
	FD_SET(dead, &rs);
	tv = (struct timeval){0, 0};
	R("poll.select.closed", select(dead + 1, &rs, NULL, NULL, &tv));
	FD_ZERO(&rs);
	FD_SET(dead, &rs);
	ts = (struct timespec){0, 0};
	R("poll.pselect.closed", pselect(dead + 1, &rs, NULL, NULL, &ts, NULL));
	pf[0] = (struct pollfd){.fd = dead, .events = POLLIN};
	R("poll.poll.closed", poll(pf, 1, 0));
	say("poll.poll.closed.revents: %#x", pf[0].revents);
	/* the listener is readable with a pending connection */
	int c2 = socket(AF_INET, SOCK_STREAM, 0);
	connect(c2, &p.laddr.sa, sizeof(p.laddr.in4));
	pf[0] = (struct pollfd){.fd = p.l, .events = POLLIN};
	R("poll.poll.listener", poll(pf, 1, 3000));
	say("poll.poll.listener.revents: %#x", pf[0].revents);
	close(accept(p.l, NULL, NULL));
	close(c2);

	/* epoll */
	int ep = F("poll.epoll_create", epoll_create(4));
	int ep1 = F("poll.epoll_create1", epoll_create1(EPOLL_CLOEXEC));
	R("poll.epoll_create1.F_GETFD", fcntl(ep1, F_GETFD));
	R("poll.epoll_create.bad", epoll_create(0));
	R("poll.epoll_create1.bad", epoll_create1(12345));
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 42}, out[4];
	R("poll.epoll_ctl.add", epoll_ctl(ep, EPOLL_CTL_ADD, p.a, &ev));
	R("poll.epoll_ctl.add.again", epoll_ctl(ep, EPOLL_CTL_ADD, p.a, &ev));
	R("poll.epoll_wait.idle", epoll_wait(ep, out, 4, 0));
	send(p.c, "epoll", 5, 0);
	wait_bytes(p.a, 5);
	memset(out, 0, sizeof(out));
	R("poll.epoll_wait.readable", epoll_wait(ep, out, 4, 1000));
	say("poll.epoll_wait.event: %#x %u", out[0].events, out[0].data.u32);
	memset(out, 0, sizeof(out));
	R("poll.epoll_pwait.readable", epoll_pwait(ep, out, 4, 1000, &mask));
	say("poll.epoll_pwait.event: %#x %u", out[0].events, out[0].data.u32);
	memset(out, 0, sizeof(out));
	ts = (struct timespec){1, 0};
	R("poll.epoll_pwait2.readable", epoll_pwait2(ep, out, 4, &ts, &mask));
	say("poll.epoll_pwait2.event: %#x %u", out[0].events, out[0].data.u32);
	R("poll.read.epoll", read(p.a, buf, sizeof(buf)));
	ts = (struct timespec){0, 1000000};
	R("poll.epoll_pwait2.idle", epoll_pwait2(ep, out, 4, &ts, NULL));
	R("poll.epoll_pwait.idle", epoll_pwait(ep, out, 4, 0, NULL));
	ev = (struct epoll_event){.events = EPOLLOUT, .data.u32 = 7};
	R("poll.epoll_ctl.mod", epoll_ctl(ep, EPOLL_CTL_MOD, p.a, &ev));
	memset(out, 0, sizeof(out));
	R("poll.epoll_wait.writable", epoll_wait(ep, out, 4, 1000));
	say("poll.epoll_wait.writable.event: %#x %u", out[0].events, out[0].data.u32);
	R("poll.epoll_ctl.del", epoll_ctl(ep, EPOLL_CTL_DEL, p.a, NULL));
	R("poll.epoll_ctl.del.again", epoll_ctl(ep, EPOLL_CTL_DEL, p.a, NULL));
	ev = (struct epoll_event){.events = EPOLLIN | EPOLLET, .data.u32 = 9};
	R("poll.epoll_ctl.add.listener", epoll_ctl(ep1, EPOLL_CTL_ADD, p.l, &ev));
	c2 = socket(AF_INET, SOCK_STREAM, 0);
	connect(c2, &p.laddr.sa, sizeof(p.laddr.in4));
	memset(out, 0, sizeof(out));
	R("poll.epoll_wait.listener", epoll_wait(ep1, out, 4, 3000));
	say("poll.epoll_wait.listener.event: %#x %u", out[0].events, out[0].data.u32);
	close(accept(p.l, NULL, NULL));
	close(c2);
	/* the peer hangs up: EPOLLIN|EPOLLRDHUP */
	ev = (struct epoll_event){.events = EPOLLIN | EPOLLRDHUP, .data.u32 = 11};
	epoll_ctl(ep, EPOLL_CTL_ADD, p.a, &ev);
	shutdown(p.c, SHUT_WR);
	memset(out, 0, sizeof(out));
	R("poll.epoll_wait.rdhup", epoll_wait(ep, out, 4, 3000));
	say("poll.epoll_wait.rdhup.event: %#x %u", out[0].events, out[0].data.u32);
	R("poll.close.epoll", close(ep));
	R("poll.close.epoll1", close(ep1));
	close_pair("poll", &p);
}

/* stdio on a stream (fdopen, fgets, fprintf, fclose): glibc reads, writes
 * and closes inside libc, past any interposer. */
static void stdio_streams(void)
{
	struct pair p;
	char line[64], buf[16];
	FILE *in, *out;
	int d, d2;

	if (make_pair("stdio", AF_INET, &p) < 0)
		return;
	R("stdio.greeting", write(p.a, "220 hello\nsecond line\n", 23));
	d = F("stdio.dup", dup(p.c));
	d2 = F("stdio.dup.2", dup(p.c));
	in = fdopen(d, "r");
	out = fdopen(d2, "w");
	expect("stdio.fdopen", in && out);
	if (in && out) {
		say("stdio.fgets 1: %s", fgets(line, sizeof(line), in) ? line : "(null)\n");
		say("stdio.fgets 2: %s", fgets(line, sizeof(line), in) ? line : "(null)\n");
		R("stdio.fprintf", fprintf(out, "QUIT %d\n", 42));
		R("stdio.fflush", fflush(out));
		R("stdio.read", read_full(p.a, buf, 8));
		say("stdio.peer got: %.8s", buf);
		R("stdio.fclose.in", fclose(in));
		R("stdio.fclose.out", fclose(out));
		/* (the tracked-descriptor count at the end says the library
		 * forgot both: fclose closes inside libc) */
	}
	R("stdio.write.original_still_open", write(p.c, "orig", 4));
	R("stdio.read.original", read_full(p.a, buf, 4));
	close_pair("stdio", &p);
}

static void dups(void)
{
	struct pair p;
	char buf[64];
	int d, d2, d3, d4, d5;

	if (make_pair("dup", AF_INET, &p) < 0)
		return;
	d = F("dup.dup", dup(p.c));
	want_transport("dup of a stream", d, stream_path);
	R("dup.write.via_dup", write(d, "via-dup", 7));
	R("dup.read", read_full(p.a, buf, 7));
	R("dup.close.dup", close(d));
	R("dup.write.original_still_open", write(p.c, "orig", 4));
	R("dup.read.original", read_full(p.a, buf, 4));

	R("dup.dup2", dup2(p.c, 200) == 200 ? 0 : -1);
	want_transport("dup2 of a stream", 200, stream_path);
	R("dup.dup2.F_GETFD", fcntl(200, F_GETFD));
	R("dup.dup2.same", dup2(p.c, p.c) == p.c ? 0 : -1);
	R("dup.write.via_dup2", write(200, "d2", 2));
	R("dup.read.dup2", read_full(p.a, buf, 2));
	/* dup2 onto an open stream replaces it */
	int pp[2];
	R("dup.pipe", pipe(pp));
	want_transport("pipe", pp[0], RSOCK_TRANSPORT_NONE);
	R("dup.dup2.pipe_over_stream", dup2(pp[1], 200) == 200 ? 0 : -1);
	want_transport("pipe dup2'd over a stream", 200, RSOCK_TRANSPORT_NONE);
	R("dup.write.pipe", write(200, "pp", 2));
	R("dup.read.pipe", read(pp[0], buf, sizeof(buf)));
	R("dup.close.200", close(200));

	R("dup.dup3.cloexec", dup3(p.c, 201, O_CLOEXEC) == 201 ? 0 : -1);
	R("dup.dup3.F_GETFD", fcntl(201, F_GETFD));
	want_transport("dup3 of a stream", 201, stream_path);
	R("dup.dup3.badflags", dup3(p.c, 202, 12345));
	R("dup.send.via_dup3", send(201, "d3", 2, 0));
	R("dup.read.dup3", read_full(p.a, buf, 2));
	close(201);

	d2 = fcntl(p.c, F_DUPFD, 310);
	R("dup.fcntl.F_DUPFD", d2 >= 0 ? 0 : -1);
	say("dup.fcntl.F_DUPFD.min: %d", d2 >= 310);
	R("dup.fcntl.F_DUPFD.F_GETFD", fcntl(d2, F_GETFD));
	d3 = fcntl(p.c, F_DUPFD_CLOEXEC, 320);
	say("dup.fcntl.F_DUPFD_CLOEXEC.min: %d", d3 >= 320);
	R("dup.fcntl.F_DUPFD_CLOEXEC.F_GETFD", fcntl(d3, F_GETFD));
	want_transport("F_DUPFD of a stream", d2, stream_path);
	want_transport("F_DUPFD_CLOEXEC of a stream", d3, stream_path);
	R("dup.fcntl.F_SETFD", fcntl(d2, F_SETFD, FD_CLOEXEC));
	R("dup.fcntl.F_GETFD.after", fcntl(d2, F_GETFD));
	d4 = fcntl64(p.c, F_DUPFD, 330);
	say("dup.fcntl64.F_DUPFD.min: %d", d4 >= 330);
	d5 = fcntl64(p.c, F_DUPFD_CLOEXEC, 340);
	R("dup.fcntl64.F_DUPFD_CLOEXEC.F_GETFD", fcntl64(d5, F_GETFD));
	want_transport("fcntl64 F_DUPFD of a stream", d4, stream_path);
	R("dup.write.via_fdupfd", write(d4, "F4", 2));
	R("dup.read.fdupfd", read_full(p.a, buf, 2));
	close(d2);
	close(d3);
	close(d4);
	close(d5);
	close(pp[0]);
	close(pp[1]);

	/* close_range and closefrom over dups of the stream */
	R("dup.dup2.400", dup2(p.c, 400) == 400 ? 0 : -1);
	R("dup.dup2.401", dup2(p.c, 401) == 401 ? 0 : -1);
	R("dup.dup2.402", dup2(p.c, 402) == 402 ? 0 : -1);
	R("dup.close_range.cloexec", close_range(400, 402, CLOSE_RANGE_CLOEXEC));
	R("dup.close_range.cloexec.F_GETFD", fcntl(401, F_GETFD));
	R("dup.close_range.badflags", close_range(400, 402, 1u << 30));
	R("dup.close_range.badflags.F_GETFD", fcntl(400, F_GETFD));
	want_transport("fd after a failed close_range", 400, stream_path);
	R("dup.close_range", close_range(400, 401, 0));
	R("dup.close_range.F_GETFD.400", fcntl(400, F_GETFD));
	R("dup.close_range.F_GETFD.401", fcntl(401, F_GETFD));
	R("dup.close_range.F_GETFD.402", fcntl(402, F_GETFD));
	want_transport("fd after close_range", 400, -1);
	R("dup.write.after_close_range", write(p.c, "cr", 2));
	R("dup.read.after_close_range", read_full(p.a, buf, 2));
	R("dup.dup2.500", dup2(p.c, 500) == 500 ? 0 : -1);
	R("dup.dup2.510", dup2(p.a, 510) == 510 ? 0 : -1);
	closefrom(402);
	say("dup.closefrom: done");
	R("dup.closefrom.F_GETFD.402", fcntl(402, F_GETFD));
	R("dup.closefrom.F_GETFD.500", fcntl(500, F_GETFD));
	R("dup.closefrom.F_GETFD.510", fcntl(510, F_GETFD));
	R("dup.write.after_closefrom", write(p.c, "cf", 2));
	R("dup.read.after_closefrom", read_full(p.a, buf, 2));
	/* a fresh socket may reuse a number the library tracked before */
	int s = socket(AF_INET, SOCK_STREAM, 0);
	R("dup.dup2.reuse_400", dup2(s, 400) == 400 ? 0 : -1);
	want_transport("unconnected socket dup2'd to 400", 400, RSOCK_TRANSPORT_UNDECIDED);
	close(400);
	close(s);
	close_pair("dup", &p);
}

static void unix_and_pipes(void)
{
	int sv[2], pp[2];
	char buf[16];

	R("unix.socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	want_transport("AF_UNIX socketpair", sv[0], RSOCK_TRANSPORT_NONE);
	R("unix.write", write(sv[0], "unix", 4));
	R("unix.read", read(sv[1], buf, sizeof(buf)));
	R("unix.send", send(sv[1], "back", 4, 0));
	R("unix.recv", recv(sv[0], buf, sizeof(buf), 0));
	R("unix.shutdown", shutdown(sv[0], SHUT_WR));
	R("unix.read.eof", read(sv[1], buf, sizeof(buf)));
	close(sv[0]);
	close(sv[1]);
	R("unix.socketpair.dgram.nonblock", socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0, sv));
	R("unix.recv.dgram.empty", recv(sv[0], buf, sizeof(buf), 0));
	close(sv[0]);
	close(sv[1]);
	int u = F("unix.socket.stream", socket(AF_UNIX, SOCK_STREAM, 0));
	want_transport("AF_UNIX socket", u, RSOCK_TRANSPORT_NONE);
	close(u);
	int dg = F("udp.socket", socket(AF_INET, SOCK_DGRAM, 0));
	want_transport("UDP socket", dg, RSOCK_TRANSPORT_NONE);
	close(dg);
	R("pipe.pipe", pipe(pp));
	want_transport("pipe", pp[1], RSOCK_TRANSPORT_NONE);
	R("pipe.write", write(pp[1], "p", 1));
	R("pipe.read", read(pp[0], buf, sizeof(buf)));
	close(pp[0]);
	close(pp[1]);
}

static void forking(void)
{
	struct pair p;
	char buf[64];
	int st;
	pid_t pid;

	acct_begin();
	if (make_pair("fork", AF_INET, &p) < 0)
		return;
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		/* the child: I/O on the inherited stream */
		int bad = 0;
		char b[16];
		if (expect_preload && api_transport && api_transport(p.c) != stream_path)
			bad = 10;
		if (write(p.c, "from-child", 10) != 10)
			_exit(1);
		if (read_full(p.c, b, 9) != 9 || memcmp(b, "to-child!", 9))
			_exit(2);
		close(p.c);
		_exit(7 + bad);
	}
	R("fork.fork", pid > 0 ? 0 : -1);
	R("fork.read.from_child", read_full(p.a, buf, 10));
	expect("fork.read.from_child.data", !memcmp(buf, "from-child", 10));
	R("fork.write.to_child", write(p.a, "to-child!", 9));
	waitpid(pid, &st, 0);
	say("fork.child.exit: %d", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	/* the parent's copy still works after the child closed its copy */
	R("fork.write.parent", write(p.c, "parent", 6));
	R("fork.read.parent", read_full(p.a, buf, 6));

	/* vfork + _exit */
	fflush(stdout);
	pid = vfork();
	if (pid == 0)
		_exit(5);
	R("fork.vfork", pid > 0 ? 0 : -1);
	waitpid(pid, &st, 0);
	say("fork.vfork.exit: %d", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	/* vfork + exec: the child writes on the inherited stream through sh */
	char fdarg[32];
	snprintf(fdarg, sizeof(fdarg), "printf vforked >&%d; exit 4", p.c);
	fflush(stdout);
	pid = vfork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", fdarg, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &st, 0);
	say("fork.vfork.exec.exit: %d", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	R("fork.read.from_exec", read_full(p.a, buf, 7));
	expect("fork.read.from_exec.data", !memcmp(buf, "vforked", 7));
	close_pair("fork", &p);
	/* the children's bytes are counted in the children */
	acct_end("fork (parent side only)", 2, 15, 23);
}

/* The reader of the sendfile scenario: a forked child reads and verifies
 * every phase, so that the sender may block on a full socket buffer. */
static int sendfile_reader(int fd, const unsigned char *data)
{
	static unsigned char got[100000];
	static const struct {
		size_t off, n;
	} phases[] = {{1000, 50000}, {90000, 10000}, {0, 100000}};

	for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
		if (read_full(fd, got, phases[i].n) != (int)phases[i].n)
			return 10 + (int)i;
		if (memcmp(got, data + phases[i].off, phases[i].n))
			return 20 + (int)i;
	}
	return 0;
}

/* --expect-preload only: closefrom() with a negative bound closes every
 * descriptor (glibc clamps it to 0); the library must forget the streams
 * too, or a file that reuses a number is taken for a TCP stream. Checked in
 * a child, which loses its stdout. */
static void closefrom_negative(void)
{
	union addr a;
	socklen_t len = loopback(AF_INET, &a);
	int l, c, s, st = 0;
	pid_t pid;

	if (!expect_preload)
		return;
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, &a.sa, len) || listen(l, 1) || getsockname(l, &a.sa, &len))
		die("closefrom_negative: listener");
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, &a.sa, len) || (s = accept(l, NULL, NULL)) < 0)
		die("closefrom_negative: connect");
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		int fd;
		closefrom(-1);
		while ((fd = open("/dev/null", O_RDONLY)) >= 0 && fd < c)
			;
		if (fd != c)
			_exit(2);
		_exit(api_transport(c) == RSOCK_TRANSPORT_NONE ? 0 : 3);
	}
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr,
			"sockcheck: --expect-preload: after closefrom(-1) a file reusing a stream's "
			"descriptor number is still reported as a stream (child status %d)\n", st);
		failures++;
	}
	close(s);
	close(c);
	close(l);
}

static void sendfiles(void)
{
	struct pair p;
	char path[] = "/tmp/sockcheck.XXXXXX";
	static unsigned char data[100000];
	off_t off;
	off64_t off64;
	int fd, st = 0;
	pid_t pid;

	acct_begin();
	if (make_pair("sendfile", AF_INET, &p) < 0)
		return;
	fd = mkstemp(path);
	if (fd < 0)
		die("mkstemp");
	unlink(path);
	fill(data, sizeof(data), 42);
	if (write(fd, data, sizeof(data)) != (ssize_t)sizeof(data))
		die("write temp file");
	fflush(stdout);
	pid = fork();
	if (pid == 0)
		_exit(sendfile_reader(p.a, data));
	/* with an offset pointer: the file position does not move */
	off = 1000;
	long sent = 0;
	while (sent < 50000) {
		ssize_t r = sendfile(p.c, fd, &off, (size_t)(50000 - sent));
		if (r <= 0)
			break;
		sent += r;
	}
	R("sendfile.offset", sent);
	say("sendfile.offset.after: %ld", (long)off);
	say("sendfile.filepos: %ld", (long)lseek(fd, 0, SEEK_CUR));
	/* without: from the file position (only 10000 bytes are left) */
	lseek(fd, 90000, SEEK_SET);
	sent = 0;
	for (;;) {
		ssize_t r = sendfile(p.c, fd, NULL, 20000);
		if (r <= 0)
			break;
		sent += r;
	}
	R("sendfile.filepos_mode", sent);
	say("sendfile.filepos.after: %ld", (long)lseek(fd, 0, SEEK_CUR));
	R("sendfile.eof", sendfile(p.c, fd, NULL, 100));
	/* sendfile64 */
	off64 = 0;
	sent = 0;
	while (sent < 100000) {
		ssize_t r = sendfile64(p.c, fd, &off64, (size_t)(100000 - sent));
		if (r <= 0)
			break;
		sent += r;
	}
	R("sendfile64.offset", sent);
	say("sendfile64.offset.after: %ld", (long)off64);
	waitpid(pid, &st, 0);
	say("sendfile.reader.exit: %d", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	R("sendfile.to_closed_fd", sendfile(fd + 1000, fd, NULL, 10));
	close(fd);
	close_pair("sendfile", &p);
	acct_end("sendfile/sendfile64 (the reader is a child)", 2, 160000, 0);
}

/* --threads: streams opened, used, dup'd and closed by several threads at
 * once (the descriptor table under concurrency). Deterministic output. */
#include <pthread.h>

#define T_THREADS 4
#define T_ITERS 250

static void *thread_body(void *arg)
{
	long bad = 0;
	union addr a;
	socklen_t len = loopback(AF_INET, &a);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	char buf[100], got[100];

	memset(buf, (int)(long)arg, sizeof(buf));
	if (l < 0 || bind(l, &a.sa, len) || listen(l, 8) || getsockname(l, &a.sa, &len))
		return (void *)-1L;
	for (int i = 0; i < T_ITERS; i++) {
		int c = socket(AF_INET, SOCK_STREAM, 0), s, d;
		if (c < 0 || connect(c, &a.sa, len)) {
			bad++;
			close(c);
			continue;
		}
		s = accept(l, NULL, NULL);
		d = dup(s);
		if (s < 0 || d < 0 || write(c, buf, sizeof(buf)) != (ssize_t)sizeof(buf) ||
		    read_full(d, got, sizeof(got)) != (int)sizeof(got) || memcmp(buf, got, sizeof(got)))
			bad++;
		if (expect_preload && api_transport && api_transport(d) != stream_path)
			bad++;
		close(d);
		close(s);
		close(c);
	}
	close(l);
	return (void *)bad;
}

static int threads_main(void)
{
	pthread_t t[T_THREADS];
	long bad = 0;
	struct rsock_stats s0, s1;

	stats_now(&s0);
	for (long i = 0; i < T_THREADS; i++)
		if (pthread_create(&t[i], NULL, thread_body, (void *)i))
			die("pthread_create");
	for (int i = 0; i < T_THREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		bad += (long)r;
	}
	printf("threads: %d threads x %d streams, %ld bad\n", T_THREADS, T_ITERS, bad);
	stats_now(&s1);
	if (expect_preload) {
		unsigned long long n = T_THREADS * T_ITERS;
		if (st_streams(&s1) - st_streams(&s0) != 2 * n || st_tx(&s1) - st_tx(&s0) != 100 * n ||
		    st_rx(&s1) - st_rx(&s0) != 100 * n || s1.tracked_fds != s0.tracked_fds) {
			fprintf(stderr,
				"sockcheck: --expect-preload: threads: streams +%llu tx +%llu rx +%llu tracked %llu->%llu, "
				"expected +%llu +%llu +%llu and no change\n",
				(st_streams(&s1) - st_streams(&s0)),
				(st_tx(&s1) - st_tx(&s0)),
				(st_rx(&s1) - st_rx(&s0)),
				(unsigned long long)s0.tracked_fds, (unsigned long long)s1.tracked_fds, 2 * n, 100 * n,
				100 * n);
			failures++;
		}
	}
	return bad || failures ? 1 : 0;
}

/* --exec: every exec entry point (system and popen too) runs a program
 * (sh -c 'exit 7') and passes its arguments and environment through. */
extern char **environ;
static int exec_family(void)
{
	static const char *names[] = {"execve", "execv", "execvp", "execvpe", "execl",
				      "execlp", "execle", "fexecve", "posix_spawn", "posix_spawnp"};
	char *argv[] = {"sh", "-c", "exit $RC", NULL};
	char *envp[] = {"RC=7", NULL};
	int ok = 0;

	setenv("RC", "7", 1);
	for (int i = 0; i < 10; i++) {
		pid_t pid;
		int st = -1;
		if (i >= 8) {
			int (*sp)(pid_t *, const char *, const posix_spawn_file_actions_t *,
				  const posix_spawnattr_t *, char *const[], char *const[]) =
				i == 8 ? posix_spawn : posix_spawnp;
			if (sp(&pid, i == 8 ? "/bin/sh" : "sh", NULL, NULL, argv, envp))
				pid = -1;
		} else if ((pid = fork()) == 0) {
			int fd;
			switch (i) {
			case 0: execve("/bin/sh", argv, envp); break;
			case 1: execv("/bin/sh", argv); break;
			case 2: execvp("sh", argv); break;
			case 3: execvpe("sh", argv, envp); break;
			case 4: execl("/bin/sh", "sh", "-c", "exit $RC", (char *)NULL); break;
			case 5: execlp("sh", "sh", "-c", "exit $RC", (char *)NULL); break;
			case 6: execle("/bin/sh", "sh", "-c", "exit $RC", (char *)NULL, envp); break;
			case 7:
				fd = open("/bin/sh", O_RDONLY | O_CLOEXEC);
				fexecve(fd, argv, envp);
				break;
			}
			_exit(99);
		}
		if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 7)
			ok++;
		else
			printf("exec: %s failed (status %d)\n", names[i], st);
	}
	/* system() and popen(): the shell sees the environment too */
	{
		int st = system("exit $RC");
		FILE *f = popen("echo rc=$RC", "r");
		char line[32] = "";
		if (WIFEXITED(st) && WEXITSTATUS(st) == 7)
			ok++;
		else
			printf("exec: system failed (status %d)\n", st);
		if (f && fgets(line, sizeof(line), f) && !strcmp(line, "rc=7\n") && pclose(f) == 0)
			ok++;
		else
			printf("exec: popen failed (%s)\n", line);
	}
	printf("exec: %d of 12\n", ok);
	return ok == 12 ? 0 : 1;
}

int main(int argc, char **argv)
{
	int threads = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--expect-preload")) {
			const char *w = getenv("RSOCK_EXPECT_TRANSPORT");
			expect_preload = 1;
			if (w && *w)
				stream_path = atoi(w);
		} else if (!strcmp(argv[i], "--noop")) {
			return 0;
		} else if (!strcmp(argv[i], "--exec")) {
			return exec_family();
		} else if (!strcmp(argv[i], "--threads")) {
			threads = 1;
		} else if (!strcmp(argv[i], "--fsize0")) {
			/* What a sandbox does (OpenSSH's pre-authentication
			 * child): no file may grow. Writing one would raise
			 * SIGXFSZ; the library's log must not. All four ways to
			 * set the limit (the same values first). */
			struct rlimit r;
			struct rlimit64 r64;
			if (prlimit64(0, RLIMIT_FSIZE, NULL, &r64) || setrlimit64(RLIMIT_FSIZE, &r64) ||
			    prlimit(0, RLIMIT_FSIZE, NULL, &r) || prlimit(0, RLIMIT_FSIZE, &r, NULL))
				return 1;
			r.rlim_cur = 0;
			if (setrlimit(RLIMIT_FSIZE, &r))
				return 1;
			int fd = socket(AF_INET, SOCK_STREAM, 0);
			struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
			printf("fsize0: socket %s, connect to port 0 %s\n", fd >= 0 ? "fd" : "bad",
			       connect(fd, (struct sockaddr *)&a, sizeof(a)) ? "refused" : "made");
			return 0;
		} else if (!strcmp(argv[i], "--close-all")) {
			/* what daemons do: close every descriptor above stderr */
			int closed = 0, ebadf = 0, other = 0;
			for (int fd = 3; fd < 4096; fd++) {
				if (close(fd) == 0)
					closed++;
				else if (errno == EBADF)
					ebadf++;
				else
					other++;
			}
			printf("close-all: closed %d ebadf %d other %d\n", closed, ebadf, other);
			int fd = socket(AF_INET, SOCK_STREAM, 0);
			printf("close-all: socket after: %s\n", fd >= 3 ? "fd" : "bad");
			return 0;
		} else {
			fprintf(stderr, "usage: sockcheck [--expect-preload] [--noop] [--close-all] [--fsize0] [--threads]\n");
			return 2;
		}
	}
	alarm(60); /* never hang a test suite */
	signal(SIGPIPE, SIG_DFL);
	if (expect_preload) {
		const char *(*ver)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "rsock_version");
		api_transport = (int (*)(int))dlsym(RTLD_DEFAULT, "rsock_fd_transport");
		api_stats = (int (*)(struct rsock_stats *, size_t))dlsym(RTLD_DEFAULT, "rsock_stats_get");
		if (!ver || !api_transport || !api_stats) {
			fprintf(stderr, "sockcheck: --expect-preload: the rsock_* API is not there "
					"(is librsock.so preloaded?)\n");
			return 1;
		}
		if (!ver() || !*ver()) {
			fprintf(stderr, "sockcheck: --expect-preload: empty rsock_version()\n");
			failures++;
		}
		struct rsock_stats st;
		errno = 0;
		if (api_stats(NULL, sizeof(st)) != -1 || errno != EINVAL ||
		    api_stats(&st, 4) != -1 || errno != EINVAL) {
			fprintf(stderr, "sockcheck: --expect-preload: rsock_stats_get accepts bad args\n");
			failures++;
		}
		if (api_stats(&st, sizeof(st)) != 0 || st.version != 6 || st.size != sizeof(st)) {
			fprintf(stderr, "sockcheck: --expect-preload: rsock_stats_get: size %u version %u\n",
				st.size, st.version);
			failures++;
		}
	}
	if (threads)
		return threads_main();
	struct rsock_stats start;
	stats_now(&start);
	say("sockcheck: start");
	basic_io(AF_INET, "v4");
	basic_io(AF_INET6, "v6");
	vector_io();
	flags_and_partial();
	nonblocking();
	errors();
	shutdowns();
	polling();
	dups();
	stdio_streams();
	unix_and_pipes();
	forking();
	closefrom_negative();
	sendfiles();
	if (expect_preload) {
		struct rsock_stats st;
		stats_now(&st);
		if (st.tracked_fds != start.tracked_fds) {
			fprintf(stderr,
				"sockcheck: --expect-preload: %llu descriptors tracked at the start, %llu at the "
				"end (every stream is closed)\n",
				(unsigned long long)start.tracked_fds, (unsigned long long)st.tracked_fds);
			failures++;
		}
		if (st_streams(&st) == 0 || st_tx(&st) < 150000 || st_rx(&st) < 150000) {
			fprintf(stderr,
				"sockcheck: --expect-preload: totals too small: streams %llu tx %llu rx %llu\n",
				st_streams(&st), st_tx(&st),
				st_rx(&st));
			failures++;
		}
	}
	say("sockcheck: end, %d failed", failures);
	return failures ? 1 : 0;
}
