/* stats.c - see stats.h. Relaxed atomics: counters, not synchronisation. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <stdatomic.h>
#include <string.h>

#include "fdtab.h"
#include "log.h"
#include "stats.h"

static struct {
	_Atomic uint64_t streams[2];
	_Atomic uint64_t bytes[2][2]; /* [rdma][tx] */
	_Atomic uint64_t fallbacks[RSOCK_FB_MAX];
	_Atomic int64_t registered;
	_Atomic uint64_t handovers;
	_Atomic uint64_t cq_events, cq_arms;
	_Atomic uint64_t zcopy;
} st_;

void stats_zcopy(uint64_t n)
{
	atomic_fetch_add_explicit(&st_.zcopy, n, memory_order_relaxed);
}

void stats_cq_event(void)
{
	atomic_fetch_add_explicit(&st_.cq_events, 1, memory_order_relaxed);
}

void stats_cq_arm(void)
{
	atomic_fetch_add_explicit(&st_.cq_arms, 1, memory_order_relaxed);
}

void stats_handover(void)
{
	atomic_fetch_add_explicit(&st_.handovers, 1, memory_order_relaxed);
}

void stats_add_bytes(int rdma, int tx, uint64_t n)
{
	atomic_fetch_add_explicit(&st_.bytes[!!rdma][!!tx], n, memory_order_relaxed);
}

void stats_stream(int rdma)
{
	atomic_fetch_add_explicit(&st_.streams[!!rdma], 1, memory_order_relaxed);
}

void stats_fallback(enum rsock_fallback_reason why)
{
	if ((unsigned)why < RSOCK_FB_MAX)
		atomic_fetch_add_explicit(&st_.fallbacks[why], 1, memory_order_relaxed);
}

void stats_registered(int64_t delta)
{
	atomic_fetch_add_explicit(&st_.registered, delta, memory_order_relaxed);
}

void stats_snapshot(struct rsock_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	st->version = 4;
	st->streams_tcp = atomic_load_explicit(&st_.streams[0], memory_order_relaxed);
	st->streams_rdma = atomic_load_explicit(&st_.streams[1], memory_order_relaxed);
	st->tx_bytes_tcp = atomic_load_explicit(&st_.bytes[0][1], memory_order_relaxed);
	st->rx_bytes_tcp = atomic_load_explicit(&st_.bytes[0][0], memory_order_relaxed);
	st->tx_bytes_rdma = atomic_load_explicit(&st_.bytes[1][1], memory_order_relaxed);
	st->rx_bytes_rdma = atomic_load_explicit(&st_.bytes[1][0], memory_order_relaxed);
	for (int i = 0; i < RSOCK_FB_MAX; i++)
		st->fallbacks[i] = atomic_load_explicit(&st_.fallbacks[i], memory_order_relaxed);
	int64_t reg = atomic_load_explicit(&st_.registered, memory_order_relaxed);
	st->registered_bytes = reg > 0 ? (uint64_t)reg : 0;
	st->tracked_fds = fdtab_count();
	st->handovers = atomic_load_explicit(&st_.handovers, memory_order_relaxed);
	st->cq_events = atomic_load_explicit(&st_.cq_events, memory_order_relaxed);
	st->cq_arms = atomic_load_explicit(&st_.cq_arms, memory_order_relaxed);
	st->zcopy_bytes = atomic_load_explicit(&st_.zcopy, memory_order_relaxed);
}

void stats_print(void)
{
	struct rsock_stats s;

	stats_snapshot(&s);
	log_emit(LOG_INFO,
		 "stats: streams tcp=%llu rdma=%llu bytes tcp tx=%llu rx=%llu rdma tx=%llu rx=%llu "
		 "fallbacks rules=%llu no_device=%llu peer=%llu resources=%llu protocol=%llu "
		 "not_implemented=%llu registered=%llu handovers=%llu cq_events=%llu cq_arms=%llu "
		 "zcopy=%llu",
		 (unsigned long long)s.streams_tcp, (unsigned long long)s.streams_rdma,
		 (unsigned long long)s.tx_bytes_tcp, (unsigned long long)s.rx_bytes_tcp,
		 (unsigned long long)s.tx_bytes_rdma, (unsigned long long)s.rx_bytes_rdma,
		 (unsigned long long)s.fallbacks[RSOCK_FB_RULES],
		 (unsigned long long)s.fallbacks[RSOCK_FB_NO_DEVICE],
		 (unsigned long long)s.fallbacks[RSOCK_FB_PEER],
		 (unsigned long long)s.fallbacks[RSOCK_FB_RESOURCES],
		 (unsigned long long)s.fallbacks[RSOCK_FB_PROTOCOL],
		 (unsigned long long)s.fallbacks[RSOCK_FB_NOT_IMPLEMENTED],
		 (unsigned long long)s.registered_bytes, (unsigned long long)s.handovers,
		 (unsigned long long)s.cq_events, (unsigned long long)s.cq_arms,
		 (unsigned long long)s.zcopy_bytes);
}
