/* sockbench.c - a plain TCP benchmark program, run unmodified over kernel
 * TCP, under librsock and under rsocket's preload library (bench/suite.sh,
 * bench/rdma.sh).
 *
 *   sockbench server ADDR PORT [CONNS]           serve CONNS connections (default 1),
 *                                                each in a thread, then exit
 *   sockbench pingpong ADDR PORT SRC SIZE COUNT  COUNT round trips of SIZE bytes:
 *                                                prints "p50_us p99_us p999_us"
 *   sockbench stream ADDR PORT SRC SIZE BYTES    send BYTES in SIZE-byte writes,
 *                                                wait for the server's 1-byte ack:
 *                                                prints "MB/s start_us end_us" (the
 *                                                monotonic clock, so that parallel
 *                                                streams give one aggregate)
 *                                                With SOCKBENCH_START_US set (a time
 *                                                of that clock, from "sockbench now"),
 *                                                the stream starts then, after its
 *                                                connection is made: parallel streams
 *                                                start together however long their
 *                                                processes took to start and connect
 *   sockbench now                                print the monotonic clock, in us
 *   sockbench connect ADDR PORT SRC 1 COUNT      COUNT connections one after the
 *                                                other, each until its first byte
 *                                                came back: prints "p50_us conns/s
 *                                                p50_connect_us" (the last: from
 *                                                socket() until connect() returned)
 *   sockbench first ADDR PORT SRC 16 1           one connection, as a command-line tool
 *                                                makes it (SRC "-": no bind): socket,
 *                                                connect, 16 B out and 16 B back, close:
 *                                                prints "total_us connect_us exchange_us
 *                                                close_us" (bench/firstconn.sh runs it
 *                                                in fresh processes)
 *   sockbench close ADDR PORT SRC SIZE COUNT     COUNT connections one after the other, each
 *                                                closed right after its last write: with
 *                                                SIZE 0, 16 B out and 16 B back (the server's
 *                                                "E"); else SIZE bytes written, which the
 *                                                server reads to EOF and counts ("W"): prints
 *                                                "p50_us p99_us max_us conns/s" of close()
 *                                                (bench/closecost.sh)
 *   sockbench hold ADDR PORT SRC 1 COUNT         hold COUNT connections open at once:
 *                                                prints "rss_kb_per_conn registered_per_conn"
 *                                                (registered memory from librsock's
 *                                                counters when it is preloaded, else 0)
 * With SOCKBENCH_IDLE=N, pingpong first holds N connections open (as hold
 * does; the server must serve N + 1): one stream's cost among many.
 *
 * The first 16 bytes the client sends on a connection say what to do: "P" +
 * size (ping-pong), "S" + size + total (stream), "C" (answer one byte and
 * close), "E" (send the 16 bytes back and close), "H" (answer one byte, keep the connection until the client closes
 * it), "W" (read to EOF, fail unless exactly total bytes came, close). Only the standard socket API is used (and dlsym for the counters). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rsock/rsock.h>

static const char *role = "client";

static void die(const char *what)
{
	fprintf(stderr, "sockbench %s (pid %d): %s: %s\n", role, (int)getpid(), what, strerror(errno));
	exit(1);
}

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static struct sockaddr_in addr(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "sockbench: bad address %s\n", ip);
		exit(2);
	}
	return a;
}

static void full(int fd, void *b, size_t n, int rd)
{
	size_t d = 0;

	while (d < n) {
		ssize_t r = rd ? read(fd, (char *)b + d, n - d) : write(fd, (char *)b + d, n - d);
		if (r <= 0)
			die(rd ? "read" : "write");
		d += (size_t)r;
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Resident set size of this process, KiB. */
static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long pages = 0, res = 0;

	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &res) != 2)
			res = 0;
		fclose(f);
	}
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Memory librsock has registered now (0 without librsock). Its public API,
 * looked up at run time: the program stays a plain TCP program. */
static double registered_bytes(void)
{
	struct rsock_stats st;
	int (*get)(struct rsock_stats *, size_t) =
		(int (*)(struct rsock_stats *, size_t))dlsym(RTLD_DEFAULT, "rsock_stats_get");

	if (!get || get(&st, sizeof(st)))
		return 0;
	return (double)st.registered_bytes;
}

struct job {
	int fd;
	uint64_t hdr[2];
};

static void *serve_one(void *arg)
{
	struct job *j = arg;
	int fd = j->fd;
	uint64_t size = j->hdr[0] >> 8, total = j->hdr[1];
	char *buf;

	if (!size || size > (64u << 20))
		exit(2);
	buf = malloc(size);
	if ((j->hdr[0] & 0xff) == 'W') {
		uint64_t got = 0;
		ssize_t r;
		while ((r = read(fd, buf, size)) > 0)
			got += (uint64_t)r;
		if (r < 0)
			die("read");
		if (got != total) {
			fprintf(stderr, "sockbench server: EOF after %llu of %llu bytes\n",
				(unsigned long long)got, (unsigned long long)total);
			exit(1);
		}
		goto out;
	}
	if ((j->hdr[0] & 0xff) == 'P') {
		for (;;) {
			size_t d = 0;
			while (d < size) {
				ssize_t r = read(fd, buf + d, size - d);
				if (r == 0)
					goto out;
				if (r < 0)
					die("read");
				d += (size_t)r;
			}
			full(fd, buf, size, 0);
		}
	}
	for (uint64_t got = 0; got < total;) {
		ssize_t r = read(fd, buf, size);
		if (r == 0) {
			fprintf(stderr, "sockbench server: EOF after %llu of %llu bytes\n",
				(unsigned long long)got, (unsigned long long)total);
			exit(1);
		}
		if (r < 0)
			die("read");
		got += (uint64_t)r;
	}
	full(fd, "k", 1, 0);
out:
	close(fd);
	free(buf);
	free(j);
	return NULL;
}

static void serve(const char *ip, int port, long conns)
{
	struct sockaddr_in a = addr(ip, port);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
	pthread_t *th = calloc((size_t)conns, sizeof(*th));
	int *held = calloc((size_t)conns, sizeof(int));
	long nth = 0, nheld = 0;

	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1024))
		die("listen");
	for (long i = 0; i < conns; i++) {
		struct job *j = calloc(1, sizeof(*j));
		if ((j->fd = accept(l, NULL, NULL)) < 0)
			die("accept");
		setsockopt(j->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		full(j->fd, j->hdr, sizeof(j->hdr), 1);
		switch (j->hdr[0] & 0xff) {
		case 'C':
			full(j->fd, "c", 1, 0);
			close(j->fd);
			free(j);
			break;
		case 'E':
			full(j->fd, j->hdr, sizeof(j->hdr), 0);
			close(j->fd);
			free(j);
			break;
		case 'H':
			full(j->fd, "h", 1, 0);
			held[nheld++] = j->fd;
			free(j);
			break;
		default:
			if (pthread_create(&th[nth], NULL, serve_one, j))
				die("pthread_create");
			nth++;
		}
	}
	for (long i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	for (long i = 0; i < nheld; i++) {
		char c;
		while (read(held[i], &c, 1) > 0)
			;
		close(held[i]);
	}
	exit(0);
}

static int dial(const char *ip, int port, const char *src)
{
	struct sockaddr_in a = addr(ip, port), s = {0};
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	if (strcmp(src, "-"))
		s = addr(src, 0);
	if ((strcmp(src, "-") && bind(fd, (struct sockaddr *)&s, sizeof(s))) ||
	    connect(fd, (struct sockaddr *)&a, sizeof(a)))
		die("connect");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* n connections, each answered once ("H") and left open: their descriptors. */
static int *hold(const char *ip, int port, const char *src, uint64_t n)
{
	int *fds = calloc(n, sizeof(int));
	uint64_t hdr[2] = {1 << 8 | 'H', 0};
	char c;
	struct rlimit rl;

	/* a descriptor per connection (and librsock's own per RDMA stream) */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	for (uint64_t i = 0; i < n; i++) {
		fds[i] = dial(ip, port, src);
		full(fds[i], hdr, sizeof(hdr), 0);
		full(fds[i], &c, 1, 1);
	}
	return fds;
}

int main(int argc, char **argv)
{
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "server")) {
		role = "server";
		serve(argv[2], atoi(argv[3]), argc == 5 ? atol(argv[4]) : 1);
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "now")) {
		printf("%.0f\n", now_us());
		return 0;
	}
	if (argc != 7) {
		fprintf(stderr, "usage: see the head of bench/sockbench.c\n");
		return 2;
	}
	const char *ip = argv[2], *src = argv[4];
	int port = atoi(argv[3]);
	uint64_t size = strtoull(argv[5], NULL, 0), n = strtoull(argv[6], NULL, 0);
	char *buf = calloc(1, size ? size : 1);
	uint64_t hdr[2] = {0, 0};

	if (!strcmp(argv[1], "connect")) {
		double *lat = calloc(n, sizeof(double)), *con = calloc(n, sizeof(double)), t0 = now_us();
		hdr[0] = 1 << 8 | 'C';
		for (uint64_t i = 0; i < n; i++) {
			double t = now_us();
			int fd = dial(ip, port, src);
			con[i] = now_us() - t;
			full(fd, hdr, sizeof(hdr), 0);
			full(fd, buf, 1, 1);
			lat[i] = now_us() - t;
			close(fd);
		}
		double total = now_us() - t0;
		qsort(lat, n, sizeof(double), cmp);
		qsort(con, n, sizeof(double), cmp);
		printf("%.1f %.1f %.1f\n", lat[n / 2], n / (total / 1e6), con[n / 2]);
		return 0;
	}
	if (!strcmp(argv[1], "first")) {
		double t0 = now_us(), t1, t2, t3;
		int fd = dial(ip, port, src);
		t1 = now_us();
		hdr[0] = 16 << 8 | 'E';
		full(fd, hdr, sizeof(hdr), 0);
		full(fd, hdr, sizeof(hdr), 1);
		t2 = now_us();
		close(fd);
		t3 = now_us();
		printf("%.0f %.0f %.0f %.0f\n", t3 - t0, t1 - t0, t2 - t1, t3 - t2);
		return 0;
	}
	if (!strcmp(argv[1], "close")) {
		double *lat = calloc(n, sizeof(double)), t0 = now_us();
		char *data = malloc(size ? size : 1);
		memset(data, 'x', size ? size : 1);
		for (uint64_t i = 0; i < n; i++) {
			int fd = dial(ip, port, src);
			if (size) {
				hdr[0] = (uint64_t)(64 << 10) << 8 | 'W';
				hdr[1] = size;
				full(fd, hdr, sizeof(hdr), 0);
				full(fd, data, size, 0);
			} else {
				hdr[0] = 16 << 8 | 'E';
				full(fd, hdr, sizeof(hdr), 0);
				full(fd, hdr, sizeof(hdr), 1);
			}
			double t = now_us();
			close(fd);
			lat[i] = now_us() - t;
		}
		double total = now_us() - t0;
		qsort(lat, n, sizeof(double), cmp);
		printf("%.0f %.0f %.0f %.1f\n", lat[n / 2], lat[(n * 99 - 1) / 100], lat[n - 1],
		       n / (total / 1e6));
		return 0;
	}
	if (!strcmp(argv[1], "hold")) {
		long before = rss_kb();
		double reg0 = registered_bytes();
		int *fds = hold(ip, port, src, n);
		printf("%.1f %.0f\n", (double)(rss_kb() - before) / (double)n,
		       (registered_bytes() - reg0) / (double)n);
		fflush(stdout);
		for (uint64_t i = 0; i < n; i++)
			close(fds[i]);
		return 0;
	}
	/* SOCKBENCH_IDLE=N: N connections held open, idle, before the measured
	 * one (the server serves N + 1): the cost of one stream among many. */
	const char *idle = getenv("SOCKBENCH_IDLE");
	if (idle && atol(idle) > 0)
		hold(ip, port, src, (uint64_t)atol(idle));
	int fd = dial(ip, port, src);

	if (!strcmp(argv[1], "pingpong")) {
		double *lat = calloc(n, sizeof(double));
		hdr[0] = size << 8 | 'P';
		full(fd, hdr, sizeof(hdr), 0);
		for (uint64_t i = 0; i < n + n / 10; i++) { /* the first tenth warms up */
			double t = now_us();
			full(fd, buf, size, 0);
			full(fd, buf, size, 1);
			if (i >= n / 10)
				lat[i - n / 10] = now_us() - t;
		}
		qsort(lat, n, sizeof(double), cmp);
		printf("%.1f %.1f %.1f\n", lat[n / 2], lat[n * 99 / 100], lat[n * 999 / 1000]);
	} else {
		const char *at = getenv("SOCKBENCH_START_US");
		if (at) {
			double wait = strtod(at, NULL) - now_us();
			if (wait > 0)
				usleep((useconds_t)wait);
		}
		double t = now_us();
		hdr[0] = size << 8 | 'S';
		hdr[1] = n;
		full(fd, hdr, sizeof(hdr), 0);
		for (uint64_t sent = 0; sent < n; sent += size)
			full(fd, buf, n - sent < size ? n - sent : size, 0);
		full(fd, buf, 1, 1);
		double end = now_us();
		printf("%.1f %.0f %.0f\n", n / (end - t), t, end);
	}
	close(fd);
	return 0;
}
