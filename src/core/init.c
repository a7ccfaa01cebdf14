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
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "negotiate/cm.h"
#include "base/config.h"
#include "core/conn.h"
#include "event/epoll.h"
#include "core/fdtab.h"
#include "path/handover.h"
#include "core/init.h"
#include "base/log.h"
#include "base/real.h"
#include "base/stats.h"
#include "path/rdma/transport.h"

_Atomic int rsock_init_state = INIT_NONE;
__thread int rsock_in_lib __attribute__((tls_model("initial-exec")));
static __thread int init_owner __attribute__((tls_model("initial-exec")));
pid_t *rsock_pid_slot;
_Atomic int rsock_pid_nocache;
_Atomic pid_t rsock_vfork_pid;

pid_t rsock_pid_slow(void)
{
	pid_t p = getpid();
	pid_t *s = rsock_pid_slot;

	if (s && !atomic_load_explicit(&rsock_pid_nocache, memory_order_relaxed))
		__atomic_store_n(s, p, __ATOMIC_RELAXED);
	return p;
}

/* The page of the pid cache (init.h); NULL leaves rsock_pid() a getpid(). */
static void pid_cache_init(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t len = pg > 0 ? (size_t)pg : 4096;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return;
#ifdef MADV_WIPEONFORK
	if (madvise(m, len, MADV_WIPEONFORK) == 0) {
		((pid_t *)m)[1] = (pid_t)syscall(SYS_getpid); /* the home pid (init.h) */
		rsock_pid_slot = m;
		return;
	}
#endif
	munmap(m, len);
}

/* Around every fork (pthread_atfork, so also glibc's own, as daemon()'s):
 * each global lock another thread of ours may hold (the cm thread takes
 * cm_lock and ho_lock on every turn) is taken, in the lock order
 * (doc/design.md section 10), so that no child inherits one held by a
 * thread it does not have (nginx's workers, forked while the master's cm
 * thread answered a probe, waited for ho_lock for ever). Registered at
 * start-up, before the application's own handlers: ours run last before
 * the fork and first after it, so theirs never run with our locks held. */
static void fork_prepare(void)
{
	conn_fork_settle_clients(); /* before any lock: it may need them all */
	conn_fork_lock(); /* first: the thread it waits for may need the cm thread */
	cm_fork_quiesce();
	ep_fork_lock();
	cm_fork_lock();
	ho_fork_lock();
	tp_fork_lock();
	fdtab_fork_prepare();
	conn_pool_fork_lock();
	log_fork_lock();
}

static void fork_parent(void)
{
	log_fork_unlock();
	conn_pool_fork_unlock();
	fdtab_fork_parent();
	tp_fork_unlock();
	ho_fork_unlock();
	cm_fork_unlock();
	ep_fork_unlock();
	cm_fork_resume();
	conn_fork_unlock();
}

static void fork_child(void)
{
	atomic_store(&rsock_vfork_pid, 0); /* this memory is the child's own */
	if (rsock_pid_slot)
		__atomic_store_n(&rsock_pid_slot[1], (pid_t)syscall(SYS_getpid), __ATOMIC_RELAXED);
	log_fork_unlock();
	stats_fork_child();
	fdtab_fork_child();
	tp_bell_fork_child(); /* closes one of our descriptors: fdtab's lock */
	tp_reap_fork_child(); /* the same */
	tp_fork_unlock();
	ho_fork_unlock();
	cm_fork_unlock();
	ep_fork_unlock();
	conn_fork_child(); /* the same; re-initialises its lock */
	cm_fork_resume();
}

static void init_run(void)
{
	int prev = rsock_guard_enter();
	int rc;

	init_owner = 1;
	pid_cache_init();
	rc = real_resolve();
	atomic_store_explicit(&rsock_init_state, INIT_RESOLVED, memory_order_release);

	rsock_config.program = program_invocation_short_name;
	log_fsize_init();
	config_load(&rsock_config);
	if (rc)
		log_error("some libc entry points could not be resolved; those calls fail with ENOSYS");
	fdtab_init();
	if (pthread_atfork(fork_prepare, fork_parent, fork_child))
		log_warn("pthread_atfork failed: a fork while another thread is in the library may hang the child");
	if (log_fd_get() >= 0)
		fdtab_own(log_fd_get());
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

int rsock_thread_start(void *(*fn)(void *), sem_t *up)
{
	pthread_t th;
	sigset_t all, old;
	int rc;

	sem_init(up, 0, 0);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes no signals */
	rc = -pthread_create(&th, NULL, fn, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return rc;
	while (sem_wait(up) && errno == EINTR)
		;
	pthread_detach(th);
	return 0;
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
	if (atomic_load(&c->path) == CONN_PATH_RDMA && c->tp)
		tp_exit_drain(c->tp, d->self, d->until);
}

__attribute__((destructor)) static void rsock_destructor(void)
{
	if (!rsock_ready())
		return;
	/* What was posted on streams never closed reaches the peer (bounded
	 * for all together, as close() is for one). */
	struct exit_drain d = {(pid_t)syscall(SYS_getpid), tp_now_ns() + 2000 * 1000000LL};
	fdtab_each(exit_drain_one, &d);
	if (rsock_config.stats_at_exit)
		stats_print();
}
