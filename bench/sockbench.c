/* sockbench.c - a plain TCP benchmark program, run unmodified over kernel
 * TCP, under librsock and under rsocket's preload library (bench/rdma.sh).
 *
 *   sockbench server ADDR PORT                    serve one connection, then exit
 *   sockbench pingpong ADDR PORT SRC SIZE COUNT   COUNT round trips of SIZE bytes:
 *                                                 prints "p50_us p99_us p999_us"
 *   sockbench stream ADDR PORT SRC SIZE BYTES     send BYTES in SIZE-byte writes,
 *                                                 wait for the server's 1-byte ack:
 *                                                 prints "MB/s"
 *
 * The first 16 bytes the client sends say what to do: "P" + size (ping-pong)
 * or "S" + size + total (stream). Only the standard socket API is used. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
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

static void serve(const char *ip, int port)
{
	struct sockaddr_in a = addr(ip, port);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), fd;
	uint64_t hdr[2];
	char *buf;

	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4))
		die("listen");
	if ((fd = accept(l, NULL, NULL)) < 0)
		die("accept");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	full(fd, hdr, sizeof(hdr), 1);
	uint64_t size = hdr[0] >> 8, total = hdr[1];
	if (!size || size > (64u << 20))
		exit(2);
	buf = malloc(size);
	if ((hdr[0] & 0xff) == 'P') {
		for (;;) {
			size_t d = 0;
			while (d < size) {
				ssize_t r = read(fd, buf + d, size - d);
				if (r == 0)
					exit(0);
				if (r < 0)
					die("read");
				d += (size_t)r;
			}
			full(fd, buf, size, 0);
		}
	}
	for (uint64_t got = 0; got < total;) {
		ssize_t r = read(fd, buf, size);
		if (r <= 0)
			die("read");
		got += (uint64_t)r;
	}
	full(fd, "k", 1, 0);
	close(fd);
	exit(0);
}

static int dial(const char *ip, int port, const char *src)
{
	struct sockaddr_in a = addr(ip, port), s = addr(src, 0);
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	if (bind(fd, (struct sockaddr *)&s, sizeof(s)) ||
	    connect(fd, (struct sockaddr *)&a, sizeof(a)))
		die("connect");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "server")) {
		serve(argv[2], atoi(argv[3]));
		return 0;
	}
	if (argc != 7) {
		fprintf(stderr, "usage: see the head of bench/sockbench.c\n");
		return 2;
	}
	int fd = dial(argv[2], atoi(argv[3]), argv[4]);
	uint64_t size = strtoull(argv[5], NULL, 0), n = strtoull(argv[6], NULL, 0);
	char *buf = calloc(1, size);
	uint64_t hdr[2];

	if (!strcmp(argv[1], "pingpong")) {
		double *lat = calloc(n, sizeof(double));
		hdr[0] = size << 8 | 'P';
		hdr[1] = 0;
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
		double t = now_us();
		hdr[0] = size << 8 | 'S';
		hdr[1] = n;
		full(fd, hdr, sizeof(hdr), 0);
		for (uint64_t sent = 0; sent < n; sent += size)
			full(fd, buf, n - sent < size ? n - sent : size, 0);
		full(fd, buf, 1, 1);
		printf("%.1f\n", n / (now_us() - t));
	}
	close(fd);
	return 0;
}
