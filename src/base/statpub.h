/* statpub.h - the process's streams published in shared memory for
 * rsock-stat(1) (doc/design.md, "Observability").
 *
 * A leaf: it knows nothing of conns or paths, it takes values. The segment
 * is the file /dev/shm/rsock-<pid> (mode 0600, the process's user), made at
 * the process's first published stream (never in the constructor, never
 * for a process without one), removed by the library's destructor, before
 * an exec (made again if the exec fails), and by rsock-stat when its
 * process is gone. A fork child gets a segment of its own at once, with
 * the header and the slots of the streams it inherits copied
 * (statpub_fork_child); a child that inherits no published stream makes
 * one at its first.
 *
 * Layout (STATPUB_VERSION 3, little or big endian as the host): the
 * header at offset 0 (STATPUB_HDR_SIZE bytes reserved), then nslots slots
 * of slot_size bytes. The table is large and sparse: tmpfs allocates only
 * the pages written, and slots are used from the lowest index. Writers use
 * relaxed atomics and no lock on the data path; a reader copies a slot and
 * keeps it when its gen is even and the same before and after the copy,
 * and validates every value (a segment is another process's memory).
 *
 * This header is also what rsock-stat includes: nothing but libc types. */
#ifndef RSOCK_STATPUB_H
#define RSOCK_STATPUB_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>

#define STATPUB_MAGIC 0x3154534b434f5352ull /* "RSOCKST1" in a little-endian file */
#define STATPUB_VERSION 3
#define STATPUB_HDR_SIZE 4096u
#define STATPUB_SLOTS 65536u
#define STATPUB_DIR "/dev/shm"
#define STATPUB_PREFIX "rsock-"

/* A slot's path; the numbers are conn.h's enum conn_path. */
enum statpub_path {
	STATPUB_PATH_UNDECIDED = 0, /* negotiation not finished */
	STATPUB_PATH_TCP = 1,
	STATPUB_PATH_RDMA = 2,
	STATPUB_PATH_SHM = 3,       /* the same-host path, when there is one */
};

enum statpub_role {
	STATPUB_ROLE_CLIENT = 1,    /* connect() */
	STATPUB_ROLE_ACCEPTED = 2,  /* accept() */
};

enum statpub_state {
	STATPUB_ST_CONNECTING = 1,  /* a non-blocking connect() returned EINPROGRESS */
	STATPUB_ST_ESTABLISHED = 2,
	STATPUB_ST_SHUT_RD = 3,     /* shutdown(SHUT_RD) */
	STATPUB_ST_SHUT_WR = 4,     /* shutdown(SHUT_WR) */
	STATPUB_ST_SHUT_RDWR = 5,   /* both */
	STATPUB_ST_CLOSED = 6,      /* no descriptor left; the library still holds it */
};

/* Per-process counters: header.counters[], the fields of struct rsock_stats
 * (include/rsock/rsock.h) but the bytes (header.closed_bytes plus the live
 * slots' bytes). Indices are part of the layout. */
enum statpub_counter {
	STATPUB_C_STREAMS_TCP = 0,
	STATPUB_C_STREAMS_RDMA = 1,
	STATPUB_C_REGISTERED = 2,   /* bytes registered with devices now (signed) */
	STATPUB_C_TRACKED_FDS = 3,  /* descriptors in the fd table now */
	STATPUB_C_HANDOVERS = 4,
	STATPUB_C_CQ_EVENTS = 5,
	STATPUB_C_CQ_ARMS = 6,
	STATPUB_C_ZCOPY = 7,
	STATPUB_C_FAILOVERS = 8,
	STATPUB_C_STREAMS_SHM = 9,
	STATPUB_C_FALLBACK = 16,    /* + enum rsock_fallback_reason, 16 of them */
	STATPUB_C_MAX = 32,
};

/* Bytes are kept by path: 0 TCP, 1 RDMA, 2 the same-host path (the
 * numbers of base/stats.h's enum stats_path). */
#define STATPUB_BYTE_PATHS 3

struct statpub_header {
	uint64_t magic;             /* STATPUB_MAGIC */
	uint32_t version;           /* STATPUB_VERSION */
	uint32_t header_size;       /* STATPUB_HDR_SIZE: offset of slot 0 */
	uint32_t slot_size;         /* sizeof(struct statpub_slot) */
	uint32_t nslots;            /* the table's capacity */
	int32_t pid;
	uint32_t uid;
	/* CLOCK_BOOTTIME ns when the segment was made: the process that holds
	 * pid now made it if it started no later (field 22 of /proc/<pid>/stat,
	 * in clock ticks, rounded down); one started later reuses the pid. */
	uint64_t made;
	char comm[16];              /* the program's name, NUL-terminated */
	_Atomic uint32_t slots_hi;  /* slots [0, slots_hi) have been used */
	_Atomic uint32_t unpublished; /* streams not published: the table was full */
	_Atomic int64_t counters[STATPUB_C_MAX];
	_Atomic uint64_t closed_bytes[STATPUB_BYTE_PATHS][2]; /* [path][tx] of the streams gone */
};

struct statpub_slot {
	_Atomic uint32_t gen;       /* odd while the slot is claimed or released */
	_Atomic uint32_t used;      /* 1: a stream holds it */
	int32_t fd;                 /* the descriptor it was published with */
	uint8_t role;               /* enum statpub_role */
	uint8_t pad_[3];
	_Atomic uint32_t path;      /* enum statpub_path */
	_Atomic uint32_t state;     /* enum statpub_state */
	_Atomic int32_t fallback;   /* on TCP: enum rsock_fallback_reason, else -1 */
	uint32_t pad2_;
	struct sockaddr_in6 local;  /* AF_INET (a sockaddr_in) or AF_INET6; family 0: unknown */
	struct sockaddr_in6 peer;
	int64_t since;              /* CLOCK_REALTIME seconds at publication */
	_Atomic uint64_t bytes[STATPUB_BYTE_PATHS][2]; /* [path][tx]: bytes by the path that carried them */
	/* The RDMA path, once it carries the stream. */
	char device[32];            /* the verbs device, NUL-terminated */
	_Atomic uint32_t qpn;       /* the queue pair's number */
	_Atomic uint32_t rx_ring;   /* bytes: our receive ring, staging ring, the peer's ring */
	_Atomic uint32_t tx_ring;
	_Atomic uint32_t peer_ring;
	_Atomic uint32_t msgs_out;  /* data messages sent, not yet credited by the peer */
	uint32_t pad3_;
	_Atomic uint64_t inflight;  /* bytes written into the peer's ring, not yet credited */
	uint8_t reserved[256 - 208];
};
_Static_assert(sizeof(struct statpub_header) <= STATPUB_HDR_SIZE, "statpub header");
_Static_assert(sizeof(struct statpub_slot) == 256, "statpub slot");

#ifndef STATPUB_LAYOUT_ONLY
struct rsock_stats;

/* A turn of the library's thread (init.c registers it with
 * service_each_turn): once this process has made its segment, the segments
 * of the user's processes that are gone are removed, off the first
 * stream's path. Returns 0 (no more work waits). */
int statpub_turn(void);

/* Whether the process's segment exists (made by statpub_open). */
int statpub_live(void);
/* Make the process's segment, its counters from now (a snapshot of the
 * process's counters: those before it existed). 0, or -errno (logged at
 * debug level; the caller publishes nothing then). Idempotent. */
int statpub_open(const struct rsock_stats *now);
/* A slot for a stream, filled (local and peer may be NULL), or NULL: no
 * segment, or the table is full. */
struct statpub_slot *statpub_claim(int fd, enum statpub_role role, const struct sockaddr *local,
				   const struct sockaddr *peer);
/* Give a slot back (its bytes go to the header's closed_bytes). NULL is allowed. */
void statpub_release(struct statpub_slot *p);
/* Counters: add delta, or set a value (STATPUB_C_*). Nothing without a segment. */
void statpub_count(enum statpub_counter i, int64_t delta);
void statpub_set(enum statpub_counter i, int64_t v);
/* The RDMA path's description of its stream. */
void statpub_rdma(struct statpub_slot *p, const char *device, uint32_t qpn, uint32_t rx_ring,
		  uint32_t tx_ring, uint32_t peer_ring);
/* Remove the segment's file (the destructor; before an exec, exec_failed
 * after it: the file is made again with what the mapping holds). Only the
 * process that made it acts (not a vfork child). */
void statpub_unlink(void);
void statpub_exec_failed(void);
/* Around fork (init.c): the slot table's lock; the child moves to a
 * segment of its own (see above). */
void statpub_fork_lock(void);
void statpub_fork_unlock(void);
void statpub_fork_child(void);

/* The data path: bytes a stream carried, one relaxed add to its own slot. */
static inline void statpub_bytes(struct statpub_slot *p, int path, int tx, uint64_t n)
{
	atomic_fetch_add_explicit(&p->bytes[path][tx], n, memory_order_relaxed);
}

/* The RDMA path's credits in use, where it changes them. */
static inline void statpub_credits(struct statpub_slot *p, uint32_t msgs, uint64_t inflight)
{
	atomic_store_explicit(&p->msgs_out, msgs, memory_order_relaxed);
	atomic_store_explicit(&p->inflight, inflight, memory_order_relaxed);
}

static inline void statpub_state(struct statpub_slot *p, enum statpub_state st)
{
	atomic_store_explicit(&p->state, st, memory_order_relaxed);
}
#endif

#endif
