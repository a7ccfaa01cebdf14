/* recv.c - tp_recv: reading the spill and the receive ring, crediting
 * what was read, and waiting (doc/design.md, "Wire protocol"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <sys/socket.h>

#include "base/proc.h"
#include "base/real.h"
#include "path/rdma/internal.h"

/* Whether an empty non-blocking read should look at the control connection
 * (a syscall): when a waiter saw it readable, and at least every 10 ms for
 * applications that never wait. Caller holds the lock. */
static int control_due(struct tp *t)
{
	int64_t now;

	if (atomic_exchange_explicit(&t->ctl_dirty, 0, memory_order_relaxed))
		return 1;
	now = clock_coarse_ms();
	if (now - t->ctl_last_ms < 10)
		return 0;
	t->ctl_last_ms = now;
	return 1;
}

/* Copy from the receive ring into iov starting at byte `skip` of iov. */
static size_t ring_to_iov(const struct ring *r, const struct iovec *iov, int iovcnt, size_t skip,
			  size_t max)
{
	struct iovec tmp[64];
	int n = 0;

	for (int i = 0; i < iovcnt && n < (int)RSOCK_ARRAY_SIZE(tmp); i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		tmp[n].iov_base = (uint8_t *)iov[i].iov_base + skip;
		tmp[n].iov_len = iov[i].iov_len - skip;
		skip = 0;
		n++;
	}
	return ring_peek_iov(r, tmp, n, max);
}

/* Copy unread bytes (the spill's, then the ring's) into iov from byte `skip`
 * of iov, at most max; returns the count. */
static size_t unread_to_iov(struct tp *t, const struct iovec *iov, int iovcnt, size_t skip, size_t max)
{
	size_t k = 0;

	if (iovcnt == 1 && !ring_used(&t->spill) && skip <= iov->iov_len) {
		/* one buffer (read, recv): no vector to build */
		size_t room = iov->iov_len - skip;
		return ring_peek(&t->rx, (uint8_t *)iov->iov_base + skip, room < max ? room : max);
	}
	if (ring_used(&t->spill))
		k = ring_to_iov(&t->spill, iov, iovcnt, skip, max);
	if (k < max && k == ring_used(&t->spill))
		k += ring_to_iov(&t->rx, iov, iovcnt, skip + k, max - k);
	return k;
}

/* A blocking read's SO_RCVTIMEO deadline, set at its first wait. */
struct recv_wait {
	int64_t deadline;
	int deadline_set;
};

/* One wait of a blocking read that has nothing to return yet. Returns 1
 * when the wait took the completions off the queue itself, 0 to look
 * again, -EAGAIN when SO_RCVTIMEO has passed (no wait then), -EINTR when a
 * signal interrupted it and the call fails. Caller holds the lock. */
static int recv_wait(struct tp *t, struct recv_wait *rw)
{
	int sink, w;

	/* SO_RCVTIMEO: what MSG_WAITALL got, else EAGAIN, as TCP */
	if (!rw->deadline_set) {
		rw->deadline = tp_timeo_deadline(t, SO_RCVTIMEO);
		rw->deadline_set = 1;
	}
	if (tp_timed_out(rw->deadline))
		return -EAGAIN;
	if (tp_unread(t))
		tp_lowat_wait_prep(t);
	sink = tp_sink_note(&t->sink_waits, t->rx.head - t->sink_mark);
	t->sink_mark = t->rx.head;
	w = tp_wait_event(t, rw->deadline, sink);
	if (w == -EINTR && !tp_intr_fails(rw->deadline))
		return 0;
	return w;
}

ssize_t tp_recv(struct tp *t, const struct iovec *iov, int iovcnt, int flags, int nonblock)
{
	size_t want = tp_iov_total(iov, iovcnt), done = 0, target;
	ssize_t r = 0;
	struct recv_wait rw = {0, 0};
	int polled = 0;

	if (!want)
		return 0;
	if (RSOCK_UNLIKELY(flags & MSG_OOB)) {
		/* Urgent data travels only on the kernel socket (a sender moves
		 * the stream to TCP first), out of band: it answers, the urgent
		 * byte or EINVAL when there is none, whatever the stream's
		 * in-band bytes are doing. */
		struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
		ssize_t n = rsock_real.recvmsg(t->tcp_fd, &m, flags);
		return n < 0 ? -errno : n;
	}
	if (RSOCK_UNLIKELY(t->owner != rsock_pid() || tp_switched(t)))
		return tp_sw_enter(t) ? -EIO : tp_sw_recv(t, iov, iovcnt, 0, flags);
	nonblock |= !!(flags & MSG_DONTWAIT);
	/* as tcp_recvmsg: MSG_WAITALL wants all, else SO_RCVLOWAT (at least 1) */
	target = flags & MSG_WAITALL ? want
				     : (size_t)atomic_load_explicit(&t->rcvlowat, memory_order_relaxed);
	if (target > want)
		target = want;
	mtx_lock(&t->lock);
	for (;;) {
		/* Not again right after a wait that took the completions: the
		 * event that ended a spin is read at once (a poll of the queue
		 * is about a hundred instructions of the provider's). */
		if (!polled)
			tp_progress(t);
		polled = 0;
		if (tp_switched(t)) {
			/* Moved to TCP meanwhile: the rest comes from there. */
			mtx_unlock(&t->lock);
			if (done && (!(flags & MSG_WAITALL) || (flags & MSG_PEEK)))
				return (ssize_t)done;
			r = tp_sw_recv(t, iov, iovcnt, done, flags);
			return r < 0 ? (done ? (ssize_t)done : r) : (ssize_t)done + r;
		}
		/* A peek copies from the first unread byte each time: it waits
		 * until the target is there (or nothing more can come). */
		if (tp_unread(t) &&
		    (!(flags & MSG_PEEK) || tp_unread(t) >= target || nonblock || tp_rx_ended(t))) {
			/* MSG_TRUNC: TCP discards (or, with MSG_PEEK, counts)
			 * without touching the buffer, which may be NULL */
			size_t n = flags & MSG_TRUNC ? (tp_unread(t) < want - done ? (size_t)tp_unread(t) : want - done)
						     : unread_to_iov(t, iov, iovcnt, done, want - done);
			if (flags & MSG_PEEK) {
				done += n;
				break;
			}
			tp_unread_consume(t, n);
			done += n;
			tp_maybe_credit(t);
			if (done >= target)
				break;
			continue;
		}
		if (t->err && t->err != -EPIPE && !t->err_told) {
			if (!done) /* (else the next call's; the end of the stream after it) */
				r = tp_err_report(t, 0);
			break;
		}
		if (tp_rx_ended(t))
			break; /* end of stream (or of our reading) */
		/* No credit here: the thresholds of tp_maybe_credit() leave the
		 * sender at least 3/4 of the ring and half the messages whenever
		 * we have read everything (doc/design.md, "Wire protocol"), and a credit
		 * per empty read would wake the peer for nothing. */
		if (nonblock) {
			if (control_due(t)) {
				tp_check_control(t);
				if (t->peer_gone || t->err || tp_switched(t))
					continue;
			}
			r = -EAGAIN;
			break;
		}
		int w = recv_wait(t, &rw);
		polled = w == 1;
		if (w < 0) {
			if (tp_unread(t)) { /* a peek short of SO_RCVLOWAT: what is there, as TCP */
				nonblock = 1;
				continue;
			}
			r = w; /* what MSG_WAITALL got, else EAGAIN or EINTR, as TCP */
			break;
		}
	}
	mtx_unlock(&t->lock);
	if (done)
		return (ssize_t)done;
	return r;
}
