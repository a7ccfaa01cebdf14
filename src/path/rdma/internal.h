/* internal.h - what the files of the RDMA path (src/path/rdma/) share and
 * nothing else includes: limits, the hooks as called, and the functions one
 * file of the module uses from another. transport.h is the interface other
 * layers see. Every function here works on a struct tp whose lock the caller
 * holds unless its comment says otherwise, and returns 0, a count, or
 * -errno. */
#ifndef RSOCK_PATH_RDMA_INTERNAL_H
#define RSOCK_PATH_RDMA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/clock.h"
#include "path/rdma/flow.h"
#include "path/rdma/transport.h"

/* Receives posted: the peer's data messages (at most TP_MAX_DATA_MSGS
 * unacknowledged), its credits (at worst one per data message of ours it
 * read: TP_MAX_DATA_MSGS), FIN and RESET, and the receives consumed but not
 * yet posted again (fewer than TP_RQ_BATCH). */
#define TP_RQ_DEPTH 144
#define TP_SIGNAL_EVERY 32
/* Receives are posted again in chains of this many (doc/design.md, "Wire
 * protocol"). */
#define TP_RQ_BATCH 16
#define TP_WC_BATCH 16 /* completions taken per ibv_poll_cq */
_Static_assert(2 * TP_MAX_DATA_MSGS + 2 + TP_RQ_BATCH - 1 <= TP_RQ_DEPTH, "receive queue headroom");
#define TP_MAX_CHUNK (32u * 1024) /* the largest copied data message ("Wire protocol") */
/* The largest data message written from a registered application buffer
 * (a span without the copy), at most half the peer's ring ("Wire protocol"). */
#define TP_MAX_ZC_CHUNK (128u * 1024)

#define TP_CTL_RESERVE 2 /* send-queue slots kept for credits and FIN */
#define TP_MIN_STAGE (16u * 1024) /* smallest staged piece of a larger send */
#define TP_SWITCH_MS 10000 /* the most a hand-over waits for the peer */
/* How often a failover waiting for the peer's SWITCH looks at its bound:
 * whether the peer's kernel has acknowledged ours (switch.c, fo_bound). */
#define TP_FO_LOOK_MS 1000
/* The most a closed stream's posted writes are waited for (by the library's
 * thread, or in close() without one) before its QP goes. */
#define TP_LINGER_MS 2000
#define TP_SPILL_AFTER_MS 20    /* a blocked send's wait before it spills */
/* The most a read mark waits after a read (the peer's test of a dead
 * reader's unread bytes, "Wire protocol"). */
#define TP_MARK_MS 20
/* The receive ring is followed by a page of its own: the peer's word for
 * the read mark at its start (registered with the ring for remote write),
 * then the staging ring, page-aligned. */
#define TP_MARK_PAD 4096u
/* Bounded detection (doc/design.md, "Errors"): the QP's ACK time-out,
 * 4.096 us x 2^TP_ACK_TIMEOUT (134 ms), and its retries: a write the peer's
 * device does not acknowledge fails after 8 tries, about 1.1 s. */
#define TP_ACK_TIMEOUT 15
#define TP_RETRY_COUNT 7
#define TP_DRAIN_MS 1000 /* the most a failover waits for its receives' flush */
/* A signalled work request not complete after this long: the device is
 * stuck (soft-RoCE after a link flap: its retransmission timer stopped,
 * neither success nor error ever came); the path counts as broken. Well
 * beyond the retries' 1.1 s. */
#define TP_STALL_MS 3000
#define TP_WRID_RECV 1   /* the wr_id of receives (a flushed one has no opcode) */

/* ---- the hooks (tp_hooks_set; setup.c), as the module calls them -------- */

extern struct tp_hooks tp_hook RSOCK_HIDDEN;

/* Wake every epoll instance, so that none sleeps on an event consumed here. */
static inline void tp_kick(void)
{
	if (tp_hook.kick)
		tp_hook.kick();
}

/* Whether this process has a thread that tears closed streams down. */
static inline int tp_reaper_ready(void)
{
	return tp_hook.reaper_ready ? tp_hook.reaper_ready() : 0;
}

/* Tell that thread that closed streams wait: a turn (tp_reap) within ms. */
static inline void tp_reaper_wake(int ms)
{
	if (tp_hook.reaper_wake)
		tp_hook.reaper_wake(ms);
}

/* ---- iovecs --------------------------------------------------------------- */

static inline size_t tp_iov_total(const struct iovec *iov, int iovcnt)
{
	size_t s = 0;

	for (int i = 0; i < iovcnt; i++)
		s += iov[i].iov_len;
	return s;
}

/* iov from byte skip on, into tmp (at most 64 pieces). Returns the count. */
static inline int tp_iov_from(const struct iovec *iov, int iovcnt, size_t skip,
			      struct iovec tmp[64])
{
	int n = 0;

	for (int i = 0; i < iovcnt && n < 64; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		tmp[n].iov_base = (uint8_t *)iov[i].iov_base + skip;
		tmp[n++].iov_len = iov[i].iov_len - skip;
		skip = 0;
	}
	return n;
}

/* The stream's error (err, not -EPIPE) for a read or write of the
 * application: as TCP reports a socket's error once (sock_error), the
 * first call gets it, later ones what a reset socket answers: the end of
 * the stream to a read (0), EPIPE to a write. Readiness then drops
 * POLLERR. */
static inline int tp_err_report(struct tp *t, int write)
{
	if (!t->err_told) {
		t->err_told = 1;
		return t->err;
	}
	return write ? -EPIPE : 0;
}

/* Whether the stream's end (or an error) has come: nothing more to wait for. */
static inline int tp_rx_ended(const struct tp *t)
{
	return t->eof || t->peer_gone || t->err || t->rd_shut;
}

/* ---- setup.c, cache.c: the stream's verbs objects and memory ------------- */

/* Unmap the stream's rings and its spill. */
void tp_mem_free(struct tp *t);
/* Deregister the stream's two MRs and free its PD (those it has; the set
 * cache keeps them instead when it takes the rings). */
void tp_regs_free(struct tp *t);
/* Destroy the stream's QP, if it has one. */
void tp_qp_destroy(struct tp *t);
/* Take a cached ring set for ctx and these sizes into t: 1 if one was
 * found, else 0. Takes the cache's lock. */
int tp_set_take(struct tp *t, struct ibv_context *ctx, uint32_t rx_size, size_t mem_len);
/* Keep t's PD, memory and MRs in the cache (its QP is destroyed), with its
 * CQ and completion channel when they can serve again: 1 if kept, else 0.
 * Takes the cache's lock. */
int tp_set_keep(struct tp *t);
/* Destroy t's CQ and completion channel, if it has them. */
void tp_cq_free(struct tp *t);
/* The ring cache's lock (tp_fork_lock takes it before the reap list's). */
extern pthread_mutex_t tp_set_lock RSOCK_HIDDEN;

/* ---- post.c: work requests and their completions -------------------------- */

#define PW_INLINE 1 /* tp_post_write: the data goes in the WR */
#define PW_SIGNAL 2 /* tp_post_write: signalled whatever the count */
#define PW_NOIMM 4  /* tp_post_write: an RDMA WRITE, no immediate (the read mark) */
/* Post n (at most TP_RQ_BATCH) receives as one chain. 0 or -errno. */
int tp_post_recv_chain(struct tp *t, unsigned n);
/* Post one RDMA WRITE WITH IMMEDIATE (sge NULL: zero bytes), or a plain
 * RDMA WRITE with PW_NOIMM; pw: PW_*.
 * 0 or -errno. Caller holds t->lock (the stream's work request t->wr). */
int tp_post_write(struct tp *t, struct ibv_sge *sge, uint32_t remote_off, uint32_t imm, int pw);
/* Post a signalled zero-byte RDMA WRITE, whose completion says every
 * earlier work request is complete. 0 or -errno. */
int tp_post_fence(struct tp *t);
/* How a failure under the stream came (tp_fail). */
enum tp_fail_kind {
	TP_FAIL_PROTO, /* the peer broke the protocol: reset, never a failover */
	TP_FAIL_PATH,  /* the path or the device failed: a failover when it can */
	TP_FAIL_FLUSH, /* a work request flushed: the QP is in error; no reset */
};
/* The RDMA path failed under the stream: a failover is due (path_down) or
 * it is broken with err (-errno), the peer told by a reset (see post.c). */
void tp_fail(struct tp *t, int err, const char *why, enum tp_fail_kind kind);
/* A credit's or read mark's post the device refused (rc, -errno): the path
 * is broken, as by a refused data message, and the stream fails over at its
 * next progress. Not for EACCES (a process whose credentials changed: the
 * send path's, tp_creds_lost) nor on a stream already on TCP or whose peer
 * is gone (its QP is done with). Caller holds t->lock. */
void tp_post_refused(struct tp *t, int rc, const char *why);
/* The failover, when the path broke and none runs (switch.c; tp_progress
 * calls it): this side's SWITCH sent, the peer's taken when it is there;
 * the wait for it is the stream's calls' and readiness's, never a call's
 * own (doc/design.md, "Descriptors, fork, exec"). */
void tp_failover_due(struct tp *t);
/* Process every completion available; returns how many there were. */
int tp_progress(struct tp *t);
/* A signalled write is outstanding: the library's thread looks for stalls
 * within TP_STALL_LOOK_MS (stall.c) unless a look is due already
 * (tp_stall_asked: when, in ms; 0 when none is). */
void tp_stall_arm(void);
extern _Atomic int64_t tp_stall_asked RSOCK_HIDDEN;

/* ---- wait.c: sleeping, waking, deadlines ---------------------------------- */

/* Wake the other threads asleep on t: something changed. */
void tp_waitq_wake(struct tp *t);
/* The deadline (CLOCK_MONOTONIC ns) of a blocking call under the socket's
 * SO_RCVTIMEO or SO_SNDTIMEO (opt); 0: none. */
int64_t tp_timeo_deadline(struct tp *t, int opt);
/* Whether a blocking call with this deadline (0: none) has run out of time. */
int tp_timed_out(int64_t deadline);
/* Sleep until a completion or a control-connection event, by deadline (ns,
 * 0: none); the lock is released meanwhile and held again on return.
 * -EINTR, 1 when it took completions itself, else 0. */
int tp_wait_event(struct tp *t, int64_t deadline, int sink);
/* Request a completion event unless one is already requested. 0 or -errno. */
int tp_arm(struct tp *t);

/* ---- flow.c: credits, the spill, the room for a send --------------------- */

/* Return consumed bytes to the peer (a credit), when any and the send
 * queue has room. */
void tp_send_credit(struct tp *t);
/* After a read: credit when tp_credit_due says so; the read mark is due. */
void tp_maybe_credit(struct tp *t);

/* ---- mark.c: the read mark ------------------------------------------------ */

/* Write the read mark (what the application read of the peer's bytes, plus
 * one) into the peer's word now, unless it says so already or cannot be
 * written (not up, broken, switched, a version-3 peer, no inline data, the
 * send queue full). */
void tp_send_mark(struct tp *t);
/* After a read: the mark is written within TP_MARK_MS by the library's
 * thread (now, without one). */
void tp_mark_due(struct tp *t);
/* The holder of t->lock, spinning for an event: the mark the library's
 * thread could not write, written now (one relaxed load when not asked). */
static inline void tp_mark_asked(struct tp *t)
{
	if (RSOCK_UNLIKELY(atomic_load_explicit(&t->mark_wanted, memory_order_relaxed))) {
		atomic_store_explicit(&t->mark_wanted, 0, memory_order_relaxed);
		tp_send_mark(t);
	}
}
/* t is closing: off the list of marks due. */
void tp_mark_drop(struct tp *t);
/* Around fork (tp_fork_lock): the list's lock, held across it; in the child
 * (before the unlock) the list, the parent's, is dropped. */
void tp_mark_lock(void);
void tp_mark_unlock(void);
void tp_mark_fork_child(void);
/* Move the ring's unread bytes to the spill and credit them; returns the
 * bytes moved. */
uint64_t tp_spill(struct tp *t);
/* Under SO_RCVLOWAT: the ring's unread bytes go to the spill. */
void tp_lowat_wait_prep(struct tp *t);
/* Bytes that may be sent now as one message (zc: from a registered span). */
uint32_t tp_send_room(struct tp *t, size_t want, int zc);

/* ---- switch.c, switched.c: the hand-over to TCP --------------------------- */

/* Look at the control connection: the peer gone, or its SWITCH. */
void tp_check_control(struct tp *t);
/* Until everything posted on t has completed, by deadline (ms). 0,
 * -ETIMEDOUT, or -errno. */
int tp_await_posted(struct tp *t, int64_t deadline);
/* The switch in the owning process (peer: the peer's SWITCH, read first;
 * NULL: this side speaks first), bounded by TP_SWITCH_MS; a failover when
 * the path broke or the peer's says FAILOVER. 0 or -errno. */
int tp_switch_locked(struct tp *t, const struct proto_switch *peer);
/* A failover due (path_down), run to its end by deadline (ms): for those
 * that cannot leave the peer's answer to later calls (close, exit). */
void tp_failover_wait(struct tp *t, int64_t deadline);
/* The failover (failover.c; doc/design.md, "Descriptors, fork, exec"):
 * the QP moved to its error state and its receives waited for (bounded),
 * so that the ring's tail counts for good what arrived. */
void tp_fo_freeze(struct tp *t);
/* Write this side's SWITCH (FAILOVER when fo; the peer's version's
 * layout), by deadline (ms). 0 or -errno. */
int tp_fo_send_switch(struct tp *t, int fo, int64_t deadline);
/* Write on TCP what the peer, having received rx bytes of ours, lacks, from
 * our copies. 0, -EPROTO for a count we cannot send from, or -errno. */
int tp_fo_resend(struct tp *t, uint64_t rx, int64_t deadline);
/* The failover failed with rc: the stream is broken (ETIMEDOUT when the
 * peer did not answer, else ECONNRESET), the peer told by a reset. */
void tp_fo_broken(struct tp *t, int rc);
/* The verbs device refused this process with EACCES: 1 when the stream is
 * switched now, 0 when it cannot be. */
int tp_creds_lost(struct tp *t);
/* A child forked since t came up may hold the socket: switch for it (by
 * deadline, ms); 1 when so, with the prefix's descriptor in *pfd. */
int tp_switch_for_children(struct tp *t, int forked, int64_t deadline, int *pfd);
/* A process other than the owner uses the stream: 0 once switched, -EIO.
 * Lock not held. */
int tp_sw_enter(struct tp *t);
/* On a switched stream: receive into iov from byte skip (bytes or -errno),
 * send the rest of iov (bytes sent), readiness. Lock not held. */
ssize_t tp_sw_recv(struct tp *t, const struct iovec *iov, int iovcnt, size_t skip, int flags);
size_t tp_sw_send_rest(struct tp *t, const struct iovec *iov, int iovcnt, size_t skip, int flags);
short tp_sw_ready(struct tp *t, uint64_t *seq);

/* ---- zcopy.c: sends without the copy -------------------------------------- */

/* A span of the application's buffer registered for one blocking send:
 * bytes [off, end) of the call's iov, at base. */
struct zc_span {
	struct ibv_mr *mr;
	const uint8_t *base;
	size_t off, end;
	uint64_t seq; /* sq_seq of its last WR (signalled), 0 until posted */
};
/* Register the rest of the iov element at byte done, when long enough. */
void tp_zc_begin(struct tp *t, struct zc_span *zc, const struct iovec *iov, int iovcnt, size_t done,
		 size_t want);
/* Wait for the span's writes, then unregister it. */
void tp_zc_end(struct tp *t, struct zc_span *zc);

/* ---- close.c -------------------------------------------------------------- */

/* Tear down one closed stream left to the reaper whose posted writes are
 * done, here: 1 if there was one. Takes the closed streams' locks. */
int tp_reap_one(void);

#endif
