/* shim/splice.c - sendfile and splice on a stream: over kernel TCP the
 * kernel moves the bytes; on a path the library does, through the same send
 * and receive as write() and read() (io.h). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "event/event.h"
#include "shim/io.h"

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

SHIM_SLOW_FN(ssize_t, sendfile_slow, (int out_fd, int in_fd, off_t *off, size_t n), (out_fd, in_fd, off, n))
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
 *    TCP (doc/design.md, "Descriptors, fork, exec") and the kernel splices;
 *    where the peer cannot take the hand-over, nothing is taken while the
 *    stream has no room, and what is taken is sent whole.
 * Offsets, descriptors that are not pipes, streams already on kernel TCP
 * (into them: handed over, whatever they still hold to be read) go to the
 * kernel, which answers as it does for TCP. */

static int is_pipe(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

static int pipe_nonblock(int fd, unsigned int flags)
{
	return (flags & SPLICE_F_NONBLOCK) || (rsock_real.fcntl(fd, F_GETFL) & O_NONBLOCK);
}

/* How many bytes one write() into pipe fd takes without blocking, once poll
 * says it is writable, or -errno. A pipe's room is counted in slots, a page
 * each, not in bytes: a slot holding one byte (a page partly read, or
 * spliced in from a socket) is taken whole. POLLOUT says one slot is free,
 * and a write of PIPE_BUF bytes needs no more than one; an empty pipe has
 * every slot free. (Its capacity less the bytes it holds can exceed what it
 * takes: a write of that size blocks, in the process that alone drains the
 * pipe, for good.) */
static long pipe_write_room(int fd)
{
	int used = 0, cap = rsock_real.fcntl(fd, F_GETPIPE_SZ);

	if (cap < 0 || rsock_real.ioctl(fd, FIONREAD, &used) < 0)
		return -errno;
	if (!used)
		return cap;
	return cap - used < PIPE_BUF ? (cap - used > 0 ? cap - used : 1) : PIPE_BUF;
}

/* splice from an RDMA stream to pipe pfd: up to len bytes are peeked,
 * written to the pipe, and only what the pipe took is consumed. The pipe's
 * room is waited for first, as the kernel does, and the write asks for no
 * more than it takes without blocking (pipe_write_room). */
static ssize_t splice_from_stream(struct conn *c, struct path_stream *s, int pfd, size_t len,
				  unsigned int flags)
{
	char buf[64 * 1024];
	struct iovec v = {buf, 0};
	long room;
	ssize_t got, put;

	if (!len)
		return 0;
	for (int tmo = 0;; tmo = -1) { /* a look, then a wait unless non-blocking */
		struct pollfd p = {.fd = pfd, .events = POLLOUT};

		if (rsock_real.poll(&p, 1, tmo) < 0)
			return -errno;
		if (p.revents & POLLERR) { /* no reader: what the kernel does */
			raise(SIGPIPE);
			return -EPIPE;
		}
		if (p.revents & POLLOUT)
			break;
		if (pipe_nonblock(pfd, flags))
			return -EAGAIN;
	}
	if ((room = pipe_write_room(pfd)) < 0)
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

/* splice from pipe pfd to an RDMA stream that cannot be handed to TCP (a
 * blocking one, or a peer too old for the hand-over): what is read from
 * the pipe cannot be put back, so a non-blocking stream takes nothing while
 * it has no room (EAGAIN), and once bytes are out of the pipe they are all
 * sent, waiting for room as a blocking send does. */
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
	if (atomic_load(&c->nonblock) && !(path_poll_events(s) & (POLLOUT | POLLERR | POLLHUP)))
		return -EAGAIN;
	got = rsock_real.read(pfd, buf, len < sizeof(buf) ? len : sizeof(buf));
	if (got <= 0)
		return got < 0 ? -errno : 0;
	while (sent < got) {
		ssize_t r;
		v.iov_base = buf + sent;
		v.iov_len = (size_t)(got - sent);
		r = rdma_send(c, s, fd, &v, 1, 0);
		if (r == -EAGAIN || r == -EWOULDBLOCK) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			if (event_poll(&p, 1, NULL, NULL) >= 0)
				continue;
		}
		if (r < 0)
			return sent ? sent : r;
		sent += r;
	}
	return sent;
}

SHIM_SLOW_FN(ssize_t, splice_slow, (int in, loff_t *off_in, int out, loff_t *off_out, size_t len,
				      unsigned int flags), (in, off_in, out, off_out, len, flags))
{
	struct conn *c;
	struct path_stream *s;
	ssize_t r;
	int from_stream = !shim_fast(in), fd = from_stream ? in : out;
	int pfd = from_stream ? out : in;
	loff_t *off = from_stream ? off_in : off_out;

	s = io_begin(fd, &c);
	/* A switched stream sends through its kernel socket (the prefix it
	 * may still hold is what it receives). */
	if (s && !off && (from_stream ? !path_kernel_only(s) : !path_switched(s)) && is_pipe(pfd)) {
		if (from_stream) {
			r = splice_from_stream(c, s, pfd, len, flags);
		} else if (atomic_load(&c->nonblock) &&
			   (r = path_handover(s)) != -EPROTONOSUPPORT && r != -ENOTCONN) {
			r = r ? r : shim_neg(REAL_CALL(splice, in, off_in, out, off_out, len, flags));
			if (r > 0)
				conn_account_tx(c, r);
		} else {
			r = splice_to_stream(c, s, fd, pfd, len, flags);
		}
		r = shim_ret(r);
	} else if (from_stream && c &&
		   RSOCK_UNLIKELY(atomic_load_explicit(&c->stale, memory_order_relaxed)) &&
		   io_stale_wait(c, fd, 0)) {
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

