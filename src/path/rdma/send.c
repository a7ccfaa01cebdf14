/* send.c - tp_send: data messages, inline, staged in the send ring or
 * from a registered span (doc/design.md, "Wire protocol"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/proc.h"
#include "base/stats.h"
#include "path/rdma/internal.h"

/* Copy len bytes starting at byte `skip` of iov into dst. */
static void iov_gather(const struct iovec *iov, int iovcnt, size_t skip, void *dst, size_t len)
{
	uint8_t *d = dst;

	for (int i = 0; i < iovcnt && len; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		size_t n = iov[i].iov_len - skip;
		if (n > len)
			n = len;
		ring_copy(d, (const uint8_t *)iov[i].iov_base + skip, n);
		d += n;
		len -= n;
		skip = 0;
	}
}

/* Whether a small message of n bytes fits now without the ring end's skip:
 * what tp_send_room(t, n, 0) == n finds in the common case (a message and
 * a send-queue slot free, n contiguous bytes in the peer's ring and in the
 * staging ring), from the offsets the caller computed once. */
static inline int small_room(const struct tp *t, uint32_t n, uint32_t poff, uint32_t toff)
{
	return t->msg_count < TP_MAX_DATA_MSGS && t->sq_busy + TP_CTL_RESERVE < TP_SQ_DEPTH &&
	       ring_remote_space(&t->peer) >= n && t->peer.size - poff >= n &&
	       ring_free(&t->tx) >= n && t->tx.size - toff >= n;
}

/* The common small send: one buffer that fits in a work request (inline),
 * room for all of it now, nothing wrong with the stream. What tp_send's loop
 * does for it, without the loop (a 64 B write() is on the round trip's path
 * at both ends). Returns 1 when sent, 0 when the loop must do it (nothing
 * done then). Caller holds the lock. */
static int send_small(struct tp *t, const void *buf, uint32_t n)
{
	/* Inline: the provider copies the bytes into the work request while
	 * it posts, from their one copy in the staging ring, which stays
	 * there until a completion says they landed (a failover sends them
	 * again from there). */
	struct ibv_sge sge = {.length = n, .lkey = 0};
	uint32_t poff = (uint32_t)t->peer.tail & (t->peer.size - 1);
	uint32_t toff = (uint32_t)t->tx.tail & (t->tx.size - 1);
	uint8_t *dst;

	/* Completions are looked at only when the room seems short: what
	 * they could say otherwise (the peer's end, an error) is news that
	 * reaches a TCP sender after its write just as well. */
	if (RSOCK_UNLIKELY(!small_room(t, n, poff, toff))) {
		tp_progress(t);
		if (tp_send_room(t, n, 0) != n) /* which may skip the staging ring's end */
			return 0;
		toff = (uint32_t)t->tx.tail & (t->tx.size - 1);
	}
	if (RSOCK_UNLIKELY(t->eof || t->err || t->peer_gone || t->fin_sent || t->path_down ||
			   tp_switched(t)))
		return 0;
	dst = t->tx.buf + toff;
	memcpy(dst, buf, n);
	t->tx.tail += n;
	t->peer.tail += n; /* ring_remote_reserve's, its room checked above */
	sge.addr = (uintptr_t)dst;
	if (RSOCK_UNLIKELY(tp_post_write(t, &sge, poff, proto_imm_encode(PROTO_IMM_DATA, n),
				      PW_INLINE))) {
		t->peer.tail -= n; /* the loop posts again, and handles the error */
		t->tx.tail -= n;
		return 0;
	}
	tp_data_msg_posted(t, dst);
	log_trace("fd %d: data message of %u bytes, inline", t->tcp_fd, n);
	return 1;
}

/* A blocking send's wait for room: its SO_SNDTIMEO deadline (set at its
 * first wait) and when its unread bytes go to the spill (0: not again). */
struct send_wait {
	int64_t deadline;
	int deadline_set;
	int64_t spill_at;
};

/* One wait of a blocking send that has no room. Returns 0 to look again
 * (it waited, or spilled), -EAGAIN when the time-out has passed, -EINTR
 * when a signal interrupted it and the call fails. Caller holds the lock. */
static int send_wait(struct tp *t, struct send_wait *sw)
{
	int64_t wait_until;

	/* SO_SNDTIMEO: what was sent, else EAGAIN, as TCP */
	if (!sw->deadline_set) {
		sw->deadline = tp_timeo_deadline(t, SO_SNDTIMEO);
		sw->deadline_set = 1;
		sw->spill_at = clock_now_ns() + TP_SPILL_AFTER_MS * 1000000LL;
	}
	if (tp_timed_out(sw->deadline))
		return -EAGAIN;
	/* Our unread bytes go aside once we have waited a while
	 * (tp_spill(): both ends may be waiting for the other). */
	wait_until = sw->deadline;
	if (sw->spill_at && ring_used(&t->rx) && tp_spill_room(t)) {
		if (clock_now_ns() >= sw->spill_at) {
			if (tp_spill(t))
				return 0;
			sw->spill_at = 0; /* no memory for it: wait as before */
		} else if (!wait_until || sw->spill_at < wait_until) {
			wait_until = sw->spill_at;
		}
	}
	if (sw->spill_at && t->rx_unacked && clock_now_ns() >= sw->spill_at)
		tp_send_credit(t); /* a spill's credit the send queue had no room for */
	if (tp_wait_event(t, wait_until, 0) == -EINTR && tp_intr_fails(sw->deadline))
		return -EINTR;
	return 0;
}

/* Post one data message of n bytes (tp_send_room allowed them, contiguous)
 * from byte done of iov: from the registered span zc (NULL: none), or
 * staged in the send ring and written from there, inline or not (the copy
 * stays until a completion covers it: a failover's resend). *src: where
 * its bytes are. 0 or tp_post_write's -errno (the reservations stay made).
 * Caller holds the lock. */
static int send_post(struct tp *t, const struct iovec *iov, int iovcnt, size_t done, uint32_t n,
		     struct zc_span *zc, const uint8_t **src)
{
	struct ring_span rs[2] = {{0, 0}, {0, 0}}; /* the reservation below fills it */
	int r;

	ring_remote_reserve(&t->peer, n, rs); /* send_room allowed n, contiguous */
	if (zc) {
		struct ibv_sge sge = {.addr = (uintptr_t)zc->base + (done - zc->off), .length = n,
				      .lkey = zc->mr->lkey};
		*src = zc->base + (done - zc->off);
		r = tp_post_write(t, &sge, rs[0].off, proto_imm_encode(PROTO_IMM_DATA, n),
				  done + n == zc->end ? PW_SIGNAL : 0);
		if (r == 0) {
			stats_zcopy(n);
			if (done + n == zc->end)
				zc->seq = t->sq_seq;
		}
	} else {
		uint8_t *dst = t->tx.buf + (t->tx.tail & (t->tx.size - 1));
		struct ibv_sge sge = {.addr = (uintptr_t)dst, .length = n, .lkey = t->tx_mr->lkey};
		iov_gather(iov, iovcnt, done, dst, n);
		t->tx.tail += n; /* == ring_write without the copy: contiguous by send_room */
		*src = dst;
		r = tp_post_write(t, &sge, rs[0].off, proto_imm_encode(PROTO_IMM_DATA, n),
				  n <= t->max_inline ? PW_INLINE : 0);
	}
	return r;
}

/* tp_send past its small message's fast path: the loop, which posts, waits
 * and handles every error. Called with t->lock held; unlocks it. */
static RSOCK_NOINLINE ssize_t send_locked(struct tp *t, const struct iovec *iov, int iovcnt,
					  int flags, int nonblock)
{
	size_t want = tp_iov_total(iov, iovcnt), done = 0;
	ssize_t r = 0;
	struct send_wait sw = {0, 0, 0};
	struct zc_span zc = {.off = SIZE_MAX};

	nonblock |= !!(flags & MSG_DONTWAIT);
	while (done < want) {
		uint32_t n;

		tp_progress(t);
		/* The peer closed its side: once its control connection is gone
		 * too, the kernel socket answers (TCP's EPIPE/RST dance). */
		if (t->eof && !t->peer_gone)
			tp_check_control(t);
		if (tp_switched(t)) { /* the peer moved the stream to TCP meanwhile */
			if (done)
				done += tp_sw_send_rest(t, iov, iovcnt, done, flags);
			else
				r = -ESHUTDOWN;
			break;
		}
		if (t->err && t->err != -EPIPE) {
			r = t->err; /* a reset, also of a peer gone (tp_check_control) */
			break;
		}
		if (t->peer_gone || t->err) {
			r = -ESHUTDOWN; /* let the kernel socket answer */
			break;
		}
		/* A long span of one buffer goes out without the copy
		 * (doc/design.md, "Wire protocol"): registered for this call. */
		if (zc.mr && done >= zc.end && want - done > TP_MAX_CHUNK)
			tp_zc_end(t, &zc); /* the next element, or the next span */
		if (!zc.mr && zc.off != done && !nonblock)
			tp_zc_begin(t, &zc, iov, iovcnt, done, want);
		int from_zc = zc.mr && done < zc.end;
		/* A failover under way: no room until the stream is on TCP. */
		n = RSOCK_UNLIKELY(t->path_down) ? 0 : tp_send_room(t, from_zc ? zc.end - done : want - done, from_zc);
		if (!n) {
			int w;
			tp_pub_credits(t); /* rsock-stat's credits: as the sender blocks */
			if (nonblock || (w = send_wait(t, &sw)) == -EAGAIN)
				break;
			if (w == -EINTR) {
				r = -EINTR; /* what was sent, else EINTR, as TCP */
				break;
			}
			continue;
		}
		const uint8_t *src = NULL;
		r = send_post(t, iov, iovcnt, done, n, from_zc ? &zc : NULL, &src);
		if (r && r != -ESHUTDOWN) {
			/* Not posted: take the reservation back, and let TCP
			 * carry these bytes once the stream has moved (the
			 * credentials changed, or the path broke: a failover). */
			t->peer.tail -= n;
			if (!from_zc)
				t->tx.tail -= n;
			if (r != -EACCES) {
				tp_fail(t, -ECONNRESET, "posting a send failed", TP_FAIL_PATH);
				tp_failover_due(t);
			}
			if (r == -EACCES ? tp_creds_lost(t) : tp_switched(t)) {
				if (done)
					done += tp_sw_send_rest(t, iov, iovcnt, done, flags);
				else
					r = -ESHUTDOWN;
				break;
			}
			if (t->path_down && !t->err) {
				r = 0; /* a failover under way: the loop waits for it */
				continue;
			}
		}
		if (r == -ESHUTDOWN) {
			t->err = (int)r;
			break;
		}
		if (r) {
			tp_fail(t, -ECONNRESET, "posting a send failed", TP_FAIL_PROTO);
			r = t->err ? t->err : -ECONNRESET;
			break;
		}
		tp_data_msg_posted(t, src);
		/* (The tests read message sizes from these lines.) */
		log_trace("fd %d: data message of %u bytes%s", t->tcp_fd, n,
			  from_zc ? ", sent without the copy" : n <= t->max_inline ? ", inline" : "");
		done += n;
	}
	tp_zc_end(t, &zc);
	if (!done && r && r == t->err && r != -EPIPE && r != -ESHUTDOWN)
		r = tp_err_report(t, 1); /* (after bytes sent, the next call's) */
	mtx_unlock(&t->lock);
	if (done)
		return (ssize_t)done;
	if (r)
		return r;
	return want ? -EAGAIN : 0;
}

ssize_t tp_send(struct tp *t, const struct iovec *iov, int iovcnt, int flags, int nonblock)
{
	ssize_t r;
	size_t want;

	if (RSOCK_UNLIKELY(t->owner != rsock_pid() || tp_switched(t)))
		return tp_sw_enter(t) ? -EIO : -ESHUTDOWN; /* the kernel socket sends */
	mtx_lock(&t->lock);
	if (RSOCK_UNLIKELY((r = tp_switched(t) ? -ESHUTDOWN : t->fin_sent ? -EPIPE : 0))) {
		mtx_unlock(&t->lock);
		return r;
	}
	t->sink_waits = 0; /* it sends: its reads wait for answers */
	if (iovcnt == 1 && (want = iov->iov_len) && want <= t->max_inline && !(flags & MSG_OOB) &&
	    send_small(t, iov->iov_base, (uint32_t)want)) {
		mtx_unlock(&t->lock);
		return (ssize_t)want;
	}
	return send_locked(t, iov, iovcnt, flags, nonblock);
}
