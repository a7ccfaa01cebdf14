/* handcheck.c - a stream that changes hands between processes behaves as
 * kernel TCP's: exec'd images, forked children and an owner that closes
 * while a child still holds the socket, system() (doc/design.md, "Descriptors, fork, exec":
 * the hand-over). Run over kernel TCP and under librsock, the output must be
 * identical (test/rdma/forkexec.bats).
 *
 * usage: handcheck SERVER_ADDR CLIENT_ADDR [PORT]
 *        handcheck --image FD OUTFD    (the exec'd image of scenarios A, B) */
#include <sys/wait.h>

#include "pair.h"

#define GREETING 3000
#define FIRST 10
#define UP 200000
#define DOWN 100000

/* Bytes i of pattern `seed`. */
static void fill(uint8_t *b, size_t n, unsigned seed, size_t from)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)((from + i) * 31u + seed * 7u + ((from + i) >> 9));
}

static uint32_t pattern_fnv(unsigned seed, size_t from, size_t n)
{
	static uint8_t b[4096];
	uint32_t h = 2166136261u;

	while (n) {
		size_t k = n < sizeof(b) ? n : sizeof(b);
		fill(b, k, seed, from);
		h = fnv(h, b, k);
		from += k;
		n -= k;
	}
	return h;
}

static int write_pattern(int fd, unsigned seed, size_t n)
{
	static uint8_t b[8192];
	size_t done = 0;

	while (done < n) {
		size_t k = n - done < sizeof(b) ? n - done : sizeof(b);
		ssize_t w;
		fill(b, k, seed, done);
		w = write(fd, b, k);
		if (w <= 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

/* Read n bytes; their FNV hash in *h. Returns the count read. */
static size_t read_hash(int fd, size_t n, uint32_t *h)
{
	static uint8_t b[8192];
	size_t got = 0;

	*h = 2166136261u;
	while (got < n) {
		size_t k = n - got < sizeof(b) ? n - got : sizeof(b);
		ssize_t r = read(fd, b, k);
		if (r <= 0)
			break;
		*h = fnv(*h, b, (size_t)r);
		got += (size_t)r;
	}
	return got;
}

static size_t drain(int fd)
{
	uint8_t b[4096];
	size_t n = 0;
	ssize_t r;

	while ((r = read(fd, b, sizeof(b))) > 0)
		n += (size_t)r;
	return n;
}

static const char *self;

/* Run this program again as the image that continues the stream on fd. */
static void exec_image(int fd, const char *tag)
{
	char a[16], o[16];

	snprintf(a, sizeof(a), "%d", fd);
	snprintf(o, sizeof(o), "%d", fileno(out));
	fflush(out);
	execl(self, "handcheck", "--image", a, o, tag, (char *)NULL);
	fprintf(stderr, "handcheck: exec: %s\n", strerror(errno));
	_exit(5);
}

/* The exec'd image: the rest of the greeting, then both directions. */
static int image_main(int fd, int ofd, const char *tag)
{
	uint32_t h;
	size_t n;

	out = fdopen(ofd, "w");
	if (!out)
		return 2;
	n = read_hash(fd, GREETING - FIRST, &h);
	say("%s: image read %zu of the greeting, %s", tag, n,
	    h == pattern_fnv(1, FIRST, GREETING - FIRST) ? "in order" : "CORRUPT");
	if (write_pattern(fd, 3, UP))
		say("%s: image write failed: %s", tag, strerror(errno));
	n = read_hash(fd, DOWN, &h);
	say("%s: image read %zu more, %s", tag, n, h == pattern_fnv(2, 0, DOWN) ? "in order" : "CORRUPT");
	close(fd);
	fflush(out);
	return 0;
}

/* ---- the server: the same for every scenario that continues in an image */

static void serve_image(int lfd, const char *tag)
{
	int fd = take(lfd);
	uint32_t h;
	size_t n;

	write_pattern(fd, 1, GREETING);
	n = read_hash(fd, UP, &h);
	say("%s: server got %zu, %s", tag, n, h == pattern_fnv(3, 0, UP) ? "in order" : "CORRUPT");
	write_pattern(fd, 2, DOWN);
	say("%s: server then reads %zu bytes before EOF", tag, drain(fd));
	close(fd);
}

static void server(int lfd)
{
	int fd;
	uint32_t h;
	size_t n;
	char buf[8];

	/* B: the process that set the stream up execs (no fork). */
	serve_image(lfd, "B");
	/* A: a forked child execs with the stream (a shell running cat <&3). */
	serve_image(lfd, "A");

	/* C: the parent reads some, a child some, the parent the rest. */
	fd = take(lfd);
	write_pattern(fd, 4, 5000);
	await(c2s);
	n = (size_t)read_full(fd, buf, 4);
	say("C: server got %zu bytes '%.4s'", n, buf);
	close(fd);

	/* D: the parent closes its descriptor, the child goes on. */
	fd = take(lfd);
	{
		uint8_t b[8192];
		ssize_t r;
		size_t tot = 0;
		h = 2166136261u;
		while ((r = read(fd, b, sizeof(b))) > 0) {
			h = fnv(h, b, (size_t)r);
			tot += (size_t)r;
			if (write(fd, b, (size_t)r) != r)
				break;
		}
		say("D: server echoed %zu bytes, %s, then EOF", tot,
		    h == pattern_fnv(5, 0, UP) ? "in order" : "CORRUPT");
	}
	close(fd);

	/* E: system() runs a shell that execs the image */
	serve_image(lfd, "E");
}

/* ---- the client ---- */

static void client(void)
{
	int fd, st, p[2];
	pid_t pid;
	uint32_t h;
	size_t n;
	uint8_t b[FIRST];

	/* B, first: a child that has not used RDMA yet sets up the stream and
	 * execs (a child of a process that carries RDMA streams stays on TCP). */
	fflush(out);
	pid = fork();
	if (pid == 0) {
		fd = dial();
		say("B: first read %zd", read_full(fd, b, FIRST));
		exec_image(fd, "B");
	}
	waitpid(pid, &st, 0);
	say("B: the exec'd image exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);

	/* A */
	fd = dial();
	say("A: first read %zd", read_full(fd, b, FIRST));
	fflush(out);
	pid = fork();
	if (pid == 0) {
		dup2(fd, 0);
		close(fd);
		exec_image(0, "A");
	}
	waitpid(pid, &st, 0);
	say("A: the exec'd child exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	close(fd);

	/* C */
	fd = dial();
	n = read_hash(fd, 1000, &h);
	say("C: parent read %zu, %s", n, h == pattern_fnv(4, 0, 1000) ? "in order" : "CORRUPT");
	fflush(out);
	pid = fork();
	if (pid == 0) {
		n = read_hash(fd, 2000, &h);
		say("C: child read %zu, %s", n, h == pattern_fnv(4, 1000, 2000) ? "in order" : "CORRUPT");
		fflush(out);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	n = read_hash(fd, 2000, &h);
	say("C: parent read %zu more, %s", n, h == pattern_fnv(4, 3000, 2000) ? "in order" : "CORRUPT");
	if (write(fd, "done", 4) != 4)
		say("C: write failed: %s", strerror(errno));
	sig(c2s);
	close(fd);

	/* D */
	fd = dial();
	if (pipe(p))
		abort();
	fflush(out);
	pid = fork();
	if (pid == 0) {
		char c;
		close(p[1]);
		if (read(p[0], &c, 1) != 0) /* the parent closed its copy */
			abort();
		/* in lockstep pieces, so that neither side's buffers fill */
		h = 2166136261u;
		for (n = 0; n < UP;) {
			uint8_t piece[8192];
			size_t k = UP - n < sizeof(piece) ? UP - n : sizeof(piece);
			fill(piece, k, 5, n);
			if (write(fd, piece, k) != (ssize_t)k || read_full(fd, piece, k) != (ssize_t)k)
				break;
			h = fnv(h, piece, k);
			n += k;
		}
		say("D: child got %zu back, %s", n, h == pattern_fnv(5, 0, UP) ? "in order" : "CORRUPT");
		fflush(out);
		close(fd);
		_exit(0);
	}
	close(p[0]);
	close(fd);
	close(p[1]);
	waitpid(pid, &st, 0);
	say("D: child exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);

	/* E */
	fd = dial();
	say("E: first read %zd", read_full(fd, b, FIRST));
	{
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "exec '%s' --image %d %d E", self, fd, fileno(out));
		fflush(out);
		st = system(cmd);
		say("E: system returned %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	close(fd);
}

int main(int argc, char **argv)
{
	self = "/proc/self/exe";
	if (argc >= 5 && !strcmp(argv[1], "--image"))
		return image_main(atoi(argv[2]), atoi(argv[3]), argv[4]);
	{
		static char path[4096];
		ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
		if (n > 0) {
			path[n] = 0;
			self = path;
		}
	}
	return pair_main(argc, argv, "handcheck", 7471, server, client);
}
