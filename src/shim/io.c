/* shim/io.c - the data path: read/write families, send/recv families and
 * the FORTIFY variants (sendfile and splice: splice.c).
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

#include "shim/io.h"

#include "negotiate/cm.h"
#include "base/log.h"
#include "base/stats.h"
#include "path/path.h"

/* ---- wrappers ------------------------------------------------------------------ */

/* A wrapper's path for tracked descriptors: out of line, so that the calls
 * on every other descriptor stay a bitmap test and a jump, but not "cold":
 * it is the data path of every RDMA stream (cold code is optimised for
 * size and laid out as unlikely). */
#define RSOCK_SLOW RSOCK_NOINLINE

SHIM_SLOW_FN(ssize_t, read_slow, (int fd, void *buf, size_t n), (fd, buf, n))
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

SHIM_SLOW_FN(ssize_t, readv_slow, (int fd, const struct iovec *iov, int iovcnt), (fd, iov, iovcnt))
{
	IO_SHIM(rx, fd, 0, rdma_recv(c_, s_, iov, iovcnt, 0), REAL_CALL(readv, fd, iov, iovcnt));
}

RSOCK_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	if (shim_fast(fd))
		return rsock_real.readv(fd, iov, iovcnt);
	return readv_slow(fd, iov, iovcnt);
}

SHIM_SLOW_FN(ssize_t, write_slow, (int fd, const void *buf, size_t n), (fd, buf, n))
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

SHIM_SLOW_FN(ssize_t, writev_slow, (int fd, const struct iovec *iov, int iovcnt), (fd, iov, iovcnt))
{
	IO_SHIM(tx, fd, 0, rdma_send(c_, s_, fd, iov, iovcnt, 0), REAL_CALL(writev, fd, iov, iovcnt));
}

RSOCK_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	if (shim_fast(fd))
		return rsock_real.writev(fd, iov, iovcnt);
	return writev_slow(fd, iov, iovcnt);
}

SHIM_SLOW_FN(ssize_t, send_slow, (int fd, const void *buf, size_t n, int flags), (fd, buf, n, flags))
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

SHIM_SLOW_FN(ssize_t, sendto_slow, (int fd, const void *buf, size_t n, int flags,
				      __CONST_SOCKADDR_ARG addr, socklen_t alen), (fd, buf, n, flags, addr, alen))
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

SHIM_SLOW_FN(ssize_t, sendmsg_slow, (int fd, const struct msghdr *msg, int flags), (fd, msg, flags))
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

SHIM_SLOW_FN(ssize_t, recv_slow, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags))
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

SHIM_SLOW_FN(ssize_t, recvfrom_slow, (int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG addr,
					socklen_t *alen), (fd, buf, n, flags, addr, alen))
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

SHIM_SLOW_FN(ssize_t, recvmsg_slow, (int fd, struct msghdr *msg, int flags), (fd, msg, flags))
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

SHIM_SLOW_FN(int, sendmmsg_slow, (int fd, struct mmsghdr *vec, unsigned int vlen, int flags), (fd, vec, vlen, flags))
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

SHIM_SLOW_FN(int, recvmmsg_slow, (int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
				    struct timespec *tmo), (fd, vec, vlen, flags, tmo))
{
	struct conn *c;
	struct path_stream *s;
	ssize_t r;

	s = io_begin(fd, &c);
	if (s) {
		r = shim_ret(rdma_mmsg(c, s, fd, vec, vlen, flags, 0));
	} else if (c && RSOCK_UNLIKELY(atomic_load_explicit(&c->stale, memory_order_relaxed)) &&
		   io_stale_wait(c, fd, flags)) {
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
