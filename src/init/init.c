/* init.c - constructor, once-state and destructor. No RDMA work happens here:
 * devices are opened lazily on the first eligible socket. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "negotiate/cm.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/ownfd.h"
#include "core/conn.h"
#include "event/epoll.h"
#include "event/event.h"
#include "core/fdtab.h"
#include "core/exec.h"
#include "path/handover.h"
#include "init/init.h"
#include "base/log.h"
#include "base/real.h"
#include "base/statpub.h"
#include "base/stats.h"
#include "path/path.h"
#include "path/rdma/transport.h" /* the RDMA path's hooks, fork handlers and reaper */
#include "path/shm/shm.h"
#include "service/service.h"

static __thread int init_owner __attribute__((tls_model("initial-exec")));

/* Around every fork (pthread_atfork, so also glibc's own, as daemon()'s):
 * each global lock another thread of ours may hold (the library's thread takes
 * cm_lock for rdma_cm events and ho_lock for hand-over requests) is taken,
 * in the lock order (doc/design.md, "Lock order and lifetimes"), so that no
 * child inherits one held by a thread it does not have (a worker forked
 * while the master's library thread answered a probe would wait for ho_lock
 * for ever). Registered at
 * start-up, before the application's own handlers: ours run last before
 * the fork and first after it, so theirs never run with our locks held.
 *
 * The table is the order: before the fork each entry's prepare runs from
 * the first entry to the last; after it, parent or child runs from the last
 * to the first. A missing hook is skipped. */
struct fork_hook {
	void (*prepare)(void);
	void (*parent)(void);
	void (*child)(void);
};

static void tp_fork_child(void)
{
	tp_wake_fork_child(); /* closes one of our descriptors: fdtab's lock */
	tp_reap_fork_child(); /* the same */
	tp_fork_unlock();
}

static const struct fork_hook fork_hooks[] = {
	/* before any lock: a connected stream awaiting its hello's answer
	 * settles now, and that may need every lock below */
	{conn_fork_settle_clients, NULL, NULL},
	/* then the fork is counted: a stream that came up just above has come
	 * up before it (its owner's close then hands it over for the child) */
	{ho_fork_count, NULL, NULL},
	/* the settling list: the thread it waits for may need the library's thread */
	{conn_fork_lock, conn_fork_unlock, conn_fork_child},
	/* the library's thread parked (service.h) */
	{service_fork_quiesce, service_fork_resume, service_fork_resume},
	{ep_fork_lock, ep_fork_unlock, ep_fork_unlock},
	{cm_fork_lock, cm_fork_unlock, cm_fork_unlock},
	{ho_fork_lock, ho_fork_unlock, ho_fork_unlock},
	{service_fork_lock, service_fork_unlock, service_fork_unlock}, /* its watch table */
	{tp_fork_lock, tp_fork_unlock, tp_fork_child},
	{fdtab_fork_prepare, fdtab_fork_parent, fdtab_fork_child},
	{ownfd_fork_prepare, ownfd_fork_parent, ownfd_fork_child}, /* a leaf */
	/* a leaf; conn_fork_child initialises it again in the child */
	{conn_pool_fork_lock, conn_pool_fork_unlock, NULL},
	{NULL, NULL, stats_fork_child},
	/* a leaf (its segment's file, rsock-stat's): the child moves to a
	 * segment of its own, after its own pid is known */
	{statpub_fork_lock, statpub_fork_unlock, statpub_fork_child},
	{log_fork_lock, log_fork_unlock, log_fork_unlock},
	{NULL, NULL, proc_fork_child}, /* first in the child: its own pid */
};
#define FORK_HOOKS (sizeof(fork_hooks) / sizeof(fork_hooks[0]))

static void fork_prepare(void)
{
	for (size_t i = 0; i < FORK_HOOKS; i++)
		if (fork_hooks[i].prepare)
			fork_hooks[i].prepare();
}

static void fork_parent(void)
{
	for (size_t i = FORK_HOOKS; i-- > 0;)
		if (fork_hooks[i].parent)
			fork_hooks[i].parent();
}

static void fork_child(void)
{
	for (size_t i = FORK_HOOKS; i-- > 0;)
		if (fork_hooks[i].child)
			fork_hooks[i].child();
}

/* What core's conns call in the layers above them. */
static const struct conn_hooks conn_hooks = {
	.stream_closed = ep_conn_closed,
	.stream_converted = ep_stream_converted,
	.instance_free = ep_destroy,
};

static void init_run(void)
{
	int prev = rsock_guard_enter();
	int rc;

	init_owner = 1;
	conn_hooks_set(&conn_hooks); /* before any conn exists */
	proc_pid_cache_init();
	rc = real_resolve();
	atomic_store_explicit(&rsock_init_state, INIT_RESOLVED, memory_order_release);

	rsock_config.program = program_invocation_short_name;
	log_fsize_init();
	config_load(&rsock_config);
	if (rc)
		log_error("some libc entry points could not be resolved; those calls fail with ENOSYS");
	fdtab_init();
	/* The RDMA path's calls upward: epoll's wake-up and the library thread's
	 * teardown of closed streams. No stream exists yet. */
	tp_hooks_set(&(const struct tp_hooks){.kick = event_kick,
					      .reaper_ready = service_running,
					      .reaper_wake = service_wake_after});
	shm_hooks.kick = event_kick; /* the same-host path's one call upward */
	/* The library's thread: streams closed by the application (tp_close)
	 * are drained and torn down there, one per turn, after its watched
	 * descriptors; the hand-over registry starts it through negotiation,
	 * which adds the process's rdma_cm channel and beacons first. */
	service_each_turn(tp_reap);
	/* the read marks due (path/rdma/mark.c) */
	service_each_turn(tp_mark_turn);
	/* the streams whose writes stalled (path/rdma/stall.c) */
	service_each_turn(tp_stall_turn);
	/* rsock-stat's segments of the user's processes that are gone, swept
	 * once a segment of ours exists */
	service_each_turn(statpub_turn);
	ho_hooks_set(&(struct ho_hooks){.start = cm_service_start});
	if (pthread_atfork(fork_prepare, fork_parent, fork_child))
		log_warn("pthread_atfork failed: a fork while another thread is in the library may hang the child");
	if (log_fd_get() >= 0)
		ownfd_mark(log_fd_get());
	if (!rc)
		ho_adopt_env(); /* streams an exec handed to this image */
	log_debug("librsock %s ready", PACKAGE_VERSION);
	atomic_store_explicit(&rsock_init_state, rc ? INIT_BROKEN : INIT_READY,
			      memory_order_release);
	init_owner = 0;
	rsock_guard_leave(prev);
}

int rsock_init(void)
{
	int st = atomic_load_explicit(&rsock_init_state, memory_order_acquire);
	int expected = INIT_NONE;

	if (st >= INIT_READY)
		return st;
	if (st == INIT_NONE &&
	    atomic_compare_exchange_strong(&rsock_init_state, &expected, INIT_RUNNING)) {
		init_run();
		return atomic_load(&rsock_init_state);
	}
	if (init_owner) /* re-entered from our own initialisation */
		return atomic_load(&rsock_init_state);
	while ((st = atomic_load_explicit(&rsock_init_state, memory_order_acquire)) < INIT_READY)
		sched_yield();
	return st;
}

__attribute__((constructor)) static void rsock_constructor(void)
{
	rsock_init();
}

struct exit_drain {
	pid_t self;
	int64_t until;
};

static void exit_drain_one(int fd, struct conn *c, void *arg)
{
	struct exit_drain *d = arg;

	(void)fd;
	if (atomic_load(&c->path) == CONN_PATH_RDMA && c->stream)
		path_exit_drain(c->stream, d->self, d->until);
}

__attribute__((destructor)) static void rsock_destructor(void)
{
	if (!rsock_ready())
		return;
	/* What was posted on streams never closed reaches the peer (bounded:
	 * 2 s for all together, as the library's thread gives a closed one). */
	struct exit_drain d = {(pid_t)syscall(SYS_getpid), clock_now_ns() + 2000 * 1000000LL};
	int parked;

	fdtab_each(exit_drain_one, &d);
	/* And on streams closed whose last writes the library's thread still
	 * waits for: the thread parked first (not in a child sharing our
	 * memory, whose thread it is not), the streams then left to the
	 * kernel. */
	parked = service_running() && service_pause_until(d.until) == 0;
	tp_exit_reap(d.self, d.until);
	if (parked)
		service_resume();
	if (rsock_config.stats_at_exit)
		stats_print(fdtab_count());
	statpub_unlink(); /* rsock-stat sees the process no more */
}
