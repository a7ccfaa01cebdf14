/* fortify.c - the FORTIFY entry points over a loopback TCP connection.
 *
 * Built with -O2 -D_FORTIFY_SOURCE=2: the buffers below have sizes the
 * compiler knows and the lengths are not compile-time constants, so glibc's
 * headers route read/recv/recvfrom/poll/ppoll to __read_chk, __recv_chk,
 * __recvfrom_chk, __poll_chk and __ppoll_chk (check with nm -D). Prints one
 * deterministic line per step. With --overflow it also checks, in a child,
 * that a length larger than the buffer aborts (glibc's __chk_fail). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Lengths the optimiser cannot see through. */
static volatile size_t len_small = 8, len_big = 64, len_nfds = 1;

static void say(const char *name, long r)
{
	if (r < 0)
		printf("%s: -1 %s\n", name, strerrorname_np(errno) ? strerrorname_np(errno) : "E?");
	else
		printf("%s: %ld\n", name, r);
	fflush(stdout);
}

static void wait_in(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	struct pollfd arr[1] = {p};

	(void)poll(arr, len_nfds, 3000);
}

int main(int argc, char **argv)
{
	int overflow = argc > 1 && !strcmp(argv[1], "--overflow");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_in from;
	socklen_t alen = sizeof(a), flen;
	char buf[64], small[8];
	struct pollfd pf[2];
	struct timespec ts = {0, 0};
	int l, c, s;

	alarm(30);
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4) ||
	    getsockname(l, (struct sockaddr *)&a, &alen)) {
		perror("fortify: listener");
		return 2;
	}
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, alen)) {
		perror("fortify: connect");
		return 2;
	}
	s = accept(l, NULL, NULL);
	if (s < 0) {
		perror("fortify: accept");
		return 2;
	}

	/* __poll_chk / __ppoll_chk */
	pf[0] = (struct pollfd){.fd = s, .events = POLLIN};
	pf[1] = (struct pollfd){.fd = c, .events = POLLOUT};
	say("poll_chk.idle", poll(pf, len_nfds, 0));
	say("poll_chk.two", poll(pf, len_nfds + 1, 0));
	printf("poll_chk.two.revents: %#x %#x\n", pf[0].revents, pf[1].revents);
	say("ppoll_chk.idle", ppoll(pf, len_nfds, &ts, NULL));

	/* __read_chk */
	say("write", write(c, "fortified-read", 14));
	wait_in(s);
	say("ppoll_chk.readable", ppoll(pf, len_nfds, &ts, NULL));
	say("poll_chk.readable", poll(pf, len_nfds, 1000));
	printf("poll_chk.readable.revents: %#x\n", pf[0].revents);
	memset(buf, 0, sizeof(buf));
	say("read_chk.partial", read(s, buf, len_small - 2));
	say("read_chk.rest", read(s, buf + 6, len_big - 6));
	printf("read_chk.data: %s\n", buf);

	/* __recv_chk */
	say("send", send(c, "fortified-recv", 14, 0));
	wait_in(s);
	memset(buf, 0, sizeof(buf));
	say("recv_chk.peek", recv(s, buf, len_small, MSG_PEEK));
	say("recv_chk", recv(s, buf, len_big, 0));
	printf("recv_chk.data: %s\n", buf);
	say("recv_chk.dontwait", recv(s, small, len_small, MSG_DONTWAIT));

	/* __recvfrom_chk */
	say("send2", send(c, "fortified-recvfrom", 18, 0));
	wait_in(s);
	memset(buf, 0, sizeof(buf));
	flen = sizeof(from);
	say("recvfrom_chk", recvfrom(s, buf, len_big, 0, (struct sockaddr *)&from, &flen));
	printf("recvfrom_chk.data: %s\n", buf);
	say("send3", send(c, "xyz", 3, 0));
	wait_in(s);
	say("recvfrom_chk.null", recvfrom(s, small, len_small, 0, NULL, NULL));

	/* errors through the _chk entry points */
	say("read_chk.badfd", read(-1, buf, len_big));
	say("recv_chk.badfd", recv(-1, buf, len_big, 0));
	say("recvfrom_chk.badfd", recvfrom(-1, buf, len_big, 0, NULL, NULL));

	/* EOF */
	close(c);
	say("read_chk.eof", read(s, buf, len_big));

	if (overflow) {
		/* a length beyond the buffer must abort, with or without librsock */
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			int fds[2];
			if (pipe(fds) == 0 && write(fds[1], "0123456789abcdef", 16) == 16)
				say("never", read(fds[0], small, len_big));
			_exit(0);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		printf("read_chk.overflow: %s\n",
		       WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT ? "SIGABRT" : "no-abort");
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			int sv[2];
			if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0 && write(sv[1], "0123456789abcdef", 16) == 16)
				say("never", recv(sv[0], small, len_big, 0));
			_exit(0);
		}
		waitpid(pid, &st, 0);
		printf("recv_chk.overflow: %s\n",
		       WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT ? "SIGABRT" : "no-abort");
	}
	close(s);
	close(l);
	printf("fortify: end\n");
	return 0;
}
