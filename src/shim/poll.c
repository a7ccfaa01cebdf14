/* shim/poll.c - poll, ppoll, select, pselect and their FORTIFY variants.
 * Streams carried by kernel TCP are ready exactly when the kernel says so;
 * the RDMA readiness path plugs in where event_any_rdma_*() is true. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include "shim/shim.h"

#include "event/event.h"

#include <sys/resource.h>

/* A count the kernel refuses (EINVAL): beyond RLIMIT_NOFILE's soft limit.
 * Asked only of counts above 1,024 (the limit's usual soft value and
 * floor), where the scan costs more than the system call. */
static RSOCK_COLD int poll_count_bad(nfds_t n)
{
	struct rlimit rl;

	return getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	       n > rl.rlim_cur;
}

/* True when no descriptor of the set is tracked: the kernel alone decides.
 * So does it for an array it would refuse (EFAULT: in the null page or
 * outside user space, shim.h; EINVAL: more entries than descriptors may
 * be open), which must not be read here: poll((void *)-1, 1, 0) crashed
 * any program under the library. */
static inline int poll_fast(const struct pollfd *fds, nfds_t n)
{
	if (n && (n > SIZE_MAX / sizeof(*fds) || shim_addr_bad(fds, n * sizeof(*fds))))
		return 1;
	if (RSOCK_UNLIKELY(n > 1024) && poll_count_bad(n))
		return 1;
	if (RSOCK_UNLIKELY(!rsock_ready()))
		return 0;
	for (nfds_t i = 0; i < n; i++)
		if (fdtab_maybe_tracked(fds[i].fd))
			return 0;
	return 1;
}

SHIM_SLOW_FN(int, poll_slow, (struct pollfd *fds, nfds_t n, int timeout), (fds, n, timeout))
{
	struct timespec ts = {timeout / 1000, (timeout % 1000) * 1000000L};

	if (shim_active() && event_any_rdma_pollfd(fds, n))
		return (int)shim_ret(event_poll(fds, n, timeout < 0 ? NULL : &ts, NULL));
	return REAL_CALL(poll, fds, n, timeout);
}

RSOCK_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (poll_fast(fds, n))
		return rsock_real.poll(fds, n, timeout);
	return poll_slow(fds, n, timeout);
}

SHIM_SLOW_FN(int, ppoll_slow, (struct pollfd *fds, nfds_t n, const struct timespec *tmo,
		       const sigset_t *mask), (fds, n, tmo, mask))
{
	if (!shim_ptr_bad(tmo, sizeof(*tmo)) && shim_active() && event_any_rdma_pollfd(fds, n))
		return (int)shim_ret(event_poll(fds, n, tmo, mask));
	return REAL_CALL(ppoll, fds, n, tmo, mask);
}

RSOCK_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo,
		       const sigset_t *mask)
{
	if (poll_fast(fds, n))
		return rsock_real.ppoll(fds, n, tmo, mask);
	return ppoll_slow(fds, n, tmo, mask);
}

/* An fd_set the kernel would refuse (EFAULT), for the nfds it reads: the
 * kernel says so, the sets are not read here. */
static int fdset_bad(int nfds, const fd_set *s)
{
	size_t bytes = nfds > 0 ? ((size_t)nfds + 63) / 64 * 8 : 0;

	return bytes && shim_ptr_bad(s, bytes);
}

static int fdsets_bad(int nfds, const fd_set *r, const fd_set *w, const fd_set *e)
{
	return fdset_bad(nfds, r) || fdset_bad(nfds, w) || fdset_bad(nfds, e);
}

SHIM_SLOW_FN(int, select_slow, (int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tmo), (nfds, r, w, e, tmo))
{
	if (!fdsets_bad(nfds, r, w, e) && !shim_ptr_bad(tmo, sizeof(*tmo)) && shim_active() &&
	    event_any_rdma_fdset(nfds, r, w, e)) {
		struct timespec ts;
		int rc;
		if (tmo) {
			ts.tv_sec = tmo->tv_sec;
			ts.tv_nsec = tmo->tv_usec * 1000L;
		}
		rc = event_select(nfds, r, w, e, tmo ? &ts : NULL, NULL);
		if (tmo) {
			tmo->tv_sec = ts.tv_sec;
			tmo->tv_usec = ts.tv_nsec / 1000;
		}
		return (int)shim_ret(rc);
	}
	return REAL_CALL(select, nfds, r, w, e, tmo);
}

RSOCK_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tmo)
{
	return select_slow(nfds, r, w, e, tmo);
}

SHIM_SLOW_FN(int, pselect_slow, (int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *tmo,
			 const sigset_t *mask), (nfds, r, w, e, tmo, mask))
{
	if (!fdsets_bad(nfds, r, w, e) && !shim_ptr_bad(tmo, sizeof(*tmo)) && shim_active() &&
	    event_any_rdma_fdset(nfds, r, w, e)) {
		struct timespec ts;
		if (tmo)
			ts = *tmo; /* pselect does not report the time left */
		return (int)shim_ret(event_select(nfds, r, w, e, tmo ? &ts : NULL, mask));
	}
	return REAL_CALL(pselect, nfds, r, w, e, tmo, mask);
}

RSOCK_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *tmo,
			 const sigset_t *mask)
{
	return pselect_slow(nfds, r, w, e, tmo, mask);
}

RSOCK_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return poll(fds, n, timeout);
}

RSOCK_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *tmo,
			     const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return ppoll(fds, n, tmo, mask);
}
