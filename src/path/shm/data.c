/* data.c - the same-host path's reads, writes and readiness, with TCP's
 * answers (doc/design.md, "The same-host path"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"
#include "path/prefix.h"
#include "path/rdma/transport.h"
#include "path/shm/internal.h"

static size_t iov_total(const struct iovec *iov, int n)
{
	size_t t = 0;

	for (int i = 0; i < n; i++)
		t += iov[i].iov_len;
	return t;
}

/* A corrupt index: the stream ends with ECONNRESET. Caller holds the lock. */
static int corrupt(struct shm_stream *st)
{
	if (!st->err) {
		log_warn_rl("shm: the peer wrote an impossible ring index: the stream is reset");
		st->err = -ECONNRESET;
	}
	return st->err;
}

#define SHM_SPILL_MAX (8u << 20)    /* the spill's bytes at most */
#define SHM_SPILL_AFTER_NS 20000000 /* a blocked writer spills after 20 ms */

int64_t shm_unread(struct shm_stream *st)
{
	int64_t a = shm_rx_avail(&st->rx);

	return a < 0 ? a : a + (int64_t)st->spill_len;
}

/* Copy len unread bytes from offset skip (the spill's first, then the
 * ring's) to p (NULL: none). */
static void unread_peek(struct shm_stream *st, char *p, size_t skip, size_t len)
{
	if (skip < st->spill_len) {
		size_t k = st->spill_len - skip < len ? st->spill_len - skip : len;
		if (p)
			memcpy(p, st->spill + st->spill_off + skip, k);
		p = p ? p + k : NULL;
		len -= k;
		skip = st->spill_len;
	}
	if (len)
		shm_rx_peek(&st->rx, p, skip - st->spill_len, len);
}

/* Consume n unread bytes: the spill's first, then the ring's (the peer
 * told of the room). */
static void unread_consume(struct shm_stream *st, size_t n)
{
	size_t k = n < st->spill_len ? n : st->spill_len;

	st->spill_off += k;
	st->spill_len -= k;
	if (!st->spill_len)
		st->spill_off = 0;
	if (n > k) {
		shm_rx_consume(&st->rx, n - k);
		shm_ring_peer(st); /* room for a writer that waits */
	}
}

/* Lest two ends each blocked writing into a full ring wait for ever (TCP's
 * larger buffers may hold what the rings cannot), a writer that waited 20
 * ms moves its own ring's unread bytes into the spill (at most 8 MiB):
 * the peer gets room. 1 when it took some. Caller holds the lock. */
static int spill_take(struct shm_stream *st)
{
	int64_t a = shm_rx_avail(&st->rx);
	size_t need;

	if (a <= 0 || st->spill_len + (size_t)a > SHM_SPILL_MAX)
		return 0;
	if (st->spill_off) {
		memmove(st->spill, st->spill + st->spill_off, st->spill_len);
		st->spill_off = 0;
	}
	need = st->spill_len + (size_t)a;
	if (need > st->spill_cap) {
		size_t cap = st->spill_cap ? st->spill_cap : 65536;
		while (cap < need)
			cap *= 2;
		uint8_t *n = realloc(st->spill, cap);
		if (!n)
			return 0;
		st->spill = n;
		st->spill_cap = cap;
	}
	shm_rx_peek(&st->rx, st->spill + st->spill_len, 0, (size_t)a);
	st->spill_len += (size_t)a;
	shm_rx_consume(&st->rx, (size_t)a);
	shm_ring_peer(st);
	return 1;
}

/* Copy n readable bytes, from skip on, into iov at byte position at
 * (trunc: copy nothing). */
static void copy_out(struct shm_stream *st, const struct iovec *iov, int iovcnt, size_t at,
		     size_t skip, size_t n, int trunc)
{
	for (int i = 0; i < iovcnt && n; i++) {
		size_t l = iov[i].iov_len;
		if (at >= l) {
			at -= l;
			continue;
		}
		size_t k = l - at < n ? l - at : n;
		if (!trunc)
			unread_peek(st, (char *)iov[i].iov_base + at, skip, k);
		skip += k;
		n -= k;
		at = 0;
	}
}

/* Copy n bytes of iov from byte position at into the ring. */
static void copy_in(struct shm_stream *st, const struct iovec *iov, int iovcnt, size_t at, size_t n)
{
	for (int i = 0; i < iovcnt && n; i++) {
		size_t l = iov[i].iov_len;
		if (at >= l) {
			at -= l;
			continue;
		}
		size_t k = l - at < n ? l - at : n;
		shm_tx_put(&st->tx, (const char *)iov[i].iov_base + at, k);
		n -= k;
		at = 0;
	}
}

/* The reader's end once the ring is empty: 0 (EOF), -ECONNRESET (once),
 * or 1 (not ended). Caller holds the lock. */
static int rx_end(struct shm_stream *st)
{
	uint32_t f = shm_rx_flags(&st->rx);

	if (st->rd_shut)
		return 0;
	if ((f & SHM_F_RESET) || (st->peer_gone && !(f & SHM_F_FIN) &&
				  (shm_tx_room(&st->tx), shm_tx_unread(&st->tx)))) {
		/* A reset, or a peer that died with our bytes unread (its
		 * kernel would have answered them with a reset; its head read
		 * afresh, not as the last send saw it): TCP reports it once,
		 * then end of file. */
		if (st->reset_told)
			return 0;
		st->reset_told = 1;
		return -ECONNRESET;
	}
	if ((f & SHM_F_FIN) || st->peer_gone)
		return 0;
	return 1;
}

int shm_sock_error(struct shm_stream *st)
{
	int e = 0;

	if (st->owner != rsock_pid())
		return 0; /* the kernel socket's own */
	pthread_mutex_lock(&st->lock);
	shm_pending_resolve(st);
	shm_follow(st);
	atomic_store_explicit(&st->ctl_dirty, 0, memory_order_relaxed);
	shm_check_live(st); /* (a peer gone is seen there) */
	if (!st->err && !atomic_load_explicit(&st->sw, memory_order_relaxed) && rx_end(st) < 0)
		e = ECONNRESET;
	pthread_mutex_unlock(&st->lock);
	return e;
}

/* A read of the TCP connection (the peer moved there), lock not held: the
 * peer's switch message first, which a blocking read waits for (the
 * socket's time-out and TCP's signal rule apply as to the read). */
static ssize_t kernel_recv(struct shm_stream *st, const struct iovec *iov, int iovcnt, int flags,
			   int nonblock)
{
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
	int64_t deadline = -1;
	ssize_t r;

	while (!(flags & MSG_OOB) && !atomic_load_explicit(&st->marker_in, memory_order_acquire)) {
		pthread_mutex_lock(&st->lock);
		int t = shm_marker_take(st);
		pthread_mutex_unlock(&st->lock);
		if (t < 0)
			return t;
		if (t)
			break;
		if (nonblock)
			return -EAGAIN;
		if (deadline < 0)
			deadline = shm_deadline(st, SO_RCVTIMEO);
		struct pollfd p = {.fd = st->tcp_fd, .events = POLLIN};
		int left = -1;
		if (deadline) {
			int64_t l = deadline - clock_now_ns();
			if (l <= 0)
				return -EAGAIN;
			left = (int)((l + 999999) / 1000000);
		}
		if (rsock_real.poll(&p, 1, left) < 0 && errno == EINTR && tp_intr_fails(deadline))
			return -EINTR;
	}
	r = rsock_real.recvmsg(st->tcp_fd, &m, flags | (nonblock ? MSG_DONTWAIT : 0));
	return r < 0 ? -errno : r;
}

ssize_t shm_recv(struct shm_stream *st, const struct iovec *iov, int iovcnt, int flags,
		 int nonblock)
{
	size_t total = iov_total(iov, iovcnt), copied = 0, target;
	int peek = flags & MSG_PEEK, trunc = flags & MSG_TRUNC, waitall = flags & MSG_WAITALL;
	int64_t deadline = -1;
	ssize_t r;

	if (st->owner != rsock_pid())
		return shm_child_recv(st, iov, iovcnt, flags, nonblock | !!(flags & MSG_DONTWAIT));
	nonblock |= !!(flags & MSG_DONTWAIT);
	/* Urgent data exists only in TCP; the kernel says whether there is. */
	if (flags & MSG_OOB)
		return kernel_recv(st, iov, iovcnt, flags, nonblock);
	/* After a hand-over the ring's unread bytes are in the prefix. */
	if (st->pre && ho_pre_left(st->pre) && total)
		return (ssize_t)ho_pre_read(st->pre, iov, iovcnt, 0, total, flags);
	pthread_mutex_lock(&st->lock);
	if (atomic_exchange_explicit(&st->ctl_dirty, 0, memory_order_relaxed))
		shm_check_live(st);
	shm_pending_resolve(st);
	shm_follow(st);
	/* TCP returns once it has target bytes: all with MSG_WAITALL, else
	 * SO_RCVLOWAT (at least one, at most what was asked). */
	target = (size_t)atomic_load_explicit(&st->rcvlowat, memory_order_relaxed);
	if (waitall || target > total)
		target = total;
	if (!target)
		target = 1;
	for (;;) {
		int64_t a = shm_unread(st);
		if (a < 0) {
			r = copied ? (ssize_t)copied : corrupt(st);
			break;
		}
		if (!total) {
			r = 0;
			break;
		}
		if (peek) {
			/* A peek copies from the head each time: it returns once
			 * target bytes are there, or at the end. */
			size_t n = (size_t)a < total ? (size_t)a : total;
			if (n >= target || (n && (nonblock || rx_end(st) != 1))) {
				copy_out(st, iov, iovcnt, 0, 0, n, trunc);
				r = (ssize_t)n;
				break;
			}
		} else if (a) {
			size_t n = (size_t)a < total - copied ? (size_t)a : total - copied;
			copy_out(st, iov, iovcnt, copied, 0, n, trunc);
			unread_consume(st, n);
			copied += n;
			if (copied >= target) {
				r = (ssize_t)copied;
				break;
			}
			continue;
		}
		if (st->err) {
			r = copied ? (ssize_t)copied : st->err;
			break;
		}
		/* The peer's switch and its end are looked at after the ring:
		 * it may have written its last bytes, then switched or ended,
		 * in between (two stores of its, two loads of ours), so the
		 * ring is looked at again once either is seen. */
		int late = fault_at(FAULT_SHM_END_LATE);
		if (late)
			rsock_real.poll(NULL, 0, late);
		int psw = shm_peer_switched(st);
		if (psw && shm_unread(st) != a)
			continue;
		if (psw) {
			/* The ring is read to its end: the TCP connection has
			 * the rest (its end, its reset, its time-outs); a peek
			 * short of its target returns what the ring had. */
			size_t n = peek ? ((size_t)a < total ? (size_t)a : total) : 0;
			if (n)
				copy_out(st, iov, iovcnt, 0, 0, n, trunc);
			pthread_mutex_unlock(&st->lock);
			return copied || n ? (ssize_t)(copied + n)
					   : kernel_recv(st, iov, iovcnt, flags, nonblock);
		}
		int e = rx_end(st);
		if (e != 1 && shm_unread(st) != a) {
			if (e < 0)
				st->reset_told = 0; /* reported after those bytes */
			continue;
		}
		if (e != 1) {
			r = copied ? (ssize_t)copied : e;
			if (copied && e < 0)
				st->reset_told = 0; /* reported at the next read */
			break;
		}
		if (nonblock) {
			r = copied ? (ssize_t)copied : -EAGAIN;
			break;
		}
		if (deadline < 0)
			deadline = shm_deadline(st, SO_RCVTIMEO);
		int w = shm_sleep(st, deadline);
		if (w == -ETIMEDOUT) {
			r = copied ? (ssize_t)copied : -EAGAIN;
			break;
		}
		if (w == -EINTR && (copied || tp_intr_fails(deadline))) {
			r = copied ? (ssize_t)copied : -EINTR;
			break;
		}
		if (atomic_exchange_explicit(&st->ctl_dirty, 0, memory_order_relaxed))
			shm_check_live(st);
		shm_follow(st);
	}
	pthread_mutex_unlock(&st->lock);
	return r;
}

/* The peer reads no more (closed, reset, its process gone): the kernel
 * socket answers a write as TCP does (EPIPE, SIGPIPE, ECONNRESET). */
static int tx_ended(struct shm_stream *st)
{
	return st->peer_gone || (shm_rx_flags(&st->rx) & (SHM_F_CLOSED | SHM_F_RESET));
}

ssize_t shm_send(struct shm_stream *st, const struct iovec *iov, int iovcnt, int flags,
		 int nonblock)
{
	size_t total = iov_total(iov, iovcnt), sent = 0;
	int64_t deadline = -1, spill_at = 0;
	ssize_t r;

	if (st->owner != rsock_pid())
		return shm_child_enter(st) ? -EIO : -ESHUTDOWN; /* the kernel socket sends */
	nonblock |= !!(flags & MSG_DONTWAIT);
	pthread_mutex_lock(&st->lock);
	if (atomic_exchange_explicit(&st->ctl_dirty, 0, memory_order_relaxed))
		shm_check_live(st);
	shm_pending_resolve(st);
	for (;;) {
		shm_follow(st);
		if (atomic_load_explicit(&st->sw, memory_order_relaxed)) {
			r = sent ? (ssize_t)sent : -ESHUTDOWN; /* the kernel socket sends */
			break;
		}
		if (st->wr_shut) {
			r = sent ? (ssize_t)sent : -EPIPE;
			break;
		}
		if (st->err) {
			r = sent ? (ssize_t)sent : st->err;
			break;
		}
		if (tx_ended(st)) {
			r = sent ? (ssize_t)sent : -ESHUTDOWN;
			break;
		}
		int64_t room = shm_tx_room(&st->tx);
		if (room < 0) {
			r = sent ? (ssize_t)sent : corrupt(st);
			break;
		}
		if (sent == total) {
			r = (ssize_t)sent;
			break;
		}
		if (room) {
			size_t n = (size_t)room < total - sent ? (size_t)room : total - sent;
			copy_in(st, iov, iovcnt, sent, n);
			sent += n;
			shm_ring_peer(st);
			continue;
		}
		if (nonblock) {
			r = sent ? (ssize_t)sent : -EAGAIN;
			break;
		}
		if (deadline < 0) {
			deadline = shm_deadline(st, SO_SNDTIMEO);
			spill_at = clock_now_ns() + SHM_SPILL_AFTER_NS;
		}
		/* While its own ring holds unread bytes, the wait ends at the
		 * spill's time too. */
		int64_t until = deadline;
		if (spill_at && shm_rx_avail(&st->rx) > 0 && (!until || spill_at < until))
			until = spill_at;
		int w = shm_sleep(st, until);
		if (w == -ETIMEDOUT && until != deadline) {
			if (!spill_take(st))
				spill_at = 0; /* full: wait as TCP's writer would */
			continue;
		}
		if (w == -ETIMEDOUT) {
			r = sent ? (ssize_t)sent : -EAGAIN;
			break;
		}
		if (w == -EINTR && (sent || tp_intr_fails(deadline))) {
			r = sent ? (ssize_t)sent : -EINTR;
			break;
		}
		if (atomic_exchange_explicit(&st->ctl_dirty, 0, memory_order_relaxed))
			shm_check_live(st);
	}
	pthread_mutex_unlock(&st->lock);
	return r;
}

/* Readiness once a side moved to TCP: the ring's (and prefix's) bytes, then
 * the kernel socket's; writes are the kernel's. Caller holds the lock. */
static short switched_ready(struct shm_stream *st, int64_t a)
{
	struct pollfd p = {.fd = st->tcp_fd, .events = POLLIN | POLLOUT | POLLPRI | POLLRDHUP};
	short ev = 0, k;

	if (rsock_real.poll(&p, 1, 0) != 1)
		p.revents = 0;
	k = p.revents;
	if (a > 0 || (st->pre && ho_pre_left(st->pre)))
		ev |= POLLIN | POLLRDNORM;
	if (shm_peer_switched(st) && shm_marker_take(st) == 1)
		ev |= k & (POLLIN | POLLRDNORM | POLLRDHUP | POLLHUP | POLLERR);
	else if (st->err)
		ev |= POLLIN | POLLRDNORM | POLLERR | POLLHUP;
	else if ((shm_rx_flags(&st->rx) & (SHM_F_FIN | SHM_F_RESET)) || st->peer_gone)
		ev |= POLLIN | POLLRDNORM | POLLRDHUP; /* the ring's end */
	ev |= k & POLLPRI;
	if (atomic_load_explicit(&st->sw, memory_order_relaxed))
		ev |= k & (POLLOUT | POLLWRNORM | POLLERR | POLLHUP);
	return ev;
}

short shm_ready_locked(struct shm_stream *st)
{
	short ev = 0;
	int64_t a = shm_unread(st), room = shm_tx_room(&st->tx);
	uint32_t f = shm_rx_flags(&st->rx);
	int ended;

	if (a < 0 || room < 0)
		corrupt(st);
	shm_pending_resolve(st);
	shm_follow(st);
	if (!st->err && atomic_load_explicit(&st->sw, memory_order_relaxed))
		return switched_ready(st, a);
	if (st->err || (f & SHM_F_RESET) ||
	    (st->peer_gone && !(f & SHM_F_FIN) && shm_tx_unread(&st->tx)))
		/* a reset's error told (rx_end), as TCP's: no POLLERR after */
		return POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLHUP | POLLRDHUP |
		       (st->err || !st->reset_told ? POLLERR : 0);
	ended = st->rd_shut || (f & SHM_F_FIN) || st->peer_gone;
	if ((a > 0 && a >= atomic_load_explicit(&st->rcvlowat, memory_order_relaxed)) || ended)
		ev |= POLLIN | POLLRDNORM;
	if (ended)
		ev |= POLLRDHUP;
	if (ended && st->wr_shut)
		ev |= POLLHUP;
	if ((f & SHM_F_CLOSED) || st->peer_gone) {
		/* A write after the peer's close went to the kernel socket,
		 * whose reset TCP reports as a hang-up and an error. */
		struct pollfd p = {.fd = st->tcp_fd, .events = 0};
		if (rsock_real.poll(&p, 1, 0) == 1)
			ev |= p.revents & (POLLHUP | POLLERR);
	}
	/* Writable as TCP counts it: a third of the ring free (see the RDMA
	 * path's ready.c); or a write would not wait (shut, peer gone). */
	if (st->wr_shut || tx_ended(st) || room >= st->tx.size / 3)
		ev |= POLLOUT | POLLWRNORM;
	return ev;
}
