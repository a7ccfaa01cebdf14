/* service.c - see service.h.
 *
 * Locks: svc_run is held by the thread whenever it is not asleep in poll(),
 * and by a fork across it (third in init.c's fork_hooks[], after the settling
 * list's locks). svc_lock guards the watch table;
 * it is a leaf, never held while a callback or per-turn function runs. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <time.h>
#include <sys/types.h>

#include "base/clock.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/real.h"
#include "service/service.h"

#define SERVICE_TURN_FNS 4

struct watch {
	int fd;
	short events;
	service_cb cb;
	void *arg;
	uint64_t id; /* 0: a free slot */
};

/* Held by the thread whenever it is not asleep in poll(), and by a fork
 * across it: no child is forked while the thread is in malloc, librdmacm or
 * libibverbs, whose internal locks the child would inherit held
 * (doc/design.md, "Lock order and lifetimes"). */
static pthread_mutex_t svc_run = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static sem_t svc_up; /* posted by a new thread as it enters its loop */

static struct watch watches[SERVICE_WATCHES]; /* in registration order */
static int n_watches;
static pid_t watches_pid; /* the process the watches belong to */
static uint64_t watch_ids;
/* Changes with the table (a watch added or removed, a fork's empty table):
 * a turn copies the table only when it changed. */
static uint64_t watch_gen;

static int (*turn_fns[SERVICE_TURN_FNS])(void);
static _Atomic int n_turn_fns;

static pid_t svc_pid;           /* the process the thread runs in */
/* timerfd: service_wake and service_wake_after from other threads, the
 * one descriptor a wake costs (an eventfd would be a second, where a
 * process at its RLIMIT_NOFILE has them among its own numbers). */
static int wake_fd = -1;
static _Atomic pid_t wake_pid;  /* the process whose thread watches wake_fd */
/* The CLOCK_MONOTONIC time (ns) wake_fd is set for, until the thread has
 * seen it expire (the thread clears it before it reads the timer and runs
 * the turn); 0: none. A caller needing a wake no earlier leaves it. */
static _Atomic int64_t timer_due;
/* On the thread: the time-out of the coming poll() (ms, -1: none), which a
 * callback or per-turn function lowers with service_wake_after. */
static int turn_sleep_ms = -1;
/* When the thread's poll() times out (CLOCK_MONOTONIC ns), published before
 * it sleeps and cleared when it wakes, before the turn; 0: no time-out. A
 * caller needing a turn no earlier sets no timer. */
static _Atomic int64_t sleep_due;
static __thread int on_thread __attribute__((tls_model("initial-exec")));

/* This process's watch table (a forked child starts with none). Caller
 * holds svc_lock. */
static void watches_mine(void)
{
	if (watches_pid != rsock_pid()) {
		n_watches = 0;
		watches_pid = rsock_pid();
		watch_gen++;
	}
}

int service_watch(int fd, short events, service_cb cb, void *arg)
{
	int rc = 0;

	pthread_mutex_lock(&svc_lock);
	watches_mine();
	for (int i = 0; i < n_watches && !rc; i++)
		if (watches[i].fd == fd)
			rc = -EEXIST;
	if (!rc && n_watches == SERVICE_WATCHES)
		rc = -ENOSPC;
	if (!rc) {
		watches[n_watches++] = (struct watch){fd, events, cb, arg, ++watch_ids};
		watch_gen++;
	}
	pthread_mutex_unlock(&svc_lock);
	if (!rc)
		service_wake(); /* the sleeping thread does not poll it yet */
	return rc;
}

/* Remove the watch of fd, or the one whose id is id (nonzero). Caller holds
 * svc_lock. */
static void unwatch_locked(int fd, uint64_t id)
{
	watches_mine();
	for (int i = 0; i < n_watches; i++)
		if (id ? watches[i].id == id : watches[i].fd == fd) {
			for (; i + 1 < n_watches; i++)
				watches[i] = watches[i + 1];
			n_watches--;
			watch_gen++;
			return;
		}
}

void service_unwatch(int fd)
{
	pthread_mutex_lock(&svc_lock);
	unwatch_locked(fd, 0);
	pthread_mutex_unlock(&svc_lock);
}

int service_each_turn(int (*fn)(void))
{
	int n = atomic_load(&n_turn_fns);

	if (n == SERVICE_TURN_FNS)
		return -ENOSPC;
	turn_fns[n] = fn;
	atomic_store(&n_turn_fns, n + 1);
	return 0;
}

/* What one poll() covers: the watches as they were when it began, then the
 * wake (its slot's fd is -1 when there is none). */
struct turn {
	struct pollfd p[SERVICE_WATCHES + 1];
	struct watch w[SERVICE_WATCHES];
	int n;
	uint64_t gen;     /* watch_gen when copied */
	int64_t sweep_due; /* when a turn next runs every callback (ns; 0: the first) */
};

static void turn_snapshot(struct turn *t)
{
	pthread_mutex_lock(&svc_lock);
	watches_mine();
	if (t->gen != watch_gen) {
		t->gen = watch_gen;
		t->n = n_watches;
		for (int i = 0; i < t->n; i++) {
			t->w[i] = watches[i];
			t->p[i] = (struct pollfd){.fd = watches[i].fd, .events = watches[i].events};
		}
	}
	pthread_mutex_unlock(&svc_lock);
	t->p[t->n] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
}

/* Whether the watch is still registered. */
static int still_watched(uint64_t id)
{
	int found = 0;

	pthread_mutex_lock(&svc_lock);
	for (int i = 0; i < n_watches && !found; i++)
		found = watches[i].id == id;
	pthread_mutex_unlock(&svc_lock);
	return found;
}

/* One turn's work (service.h). Returns nonzero when more work waits. */
static int turn_run(struct turn *t)
{
	int more = 0, n = atomic_load(&n_turn_fns);
	int64_t now = clock_now_ns();
	int all = now >= t->sweep_due;

	if (all)
		t->sweep_due = now + SERVICE_SWEEP_MS * 1000000LL;
	for (int i = 0; i < t->n; i++) {
		if (!all && !t->p[i].revents)
			continue;
		if (!still_watched(t->w[i].id))
			continue;
		if (t->w[i].cb(t->w[i].fd, t->p[i].revents, t->w[i].arg) < 0) {
			pthread_mutex_lock(&svc_lock);
			unwatch_locked(-1, t->w[i].id);
			pthread_mutex_unlock(&svc_lock);
		}
	}
	if (t->p[t->n].revents) {
		uint64_t v;
		/* Cleared first: a caller that saw the old time and set none
		 * has its work done by this turn's functions. */
		atomic_store(&timer_due, 0);
		(void)!rsock_real.read(t->p[t->n].fd, &v, sizeof(v));
	}
	for (int i = 0; i < n; i++)
		more |= turn_fns[i]() != 0;
	return more;
}

static void *service_main(void *arg)
{
	struct turn t = {.gen = UINT64_MAX};

	(void)arg;
	on_thread = 1;
	rsock_guard_enter(); /* this thread's libc calls are the library's own */
	/* Past the thread's start-up code (the C library's, and a sanitizer
	 * runtime's, which frees and allocates under its allocator's locks):
	 * service_start may return, and from here a fork parks this thread
	 * (svc_run). */
	sem_post(&svc_up);
	pthread_mutex_lock(&svc_run);
	turn_snapshot(&t); /* the first turn: every revents 0 */
	for (;;) {
		int more, ms;
		turn_sleep_ms = -1;
		more = turn_run(&t);
		turn_snapshot(&t);
		ms = more ? 0 : turn_sleep_ms;
		atomic_store(&sleep_due, ms < 0 ? 0 : clock_now_ns() + (int64_t)ms * 1000000);
		pthread_mutex_unlock(&svc_run);
		rsock_real.poll(t.p, (nfds_t)t.n + 1, ms);
		pthread_mutex_lock(&svc_run);
		/* Cleared before the turn: a caller that saw the time and set
		 * no timer has its work done by this turn's functions. */
		atomic_store(&sleep_due, 0);
	}
	return NULL;
}

int service_start(void)
{
	int rc = 0;

	/* svc_lock across: the callers are serialised (and the new thread
	 * waits for it only after it posted svc_up). */
	pthread_mutex_lock(&svc_lock);
	if (svc_pid == rsock_pid())
		goto out;
	/* (without it, the thread cannot be woken and nobody relies on it;
	 * in a forked child the inherited one is the parent's thread's) */
	if (wake_fd >= 0)
		ownfd_close(wake_fd);
	wake_fd = ownfd_move(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	atomic_store(&timer_due, 0);
	atomic_store(&sleep_due, 0);
	/* Return only once the thread runs its loop: a fork before that
	 * (nginx forks its workers right after listen()) would not park it
	 * either. */
	if ((rc = rsock_thread_start(service_main, &svc_up)))
		goto out;
	svc_pid = rsock_pid();
	if (wake_fd >= 0)
		atomic_store(&wake_pid, svc_pid);
out:
	pthread_mutex_unlock(&svc_lock);
	return rc;
}

int service_running(void)
{
	return atomic_load_explicit(&wake_pid, memory_order_acquire) == rsock_pid();
}

/* Set the timer for due (CLOCK_MONOTONIC ns; a time past fires at once). */
static void timer_set(int64_t due)
{
	struct itimerspec its = {.it_value = clock_ns_ts(due)};

	timerfd_settime(wake_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

void service_wake(void)
{
	service_wake_after(0);
}

void service_wake_after(int ms)
{
	int64_t due, cur;

	if (on_thread) {
		if (turn_sleep_ms < 0 || ms < turn_sleep_ms)
			turn_sleep_ms = ms;
		return;
	}
	if (!service_running())
		return;
	due = clock_now_ns() + (int64_t)ms * 1000000;
	cur = atomic_load(&sleep_due);
	if (cur && cur <= due)
		return; /* the thread wakes by then anyway */
	cur = atomic_load(&timer_due);
	do {
		if (cur && cur <= due)
			return; /* a wake is due no later */
	} while (!atomic_compare_exchange_weak(&timer_due, &cur, due));
	timer_set(due);
	/* An earlier time another caller stored meanwhile may have been set
	 * before ours overwrote it. */
	while ((cur = atomic_load(&timer_due)) && cur < due)
		timer_set(due = cur);
}

/* Tries the lock every millisecond: the exit's one caller waits for at
 * most one turn, and pthread_mutex_clocklock is seen by no sanitizer
 * (ThreadSanitizer then takes the later unlock for a stray one). */
int service_pause_until(int64_t deadline_ns)
{
	const struct timespec ms = {0, 1000000};

	while (pthread_mutex_trylock(&svc_run)) {
		if (clock_now_ns() >= deadline_ns)
			return -ETIMEDOUT;
		nanosleep(&ms, NULL);
	}
	return 0;
}

void service_resume(void)
{
	pthread_mutex_unlock(&svc_run);
}

void service_fork_quiesce(void)
{
	pthread_mutex_lock(&svc_run);
}

void service_fork_resume(void)
{
	pthread_mutex_unlock(&svc_run);
}

void service_fork_lock(void)
{
	pthread_mutex_lock(&svc_lock);
}

void service_fork_unlock(void)
{
	pthread_mutex_unlock(&svc_lock);
}
