/* init.h - the once-state of the library and the per-thread guard.
 *
 * States: NONE -> RUNNING -> RESOLVED (real table usable) -> READY (config,
 * fd table usable). The constructor runs rsock_init(); every shim checks the
 * state first, so a call made from another library's constructor before ours
 * triggers the same initialisation. */
#ifndef RSOCK_INIT_H
#define RSOCK_INIT_H

#include <stdatomic.h>

#include "compiler.h"

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

/* Run or wait for initialisation. Returns the state reached: READY normally,
 * BROKEN when libc lacks a required symbol, RUNNING or RESOLVED when called
 * re-entrantly from the initialising thread itself. */
int rsock_init(void);

static inline int rsock_ready(void)
{
	return atomic_load_explicit(&rsock_init_state, memory_order_acquire) == INIT_READY;
}

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

#endif
