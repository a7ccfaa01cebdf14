/* shim/epoll.c - epoll. Registrations of streams carried by kernel TCP are
 * the kernel's; an instance that holds RDMA streams is driven by event/epoll/,
 * and an instance that holds none costs a table lookup per wait and passes
 * through event/epoll/ too (wait.c). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include "shim/shim.h"

#include "event/epoll.h"

/* A new epoll descriptor (or -1 from libc) is tracked. */
static int track_new(int fd)
{
	if (fd >= 0 && shim_active())
		ep_track_new(fd);
	return fd;
}

RSOCK_EXPORT int epoll_create(int size)
{
	return SHIM_KEPT(track_new(REAL_CALL(epoll_create, size)));
}

RSOCK_EXPORT int epoll_create1(int flags)
{
	return SHIM_KEPT(track_new(REAL_CALL(epoll_create1, flags)));
}

SHIM_SLOW_FN(int, epoll_ctl_slow, (int epfd, int op, int fd, struct epoll_event *ev), (epfd, op, fd, ev))
{
	struct conn *c;
	int rc;

	if (!(c = shim_conn(fd)))
		return REAL_CALL(epoll_ctl, epfd, op, fd, ev);
	rc = ep_ctl(epfd, op, fd, c, ev);
	conn_unref(c);
	if (rc == EP_PASS)
		return REAL_CALL(epoll_ctl, epfd, op, fd, ev);
	return (int)shim_ret(rc);
}

RSOCK_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (shim_fast(fd))
		return rsock_real.epoll_ctl(epfd, op, fd, ev);
	return epoll_ctl_slow(epfd, op, fd, ev);
}

/* The wait of an instance event/epoll/ drives (its result), else that of
 * the kernel's epoll_pwait2 or, without it, of real (epoll_pwait's
 * arguments, timeout ms). */
SHIM_SLOW_FN(int, wait_slow,
	     (int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
	      const sigset_t *mask, int timeout, int use_pwait2),
	     (epfd, ev, max, tmo, mask, timeout, use_pwait2))
{
	struct conn *c;
	int rc = EP_PASS;

	if (shim_active() && (c = fdtab_get(epfd))) {
		if (c->instance)
			rc = ep_wait(c, epfd, ev, max, tmo, mask);
		conn_unref(c);
	}
	if (rc != EP_PASS)
		return (int)shim_ret(rc);
	if (use_pwait2)
		return REAL_CALL(epoll_pwait2, epfd, ev, max, tmo, mask);
	return REAL_CALL(epoll_pwait, epfd, ev, max, timeout, mask);
}

static const struct timespec *ms_to_ts(int timeout, struct timespec *ts)
{
	if (timeout < 0)
		return NULL;
	ts->tv_sec = timeout / 1000;
	ts->tv_nsec = (timeout % 1000) * 1000000L;
	return ts;
}

RSOCK_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	struct timespec ts;

	if (shim_fast(epfd))
		return rsock_real.epoll_wait(epfd, ev, max, timeout);
	return wait_slow(epfd, ev, max, ms_to_ts(timeout, &ts), NULL, timeout, 0);
}

RSOCK_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
			     const sigset_t *mask)
{
	struct timespec ts;

	if (shim_fast(epfd))
		return rsock_real.epoll_pwait(epfd, ev, max, timeout, mask);
	return wait_slow(epfd, ev, max, ms_to_ts(timeout, &ts), mask, timeout, 0);
}

RSOCK_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
			      const sigset_t *mask)
{
	if (shim_fast(epfd) || !rsock_real.epoll_pwait2)
		return REAL_CALL(epoll_pwait2, epfd, ev, max, tmo, mask);
	return wait_slow(epfd, ev, max, tmo, mask, -1, 1);
}
