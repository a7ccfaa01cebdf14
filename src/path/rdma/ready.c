/* ready.c - readiness for poll and epoll, and the bytes readable
 * (doc/design.md, "Readiness"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <sys/ioctl.h>

#include "base/proc.h"
#include "base/real.h"
#include "path/handover.h"
#include "path/rdma/internal.h"

/* Writable as kernel TCP counts it (sk_stream_is_writeable: a third of
 * the send buffer free): a third of the peer's ring and of the message
 * allowance, and a message's room now. With any room at all counting, an
 * application that writes 8 KiB on a blocking socket after poll() said
 * POLLOUT blocked with 4 KiB of room, where TCP never blocks it; relays
 * whose ends all did that (socat on both sides of haproxy) stopped for good,
 * each blocked in a write to a peer blocked in its own (streamcheck scenario
 * 16). A reader that has read everything leaves the sender 3/4 of the ring
 * and half the messages (maybe_credit), so this never waits on a reader
 * that is done. Caller holds the lock. */
static int writable_locked(struct tp *t)
{
	return !t->path_down && ring_remote_space(&t->peer) >= t->peer.size / 3 &&
	       t->msg_count + TP_MAX_DATA_MSGS / 3 <= TP_MAX_DATA_MSGS && tp_send_room(t, 1, 0);
}

/* Readiness of t; caller holds the lock. */
static short ready_locked(struct tp *t)
{
	short ev = 0;
	uint64_t u = tp_unread(t);

	if (u && u < (uint64_t)atomic_load_explicit(&t->rcvlowat, memory_order_relaxed)) {
		tp_lowat_wait_prep(t); /* SO_RCVLOWAT: not readable yet (tp_recv) */
		u = 0;
	}
	if (u || tp_rx_ended(t))
		ev |= POLLIN | POLLRDNORM;
	if (t->eof || t->peer_gone || t->rd_shut)
		ev |= POLLRDHUP;
	if (t->err && t->err != -EPIPE) /* a reset shuts both directions, its error told once */
		ev |= (t->err_told ? 0 : POLLERR) | POLLHUP | POLLRDHUP;
	else if ((t->eof || t->peer_gone) && t->fin_sent)
		ev |= POLLHUP;
	if (t->fin_sent || t->peer_gone || t->err || writable_locked(t))
		ev |= POLLOUT | POLLWRNORM;
	return ev;
}

short tp_poll_events(struct tp *t)
{
	return tp_ready(t, 0, NULL);
}

short tp_ready(struct tp *t, int do_arm, uint64_t *seq)
{
	short ev;

	if (RSOCK_UNLIKELY(t->owner != rsock_pid() || tp_switched(t))) {
		if (tp_sw_enter(t)) {
			if (seq)
				*seq = 0;
			return POLLERR | POLLHUP;
		}
		return tp_sw_ready(t, seq);
	}
	mtx_lock(&t->lock);
	tp_progress(t);
	/* The control connection is looked at (a syscall) only when a waiter
	 * saw it readable: nothing but FIN, RST or SWITCH ever comes on it. */
	if (atomic_exchange_explicit(&t->ctl_dirty, 0, memory_order_relaxed))
		tp_check_control(t);
	if (tp_switched(t)) {
		mtx_unlock(&t->lock);
		return tp_sw_ready(t, seq);
	}
	ev = ready_locked(t);
	if (do_arm && !atomic_load_explicit(&t->armed, memory_order_relaxed)) {
		/* Arm, then look again: a completion that came before the
		 * arming raised no event. */
		int rc = tp_arm(t);
		if (rc == -EACCES && tp_creds_lost(t)) {
			mtx_unlock(&t->lock);
			return tp_sw_ready(t, seq);
		}
		if (rc)
			tp_fail(t, -ECONNRESET, "arming the completion queue failed", TP_FAIL_PATH);
		if (tp_progress(t) || rc)
			ev = ready_locked(t);
		if (tp_switched(t)) { /* failed over */
			mtx_unlock(&t->lock);
			return tp_sw_ready(t, seq);
		}
	}
	if (seq)
		*seq = atomic_load_explicit(&t->evseq, memory_order_relaxed);
	mtx_unlock(&t->lock);
	return ev;
}

int tp_sock_error(struct tp *t)
{
	int e = 0;

	if (t->owner != rsock_pid() || tp_switched(t))
		return 0; /* the kernel socket's own */
	mtx_lock(&t->lock);
	tp_progress(t);
	atomic_store_explicit(&t->ctl_dirty, 0, memory_order_relaxed);
	tp_check_control(t); /* (a peer gone, its reset, is seen there) */
	if (!tp_switched(t) && t->err && t->err != -EPIPE && !t->err_told)
		e = -tp_err_report(t, 0);
	mtx_unlock(&t->lock);
	return e;
}

int tp_readable_bytes(struct tp *t)
{
	uint64_t n;

	if (t->owner != rsock_pid() || tp_switched(t)) {
		int k = 0;
		if (tp_sw_enter(t))
			return 0;
		rsock_real.ioctl(t->tcp_fd, FIONREAD, &k);
		n = ho_pre_left(t->pre) + (uint64_t)(k > 0 ? k : 0);
		return n > INT32_MAX ? INT32_MAX : (int)n;
	}
	mtx_lock(&t->lock);
	tp_progress(t);
	n = tp_unread(t);
	mtx_unlock(&t->lock);
	if (tp_switched(t)) /* failed over meanwhile */
		return tp_readable_bytes(t);
	return n > INT32_MAX ? INT32_MAX : (int)n;
}
