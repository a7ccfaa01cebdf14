/* stats.c - see stats.h. Relaxed atomics: counters, not synchronisation.
 * Every counter but the bytes is also added to the process's segment for
 * rsock-stat (statpub.h), when it has one; the bytes go to the stream's own
 * slot (conn.c). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/log.h"
#include "base/statpub.h"
#include "base/stats.h"

static struct {
	_Atomic uint64_t streams[3]; /* [enum stats_path] */
	_Atomic uint64_t fallbacks[RSOCK_FB_MAX];
	_Atomic int64_t registered;
	_Atomic uint64_t handovers, failovers;
} st_;

/* The counters the data path moves (bytes at every call, completion events
 * and arms at every sleep) are kept per thread: one shared counter is a
 * cache line every thread of a server writes at every call. A thread claims
 * a shard at its first count and gives it back at its exit (to the next new
 * thread, which adds to the same sums); threads beyond ST_SHARDS share the
 * last one. Counts are atomic additions even so (a shard may be shared: two
 * claims racing for a new one, a signal handler's call), but on a line no
 * other thread writes. Reading sums the shards. */
#define ST_SHARDS 256
struct st_shard {
	_Atomic uint64_t bytes[3][2]; /* [enum stats_path][tx] */
	_Atomic uint64_t cq_events, cq_arms, zcopy;
	_Atomic int owned;
} __attribute__((aligned(64)));

static struct st_shard st_shards[ST_SHARDS + 1];
static _Atomic unsigned st_nshards;
static __thread struct st_shard *st_mine __attribute__((tls_model("initial-exec")));
static pthread_key_t st_key;
static pthread_once_t st_key_once = PTHREAD_ONCE_INIT;
static int st_key_ok;

static void st_release(void *p)
{
	atomic_store_explicit(&((struct st_shard *)p)->owned, 0, memory_order_release);
}

static void st_key_make(void)
{
	st_key_ok = pthread_key_create(&st_key, st_release) == 0;
}

static RSOCK_NOINLINE struct st_shard *st_claim(void)
{
	struct st_shard *sh = NULL;
	unsigned n = atomic_load_explicit(&st_nshards, memory_order_acquire);

	for (unsigned i = 0; i < n && !sh; i++) {
		int free_ = 0;
		if (atomic_compare_exchange_strong(&st_shards[i].owned, &free_, 1))
			sh = &st_shards[i];
	}
	while (!sh) {
		if (n >= ST_SHARDS)
			return st_mine = &st_shards[ST_SHARDS]; /* shared, never given back */
		if (atomic_compare_exchange_weak(&st_nshards, &n, n + 1)) {
			sh = &st_shards[n];
			atomic_store(&sh->owned, 1);
		}
	}
	pthread_once(&st_key_once, st_key_make);
	if (st_key_ok)
		pthread_setspecific(st_key, sh);
	return st_mine = sh;
}

static inline struct st_shard *st_shard(void)
{
	struct st_shard *sh = st_mine;

	return RSOCK_LIKELY(sh) ? sh : st_claim();
}

void stats_fork_child(void)
{
	/* The other threads' shards are nobody's in the child. */
	unsigned n = atomic_load(&st_nshards);

	for (unsigned i = 0; i < n; i++)
		if (&st_shards[i] != st_mine)
			atomic_store(&st_shards[i].owned, 0);
}

/* The sum of one counter over the shards. */
#define ST_SUM(field)                                                                   \
	({                                                                              \
		uint64_t sum_ = 0;                                                      \
		unsigned n_ = atomic_load_explicit(&st_nshards, memory_order_acquire); \
		for (unsigned i_ = 0; i_ < n_; i_++)                                    \
			sum_ += atomic_load_explicit(&st_shards[i_].field, memory_order_relaxed); \
		sum_ + atomic_load_explicit(&st_shards[ST_SHARDS].field, memory_order_relaxed); \
	})

void stats_zcopy(uint64_t n)
{
	atomic_fetch_add_explicit(&st_shard()->zcopy, n, memory_order_relaxed);
	statpub_count(STATPUB_C_ZCOPY, (int64_t)n);
}

void stats_cq_event(void)
{
	atomic_fetch_add_explicit(&st_shard()->cq_events, 1, memory_order_relaxed);
	statpub_count(STATPUB_C_CQ_EVENTS, 1);
}

void stats_cq_arm(void)
{
	atomic_fetch_add_explicit(&st_shard()->cq_arms, 1, memory_order_relaxed);
	statpub_count(STATPUB_C_CQ_ARMS, 1);
}

void stats_handover(void)
{
	atomic_fetch_add_explicit(&st_.handovers, 1, memory_order_relaxed);
	statpub_count(STATPUB_C_HANDOVERS, 1);
}

void stats_failover(void)
{
	atomic_fetch_add_explicit(&st_.failovers, 1, memory_order_relaxed);
	statpub_count(STATPUB_C_FAILOVERS, 1);
}

void stats_add_bytes(int path, int tx, uint64_t n)
{
	atomic_fetch_add_explicit(&st_shard()->bytes[(unsigned)path < 3 ? path : 0][!!tx], n,
				  memory_order_relaxed);
}

void stats_stream(int path)
{
	path = (unsigned)path < 3 ? path : 0;
	atomic_fetch_add_explicit(&st_.streams[path], 1, memory_order_relaxed);
	statpub_count(path == STATS_SHM    ? STATPUB_C_STREAMS_SHM
		      : path == STATS_RDMA ? STATPUB_C_STREAMS_RDMA
					   : STATPUB_C_STREAMS_TCP,
		      1);
}

void stats_fallback(enum rsock_fallback_reason why)
{
	if ((unsigned)why < RSOCK_FB_MAX) {
		atomic_fetch_add_explicit(&st_.fallbacks[why], 1, memory_order_relaxed);
		statpub_count(STATPUB_C_FALLBACK + why, 1);
	}
}

void stats_registered(int64_t delta)
{
	atomic_fetch_add_explicit(&st_.registered, delta, memory_order_relaxed);
	statpub_count(STATPUB_C_REGISTERED, delta);
}

void stats_snapshot(struct rsock_stats *st, size_t tracked_fds)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	st->version = 6;
	st->streams_tcp = atomic_load_explicit(&st_.streams[0], memory_order_relaxed);
	st->streams_rdma = atomic_load_explicit(&st_.streams[1], memory_order_relaxed);
	st->tx_bytes_tcp = ST_SUM(bytes[0][1]);
	st->rx_bytes_tcp = ST_SUM(bytes[0][0]);
	st->tx_bytes_rdma = ST_SUM(bytes[1][1]);
	st->rx_bytes_rdma = ST_SUM(bytes[1][0]);
	for (int i = 0; i < RSOCK_FB_MAX; i++)
		st->fallbacks[i] = atomic_load_explicit(&st_.fallbacks[i], memory_order_relaxed);
	int64_t reg = atomic_load_explicit(&st_.registered, memory_order_relaxed);
	st->registered_bytes = reg > 0 ? (uint64_t)reg : 0;
	st->tracked_fds = tracked_fds;
	st->handovers = atomic_load_explicit(&st_.handovers, memory_order_relaxed);
	st->cq_events = ST_SUM(cq_events);
	st->cq_arms = ST_SUM(cq_arms);
	st->zcopy_bytes = ST_SUM(zcopy);
	st->failovers = atomic_load_explicit(&st_.failovers, memory_order_relaxed);
	st->streams_shm = atomic_load_explicit(&st_.streams[STATS_SHM], memory_order_relaxed);
	st->tx_bytes_shm = ST_SUM(bytes[STATS_SHM][1]);
	st->rx_bytes_shm = ST_SUM(bytes[STATS_SHM][0]);
}

void stats_print(size_t tracked_fds)
{
	struct rsock_stats s;

	stats_snapshot(&s, tracked_fds);
	log_emit(LOG_INFO,
		 "stats: streams tcp=%llu rdma=%llu shm=%llu bytes tcp tx=%llu rx=%llu rdma tx=%llu "
		 "rx=%llu shm tx=%llu rx=%llu fallbacks rules=%llu no_device=%llu peer=%llu "
		 "resources=%llu protocol=%llu not_implemented=%llu registered=%llu handovers=%llu "
		 "cq_events=%llu cq_arms=%llu zcopy=%llu failovers=%llu",
		 (unsigned long long)s.streams_tcp, (unsigned long long)s.streams_rdma,
		 (unsigned long long)s.streams_shm, (unsigned long long)s.tx_bytes_tcp,
		 (unsigned long long)s.rx_bytes_tcp, (unsigned long long)s.tx_bytes_rdma,
		 (unsigned long long)s.rx_bytes_rdma, (unsigned long long)s.tx_bytes_shm,
		 (unsigned long long)s.rx_bytes_shm,
		 (unsigned long long)s.fallbacks[RSOCK_FB_RULES],
		 (unsigned long long)s.fallbacks[RSOCK_FB_NO_DEVICE],
		 (unsigned long long)s.fallbacks[RSOCK_FB_PEER],
		 (unsigned long long)s.fallbacks[RSOCK_FB_RESOURCES],
		 (unsigned long long)s.fallbacks[RSOCK_FB_PROTOCOL],
		 (unsigned long long)s.fallbacks[RSOCK_FB_NOT_IMPLEMENTED],
		 (unsigned long long)s.registered_bytes, (unsigned long long)s.handovers,
		 (unsigned long long)s.cq_events, (unsigned long long)s.cq_arms,
		 (unsigned long long)s.zcopy_bytes, (unsigned long long)s.failovers);
}
