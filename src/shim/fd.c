/* shim/fd.c - descriptor management: close, close_range, closefrom, dup,
 * dup2, dup3, fcntl, fcntl64 and ioctl. A stream object is shared by every
 * descriptor that refers to it and dies with the last one. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <fcntl.h>
#include <linux/close_range.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#include "shim/shim.h"

#include "negotiate/cm.h"
#include "path/handover.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/ownfd.h"
#include "path/path.h"

void shim_forget(int fd)
{
	conn_unref(fdtab_take(fd));
}

/* One of the library's own descriptors (fdtab.h): the application never
 * opened it, so it may not close or replace it. */
static int is_own_fd(int fd)
{
	return fd >= 0 && ownfd_is(fd);
}

/* A stream on TCP at whose head a late negotiation message may still wait
 * unread (conn.h's stale): the kernel closes a socket with unread bytes
 * with a reset, which drops what the application wrote and the peer has
 * not yet read, where over kernel TCP the application's last bytes and the
 * end arrive. So the last descriptor's close drops the message first when
 * it is there, whole (a message that arrives after the close still meets a
 * reset: the handshake's bounds make that rare). Bytes of the
 * application's at the head stay: a reset then, as TCP's. */
static RSOCK_COLD void close_drop_stale(struct conn *c, int fd)
{
	pthread_mutex_lock(&c->lock);
	int st = atomic_load(&c->stale);
	if (st != CM_STALE_NONE && atomic_load(&c->nfds) == 1) {
		int64_t until = clock_now_ms() + CM_STALE_PARTIAL_MS;
		/* Its beginning only: the rest is on its way. */
		while (cm_drop_stale(fd, &st) == -EINPROGRESS && clock_left_ms(until))
			usleep(200);
		atomic_store(&c->stale, st);
	}
	pthread_mutex_unlock(&c->lock);
}

SHIM_SLOW_FN(int, close_slow, (int fd), (fd))
{
	if (shim_active()) {
		struct conn *c;

		if (is_own_fd(fd)) {
			errno = EBADF;
			return -1;
		}
		/* Forget first: once closed, the number may be reused at once
		 * (not in a vfork child: the tables are the parent's). */
		if (!shim_vforked()) {
			if ((c = shim_conn(fd))) {
				if (RSOCK_UNLIKELY(atomic_load_explicit(&c->stale, memory_order_relaxed)))
					close_drop_stale(c, fd);
				conn_unref(c);
			}
			shim_forget(fd);
		}
	}
	return REAL_CALL(close, fd);
}

RSOCK_EXPORT int close(int fd)
{
	if (shim_fast_fd(fd))
		return rsock_real.close(fd);
	return close_slow(fd);
}

static int sys_close_range(unsigned lo, unsigned hi, int flags)
{
	if (rsock_real.close_range)
		return rsock_real.close_range(lo, hi, flags);
	return (int)syscall(SYS_close_range, lo, hi, flags);
}

/* close_range() that passes over the library's own descriptors. */
static int close_range_sparing(unsigned lo, unsigned hi, int flags)
{
	int *own, n, rc = 0;
	unsigned from = lo;

	if (!(flags & CLOSE_RANGE_CLOEXEC) && !shim_vforked())
		fdtab_remove_range(lo, hi);
	n = ownfd_list(lo, hi, &own);
	if (n < 0) /* no memory to spare them: the application's call first */
		return sys_close_range(lo, hi, flags);
	for (int i = 0; i < n && !rc; i++) {
		if ((unsigned)own[i] > from)
			rc = sys_close_range(from, (unsigned)own[i] - 1, flags);
		from = (unsigned)own[i] + 1;
	}
	if (!rc && from <= hi && (n == 0 || (unsigned)own[n - 1] < hi))
		rc = sys_close_range(from, hi, flags);
	free(own);
	return rc;
}

RSOCK_EXPORT int close_range(unsigned int lo, unsigned int hi, int flags)
{
	/* What the kernel refuses (EINVAL) closes nothing: forget nothing. */
	return SHIM_KEPT(!shim_active() || lo > hi || (flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC))
				 ? sys_close_range(lo, hi, flags)
				 : close_range_sparing(lo, hi, flags));
}

static void closefrom_slow(int lo)
{
	if (lo < 0)
		lo = 0; /* glibc clamps a negative bound: everything is closed */
	if (!shim_active() || !rsock_real.closefrom) {
		if (rsock_real.closefrom)
			rsock_real.closefrom(lo);
		return;
	}
	if (close_range_sparing((unsigned)lo, ~0u, 0) == 0)
		return;
	/* Like glibc: no close_range in the kernel, close one by one. */
	if (!shim_vforked())
		fdtab_remove_range((unsigned)lo, ~0u);
	int *own, n = ownfd_list((unsigned)lo, ~0u, &own), k = 0;
	for (int fd = lo; fd < 65536; fd++) {
		while (k < n && own[k] < fd)
			k++;
		if (k < n && own[k] == fd)
			continue;
		rsock_real.close(fd);
	}
	if (n > 0)
		free(own);
}

RSOCK_EXPORT void closefrom(int lo)
{
	int e0 = errno; /* closefrom returns nothing and never fails */

	closefrom_slow(lo);
	errno = e0;
}

/* stdio will carry the stream of c (on fd): glibc's FILE functions (fgets,
 * fprintf, fclose...) call read, write and close inside libc, where no
 * interposer sees them, so they would read the kernel socket of an RDMA
 * stream (nothing, or the client's hello on a server's stream not yet
 * settled) and write past the library; the same holds for another process
 * the descriptor is sent to (SCM_RIGHTS, io.c). The stream goes to kernel
 * TCP first (shim_to_tcp, shim.h). So does a stream put on descriptor 1
 * or 2 (dup_track): stdout and stderr write there, and bash's builtins
 * (echo, printf) write through stdout after `>&3` (dup2(3, 1)): the bytes
 * went on the quiet kernel socket, where the peer's library dropped them
 * as stray control bytes. (A dup onto descriptor 0 does not count: bash
 * makes one for every `read line <&3` and reads with read(); a program
 * that reads stdin with stdio after such a dup is not seen.) */
struct path_stream *shim_to_tcp(struct conn *c, int fd, const char *who)
{
	struct path_stream *s;

	if (atomic_load(&c->hello_due))
		conn_settle(c, fd, CONN_SETTLE_FULL);
	s = atomic_load(&c->path) == CONN_PATH_RDMA ? c->stream : NULL;
	if (s && !path_switched(s)) {
		log_debug("fd %d: %s takes the stream: it moves to TCP", fd, who);
		if (path_handover(s))
			log_warn_rl("fd %d: %s takes an RDMA stream that could not move to TCP", fd, who);
	}
	return s && path_switched(s) ? s : NULL;
}

/* Bytes that came over RDMA and are not read yet go back into in, so that
 * its first reads return them. */
static void prefix_to_file(struct path_stream *s, FILE *in, int fd)
{
	size_t n = path_prefix_left(s);
	uint8_t *b = n ? malloc(n) : NULL;
	struct iovec v = {b, n};
	ssize_t r = b ? path_recv(s, &v, 1, MSG_DONTWAIT, 1) : 0;

	/* glibc takes back any number of bytes (a growing backup area) */
	for (ssize_t i = r - 1; i >= 0; i--)
		if (ungetc(b[i], in) == EOF) {
			log_warn_rl("fd %d: %zd bytes that came over RDMA are lost to stdio", fd, i + 1);
			break;
		}
	free(b);
}

/* In a vfork child, which is about to exec: the new image will hold the
 * stream of oldfd under another number (Python's subprocess dup2s a socket
 * given as stdin or stdout). Nothing is recorded in the tables, which are
 * the parent's; the exec hands the stream over as an inherited one
 * (handover.h). */
static void vforked_dup(int oldfd, int newfd)
{
	struct conn *c = fdtab_get(oldfd);

	if (!c)
		return;
	if (!c->instance) {
		log_debug("fd %d: a vfork child gives the stream another number", oldfd);
		ho_vfork_dup(oldfd, newfd, atomic_load(&c->path) == CONN_PATH_RDMA ? c->stream : NULL);
	}
	conn_unref(c);
}

/* newfd now refers to what oldfd refers to (after a successful dup). */
static void dup_track(int oldfd, int newfd)
{
	struct conn *c;

	if (shim_vforked()) {
		vforked_dup(oldfd, newfd);
		return;
	}
	c = fdtab_get(oldfd);
	if (!c) {
		shim_forget(newfd);
		return;
	}
	if (fdtab_insert(newfd, c))
		log_warn_rl("dup: fd %d cannot be tracked", newfd);
	else if (newfd == STDOUT_FILENO || newfd == STDERR_FILENO)
		shim_to_tcp(c, newfd, newfd == STDOUT_FILENO ? "stdout" : "stderr");
	conn_unref(c);
}

/* fclose closes its descriptor inside libc: forget the stream first, as
 * close() does (the number may be reused at once). */
RSOCK_EXPORT int fclose(FILE *f)
{
	int fd = f ? fileno(f) : -1; /* -1 for a FILE without a descriptor */

	if (!rsock_real.fclose) {
		errno = ENOSYS;
		return EOF;
	}
	if (fd >= 0 && !shim_fast_fd(fd)) {
		int e0 = errno;
		if (shim_active() && !shim_vforked() && !is_own_fd(fd))
			shim_forget(fd);
		errno = e0;
	}
	return rsock_real.fclose(f);
}

RSOCK_EXPORT FILE *fdopen(int fd, const char *mode)
{
	int reads = mode && (mode[0] == 'r' || strchr(mode, '+'));
	struct conn *c;
	struct path_stream *s;
	FILE *f;

	if (!rsock_real.fdopen) {
		errno = ENOSYS;
		return NULL;
	}
	if (shim_fast(fd))
		return rsock_real.fdopen(fd, mode);
	int e0 = errno;
	if (!(c = shim_conn(fd))) {
		errno = e0;
		return rsock_real.fdopen(fd, mode);
	}
	s = shim_to_tcp(c, fd, "stdio");
	errno = e0;
	f = rsock_real.fdopen(fd, mode);
	if (f && reads && s)
		prefix_to_file(s, f, fd);
	conn_unref(c);
	if (f)
		errno = e0;
	return f;
}

RSOCK_EXPORT int dup(int fd)
{
	int nfd;

	if (shim_fast(fd))
		return rsock_real.dup(fd);
	nfd = REAL_CALL(dup, fd);
	if (nfd >= 0) {
		int saved = errno;
		if (shim_active())
			dup_track(fd, nfd);
		errno = saved;
	}
	return nfd;
}

/* dup2/dup3 onto newfd: whatever newfd was is gone. */
SHIM_SLOW_FN(int, dup_onto, (int oldfd, int newfd, int flags, int is3), (oldfd, newfd, flags, is3))
{
	int r, saved, own, active = shim_active();

	if (!is3 && oldfd == newfd)
		return REAL_CALL(dup2, oldfd, newfd);
	own = active && !shim_vforked() && is_own_fd(newfd);
	if (own && newfd != log_fd_get()) {
		/* One of our channels, wake-up eventfds, pipes or devices: it cannot move from
		 * under the objects that use it. Refused as the kernel refuses
		 * a dup2 that races an open(). */
		log_warn_rl("dup2 onto fd %d, which the library uses: refused (EBUSY)", newfd);
		errno = EBUSY;
		return -1;
	}
	r = is3 ? REAL_CALL(dup3, oldfd, newfd, flags) : REAL_CALL(dup2, oldfd, newfd);
	if (r < 0 || !active)
		return r;
	saved = errno;
	if (own) { /* the log file: it is opened again elsewhere */
		ownfd_forget(newfd);
		int nfd = log_fd_lost();
		if (nfd >= 0)
			ownfd_mark(nfd);
	}
	dup_track(oldfd, newfd);
	errno = saved;
	return r;
}

RSOCK_EXPORT int dup2(int oldfd, int newfd)
{
	if (shim_fast(oldfd) && shim_fast_fd(newfd))
		return rsock_real.dup2(oldfd, newfd);
	return dup_onto(oldfd, newfd, 0, 0);
}

RSOCK_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	if (shim_fast(oldfd) && shim_fast_fd(newfd))
		return rsock_real.dup3(oldfd, newfd, flags);
	return dup_onto(oldfd, newfd, flags, 1);
}

/* fcntl's optional argument is read as a pointer whatever its type, as glibc
 * itself does: on the LP64 ABIs an int vararg occupies a full slot, and the
 * real fcntl reads it back as the type the command expects. */
SHIM_SLOW_FN(int, fcntl_slow, (int (*real)(int, int, ...), int fd, int cmd, void *arg),
	     (real, fd, cmd, arg))
{
	int r, saved;

	if (!real)
		return (errno = ENOSYS, -1);
	shim_active();
	r = real(fd, cmd, arg);
	if (r < 0 || !shim_active())
		return r;
	saved = errno;
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
		dup_track(fd, r);
	} else if (cmd == F_SETFL) {
		struct conn *c = fdtab_get(fd);
		if (c)
			atomic_store(&c->nonblock, !!((long)arg & O_NONBLOCK));
		conn_unref(c);
	}
	errno = saved;
	return r;
}

RSOCK_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (shim_fast(fd))
		return rsock_real.fcntl(fd, cmd, arg);
	return fcntl_slow(rsock_real.fcntl, fd, cmd, arg);
}

RSOCK_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (shim_fast(fd) && rsock_real.fcntl64)
		return rsock_real.fcntl64(fd, cmd, arg);
	return fcntl_slow(rsock_real.fcntl64 ? rsock_real.fcntl64 : rsock_real.fcntl, fd, cmd, arg);
}

SHIM_SLOW_FN(int, ioctl_slow, (int fd, unsigned long req, void *arg), (fd, req, arg))
{
	struct conn *c = shim_conn(fd);
	int r;

	if (req == FIONREAD)
		conn_settle_maybe(c, fd);
	/* A pointer the kernel would refuse goes to it, which says EFAULT. */
	if (c && req == FIONREAD && atomic_load(&c->path) == CONN_PATH_RDMA &&
	    !shim_addr_bad(arg, sizeof(int))) {
		*(int *)arg = path_readable_bytes(c->stream);
		conn_unref(c);
		return 0;
	}
	r = REAL_CALL(ioctl, fd, req, arg);
	if (c && r == 0 && req == FIONBIO && arg)
		atomic_store(&c->nonblock, *(int *)arg != 0);
	conn_unref(c);
	return r;
}

RSOCK_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (shim_fast(fd))
		return rsock_real.ioctl(fd, req, arg);
	return ioctl_slow(fd, req, arg);
}
