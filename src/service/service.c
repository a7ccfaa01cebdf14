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
#include <sys/eventfd.h>
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

static int (*turn_fns[SERVICE_TURN_FNS])(void);
static _Atomic int n_turn_fns;

/* When a turn is due (service_turn_in; CLOCK_MONOTONIC ms, 0: none). */
static _Atomic int64_t turn_due;

static __thread int svc_self;   /* this thread is the service's */

static pid_t svc_pid;           /* the process the thread runs in */
static int wake_fd = -1;        /* eventfd: service_wake */
static _Atomic pid_t wake_pid;  /* the process whose thread watches wake_fd */

/* This process's watch table (a forked child starts with none). Caller
 * holds svc_lock. */
static void watches_mine(void)
{
	if (watches_pid != rsock_pid()) {
		n_watches = 0;
		watches_pid = rsock_pid();
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
	if (!rc)
		watches[n_watches++] = (struct watch){fd, events, cb, arg, ++watch_ids};
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
};

static void turn_snapshot(struct turn *t)
{
	pthread_mutex_lock(&svc_lock);
	watches_mine();
	t->n = n_watches;
	for (int i = 0; i < t->n; i++) {
		t->w[i] = watches[i];
		t->p[i] = (struct pollfd){.fd = watches[i].fd, .events = watches[i].events};
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

	for (int i = 0; i < t->n; i++) {
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
		(void)!rsock_real.read(t->p[t->n].fd, &v, sizeof(v));
	}
	for (int i = 0; i < n; i++)
		more |= turn_fns[i]() != 0;
	return more;
}

/* The sleep's time-out in ms: 0 when more work waits, else until the turn
 * due (service_turn_in), else none (-1). */
static int sleep_ms(int more)
{
	int64_t due = atomic_load(&turn_due);

	if (more)
		return 0;
	if (!due)
		return -1;
	return clock_left_ms(due);
}

/* A turn due by now is this one: no longer due. */
static void turn_begins(void)
{
	int64_t due = atomic_load(&turn_due);

	if (due && due <= clock_now_ms())
		atomic_compare_exchange_strong(&turn_due, &due, 0);
}

static void *service_main(void *arg)
{
	struct turn t;

	(void)arg;
	rsock_guard_enter(); /* this thread's libc calls are the library's own */
	svc_self = 1;
	/* Past the thread's start-up code (the C library's, and a sanitizer
	 * runtime's, which frees and allocates under its allocator's locks):
	 * service_start may return, and from here a fork parks this thread
	 * (svc_run). */
	sem_post(&svc_up);
	pthread_mutex_lock(&svc_run);
	turn_snapshot(&t); /* the first turn: every revents 0 */
	for (;;) {
		turn_begins();
		int more = turn_run(&t);
		turn_snapshot(&t);
		pthread_mutex_unlock(&svc_run);
		rsock_real.poll(t.p, (nfds_t)t.n + 1, sleep_ms(more));
		pthread_mutex_lock(&svc_run);
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
	wake_fd = ownfd_move(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
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

void service_wake(void)
{
	uint64_t one = 1;

	if (service_running())
		(void)!rsock_real.write(wake_fd, &one, sizeof(one));
}

void service_turn_in(int ms)
{
	int64_t due = clock_now_ms() + ms, cur = atomic_load(&turn_due);

	while (!cur || cur > due)
		if (atomic_compare_exchange_weak(&turn_due, &cur, due)) {
			if (!svc_self) /* (the thread itself sleeps by it next) */
				service_wake(); /* its sleep may have no time-out, or a later one */
			return;
		}
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
