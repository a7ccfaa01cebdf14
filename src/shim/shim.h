/* shim.h - what every exported wrapper uses.
 *
 * The shape of a wrapper:
 *
 *   ret name(int fd, ...)
 *   {
 *           if (shim_fast(fd))                  // ready, fd not tracked
 *                   return rsock_real.name(fd, ...);
 *           return name_slow(fd, ...);           // cold path
 *   }
 *
 * The slow path calls shim_conn(fd): it finishes initialisation if needed and
 * returns the fd's conn with a reference, or NULL when the call must go to
 * libc unchanged (untracked fd, the library's own call, broken init). Internal
 * code returns -errno; shim_ret() is the one place that sets errno. */
#ifndef RSOCK_SHIM_H
#define RSOCK_SHIM_H

#include <errno.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/compiler.h"
#include "base/ownfd.h"
#include "core/conn.h"
#include "core/fdtab.h"
#include "init/init.h"
#include "base/real.h"

static inline int shim_fast(int fd)
{
	return RSOCK_LIKELY(rsock_ready()) && RSOCK_LIKELY(!fdtab_maybe_tracked(fd));
}

/* shim_fast() for the calls that close or replace a descriptor (close,
 * fclose, dup2 and dup3 onto it): the library's own descriptors, which the
 * data calls pass straight to libc, take the slow path there. */
static inline int shim_fast_fd(int fd)
{
	return shim_fast(fd) && RSOCK_LIKELY(!ownfd_maybe(fd));
}

/* Finish or wait for initialisation. Returns 1 when the library may act
 * (ready and not inside its own call), 0 for plain passthrough. */
static inline int shim_active(void)
{
	if (RSOCK_UNLIKELY(!rsock_ready()) && rsock_init() != INIT_READY)
		return 0;
	return !rsock_in_lib;
}

/* True in a child that shares its parent's memory (vfork, or clone with
 * CLONE_VM) until it execs: the library's tables are the parent's, the
 * descriptors its own, so what it closes or duplicates must not be
 * recorded (init.h, the home pid). One system call; used where the tables
 * change (close, close_range, closefrom, dup*, fclose), never on the data
 * path. */
static inline int shim_vforked(void)
{
	pid_t *s = rsock_pid_slot;
	pid_t home = s ? __atomic_load_n(&s[1], __ATOMIC_RELAXED)
		       : atomic_load_explicit(&rsock_vfork_pid, memory_order_relaxed);

	return RSOCK_UNLIKELY(home != 0) && (pid_t)syscall(SYS_getpid) != home;
}

static inline struct conn *shim_conn(int fd)
{
	struct conn *c = shim_active() ? fdtab_get(fd) : NULL;

	if (RSOCK_UNLIKELY(c && c->instance)) { /* an epoll instance: not a stream */
		conn_unref(c);
		c = NULL;
	}
	return c;
}

/* The stream of c (on fd) is about to be used where the library cannot
 * follow (stdio, another process through SCM_RIGHTS): one not settled yet
 * declines RDMA (both ends stay on TCP), an RDMA stream is handed over to
 * TCP (the SWITCH exchange), in order. Returns the stream's path object if
 * it was carried by RDMA (now switched: path_prefix_left() bytes that came
 * over RDMA are still to be read here), else NULL. who names the taker in
 * the log. (fd.c) */
struct path_stream;
struct path_stream *shim_to_tcp(struct conn *c, int fd, const char *who);

/* A buffer the kernel would refuse at once (its access_ok): one from 2^56
 * up (beyond any x86-64 or arm64 user space; a pointer such as (void *)-1)
 * or one that wraps. SHIM_NULL_PAGE: addresses below are never mapped, and
 * fault when the kernel copies (io.c, iov_check). */
#if UINTPTR_MAX > 0xffffffffu
#define SHIM_USER_TOP ((uintptr_t)1 << 56)
#else
#define SHIM_USER_TOP ((uintptr_t)0xc0000000u) /* the 3G/1G split */
#endif
#define SHIM_NULL_PAGE ((uintptr_t)4096)

static inline int shim_range_outside(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;

	return n && (a >= SHIM_USER_TOP || n > SHIM_USER_TOP - a);
}

/* n bytes at p that the kernel would refuse, or whose reading would fault
 * (the null page, NULL included). */
static inline int shim_addr_bad(const void *p, size_t n)
{
	return (uintptr_t)p < SHIM_NULL_PAGE || shim_range_outside(p, n);
}

/* The same for an optional pointer: NULL is fine. */
static inline int shim_ptr_bad(const void *p, size_t n)
{
	return p && shim_addr_bad(p, n);
}

/* The one errno helper: r < 0 is -errno. */
static inline long shim_ret(long r)
{
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

/* What a call that succeeds leaves in errno: the application's value, as
 * the kernel's system calls do (programs test errno after a loop of calls,
 * nuttcp among them). The library's own calls on the way may fail and be
 * dealt with (the EAGAIN of a drained channel, a cache file not made yet),
 * so every wrapper's slow path runs inside SHIM_KEPT, which puts the
 * application's value back unless the call fails (-1). The fast path
 * (libc at once) needs nothing. */
#define SHIM_KEPT(call)                                    \
	__extension__({                                    \
		int e0_ = errno;                           \
		__typeof__(call) r_ = (call);              \
		if (RSOCK_LIKELY(r_ != -1))                \
			errno = e0_;                       \
		r_;                                        \
	})

/* The slow path of a wrapper that has a fast one, as a function that keeps
 * errno (SHIM_KEPT) around its body, out of line: the fast path stays a
 * test and a jump (no frame for the saved value). Used as
 *   SHIM_SLOW_FN(ssize_t, read_slow, (int fd, void *buf, size_t n), (fd, buf, n))
 *   { ...the body... }                                                  */
#define SHIM_SLOW_FN(ret, name, params, args)                                 \
	static inline __attribute__((always_inline)) ret name##_body params;  \
	static RSOCK_NOINLINE ret name params                                 \
	{                                                                     \
		return SHIM_KEPT(name##_body args);                           \
	}                                                                     \
	static inline __attribute__((always_inline)) ret name##_body params

/* shim_active() for a call that goes to libc afterwards whatever it says:
 * the initialisation it may run leaves errno alone. */
static RSOCK_NOINLINE RSOCK_MAYBE_UNUSED int shim_active_quiet(void)
{
	int e0 = errno, r = shim_active();

	errno = e0;
	return r;
}

/* -errno of a libc-style result (r == -1 with errno set). */
static inline long shim_neg(long r)
{
	return r < 0 ? -errno : r;
}

/* Call the real function, or fail with ENOSYS when libc did not give us one. */
#define REAL_CALL(name, ...) \
	(RSOCK_LIKELY(rsock_real.name != NULL) ? rsock_real.name(__VA_ARGS__) : (errno = ENOSYS, -1))

/* Body of a wrapper that hands an fd call to libc unchanged (the fd table is
 * consulted on the slow path only). */
#define SHIM_PASS_FD(name, fd, ...)                                  \
	do {                                                         \
		if (shim_fast(fd))                                   \
			return rsock_real.name(__VA_ARGS__);         \
		shim_active_quiet();                                 \
		return REAL_CALL(name, __VA_ARGS__);                 \
	} while (0)

/* glibc's FORTIFY entry points, declared by no public header we compile with. */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, __SOCKADDR_ARG addr,
		       socklen_t *alen);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask,
		size_t fdslen);
extern void __chk_fail(void) __attribute__((noreturn));

/* Start tracking a new descriptor of an eligible socket. Returns its conn with
 * a reference for the caller, or NULL: an fd that cannot be tracked simply
 * stays on kernel TCP. */
struct conn *shim_track_new(int fd, int domain, enum conn_role role, enum conn_path path,
			    int nonblock);

/* The application closed or replaced fd: forget it. */
void shim_forget(int fd);

#endif
