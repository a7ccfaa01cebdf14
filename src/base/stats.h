/* stats.h - process-wide counters behind rsock_stats_get() and RSOCK_STATS=1. */
#ifndef RSOCK_STATS_H
#define RSOCK_STATS_H

#include <stdint.h>

#include <stddef.h>

#include "base/compiler.h"
#include "rsock/rsock.h"

/* Which path a count is for. */
enum stats_path { STATS_TCP = 0, STATS_RDMA = 1, STATS_SHM = 2 };
/* n bytes sent (tx 1) or received on a stream of path (enum stats_path). */
void stats_add_bytes(int path, int tx, uint64_t n);
/* One more stream (connected or accepted) on path (enum stats_path). */
void stats_stream(int path);
void stats_fallback(enum rsock_fallback_reason why);
void stats_registered(int64_t delta);
void stats_handover(void);
void stats_cq_event(void);
void stats_cq_arm(void);
void stats_zcopy(uint64_t n);
/* A stream moved to TCP because its RDMA path broke (a failover). */
void stats_failover(void);
/* In a fork child: the other threads' per-thread shards are free again. */
void stats_fork_child(void);
/* Fill st completely (current version); tracked_fds: the fd table's count
 * (the caller's, from a layer above). */
void stats_snapshot(struct rsock_stats *st, size_t tracked_fds);
/* Print the counters (with the fd table's count) to the log destination,
 * whatever the log level. */
void stats_print(size_t tracked_fds);

#endif
