/* shim/epoll.c - epoll. Kernel-TCP streams are registered as they are; the
 * RDMA readiness path plugs into epoll_ctl for streams carried by RDMA. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include "shim.h"

RSOCK_EXPORT int epoll_create(int size)
{
	shim_active();
	return REAL_CALL(epoll_create, size);
}

RSOCK_EXPORT int epoll_create1(int flags)
{
	shim_active();
	return REAL_CALL(epoll_create1, flags);
}

RSOCK_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	SHIM_PASS_FD(epoll_ctl, fd, epfd, op, fd, ev);
}

RSOCK_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	SHIM_PASS_FD(epoll_wait, epfd, epfd, ev, max, timeout);
}

RSOCK_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
			     const sigset_t *mask)
{
	SHIM_PASS_FD(epoll_pwait, epfd, epfd, ev, max, timeout, mask);
}

RSOCK_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
			      const sigset_t *mask)
{
	shim_active();
	return REAL_CALL(epoll_pwait2, epfd, ev, max, tmo, mask);
}
