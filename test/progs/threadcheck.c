/* threadcheck.c - threads on streams as an application observes them, for
 * the differential test (kernel TCP versus librsock over RDMA):
 *   1. full duplex on one socket: one thread sends 32 MB while another
 *      receives 32 MB, at both ends at once (checksums compared);
 *   2. 8 threads, each with its own connection, 2000 echo round trips each;
 *   3. close() from another thread while one is blocked in recv(): as with
 *      TCP, the blocked call keeps the stream and still gets the peer's data;
 *   4. shutdown(SHUT_RD) from another thread wakes a blocked recv() with 0.
 *
 * usage: threadcheck SERVER_ADDR CLIENT_ADDR [PORT]; output: one line per
 * observation (server's, then client's). With RSOCK_EXPECT_TRANSPORT=N every
 * connected stream must report that rsock_fd_transport() value. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define DUPLEX_BYTES (32u << 20)
#define NTHREADS 8
#define ROUNDS 2000

static const char *srv_addr, *cli_addr;
static int port, failures, s2c[2], c2s[2];
static FILE *out;

static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
	fflush(out);
}

static void sig(int p[2]) { char c = 1; if (write(p[1], &c, 1) != 1) abort(); }
static void await(int p[2]) { char c; if (read(p[0], &c, 1) != 1) abort(); }

static void check_transport(int fd)
{
	const char *want = getenv("RSOCK_EXPECT_TRANSPORT");
	int (*ft)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "rsock_fd_transport");

	if (want && (ft ? ft(fd) : -2) != atoi(want)) {
		fprintf(stderr, "threadcheck: fd %d transport %d, expected %s\n", fd, ft ? ft(fd) : -2, want);
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	}
}

static struct sockaddr_in addr_of(const char *ip, int p)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		exit(2);
	return a;
}

static int dial(void)
{
	struct sockaddr_in me = addr_of(cli_addr, 0), peer = addr_of(srv_addr, port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof(me)) ||
	    connect(fd, (struct sockaddr *)&peer, sizeof(peer))) {
		fprintf(stderr, "threadcheck: connect: %s\n", strerror(errno));
		exit(3);
	}
	check_transport(fd);
	return fd;
}

static int take(int lfd)
{
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		exit(3);
	check_transport(fd);
	return fd;
}

static uint32_t fnv(uint32_t h, const uint8_t *p, size_t n)
{
	while (n--)
		h = (h ^ *p++) * 16777619u;
	return h;
}

static ssize_t read_full(int fd, void *b, size_t n)
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

/* ---- 1: full duplex ---- */
struct duplex {
	int fd;
	uint32_t seed, hash;
	size_t bytes;
};

static void *duplex_send(void *arg)
{
	struct duplex *d = arg;
	static __thread uint8_t buf[65536];
	uint32_t s = d->seed, h = 2166136261u;
	size_t left = DUPLEX_BYTES;

	while (left) {
		size_t n = left < sizeof(buf) ? left : sizeof(buf);
		for (size_t i = 0; i < n; i++) {
			s = s * 1103515245u + 12345u;
			buf[i] = (uint8_t)(s >> 16);
		}
		h = fnv(h, buf, n);
		for (size_t off = 0; off < n;) {
			ssize_t w = write(d->fd, buf + off, n - off);
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

	while (d->bytes < DUPLEX_BYTES && (r = read(d->fd, buf, sizeof(buf))) > 0) {
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
}

int main(int argc, char **argv)
{
	struct sockaddr_in a;
	int lfd, one = 1, status, cfd;
	char path[] = "/tmp/threadcheck-XXXXXX";
	pid_t pid;

	if (argc < 3) {
		fprintf(stderr, "usage: threadcheck SERVER_ADDR CLIENT_ADDR [PORT]\n");
		return 2;
	}
	srv_addr = argv[1];
	cli_addr = argv[2];
	port = argc > 3 ? atoi(argv[3]) : 7473;
	signal(SIGPIPE, SIG_IGN);
	if (pipe(s2c) || pipe(c2s))
		return 2;
	a = addr_of(srv_addr, port);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 64)) {
		perror("threadcheck: listen");
		return 2;
	}
	cfd = mkstemp(path);
	pid = fork();
	if (pid == 0) {
		close(lfd);
		out = fdopen(cfd, "w");
		client();
		fflush(out);
		_exit(failures ? 1 : 0);
	}
	out = stdout;
	server(lfd);
	waitpid(pid, &status, 0);
	fflush(stdout);
	FILE *f = fopen(path, "r");
	char line[512];
	while (f && fgets(line, sizeof(line), f))
		fputs(line, stdout);
	if (f)
		fclose(f);
	unlink(path);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		failures++;
	return failures ? 1 : 0;
}
