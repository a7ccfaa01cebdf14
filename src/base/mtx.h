/* mtx.h - the lock of a stream's transport state: a futex word, three
 * states (free, held, held with sleepers), private to the process.
 *
 * Each data call takes it once and gives it back (doc/design.md, "Lock
 * order and lifetimes"): taking and giving a free one is an atomic
 * exchange each, inline, where glibc's mutex costs two calls and some
 * fifty instructions between them. A contended lock sleeps in the
 * kernel (FUTEX_WAIT_PRIVATE) as glibc's does; there is no spinning, no
 * owner, no recursion, no robustness: what the stream's code needs, and
 * a thread that takes it twice deadlocks as with a normal mutex. */
#ifndef RSOCK_MTX_H
#define RSOCK_MTX_H

#include <errno.h>
#include <stdatomic.h>

#include "base/compiler.h"

struct mtx {
	atomic_int v; /* 0 free, 1 held, 2 held and a thread may sleep on it */
};

#define MTX_INIT {0}

/* The contended halves (mtx.c). */
void mtx_lock_slow(struct mtx *m) RSOCK_HIDDEN;
void mtx_wake(struct mtx *m) RSOCK_HIDDEN;

static inline void mtx_init(struct mtx *m)
{
	atomic_init(&m->v, 0);
}

/* Take m, sleeping while another thread holds it. */
static inline void mtx_lock(struct mtx *m)
{
	int c = 0;

	if (RSOCK_UNLIKELY(!atomic_compare_exchange_strong_explicit(&m->v, &c, 1, memory_order_acquire,
								    memory_order_relaxed)))
		mtx_lock_slow(m);
}

/* Take m if it is free: 0, else -EBUSY (nothing taken). */
static inline int mtx_trylock(struct mtx *m)
{
	int c = 0;

	return atomic_compare_exchange_strong_explicit(&m->v, &c, 1, memory_order_acquire,
						       memory_order_relaxed)
		       ? 0
		       : -EBUSY;
}

/* Give m back (held by the caller), waking one sleeper if there may be one. */
static inline void mtx_unlock(struct mtx *m)
{
	if (RSOCK_UNLIKELY(atomic_exchange_explicit(&m->v, 0, memory_order_release) != 1))
		mtx_wake(m);
}

#endif
