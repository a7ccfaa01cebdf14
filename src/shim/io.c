/* shim/io.c - the data path: read/write families, send/recv families,
 * sendfile and the FORTIFY variants.
 *
 * Every wrapper has the same shape: untracked fd -> libc at once; tracked
 * fd -> io_begin() says whether the stream is carried by RDMA (then the
 * transport moves the bytes) or by kernel TCP (then libc does, and the bytes
 * are counted). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "shim/shim.h"

#include "negotiate/cm.h"
#include "base/log.h"
#include "base/stats.h"
#include "path/path.h"

/* ---- the dispatcher --------------------------------------------------------- */

/* Look fd up. Returns the path of an RDMA stream, or NULL for kernel
 * TCP (then *c may still be a tracked conn, for the counters). A late hello
 * answer at the head of a TCP stream is dropped first. */
static struct path_stream *io_begin(int fd, struct conn **cp)
{
	struct conn *c = shim_conn(fd);

	*cp = c;
	if (!c)
		return NULL;
	conn_settle_maybe(c, fd);
	if (RSOCK_UNLIKELY(c->stale_ack)) {
		int r = cm_drop_stale_ack(fd);
		if (r == -EAGAIN && !atomic_load(&c->nonblock)) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			rsock_real.poll(&p, 1, 1000);
			r = cm_drop_stale_ack(fd);
		}
		if (r != -EAGAIN)
			c->stale_ack = 0;
	}
	if (atomic_load_explicit(&c->path, memory_order_acquire) != CONN_PATH_RDMA)
		return NULL;
	return c->stream;
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
static RSOCK_NOINLINE int iov_check_n(const struct iovec *iov, int n, size_t *bytes)
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
static int msg_outside(const struct msghdr *msg)
{
	return shim_addr_bad(msg, sizeof(*msg));
}

/* msg_iovlen as a count: one beyond IOV_MAX fails iov_check (EINVAL). */
static int msg_iovcnt(const struct msghdr *msg)
{
	return msg->msg_iovlen > IOV_MAX ? IOV_MAX + 1 : (int)msg->msg_iovlen;
}

static ssize_t rdma_recv(struct conn *c, struct path_stream *s, const struct iovec *iov, int n,
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
static ssize_t rdma_send(struct conn *c, struct path_stream *s, int fd, const struct iovec *iov,
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

/* A read on a non-blocking TCP stream whose late hello answer may still
 * come (io_begin saw none, or only its beginning): the kernel's read could
 * return the answer, arrived meanwhile, as data. There is nothing for the
 * application yet, as far as it can tell: EAGAIN, as TCP with nothing to
 * read. A blocking one has waited in io_begin. */
static RSOCK_COLD int io_ack_pending(const struct conn *c)
{
	return c->stale_ack && atomic_load(&c->nonblock);
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
		} else if (IO_IS_RX_##dir && c_ && RSOCK_UNLIKELY(c_->stale_ack) && \
			   io_ack_pending(c_)) {                       \
			errno = EAGAIN;                                \
			r_ = -1;                                       \
		} else {                                               \
			r_ = real_expr;                                \
			if (c_ && !((flags) & MSG_PEEK))               \
				conn_account_##dir(c_, r_);            \
		}                                                      \
		conn_unref(c_);                                        \
		return r_;                                             \
	} while (0)

/* ---- wrappers ------------------------------------------------------------------ */

/* A wrapper's path for tracked descriptors: out of line, so that the calls
 * on every other descriptor stay a bitmap test and a jump, but not "cold":
 * it is the data path of every RDMA stream (cold code is optimised for
 * size and laid out as unlikely). */
#define RSOCK_SLOW RSOCK_NOINLINE

static RSOCK_SLOW ssize_t read_slow(int fd, void *buf, size_t n)
{
	struct iovec v = {buf, n};
	IO_SHIM(rx, fd, 0, rdma_recv(c_, s_, &v, 1, 0), REAL_CALL(read, fd, buf, n));
}

RSOCK_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	if (shim_fast(fd))
		return rsock_real.read(fd, buf, n);
	return read_slow(fd, buf, n);
}

static RSOCK_SLOW ssize_t readv_slow(int fd, const struct iovec *iov, int iovcnt)
{
	IO_SHIM(rx, fd, 0, rdma_recv(c_, s_, iov, iovcnt, 0), REAL_CALL(readv, fd, iov, iovcnt));
}

RSOCK_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	if (shim_fast(fd))
		return rsock_real.readv(fd, iov, iovcnt);
	return readv_slow(fd, iov, iovcnt);
}

static RSOCK_SLOW ssize_t write_slow(int fd, const void *buf, size_t n)
{
	struct iovec v = {(void *)buf, n};
	IO_SHIM(tx, fd, 0, rdma_send(c_, s_, fd, &v, 1, 0), REAL_CALL(write, fd, buf, n));
}

RSOCK_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	if (shim_fast(fd))
		return rsock_real.write(fd, buf, n);
	return write_slow(fd, buf, n);
}

static RSOCK_SLOW ssize_t writev_slow(int fd, const struct iovec *iov, int iovcnt)
{
	IO_SHIM(tx, fd, 0, rdma_send(c_, s_, fd, iov, iovcnt, 0), REAL_CALL(writev, fd, iov, iovcnt));
}

RSOCK_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	if (shim_fast(fd))
		return rsock_real.writev(fd, iov, iovcnt);
	return writev_slow(fd, iov, iovcnt);
}

static RSOCK_SLOW ssize_t send_slow(int fd, const void *buf, size_t n, int flags)
{
	struct iovec v = {(void *)buf, n};
	IO_SHIM(tx, fd, 0, rdma_send(c_, s_, fd, &v, 1, flags), REAL_CALL(send, fd, buf, n, flags));
}

RSOCK_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	if (shim_fast(fd))
		return rsock_real.send(fd, buf, n, flags);
	return send_slow(fd, buf, n, flags);
}

static RSOCK_SLOW ssize_t sendto_slow(int fd, const void *buf, size_t n, int flags,
				      __CONST_SOCKADDR_ARG addr, socklen_t alen)
{
	struct iovec v = {(void *)buf, n};
	/* A connected TCP socket ignores the address (EISCONN only for other types). */
	IO_SHIM(tx, fd, 0, rdma_send(c_, s_, fd, &v, 1, flags),
		REAL_CALL(sendto, fd, buf, n, flags, addr, alen));
}

RSOCK_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG addr,
			    socklen_t alen)
{
	if (shim_fast(fd))
		return rsock_real.sendto(fd, buf, n, flags, addr, alen);
	return sendto_slow(fd, buf, n, flags, addr, alen);
}

/* Descriptors sent to another process (SCM_RIGHTS: a master that accepts
 * and hands each connection to a worker, as Node's cluster module does).
 * The receiver has none of our state for them, so a stream among them
 * goes to kernel TCP first (shim_to_tcp): one not settled yet declines
 * RDMA, which loses nothing; an RDMA stream is handed over in order, but
 * the bytes that came over RDMA and were not read yet stay readable here
 * only (said in the log). */
static RSOCK_COLD void pass_fds(const struct msghdr *msg)
{
	struct cmsghdr *cm;

	if (!shim_active() || !msg->msg_control || msg->msg_controllen < sizeof(struct cmsghdr))
		return;
	for (cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR((struct msghdr *)msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const unsigned char *d = CMSG_DATA(cm);
		for (size_t i = 0; i < n; i++) {
			int pfd;
			struct conn *c;
			memcpy(&pfd, d + i * sizeof(int), sizeof(int));
			if (!fdtab_maybe_tracked(pfd) || !(c = shim_conn(pfd)))
				continue;
			int role = atomic_load(&c->role);
			if (role == CONN_ROLE_ACCEPTED || role == CONN_ROLE_CLIENT) {
				log_debug("fd %d: sent to another process: its stream goes to TCP", pfd);
				struct path_stream *s = shim_to_tcp(c, pfd, "another process");
				if (s && path_prefix_left(s))
					log_warn_rl("fd %d: sent to another process with %zu bytes that came "
						    "over RDMA unread: they stay readable in this process only",
						    pfd, path_prefix_left(s));
			}
			conn_unref(c);
		}
	}
}

static RSOCK_SLOW ssize_t sendmsg_slow(int fd, const struct msghdr *msg, int flags)
{
	int outside = msg_outside(msg);

	if (!outside && msg->msg_controllen)
		pass_fds(msg);
	IO_SHIM(tx, fd, 0,
		outside ? -EFAULT : rdma_send(c_, s_, fd, msg->msg_iov, msg_iovcnt(msg), flags),
		REAL_CALL(sendmsg, fd, msg, flags));
}

RSOCK_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	if (shim_fast(fd) && RSOCK_LIKELY(msg_outside(msg) || !msg->msg_controllen))
		return rsock_real.sendmsg(fd, msg, flags);
	return sendmsg_slow(fd, msg, flags);
}

static RSOCK_SLOW ssize_t recv_slow(int fd, void *buf, size_t n, int flags)
{
	struct iovec v = {buf, n};
	IO_SHIM(rx, fd, flags, rdma_recv(c_, s_, &v, 1, flags), REAL_CALL(recv, fd, buf, n, flags));
}

RSOCK_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	if (shim_fast(fd))
		return rsock_real.recv(fd, buf, n, flags);
	return recv_slow(fd, buf, n, flags);
}

/* recvfrom/recvmsg on a connected TCP socket report no address. */
static ssize_t rdma_recvfrom(struct conn *c, struct path_stream *s, void *buf, size_t n, int flags,
			     socklen_t *alen)
{
	struct iovec v = {buf, n};
	ssize_t r = rdma_recv(c, s, &v, 1, flags);

	if (r >= 0 && alen)
		*alen = 0;
	return r;
}

static RSOCK_SLOW ssize_t recvfrom_slow(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG addr,
					socklen_t *alen)
{
	IO_SHIM(rx, fd, flags, rdma_recvfrom(c_, s_, buf, n, flags, SA(addr) ? alen : NULL),
		REAL_CALL(recvfrom, fd, buf, n, flags, addr, alen));
}

RSOCK_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG addr,
			      socklen_t *alen)
{
	if (shim_fast(fd))
		return rsock_real.recvfrom(fd, buf, n, flags, addr, alen);
	return recvfrom_slow(fd, buf, n, flags, addr, alen);
}

static ssize_t rdma_recvmsg(struct conn *c, struct path_stream *s, struct msghdr *msg, int flags)
{
	if (msg_outside(msg))
		return -EFAULT;
	ssize_t r = rdma_recv(c, s, msg->msg_iov, msg_iovcnt(msg), flags);

	if (r >= 0) {
		msg->msg_namelen = 0;
		msg->msg_controllen = 0;
		msg->msg_flags = flags & MSG_OOB; /* as tcp_recvmsg says of urgent data */
	}
	return r;
}

static RSOCK_SLOW ssize_t recvmsg_slow(int fd, struct msghdr *msg, int flags)
{
	IO_SHIM(rx, fd, flags, rdma_recvmsg(c_, s_, msg, flags), REAL_CALL(recvmsg, fd, msg, flags));
}

RSOCK_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	if (shim_fast(fd))
		return rsock_real.recvmsg(fd, msg, flags);
	return recvmsg_slow(fd, msg, flags);
}

/* Bytes moved by the first r messages of an mmsg vector. */
static long long mmsg_bytes(const struct mmsghdr *v, int r)
{
	long long sum = 0;

	for (int i = 0; i < r; i++)
		sum += v[i].msg_len;
	return sum;
}

/* The most messages of a batch the kernel's sendmmsg and recvmmsg handle
 * (UIO_MAXIOV): the entries of vlen it reads. */
#define MMSG_MAX 1024u
static unsigned int mmsg_len(unsigned int vlen)
{
	return vlen < MMSG_MAX ? vlen : MMSG_MAX;
}

/* An mmsg vector the kernel could not read (EFAULT): such a call goes to
 * the kernel untouched, on any descriptor. */
static int mmsg_outside(const struct mmsghdr *vec, unsigned int vlen)
{
	return vlen && shim_addr_bad(vec, mmsg_len(vlen) * sizeof(*vec));
}

/* sendmmsg/recvmmsg over RDMA: one message after the other, stopping at the
 * first that would block or fails, like the kernel. */
static int rdma_mmsg(struct conn *c, struct path_stream *s, int fd, struct mmsghdr *vec,
		     unsigned vlen, int flags, int tx)
{
	unsigned i;
	ssize_t r = 0;

	vlen = mmsg_len(vlen);
	for (i = 0; i < vlen; i++) {
		if (tx)
			r = rdma_send(c, s, fd, vec[i].msg_hdr.msg_iov, (int)vec[i].msg_hdr.msg_iovlen,
				      flags);
		else
			r = rdma_recvmsg(c, s, &vec[i].msg_hdr, flags);
		if (r < 0)
			break;
		vec[i].msg_len = (unsigned)r;
		if (!tx && r == 0)
			break;
		if (!tx && (flags & MSG_WAITFORONE))
			flags |= MSG_DONTWAIT;
	}
	return i ? (int)i : (int)r;
}

static RSOCK_SLOW int sendmmsg_slow(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	struct conn *c;
	struct path_stream *s;
	ssize_t r;

	for (unsigned int i = 0; i < mmsg_len(vlen); i++)
		if (vec[i].msg_hdr.msg_controllen)
			pass_fds(&vec[i].msg_hdr);
	s = io_begin(fd, &c);
	if (s) {
		r = shim_ret(rdma_mmsg(c, s, fd, vec, vlen, flags, 1));
	} else {
		r = REAL_CALL(sendmmsg, fd, vec, vlen, flags);
		if (c)
			conn_account_tx(c, mmsg_bytes(vec, (int)r));
	}
	conn_unref(c);
	return (int)r;
}

/* Whether a batch carries control data (descriptors to look at), in the
 * messages the kernel sends. The vector is readable (mmsg_outside). */
static int mmsg_control(const struct mmsghdr *vec, unsigned int vlen)
{
	for (unsigned int i = 0; i < mmsg_len(vlen); i++)
		if (vec[i].msg_hdr.msg_controllen)
			return 1;
	return 0;
}

RSOCK_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	if (mmsg_outside(vec, vlen) || (shim_fast(fd) && RSOCK_LIKELY(!mmsg_control(vec, vlen))))
		return rsock_real.sendmmsg(fd, vec, vlen, flags);
	return sendmmsg_slow(fd, vec, vlen, flags);
}

static RSOCK_SLOW int recvmmsg_slow(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
				    struct timespec *tmo)
{
	struct conn *c;
	struct path_stream *s;
	ssize_t r;

	s = io_begin(fd, &c);
	if (s) {
		r = shim_ret(rdma_mmsg(c, s, fd, vec, vlen, flags, 0));
	} else if (c && RSOCK_UNLIKELY(c->stale_ack) && io_ack_pending(c)) {
		errno = EAGAIN;
		r = -1;
	} else {
		r = REAL_CALL(recvmmsg, fd, vec, vlen, flags, tmo);
		if (c)
			conn_account_rx(c, mmsg_bytes(vec, (int)r));
	}
	conn_unref(c);
	return (int)r;
}

RSOCK_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
			  struct timespec *tmo)
{
	if (shim_fast(fd) || mmsg_outside(vec, vlen))
		return rsock_real.recvmmsg(fd, vec, vlen, flags, tmo);
	return recvmmsg_slow(fd, vec, vlen, flags, tmo);
}

/* sendfile to an RDMA stream: read a block from the file, send it. Returns
 * what was sent; the file offset (or *off) advances by exactly that. */
static ssize_t rdma_sendfile(struct conn *c, struct path_stream *s, int out_fd, int in_fd,
			     off64_t *off, size_t n)
{
	char buf[64 * 1024];
	size_t chunk = n < sizeof(buf) ? n : sizeof(buf);
	ssize_t got, sent;
	struct iovec v;

	got = off ? pread64(in_fd, buf, chunk, *off) : rsock_real.read(in_fd, buf, chunk);
	if (got <= 0)
		return got < 0 ? -errno : 0;
	v.iov_base = buf;
	v.iov_len = (size_t)got;
	sent = rdma_send(c, s, out_fd, &v, 1, 0);
	if (sent < 0)
		return sent;
	if (off)
		*off += sent;
	else if (sent < got)
		lseek64(in_fd, (off64_t)(sent - got), SEEK_CUR);
	return sent;
}

static RSOCK_COLD ssize_t sendfile_slow(int out_fd, int in_fd, off_t *off, size_t n)
{
	off64_t o = off ? *off : 0;
	ssize_t r;
	struct conn *c;
	struct path_stream *s = io_begin(out_fd, &c);

	/* (A socket is no source for sendfile: the kernel says EINVAL for an
	 * RDMA stream's socket as for any other.) */
	if (s) {
		r = shim_ret(rdma_sendfile(c, s, out_fd, in_fd, off ? &o : NULL, n));
		if (off)
			*off = (off_t)o;
	} else {
		r = REAL_CALL(sendfile, out_fd, in_fd, off, n);
		if (c)
			conn_account_tx(c, r);
	}
	conn_unref(c);
	return r;
}

RSOCK_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *off, size_t n)
{
	if (shim_fast(out_fd))
		return rsock_real.sendfile(out_fd, in_fd, off, n);
	return sendfile_slow(out_fd, in_fd, off, n);
}

RSOCK_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *off, size_t n)
{
	if (shim_fast(out_fd) && rsock_real.sendfile64)
		return rsock_real.sendfile64(out_fd, in_fd, off, n);
	/* off64_t and off_t are the same type on the LP64 ABIs. */
	return sendfile_slow(out_fd, in_fd, (off_t *)off, n);
}

/* ---- splice ---------------------------------------------------------------------
 * splice() moves bytes between a pipe and another descriptor inside the
 * kernel, but an RDMA stream's bytes are not in its kernel socket:
 *  - stream to pipe: the bytes are peeked, written to the pipe (no more than
 *    it has room for) and then consumed, exactly as many as the pipe took;
 *  - pipe to a blocking stream: read from the pipe, sent whole;
 *  - pipe to a non-blocking stream: what is taken from a pipe cannot be put
 *    back if the stream then has no room, so the stream is handed to kernel
 *    TCP (doc/design.md, "Descriptors, fork, exec") and the kernel splices.
 * Offsets, descriptors that are not pipes and streams already on kernel
 * TCP go to the kernel, which answers as it does for TCP. */

static int is_pipe(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* Free bytes in pipe fd (its capacity less what it holds), or -errno. */
static long pipe_room(int fd)
{
	int used = 0, cap = rsock_real.fcntl(fd, F_GETPIPE_SZ);

	if (cap < 0 || rsock_real.ioctl(fd, FIONREAD, &used) < 0)
		return -errno;
	return cap > used ? cap - used : 0;
}

static int pipe_nonblock(int fd, unsigned int flags)
{
	return (flags & SPLICE_F_NONBLOCK) || (rsock_real.fcntl(fd, F_GETFL) & O_NONBLOCK);
}

/* splice from an RDMA stream to pipe pfd: up to len bytes are peeked,
 * written to the pipe, and only what the pipe took is consumed. The pipe's
 * room is waited for first, as the kernel does, and the write asks for no
 * more than that room. */
static ssize_t splice_from_stream(struct conn *c, struct path_stream *s, int pfd, size_t len,
				  unsigned int flags)
{
	char buf[64 * 1024];
	struct iovec v = {buf, 0};
	long room;
	ssize_t got, put;

	if (!len)
		return 0;
	while ((room = pipe_room(pfd)) == 0) {
		struct pollfd p = {.fd = pfd, .events = POLLOUT};
		if (pipe_nonblock(pfd, flags))
			return -EAGAIN;
		if (rsock_real.poll(&p, 1, -1) < 0)
			return -errno;
		if (p.revents & POLLERR) { /* no reader: what the kernel does */
			raise(SIGPIPE);
			return -EPIPE;
		}
	}
	if (room < 0)
		return room;
	v.iov_len = len < sizeof(buf) ? len : sizeof(buf);
	if ((size_t)room < v.iov_len)
		v.iov_len = (size_t)room;
	got = rdma_recv(c, s, &v, 1, MSG_PEEK);
	if (got <= 0)
		return got;
	put = rsock_real.write(pfd, buf, (size_t)got);
	if (put <= 0)
		return put < 0 ? -errno : 0;
	v.iov_len = (size_t)put;
	got = rdma_recv(c, s, &v, 1, MSG_DONTWAIT); /* the bytes the pipe took */
	if (got != put)
		log_warn_rl("splice: %zd bytes peeked went to the pipe, %zd consumed "
			    "(another thread read the stream meanwhile)", put, got);
	return put;
}

static ssize_t splice_to_stream(struct conn *c, struct path_stream *s, int fd, int pfd, size_t len,
				unsigned int flags)
{
	char buf[64 * 1024];
	struct iovec v;
	ssize_t got, sent = 0;

	if (!len)
		return 0;
	if (flags & SPLICE_F_NONBLOCK) {
		struct pollfd p = {.fd = pfd, .events = POLLIN};
		if (rsock_real.poll(&p, 1, 0) == 0)
			return -EAGAIN;
	}
	got = rsock_real.read(pfd, buf, len < sizeof(buf) ? len : sizeof(buf));
	if (got <= 0)
		return got < 0 ? -errno : 0;
	while (sent < got) {
		ssize_t r;
		v.iov_base = buf + sent;
		v.iov_len = (size_t)(got - sent);
		r = rdma_send(c, s, fd, &v, 1, 0);
		if (r < 0)
			return sent ? sent : r;
		sent += r;
	}
	return sent;
}

static RSOCK_COLD ssize_t splice_slow(int in, loff_t *off_in, int out, loff_t *off_out, size_t len,
				      unsigned int flags)
{
	struct conn *c;
	struct path_stream *s;
	ssize_t r;
	int from_stream = !shim_fast(in), fd = from_stream ? in : out;
	int pfd = from_stream ? out : in;
	loff_t *off = from_stream ? off_in : off_out;

	s = io_begin(fd, &c);
	if (s && !off && !path_kernel_only(s) && is_pipe(pfd)) {
		if (from_stream) {
			r = splice_from_stream(c, s, pfd, len, flags);
		} else if (atomic_load(&c->nonblock) && !path_switched(s) &&
			   (r = path_handover(s)) != -EPROTONOSUPPORT && r != -ENOTCONN) {
			r = r ? r : shim_neg(REAL_CALL(splice, in, off_in, out, off_out, len, flags));
			if (r > 0)
				conn_account_tx(c, r);
		} else {
			r = splice_to_stream(c, s, fd, pfd, len, flags);
		}
		r = shim_ret(r);
	} else if (from_stream && c && RSOCK_UNLIKELY(c->stale_ack) && io_ack_pending(c)) {
		errno = EAGAIN;
		r = -1;
	} else {
		r = REAL_CALL(splice, in, off_in, out, off_out, len, flags);
		if (c && r > 0) {
			if (from_stream)
				conn_account_rx(c, r);
			else
				conn_account_tx(c, r);
		}
	}
	conn_unref(c);
	return r;
}

RSOCK_EXPORT ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len,
			    unsigned int flags)
{
	if ((shim_fast(in) && shim_fast(out)) || !rsock_real.splice)
		return rsock_real.splice ? rsock_real.splice(in, off_in, out, off_out, len, flags)
					 : shim_ret(-ENOSYS);
	return splice_slow(in, off_in, out, off_out, len, flags);
}

/* FORTIFY variants: same checks as glibc's, then the plain wrapper. */
RSOCK_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (shim_fast(fd) && rsock_real.__read_chk)
		return rsock_real.__read_chk(fd, buf, n, buflen);
	if (n > buflen)
		__chk_fail();
	return read(fd, buf, n);
}

RSOCK_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	if (shim_fast(fd) && rsock_real.__recv_chk)
		return rsock_real.__recv_chk(fd, buf, n, buflen, flags);
	if (n > buflen)
		__chk_fail();
	return recv(fd, buf, n, flags);
}

RSOCK_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
				    __SOCKADDR_ARG addr, socklen_t *alen)
{
	if (shim_fast(fd) && rsock_real.__recvfrom_chk)
		return rsock_real.__recvfrom_chk(fd, buf, n, buflen, flags, addr, alen);
	if (n > buflen)
		__chk_fail();
	return recvfrom(fd, buf, n, flags, addr, alen);
}
