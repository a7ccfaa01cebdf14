/* adapt.h - adaptive busy-poll, the spin a waiter allows itself before it
 * sleeps, learnt from its recent waits (doc/design.md, "Wire protocol").
 * Not bound to any path: a blocking call on a stream and an epoll instance
 * keep one each (module prefix path_). */
#ifndef RSOCK_PATH_ADAPT_H
#define RSOCK_PATH_ADAPT_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/config.h"

/* Adaptive busy-poll (doc/design.md, "Wire protocol"). A waiter that
 * usually gets its event soon (avg_ns: the recent time from starting to wait to the
 * event, an EWMA; dev_ns: the mean deviation from it, as TCP keeps its
 * round trip's, RFC 6298) spins up to the average and four deviations, and
 * at least twice the average, within [RSOCK_POLL_US, RSOCK_POLL_MAX_US]:
 * the late events of a jittery path are caught too; one whose waits are
 * longer than the ceiling (an idle stream) spins only RSOCK_POLL_US, except every PATH_PROBE_EVERY-th wait,
 * which spins the ceiling (a probe). A wait that sleeps also pays the
 * wake-up, which can be longer than the wait itself (350 us in a TCG
 * guest): it counts as at most just beyond the ceiling, so that one sleep
 * near the ceiling does not stop the spinning, and an event caught spinning
 * while the average is beyond the ceiling sets the average to its time.
 * Without that, a waiter whose events came back within the ceiling went on
 * looking slower than it for ever (bench/results/changes.md). One per
 * stream (blocking calls) and one per epoll instance. */
#define PATH_PROBE_EVERY 8
/* A spin that has lasted this long yields the CPU (sched_yield) each time
 * it reads the clock: when the thread that makes the event (the peer, on
 * the same host) shares this CPU, it gets to run at once instead of after
 * the spin (a 64 B ping-pong with both ends on one CPU of the guest: p50
 * 1.48 ms, 0.43 ms yielding; kernel TCP 0.22 ms). Shorter spins do not
 * yield: a system call every 16th poll cost the guest's 64 B round trip
 * 3-12 us when both ends have CPUs of their own (doc/design.md, "Wire
 * protocol"). */
#define PATH_YIELD_AFTER_NS 50000
static inline void path_spin_yield(int64_t spun_ns)
{
	if (spun_ns >= PATH_YIELD_AFTER_NS)
		sched_yield();
}
/* A same-host stream's spin yields from the start: its peer runs on this
 * host's CPUs and may be waiting for this one (redis-benchmark with one
 * connection, unpinned on a loaded 2-CPU host: 3,700-6,600 GETs/s when
 * yielding after 50 us, 34,700-44,400 yielding at once;
 * bench/results/changes.md). */
static inline void path_spin_yield_local(void)
{
	sched_yield();
}
struct path_adapt {
	_Atomic uint32_t avg_ns;
	_Atomic uint32_t dev_ns; /* mean deviation of the waits from avg_ns */
	_Atomic uint32_t beyond; /* waits started with avg_ns beyond the ceiling */
	_Atomic int quiet;       /* the last wait timed out with no event: no probe */
};

/* How a wait ended (path_wait_note). */
enum path_wait_end {
	PATH_WAIT_SPUN,    /* its event was caught spinning */
	PATH_WAIT_SLEPT,   /* it slept, and its event woke it */
	PATH_WAIT_TIMEOUT, /* it slept, and no event came: a quiet stream */
};

/* Just beyond the ceiling: what a wait that slept counts for at most. */
static inline uint32_t path_adapt_beyond_ns(void)
{
	return tp_settings.poll_max_us * 1000u + 1000u;
}

/* A new waiter starts beyond the ceiling: its first wait is a probe. */
static inline void path_adapt_init(struct path_adapt *a)
{
	atomic_init(&a->avg_ns, path_adapt_beyond_ns());
	atomic_init(&a->dev_ns, 0);
	atomic_init(&a->beyond, 0);
	atomic_init(&a->quiet, 0);
}

/* The spin budget of the wait about to start, in nanoseconds. */
static inline int64_t path_spin_budget_ns(struct path_adapt *a)
{
	int64_t base = (int64_t)tp_settings.poll_us * 1000, max = (int64_t)tp_settings.poll_max_us * 1000;
	int64_t avg = atomic_load_explicit(&a->avg_ns, memory_order_relaxed), b = 2 * avg;
	int64_t tail = avg + 4 * (int64_t)atomic_load_explicit(&a->dev_ns, memory_order_relaxed);

	if (!base || !avg)
		return base;
	if (avg > max) /* a quiet stream (its last wait ended with no event) never probes */
		return max > base && !atomic_load_explicit(&a->quiet, memory_order_relaxed) &&
				       !(atomic_fetch_add_explicit(&a->beyond, 1, memory_order_relaxed) %
					 PATH_PROBE_EVERY)
			       ? max
			       : base;
	if (tail > b)
		b = tail;
	return b > max ? max : b < base ? base : b;
}

/* Fold one wait of waited_ns into the average. */
static inline void path_wait_note(struct path_adapt *a, int64_t waited_ns, enum path_wait_end end)
{
	uint32_t avg = atomic_load_explicit(&a->avg_ns, memory_order_relaxed);
	uint32_t cap = path_adapt_beyond_ns();
	uint32_t w = waited_ns < 0 ? 0 : waited_ns > cap ? cap : (uint32_t)waited_ns;

	if ((end == PATH_WAIT_TIMEOUT) != atomic_load_explicit(&a->quiet, memory_order_relaxed))
		atomic_store_explicit(&a->quiet, end == PATH_WAIT_TIMEOUT, memory_order_relaxed);
	uint32_t dev = atomic_load_explicit(&a->dev_ns, memory_order_relaxed);

	if (end == PATH_WAIT_SPUN && avg > cap - 1000u)
		avg = 0; /* beyond the ceiling, and yet caught spinning: start again */
	if (avg) {
		uint32_t d = w > avg ? w - avg : avg - w;
		dev = (uint32_t)(((uint64_t)dev * 3 + d) / 4);
		avg = (uint32_t)(((uint64_t)avg * 7 + w) / 8);
	} else {
		dev = w / 2; /* as RFC 6298's first measurement */
		avg = w ? w : 1;
	}
	atomic_store_explicit(&a->dev_ns, dev, memory_order_relaxed);
	atomic_store_explicit(&a->avg_ns, avg, memory_order_relaxed);
}

#endif
