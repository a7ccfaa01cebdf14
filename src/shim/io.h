/* shim/io.h - what the data wrappers (io.c) and the sendfile and splice
 * wrappers (splice.c) share: the dispatcher that says whether a descriptor's
 * stream is on a path (io_begin), the checks of a call's buffers as the
 * kernel makes them, a send and a receive on a path, and the shape of every
 * data wrapper (IO_SHIM). Included by those two files only. */
#ifndef RSOCK_SHIM_IO_H
#define RSOCK_SHIM_IO_H

#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shim/shim.h"

#include "negotiate/cm.h"
#include "base/clock.h"
#include "base/log.h"
#include "path/path.h"

/* ---- the dispatcher --------------------------------------------------------- */

/* Look fd up. Returns the path of an RDMA stream, or NULL for kernel
 * TCP (then *c may still be a tracked conn, for the counters; a receive
 * checks it for a late negotiation message first, io_stale_wait). */
static RSOCK_MAYBE_UNUSED struct path_stream *io_begin(int fd, struct conn **cp)
{
	struct conn *c = shim_conn(fd);

	*cp = c;
	if (!c)
		return NULL;
	conn_settle_maybe(c, fd);
	if (atomic_load_explicit(&c->path, memory_order_acquire) != CONN_PATH_RDMA)
		return NULL;
	return c->stream;
}

/* A receive on a TCP stream at whose head a late negotiation message may
 * still arrive (conn.h's stale: the handshake gave up waiting, over a cut
 * wire say): the kernel's read could return it as data. It is dropped if
 * it is there; until it, other bytes or the end arrive there is nothing for
 * the application: a non-blocking call (O_NONBLOCK, MSG_DONTWAIT) fails with
 * EAGAIN, as TCP's with nothing to read, and a blocking one waits as the
 * kernel's read would (SO_RCVTIMEO, then EAGAIN; a signal: EINTR). 0: go on
 * to the kernel's read; -1 with errno: the call's result.
 * Bytes that begin like the message and are not followed by its rest within
 * CM_STALE_PARTIAL_MS are the application's (a non-blocking call waits that
 * long too). */
static RSOCK_MAYBE_UNUSED RSOCK_COLD int io_stale_wait(struct conn *c, int fd, int flags)
{
	int64_t deadline = -1, partial = -1;

	for (;;) {
		pthread_mutex_lock(&c->lock);
		int st = atomic_load(&c->stale);
		int r = cm_drop_stale(fd, &st);
		if (r && r != -EAGAIN && r != -EINPROGRESS)
			st = CM_STALE_NONE, r = 0; /* the socket's error: the read reports it */
		if (r == -EINPROGRESS) {
			if (partial < 0)
				partial = clock_now_ms() + CM_STALE_PARTIAL_MS;
			else if (!clock_left_ms(partial))
				st = CM_STALE_NONE, r = 0; /* the application's bytes */
		}
		atomic_store(&c->stale, st);
		pthread_mutex_unlock(&c->lock);
		if (!r)
			return 0;
		if (r == -EINPROGRESS) { /* its beginning: the rest is on its way */
			usleep(200);
			continue;
		}
		if ((flags & MSG_DONTWAIT) || atomic_load(&c->nonblock)) {
			errno = EAGAIN;
			return -1;
		}
		if (deadline < 0) {
			struct timeval tv = {0};
			socklen_t tl = sizeof(tv);
			rsock_real.getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl);
			deadline = tv.tv_sec || tv.tv_usec
					   ? clock_now_ms() + tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000
					   : INT64_MAX;
		}
		int left = deadline == INT64_MAX ? -1 : clock_left_ms(deadline);
		if (!left) {
			errno = EAGAIN;
			return -1;
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (rsock_real.poll(&p, 1, left) < 0 && errno == EINTR)
			return -1;
	}
}

/* ---- the buffers of a call on an RDMA stream --------------------------------- */

/* The kernel checks a call's buffers before it moves a byte (access_ok): a
 * range in its own half of the address space, or one that wraps, fails the
 * whole call with EFAULT. Where it copies, a buffer in unmapped user memory
 * faults then: EFAULT if nothing was copied yet, else the bytes copied. The
 * library copies with memcpy, where the same buffer is a SIGSEGV of the
 * application. What a range check can tell is checked: the kernel's half
 * (anything from 2^56 up: the largest user space of x86-64 and arm64 is
 * below; a pointer such as (void *)-1; shim.h) and the null page. Another
 * unmapped user address still faults in the copy.
 *
 * A call's vector as the kernel takes it: -EINVAL for a count beyond
 * IOV_MAX or a length that is negative as ssize_t, -EFAULT for a vector or
 * a buffer outside user space; else the number of leading elements the
 * kernel copies before it faults on a buffer in the null page (n: none
 * there), with *bytes their length. */
static RSOCK_MAYBE_UNUSED RSOCK_NOINLINE int iov_check_n(const struct iovec *iov, int n, size_t *bytes)
{
	int k = n;

	*bytes = 0;
	if (n < 0 || n > IOV_MAX)
		return -EINVAL;
	if (n && shim_addr_bad(iov, (size_t)n * sizeof(*iov)))
		return -EFAULT;
	for (int i = 0; i < n; i++)
		if ((ssize_t)iov[i].iov_len < 0)
			return -EINVAL;
	for (int i = 0; i < n; i++) {
		if (shim_range_outside(iov[i].iov_base, iov[i].iov_len))
			return -EFAULT;
		if (k == n && iov[i].iov_len && (uintptr_t)iov[i].iov_base < SHIM_NULL_PAGE)
			k = i;
		if (k == n)
			*bytes += iov[i].iov_len;
	}
	return k;
}

/* The same; one buffer (read, write, send, recv...) checked inline. */
static inline int iov_check(const struct iovec *iov, int n, size_t *bytes)
{
	if (RSOCK_LIKELY(n == 1) && !shim_addr_bad(iov, sizeof(*iov))) {
		size_t len = iov->iov_len;

		*bytes = 0;
		if ((ssize_t)len < 0)
			return -EINVAL;
		if (shim_range_outside(iov->iov_base, len))
			return -EFAULT;
		if (len && (uintptr_t)iov->iov_base < SHIM_NULL_PAGE)
			return 0;
		*bytes = len;
		return 1;
	}
	return iov_check_n(iov, n, bytes);
}

/* A message header the kernel could not read (EFAULT). */
static RSOCK_MAYBE_UNUSED int msg_outside(const struct msghdr *msg)
{
	return shim_addr_bad(msg, sizeof(*msg));
}

/* msg_iovlen as a count: one beyond IOV_MAX fails iov_check (EINVAL). */
static RSOCK_MAYBE_UNUSED int msg_iovcnt(const struct msghdr *msg)
{
	return msg->msg_iovlen > IOV_MAX ? IOV_MAX + 1 : (int)msg->msg_iovlen;
}

static RSOCK_MAYBE_UNUSED ssize_t rdma_recv(struct conn *c, struct path_stream *s, const struct iovec *iov, int n,
			 int flags)
{
	size_t good;
	ssize_t r;
	int k;

	/* MSG_TRUNC discards without touching the buffer, as TCP does. */
	if (!(flags & MSG_TRUNC)) {
		if ((k = iov_check(iov, n, &good)) < 0)
			return k;
		if (k < n && !good) {
			/* The kernel waits for bytes (or the end), then faults
			 * on the first, which stays unread. */
			char one;
			struct iovec v = {&one, 1};
			r = path_recv(s, &v, 1, (flags & ~MSG_WAITALL) | MSG_PEEK, atomic_load(&c->nonblock));
			return r > 0 ? -EFAULT : r;
		}
		n = k; /* the bytes before the buffer that would fault */
	}
	r = path_recv(s, iov, n, flags, atomic_load(&c->nonblock));
	if (!(flags & MSG_PEEK))
		conn_account_rx(c, r);
	return r;
}

/* Send on an RDMA stream. A stream whose peer is gone is handed to the
 * kernel socket, which then answers exactly as TCP does (EPIPE, SIGPIPE,
 * ECONNRESET). */
static RSOCK_MAYBE_UNUSED ssize_t rdma_send(struct conn *c, struct path_stream *s, int fd, const struct iovec *iov,
			 int n, int flags)
{
	size_t good;
	int k = iov_check(iov, n, &good);
	ssize_t r;

	if (k < 0)
		return k;
	/* The kernel copies a send in pieces of up to a segment's size, each
	 * all or nothing: a small one that reaches the null page is EFAULT
	 * with nothing sent (a large one may send its first pieces). */
	if (k < n)
		return -EFAULT;
	/* Urgent data (telnet, FTP's ABOR) exists only in TCP: the stream
	 * moves there first, in order, and the kernel socket sends it. A peer
	 * too old for the hand-over gets the bytes in band. */
	if (RSOCK_UNLIKELY(flags & MSG_OOB) && !path_switched(s) && (r = path_handover(s))) {
		log_warn_rl("fd %d: MSG_OOB on an RDMA stream that cannot move to TCP (errno %d): "
			    "sent in band", fd, (int)-r);
		flags &= ~MSG_OOB;
	}
	r = path_send(s, iov, n, flags, atomic_load(&c->nonblock));

	if (r == -ESHUTDOWN) {
		struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
		r = shim_neg(rsock_real.sendmsg(fd, &m, flags));
	} else if (r == -EPIPE && !(flags & MSG_NOSIGNAL)) {
		raise(SIGPIPE); /* after shutdown(SHUT_WR), as TCP does */
	}
	conn_account_tx(c, r);
	return r;
}

#define IO_IS_RX_rx 1
#define IO_IS_RX_tx 0

/* The shape of every data wrapper. dir: rx or tx; flags: the call's MSG_*
 * flags (peeked bytes are not counted); rdma_expr: the RDMA call (may use
 * c_, s_); real_expr: the libc call. */
#define IO_SHIM(dir, fd, flags, rdma_expr, real_expr)                  \
	do {                                                           \
		struct conn *c_;                                       \
		struct path_stream *s_;                                \
		ssize_t r_;                                            \
		s_ = io_begin(fd, &c_);                                \
		if (s_) {                                              \
			r_ = shim_ret(rdma_expr);                      \
		} else if (IO_IS_RX_##dir && c_ &&                     \
			   RSOCK_UNLIKELY(atomic_load_explicit(&c_->stale, \
					  memory_order_relaxed)) &&    \
			   io_stale_wait(c_, fd, flags)) {             \
			r_ = -1;                                       \
		} else {                                               \
			r_ = real_expr;                                \
			if (c_ && !((flags) & MSG_PEEK))               \
				conn_account_##dir(c_, r_);            \
		}                                                      \
		conn_unref(c_);                                        \
		return r_;                                             \
	} while (0)

#endif
