/* forkstart: fork at once after the library has started its service thread,
 * as nginx forks its workers right after listen().
 *
 * Usage: forkstart ADDR [ROUNDS]
 *
 * Each round is a process that listens on ADDR (its first listener starts
 * librsock's connection-manager thread) and forks at once. The child listens
 * in turn (its own thread), starts and joins a thread of its own, and exits.
 * Every child must be done within 10 s: one forked while the new thread was
 * still in its start-up code holding a lock (the allocator's, under ASan)
 * inherits that lock held, and its own threads then wait for it for ever.
 * Prints "forkstart: N of N rounds" and exits 0 when every round passed (it
 * stops at the first that did not).
 * Without librsock it is a plain listen-and-fork program (and passes). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_storage addr;
static socklen_t addr_len;

static int listen_any(void)
{
	int s = socket(addr.ss_family, SOCK_STREAM, 0);

	if (s < 0 || bind(s, (struct sockaddr *)&addr, addr_len) || listen(s, 4)) {
		perror("forkstart: socket, bind or listen");
		return -1;
	}
	return s;
}

static void *nothing(void *arg)
{
	free(malloc(64));
	return arg;
}

/* The forked child: a listener and a thread of its own. */
static int child(void)
{
	pthread_t t;

	if (listen_any() < 0)
		return 1;
	if (pthread_create(&t, NULL, nothing, NULL) || pthread_join(t, NULL))
		return 1;
	return 0;
}

/* pid's exit status, or -1 once it has run for timeout_ms (then killed). */
static int reap(pid_t pid, int timeout_ms)
{
	int st;

	for (int waited = 0; waited < timeout_ms; waited++) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (r < 0 && errno != EINTR)
			return -1;
		usleep(1000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

/* One round: listen, fork at once, the child must finish. */
static int round_once(void)
{
	pid_t pid;
	int rc;

	if (listen_any() < 0)
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0)
		_exit(child());
	rc = reap(pid, 10000);
	if (rc)
		fprintf(stderr, "forkstart: the child %s\n", rc < 0 ? "hung (killed after 10 s)" : "failed");
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
	int rounds = argc > 2 ? atoi(argv[2]) : 100, passed = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: forkstart ADDR [ROUNDS]\n");
		return 2;
	}
	if (inet_pton(AF_INET, argv[1], &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		addr_len = sizeof(*a4);
	} else if (inet_pton(AF_INET6, argv[1], &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		addr_len = sizeof(*a6);
	} else {
		fprintf(stderr, "forkstart: bad address %s\n", argv[1]);
		return 2;
	}
	for (int i = 0; i < rounds; i++) {
		pid_t pid = fork(); /* each round a fresh process: its first listen starts the thread */
		if (pid < 0)
			return 1;
		if (pid == 0)
			_exit(round_once());
		if (reap(pid, 30000))
			break; /* one hang is the verdict: no need to wait for more */
		passed++;
	}
	printf("forkstart: %d of %d rounds\n", passed, rounds);
	return passed == rounds ? 0 : 1;
}
