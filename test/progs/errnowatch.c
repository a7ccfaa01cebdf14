/* errnowatch.c - a preload object that checks errno across the socket API,
 * for the tests: put before librsock in LD_PRELOAD, it sees every call the
 * application makes first. Before passing a call on it sets errno to a mark
 * the call has no reason to produce; afterwards a call that succeeded must
 * have left the mark alone (the kernel's system calls never touch errno on
 * success, and programs rely on it: nuttcp tests errno after its transfer
 * loop), and a call that failed must have set errno. Each breach is a line
 * in the file ERRNOWATCH_LOG (the call, its result, errno); the application
 * then gets errno as it would have it (restored after a success).
 *
 * Run over kernel TCP alone, the log stays empty: the yardstick. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

ssize_t __read_chk(int fd, void *b, size_t n, size_t bl);
ssize_t __recv_chk(int fd, void *b, size_t n, size_t bl, int f);
int fcntl64(int fd, int cmd, ...);

#define MARK 4093 /* no call returns this errno */

static void note(const char *name, long r, int e)
{
	const char *path = getenv("ERRNOWATCH_LOG");
	char line[160];
	int n, fd;

	if (!path)
		return;
	n = snprintf(line, sizeof(line), "%s returned %ld %s errno %d\n", name, r,
		     r == -1 ? "without setting" : "but changed", e);
	fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (syscall(SYS_write, fd, line, (size_t)n) < 0)
		(void)0;
	syscall(SYS_close, fd);
}

/* After the call: r is its result, -1 on failure. */
static void check(const char *name, long r, int e0)
{
	int e = errno;

	if ((r == -1) == (e == MARK))
		note(name, r, e);
	if (r != -1)
		errno = e0;
	else if (e == MARK)
		errno = EIO; /* never let the mark escape */
}

static void *next(const char *name)
{
	int e = errno;
	void *f = dlsym(RTLD_NEXT, name);

	errno = e;
	return f;
}

/* WATCH(ret, name, (params), (args)): the wrapper of name. */
#define WATCH(ret, name, params, args)                                  \
	ret name params                                                 \
	{                                                               \
		static ret(*real_) params;                              \
		int e0_;                                                \
		ret r_;                                                 \
		if (!real_)                                             \
			real_ = (ret(*) params)next(#name);             \
		e0_ = errno;                                            \
		errno = MARK;                                           \
		r_ = real_ args;                                        \
		check(#name, (long)r_, e0_);                            \
		return r_;                                              \
	}

WATCH(int, socket, (int d, int t, int p), (d, t, p))
WATCH(int, socketpair, (int d, int t, int p, int sv[2]), (d, t, p, sv))
WATCH(int, bind, (int fd, const struct sockaddr *a, socklen_t l), (fd, a, l))
WATCH(int, listen, (int fd, int b), (fd, b))
WATCH(int, accept, (int fd, struct sockaddr *a, socklen_t *l), (fd, a, l))
WATCH(int, accept4, (int fd, struct sockaddr *a, socklen_t *l, int f), (fd, a, l, f))
WATCH(int, connect, (int fd, const struct sockaddr *a, socklen_t l), (fd, a, l))
WATCH(int, shutdown, (int fd, int how), (fd, how))
WATCH(int, getsockopt, (int fd, int lv, int n, void *v, socklen_t *l), (fd, lv, n, v, l))
WATCH(int, setsockopt, (int fd, int lv, int n, const void *v, socklen_t l), (fd, lv, n, v, l))
WATCH(int, getsockname, (int fd, struct sockaddr *a, socklen_t *l), (fd, a, l))
WATCH(int, getpeername, (int fd, struct sockaddr *a, socklen_t *l), (fd, a, l))
WATCH(ssize_t, read, (int fd, void *b, size_t n), (fd, b, n))
WATCH(ssize_t, write, (int fd, const void *b, size_t n), (fd, b, n))
WATCH(ssize_t, readv, (int fd, const struct iovec *v, int n), (fd, v, n))
WATCH(ssize_t, writev, (int fd, const struct iovec *v, int n), (fd, v, n))
WATCH(ssize_t, recv, (int fd, void *b, size_t n, int f), (fd, b, n, f))
WATCH(ssize_t, send, (int fd, const void *b, size_t n, int f), (fd, b, n, f))
WATCH(ssize_t, recvfrom, (int fd, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l),
      (fd, b, n, f, a, l))
WATCH(ssize_t, sendto, (int fd, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l),
      (fd, b, n, f, a, l))
WATCH(ssize_t, recvmsg, (int fd, struct msghdr *m, int f), (fd, m, f))
WATCH(ssize_t, sendmsg, (int fd, const struct msghdr *m, int f), (fd, m, f))
WATCH(int, recvmmsg, (int fd, struct mmsghdr *m, unsigned n, int f, struct timespec *t),
      (fd, m, n, f, t))
WATCH(int, sendmmsg, (int fd, struct mmsghdr *m, unsigned n, int f), (fd, m, n, f))
WATCH(ssize_t, __read_chk, (int fd, void *b, size_t n, size_t bl), (fd, b, n, bl))
WATCH(ssize_t, __recv_chk, (int fd, void *b, size_t n, size_t bl, int f), (fd, b, n, bl, f))
WATCH(ssize_t, sendfile, (int out, int in, off_t *o, size_t n), (out, in, o, n))
WATCH(ssize_t, splice, (int a, loff_t *ao, int b, loff_t *bo, size_t n, unsigned f),
      (a, ao, b, bo, n, f))
WATCH(int, close, (int fd), (fd))
WATCH(int, dup, (int fd), (fd))
WATCH(int, dup2, (int a, int b), (a, b))
WATCH(int, dup3, (int a, int b, int f), (a, b, f))
WATCH(int, poll, (struct pollfd *p, nfds_t n, int t), (p, n, t))
WATCH(int, ppoll, (struct pollfd *p, nfds_t n, const struct timespec *t, const sigset_t *m),
      (p, n, t, m))
WATCH(int, select, (int n, fd_set *r, fd_set *w, fd_set *x, struct timeval *t), (n, r, w, x, t))
WATCH(int, pselect, (int n, fd_set *r, fd_set *w, fd_set *x, const struct timespec *t, const sigset_t *m),
      (n, r, w, x, t, m))
WATCH(int, epoll_create, (int n), (n))
WATCH(int, epoll_create1, (int f), (f))
WATCH(int, epoll_ctl, (int ep, int op, int fd, struct epoll_event *e), (ep, op, fd, e))
WATCH(int, epoll_wait, (int ep, struct epoll_event *e, int n, int t), (ep, e, n, t))
WATCH(int, epoll_pwait, (int ep, struct epoll_event *e, int n, int t, const sigset_t *m),
      (ep, e, n, t, m))

/* fcntl, fcntl64 (what _FILE_OFFSET_BITS=64 programs call) and ioctl:
 * the optional argument as a pointer-sized word, as glibc reads it. */
static int vararg_watched(const char *name, int fd, unsigned long op, void *arg)
{
	int (*real)(int, unsigned long, void *) = (int (*)(int, unsigned long, void *))next(name);
	int e0 = errno, r;

	errno = MARK;
	r = real(fd, op, arg);
	check(name, r, e0);
	return r;
}

#define ARG_OF(last)                               \
	__extension__({                            \
		va_list ap_;                       \
		void *a_;                          \
		va_start(ap_, last);               \
		a_ = va_arg(ap_, void *);          \
		va_end(ap_);                       \
		a_;                                \
	})

int fcntl(int fd, int cmd, ...)
{
	return vararg_watched("fcntl", fd, (unsigned long)cmd, ARG_OF(cmd));
}

int fcntl64(int fd, int cmd, ...)
{
	return vararg_watched("fcntl64", fd, (unsigned long)cmd, ARG_OF(cmd));
}

int ioctl(int fd, unsigned long req, ...)
{
	return vararg_watched("ioctl", fd, req, ARG_OF(req));
}
