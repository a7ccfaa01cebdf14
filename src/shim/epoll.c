/* shim/epoll.c - epoll. Registrations of streams carried by kernel TCP are
 * the kernel's; an instance that holds RDMA streams is driven by event/epoll/,
 * and an instance that holds none costs a table lookup per wait and passes
 * through event/epoll/ too (wait.c). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include "shim/shim.h"

#include "event/epoll.h"

/* A new epoll descriptor (or -1 from libc) is tracked; errno is kept. */
static int track_new(int fd)
{
	if (fd >= 0 && shim_active()) {
		int saved = errno;
		ep_track_new(fd);
		errno = saved;
	}
	return fd;
}

RSOCK_EXPORT int epoll_create(int size)
{
	return track_new(REAL_CALL(epoll_create, size));
}

RSOCK_EXPORT int epoll_create1(int flags)
{
	return track_new(REAL_CALL(epoll_create1, flags));
}

RSOCK_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct conn *c;
	int rc;

	if (shim_fast(fd))
		return rsock_real.epoll_ctl(epfd, op, fd, ev);
	if (!(c = shim_conn(fd)))
		return REAL_CALL(epoll_ctl, epfd, op, fd, ev);
	rc = ep_ctl(epfd, op, fd, c, ev);
	conn_unref(c);
	if (rc == EP_PASS)
		return REAL_CALL(epoll_ctl, epfd, op, fd, ev);
	return (int)shim_ret(rc);
}

/* The wait of an instance event/epoll/ drives, or EP_PASS. */
static int wait_slow(int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
		     const sigset_t *mask)
{
	struct conn *c;
	int rc;

	if (!shim_active() || !(c = fdtab_get(epfd)))
		return EP_PASS;
	rc = c->instance ? ep_wait(c, epfd, ev, max, tmo, mask) : EP_PASS;
	conn_unref(c);
	return rc;
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
	int rc;

	if (shim_fast(epfd))
		return rsock_real.epoll_wait(epfd, ev, max, timeout);
	rc = wait_slow(epfd, ev, max, ms_to_ts(timeout, &ts), NULL);
	if (rc == EP_PASS)
		return REAL_CALL(epoll_wait, epfd, ev, max, timeout);
	return (int)shim_ret(rc);
}

RSOCK_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
			     const sigset_t *mask)
{
	struct timespec ts;
	int rc;

	if (shim_fast(epfd))
		return rsock_real.epoll_pwait(epfd, ev, max, timeout, mask);
	rc = wait_slow(epfd, ev, max, ms_to_ts(timeout, &ts), mask);
	if (rc == EP_PASS)
		return REAL_CALL(epoll_pwait, epfd, ev, max, timeout, mask);
	return (int)shim_ret(rc);
}

RSOCK_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
			      const sigset_t *mask)
{
	int rc;

	if (shim_fast(epfd) || !rsock_real.epoll_pwait2)
		return REAL_CALL(epoll_pwait2, epfd, ev, max, tmo, mask);
	rc = wait_slow(epfd, ev, max, tmo, mask);
	if (rc == EP_PASS)
		return REAL_CALL(epoll_pwait2, epfd, ev, max, tmo, mask);
	return (int)shim_ret(rc);
}
