/* proc.h - what every layer asks of the process: the library's once-state,
 * the per-thread guard, the process id without a system call, and how the
 * library starts a thread of its own.
 *
 * States: NONE -> RUNNING -> RESOLVED (real table usable) -> READY (config,
 * fd table usable). init/init.c runs the state machine (rsock_init()) from
 * the constructor; every shim checks the state first, so a call made from
 * another library's constructor before ours triggers the same
 * initialisation. */
#ifndef RSOCK_PROC_H
#define RSOCK_PROC_H

#include <semaphore.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "base/compiler.h"

enum rsock_init_state {
	INIT_NONE = 0,
	INIT_RUNNING,
	INIT_RESOLVED, /* real table filled; config not loaded yet */
	INIT_READY,    /* fully working */
	INIT_BROKEN,   /* a required libc symbol is missing: pure passthrough */
};

extern _Atomic int rsock_init_state RSOCK_HIDDEN;

/* Set while the library itself is calling libc on this thread: shims then go
 * straight to the real function. */
extern __thread int rsock_in_lib RSOCK_HIDDEN __attribute__((tls_model("initial-exec")));

static inline int rsock_ready(void)
{
	return atomic_load_explicit(&rsock_init_state, memory_order_acquire) == INIT_READY;
}

/* The process id without a system call on the fast path (every stream
 * operation checks that this process owns the stream's verbs objects). The
 * id is cached in a page marked MADV_WIPEONFORK, which the kernel hands to
 * any child that copies the address space (fork, clone without CLONE_VM)
 * zero-filled, so a child reads its own id at its first call. A vfork child
 * shares the page: the vfork stub turns the cache off for good before the
 * real vfork (shim/proc.c); posix_spawn's child never enters the library.
 * Without the page (madvise refused, e.g. under valgrind) it is getpid(). */
extern pid_t *rsock_pid_slot RSOCK_HIDDEN;
extern _Atomic int rsock_pid_nocache RSOCK_HIDDEN;
pid_t rsock_pid_slow(void) RSOCK_HIDDEN;

/* The page's second word is the home pid: the process whose memory this is
 * (written at start-up and in every fork child; 0 in a child that forked
 * without the C library's fork handlers, whose memory is its own too). A
 * child that shares the memory (vfork, clone with CLONE_VM as libuv and
 * posix_spawn-like code use) reads its parent's there: shim_vforked().
 * Without the page, the vfork stub's record is all there is: the pid of
 * the process that last called vfork (0 since the last fork). */
extern _Atomic pid_t rsock_vfork_pid RSOCK_HIDDEN;

static inline pid_t rsock_pid(void)
{
	pid_t *s = rsock_pid_slot;

	if (RSOCK_LIKELY(s && !atomic_load_explicit(&rsock_pid_nocache, memory_order_relaxed))) {
		pid_t p = __atomic_load_n(s, __ATOMIC_RELAXED);
		if (RSOCK_LIKELY(p))
			return p;
	}
	return rsock_pid_slow();
}

/* In a child that copied the address space: the home pid is its own. */
void proc_fork_child(void);
/* At start-up: map the pid cache's page (nothing when it cannot be had). */
void proc_pid_cache_init(void);

/* The guard: rsock_guard_enter() returns the previous value for _leave(). */
static inline int rsock_guard_enter(void)
{
	int prev = rsock_in_lib;
	rsock_in_lib = 1;
	return prev;
}
static inline void rsock_guard_leave(int prev)
{
	rsock_in_lib = prev;
}

/* Start one of the library's threads (the library's thread, the settling thread):
 * it runs fn with every signal blocked, and the call returns only once fn
 * has posted *up, i.e. once the thread is past its start-up code (the C
 * library's, a sanitizer runtime's). A process may fork as soon as the
 * call returns (nginx forks its workers right after listen(), a
 * fork-after-accept server right after accept()); a child forked while the
 * new thread was still inside a sanitizer's allocator inherited that
 * allocator's lock held and hung. fn must post *up before it takes any
 * lock. 0 or -errno. */
int rsock_thread_start(void *(*fn)(void *), sem_t *up) RSOCK_HIDDEN;

#endif
