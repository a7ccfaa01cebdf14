/* internal.h - what the files of path/shm share: the stream object, its
 * waiting and its ends (doc/design.md, "The same-host path"). */
#ifndef RSOCK_PATH_SHM_INTERNAL_H
#define RSOCK_PATH_SHM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "path/adapt.h"
#include "path/path.h"
#include "path/shm/ring.h"
#include "path/shm/shm.h"

struct shm_stream {
	struct path_stream s;        /* first: the path's view (path.h) */
	pthread_mutex_t lock;        /* everything below not marked atomic */
	pid_t owner;                 /* the process that set the stream up */
	int side;                    /* 0 client, 1 server */
	void *map;
	size_t maplen;
	struct shm_hdr *hdr;
	struct shm_rx rx;
	struct shm_tx tx;
	int efd_me;                  /* this side's doorbell: the peer writes it */
	int efd_peer;                /* the peer's doorbell */
	int tcp_fd;                  /* our duplicate of the stream's TCP socket: the
				      * control connection, whose end says the peer's
				      * process closed the stream or died */
	int err;                     /* sticky -errno (a corrupt index, a reset reported) */
	int reset_told;              /* the reader was given ECONNRESET once */
	int rd_shut, wr_shut;        /* shutdown() of this side */
	int peer_gone;               /* the control connection ended */
	uint32_t flags_seen;         /* the peer's flags at the last look (shm_sleep) */
	_Atomic int sw;              /* this side writes on the TCP connection (switch.c) */
	struct ho_pre *pre;          /* the ring's unread bytes after a hand-over, or NULL */
	_Atomic int marker_in;       /* the peer's switch message was taken off the TCP stream */
	int pending;                 /* the server awaits the client's word on live_fd */
	int live_fd;                 /* the set-up connection while pending, else -1 */
	int declined;                /* the client said no: the stream is TCP's (its ring unused) */
	/* in a process other than the owner (child.c; copies a fork made) */
	pid_t child_pid;             /* the process that asked the owner, 0: none */
	int child_rc;                /* what the owner answered: 0 or -EIO */
	struct ho_pre *child_pre;    /* the prefix it left, or NULL */
	uint64_t key;                /* the hello's token (shm_stream_key), 0: none */
	unsigned fork_gen;           /* ho_forks when it came up: a fork since, a child may hold it */
	/* The spill (data.c): ring bytes a writer blocked on a full peer took
	 * out of its own ring, read before the ring's. */
	uint8_t *spill;
	size_t spill_cap, spill_off, spill_len;
	struct shm_stream *next;     /* on this process's list of keyed streams */
	struct ho_rec *rec;          /* the hand-over registry's record (path/registry.h) */
	_Atomic int ctl_dirty;       /* a waiter saw the control connection readable */
	struct path_waiter *waitq;   /* threads asleep on the stream */
	_Atomic int sleepers;
	_Atomic int watchers;        /* epoll registrations */
	_Atomic int rcvlowat;
	_Atomic int64_t timeo_ns[2]; /* SO_RCVTIMEO, SO_SNDTIMEO (0: none) */
	struct path_adapt wait;
};

static inline struct shm_stream *shm_of(struct path_stream *s)
{
	return (struct shm_stream *)s;
}

/* ---- stream.c ---- */
/* Ring the peer's doorbell if it is armed (it sleeps or waits in poll).
 * Caller holds the lock. */
void shm_ring_peer(struct shm_stream *st);
/* Look at the control connection once a waiter saw it move: its end is
 * the peer's close or death. Caller holds the lock. */
void shm_check_live(struct shm_stream *st);
/* Something may have changed since the caller's look (an index, the
 * peer's flags, the control connection): 1 or 0. Caller holds the lock. */
int shm_changed(struct shm_stream *st);
/* Sleep until the peer changes something or deadline (0: none), the lock
 * released meanwhile: 0, -EINTR, -ETIMEDOUT. Caller holds the lock. */
int shm_sleep(struct shm_stream *st, int64_t deadline);
/* The wait a blocking call keeps for opt (SO_RCVTIMEO, SO_SNDTIMEO): a
 * deadline in clock_now_ns() units, 0 for none. */
int64_t shm_deadline(struct shm_stream *st, int opt);
/* Wake every other thread asleep on the stream. Caller holds the lock. */
void shm_waitq_wake(struct shm_stream *st);
/* Take the doorbell's pending ring, if any: 1 when there was one (the
 * other sleepers are woken, and with kick the epoll instances that watch
 * the stream look again). Lock not held. */
int shm_consume(struct shm_stream *st, int kick);

/* ---- switch.c: the hand-over to TCP ---- */
/* This side writes on the TCP connection from now on; the peer follows at
 * its next look. mark: this side moves first, and sends the switch message
 * that wakes the peer's library thread. Caller holds the lock. */
void shm_switch_locked(struct shm_stream *st, int mark);
/* The peer wrote its last ring byte (SHM_F_SWITCH, or it declined the
 * memory): 1 or 0. */
static inline int shm_peer_switched(const struct shm_stream *st)
{
	return st->declined || !!(shm_rx_flags(&st->rx) & SHM_F_SWITCH);
}
/* The server while pending: look for the client's word (never blocks); a
 * decline moves the stream to TCP. Caller holds the lock. */
void shm_pending_resolve(struct shm_stream *st);
/* The other end, when it is a stream of this process, follows st's move
 * now if it is not busy. Caller holds st's lock. */
void shm_local_nudge(struct shm_stream *st);
/* st leaves the list of keyed streams (its close). */
void shm_local_forget(struct shm_stream *st);
/* Follow a peer that moved to TCP. Caller holds the lock. */
static inline void shm_follow(struct shm_stream *st)
{
	if (!atomic_load_explicit(&st->sw, memory_order_relaxed) && shm_peer_switched(st))
		shm_switch_locked(st, 0);
}
/* Take the peer's switch message off the head of the TCP stream, once the
 * peer switched: 1 (taken, now or before), 0 (not all there yet), -errno
 * (not a switch message: the stream is reset). Never blocks. Caller holds
 * the lock. */
int shm_marker_take(struct shm_stream *st);
/* The whole hand-over (path.h's handover): switch, wait (at most 10 s) for
 * the peer's last ring byte, move what is unread to a prefix. 0 or -errno. */
int shm_handover(struct shm_stream *st);

/* ---- child.c: another process's use ---- */
/* In a process other than the owner: ask the owner (once) to move the
 * stream to TCP. 0, or -EIO (it cannot: gone, or no record). */
int shm_child_enter(struct shm_stream *st);
/* A read there: the owner's prefix, then the kernel socket. */
ssize_t shm_child_recv(struct shm_stream *st, const struct iovec *iov, int iovcnt, int flags,
		       int nonblock);
/* poll()'s bits there; and the bytes readable. */
short shm_child_ready(struct shm_stream *st);
int shm_child_readable(struct shm_stream *st);

/* ---- data.c ---- */
ssize_t shm_send(struct shm_stream *st, const struct iovec *iov, int iovcnt, int flags,
		 int nonblock);
ssize_t shm_recv(struct shm_stream *st, const struct iovec *iov, int iovcnt, int flags,
		 int nonblock);
/* The bytes unread: the spill's and the ring's (validated), or -ECONNRESET.
 * Caller holds the lock. */
int64_t shm_unread(struct shm_stream *st);
/* poll()'s bits for the stream now. Caller holds the lock. */
short shm_ready_locked(struct shm_stream *st);
/* getsockopt(SO_ERROR) (path.h: sock_error): ECONNRESET when the peer's
 * reset (or its death with our bytes unread) is not told yet, now told;
 * else 0. Looks at the peer's liveness first. Takes the lock. */
int shm_sock_error(struct shm_stream *st);

#endif
