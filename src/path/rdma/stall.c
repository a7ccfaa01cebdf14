/* stall.c - a signalled write that neither completes nor fails: soft-RoCE
 * after a link flap stops its retransmission timer, and no completion, good
 * or bad, ever comes (doc/design.md, "Errors"). A thread asleep in the
 * stream wakes for it by itself (tp_wait_event); the library's thread looks
 * for everyone else (an event-driven application in epoll_wait, one busy
 * elsewhere) every TP_STALL_LOOK_MS while signalled writes are outstanding,
 * and fails such a path over. Nothing is looked at while none are. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>

#include "base/proc.h"
#include "path/registry.h"
#include "path/rdma/internal.h"

#define TP_STALL_LOOK_MS 1000

_Atomic int64_t tp_stall_asked; /* ms of the next look; 0: none asked for */

void tp_stall_arm(void)
{
	int64_t none = 0;

	if (atomic_compare_exchange_strong(&tp_stall_asked, &none, clock_coarse_ms() + TP_STALL_LOOK_MS))
		tp_reaper_wake(TP_STALL_LOOK_MS);
}

/* Whether t's oldest signalled write is overdue. Caller holds the lock. */
static int overdue(struct tp *t)
{
	return t->sig_count && clock_coarse_ms() - t->sig[t->sig_head].ms > TP_STALL_MS;
}

/* ho_each's look at one stream; *arg: whether writes are still outstanding. */
static int look(struct path_stream *s, void *arg)
{
	struct tp *t;
	int *busy = arg;

	if (s->ops != &tp_path_ops)
		return 0;
	t = tp_of(s);
	if (t->owner != rsock_pid() || !t->sig_count)
		return 0; /* (a racy peek: the next look sees it) */
	if (mtx_trylock(&t->lock)) {
		*busy = 1; /* in use: the next look */
		return 0;
	}
	if (t->up && t->qp && !t->err && !t->path_down && !t->fo_frozen && !tp_switched(t) &&
	    overdue(t) && !tp_progress(t) && overdue(t)) {
		tp_fail(t, -ETIMEDOUT, "a write not completed within 3 s", TP_FAIL_PATH);
		tp_failover_due(t);
		if (atomic_load_explicit(&t->watchers, memory_order_relaxed))
			tp_kick(); /* epoll looks again: not writable now */
	}
	if (t->sig_count && !t->err && !t->path_down && !tp_switched(t))
		*busy = 1;
	mtx_unlock(&t->lock);
	return 0;
}

int tp_stall_turn(void)
{
	int64_t due = atomic_load(&tp_stall_asked);
	int busy = 0;

	if (!due || due > clock_coarse_ms())
		return 0;
	atomic_store(&tp_stall_asked, 0); /* a write posted from now on asks again */
	ho_each(look, &busy);
	if (busy)
		tp_stall_arm();
	return 0;
}
