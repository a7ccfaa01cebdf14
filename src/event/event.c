/* event.c - see event.h: poll and select over sets that hold RDMA streams. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "event/event.h"
#include "event/epoll.h"
#include "core/conn.h"
#include "core/fdtab.h"
#include "base/clock.h"
#include "base/real.h"
#include "path/path.h"

int event_fd_is_rdma(int fd)
{
	struct conn *c;
	int rdma;

	if (!fdtab_maybe_tracked(fd) || !(c = fdtab_get(fd)))
		return 0;
	if (c->instance)
		ep_nested(c->instance); /* an epoll instance polled or selected */
	conn_settle_maybe(c, fd);
	rdma = atomic_load_explicit(&c->path, memory_order_relaxed) == CONN_PATH_RDMA &&
	       !path_kernel_only(c->stream);
	conn_unref(c);
	return rdma;
}

int event_any_rdma_pollfd(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (event_fd_is_rdma(fds[i].fd))
			return 1;
	return 0;
}

int event_any_rdma_fdset(int nfds, const fd_set *r, const fd_set *w, const fd_set *e)
{
	for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++)
		if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) &&
		    event_fd_is_rdma(fd))
			return 1;
	return 0;
}

#define EV_SMALL 16

/* The streams' waits begun by path_wait_fd are over (again: nothing). */
static void sleep_end(struct conn **cs, struct path_waiter *slept, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (cs[i])
			path_wait_end(cs[i]->stream, &slept[i]);
}

/* cs[i]: the conn of fds[i] (a reference) when it is an RDMA stream, else
 * NULL. */
static void streams_collect(const struct pollfd *fds, nfds_t n, struct conn **cs)
{
	for (nfds_t i = 0; i < n; i++) {
		struct conn *c = fdtab_maybe_tracked(fds[i].fd) ? fdtab_get(fds[i].fd) : NULL;
		/* An accepted stream settles at its first use, and a wait is
		 * one: until then its kernel socket holds the client's hello,
		 * readable where TCP would have nothing (ncat --broker read
		 * it, got EAGAIN and closed the stream). */
		if (c && c->instance)
			ep_nested(c->instance);
		conn_settle_maybe(c, fds[i].fd);
		if (c && (atomic_load(&c->path) != CONN_PATH_RDMA || path_kernel_only(c->stream))) {
			conn_unref(c);
			c = NULL;
		}
		cs[i] = c;
	}
}

/* The kernel's set ext[]: fds[] with the RDMA streams' entries ignored
 * (fd -1), then per RDMA stream its wait descriptor (if armed, path_wait_fd)
 * and its control connection, then the thread's wake descriptor if a
 * stream armed one. Returns its size. Arms first: a completion after the
 * look that follows wakes the sleep. */
static nfds_t ext_build(const struct pollfd *fds, nfds_t n, struct conn **cs,
			struct pollfd *ext, struct path_waiter *slept)
{
	nfds_t m = n;
	int wake = -1; /* the thread's wake descriptor, polled too when a wait uses it */

	for (nfds_t i = 0; i < n; i++) {
		ext[i] = fds[i];
		ext[i].revents = 0;
		if (!cs[i])
			continue;
		ext[i].fd = -1; /* the kernel ignores it */
		int wfd = path_wait_fd(cs[i]->stream, &slept[i]);
		if (slept[i].fd >= 0)
			wake = slept[i].fd; /* this thread's, whichever stream set it */
		if (wfd >= 0) {
			ext[m].fd = wfd;
			ext[m].events = POLLIN;
			ext[m++].revents = 0;
		}
		ext[m].fd = path_control_fd(cs[i]->stream);
		ext[m].events = POLLIN | POLLRDHUP |
				(path_switched(cs[i]->stream) ? fds[i].events & POLLOUT : 0);
		ext[m++].revents = 0;
	}
	if (wake >= 0) { /* other threads' progress on our streams writes it */
		ext[m].fd = wake;
		ext[m].events = POLLIN;
		ext[m++].revents = 0;
	}
	return m;
}

/* event_poll's three arrays: each is on the stack (its _small twin) for
 * small sets, else allocated (or NULL when that failed). */
static void arrays_free(struct conn **cs, struct conn **cs_small, struct pollfd *ext,
			struct pollfd *ext_small, struct path_waiter *slept,
			struct path_waiter *wq_small)
{
	if (cs != cs_small)
		free(cs);
	if (ext != ext_small)
		free(ext);
	if (slept != wq_small)
		free(slept);
}

/* After a sleep on ext[0 .. m): the streams' waits are done, and a control
 * connection that moved is looked at. */
static void streams_woken(struct conn **cs, nfds_t n, const struct pollfd *ext, nfds_t m)
{
	for (nfds_t i = 0, j = n; i < n; i++) {
		if (!cs[i])
			continue;
		path_wait_done(cs[i]->stream);
		/* ext[] holds, per stream, the wait fd (if armed) then the
		 * control connection. */
		int cfd = path_control_fd(cs[i]->stream);
		while (j < m && ext[j].fd != cfd)
			j++;
		if (j < m && ext[j].revents)
			path_control_event(cs[i]->stream);
	}
}

int event_poll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
	/* A few descriptors (the usual case) need no allocation. */
	struct conn *cs_small[EV_SMALL];
	struct pollfd ext_small[3 * EV_SMALL];
	struct path_waiter wq_small[EV_SMALL];
	struct conn **cs = n <= EV_SMALL ? cs_small : calloc(n, sizeof(*cs));
	struct pollfd *ext = n <= EV_SMALL ? ext_small : calloc(3 * n, sizeof(*ext));
	/* stream i's wait (path_wait_fd, path_wait_end) */
	struct path_waiter *slept = n <= EV_SMALL ? wq_small : calloc(n, sizeof(*slept));
	int64_t deadline = -1; /* the clock is read when a wait begins */
	int64_t tmo_ns = event_tmo_ns(tmo);
	int count = 0, rc = 0;
	struct timespec zero = {0, 0};

	if (!cs || !ext || !slept) {
		arrays_free(cs, cs_small, ext, ext_small, slept, wq_small);
		return -ENOMEM;
	}
	streams_collect(fds, n, cs);
	for (nfds_t i = 0; i < n; i++)
		slept[i].on = 0;
	for (;;) {
		/* Arm first, then look: a completion after the look wakes the sleep. */
		nfds_t m = ext_build(fds, n, cs, ext, slept);

		count = 0;
		for (nfds_t i = 0; i < n; i++) {
			if (!cs[i])
				continue;
			short want = fds[i].events | POLLERR | POLLHUP;
			fds[i].revents = path_poll_events(cs[i]->stream) & want;
			count += fds[i].revents != 0;
		}
		int r = rsock_real.ppoll(ext, n, &zero, NULL);
		if (r < 0) {
			rc = -errno;
			break;
		}
		for (nfds_t i = 0; i < n; i++)
			if (!cs[i]) {
				fds[i].revents = ext[i].revents;
				count += ext[i].revents != 0;
			}
		if (count)
			break;
		struct timespec left, *lp = NULL;
		if (tmo_ns >= 0) {
			int64_t l, now;
			if (!tmo_ns)
				break;
			now = clock_now_ns();
			if (deadline < 0)
				deadline = now + tmo_ns;
			if ((l = deadline - now) <= 0)
				break;
			left.tv_sec = l / 1000000000;
			left.tv_nsec = l % 1000000000;
			lp = &left;
		}
		r = rsock_real.ppoll(ext, m, lp, mask);
		sleep_end(cs, slept, n);
		if (r < 0) {
			rc = -errno; /* EINTR from a signal the mask let through */
			break;
		}
		streams_woken(cs, n, ext, m);
		if (r == 0 && tmo_ns >= 0 && deadline - clock_now_ns() <= 0)
			deadline = clock_now_ns(); /* one last look, then time out */
	}
	sleep_end(cs, slept, n); /* the loop left before sleeping */
	for (nfds_t i = 0; i < n; i++)
		conn_unref(cs[i]);
	arrays_free(cs, cs_small, ext, ext_small, slept, wq_small);
	return rc ? rc : count;
}

int event_select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timespec *tmo,
		 const sigset_t *mask)
{
	struct pollfd *p;
	int n = 0, rc, count = 0;
	/* (Linux's select() leaves the time not slept in *tmo) */
	int64_t tmo_ns = event_tmo_ns(tmo), start = tmo_ns > 0 ? clock_now_ns() : 0;

	if (nfds < 0 || nfds > FD_SETSIZE)
		return -EINVAL;
	p = calloc(nfds ? (size_t)nfds : 1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (r && FD_ISSET(fd, r))
			ev |= POLLIN;
		if (w && FD_ISSET(fd, w))
			ev |= POLLOUT;
		if (e && FD_ISSET(fd, e))
			ev |= POLLPRI;
		if (ev) {
			p[n].fd = fd;
			p[n++].events = ev;
		}
	}
	rc = event_poll(p, (nfds_t)n, tmo, mask);
	if (rc >= 0) {
		for (int i = 0; i < n; i++)
			if (p[i].revents & POLLNVAL) {
				rc = -EBADF;
				break;
			}
	}
	if (rc >= 0) {
		if (r)
			FD_ZERO(r);
		if (w)
			FD_ZERO(w);
		if (e)
			FD_ZERO(e);
		for (int i = 0; i < n; i++) {
			short v = p[i].revents;
			if (r && (p[i].events & POLLIN) && (v & (POLLIN | POLLHUP | POLLERR)))
				FD_SET(p[i].fd, r), count++;
			if (w && (p[i].events & POLLOUT) && (v & (POLLOUT | POLLERR)))
				FD_SET(p[i].fd, w), count++;
			if (e && (p[i].events & POLLPRI) && (v & POLLPRI))
				FD_SET(p[i].fd, e), count++;
		}
		rc = count;
	}
	if (start) {
		int64_t left = tmo_ns - (clock_now_ns() - start);
		if (left < 0)
			left = 0;
		tmo->tv_sec = left / 1000000000;
		tmo->tv_nsec = left % 1000000000;
	}
	free(p);
	return rc;
}
