/* event.h - readiness for poll/select/epoll. The application's descriptor is
 * the kernel socket, so readiness of streams carried by kernel TCP is the
 * kernel's own; only streams carried by RDMA need the library's help, which
 * these functions detect. */
#ifndef RSOCK_EVENT_H
#define RSOCK_EVENT_H

#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/select.h>
#include <time.h>

#include "base/compiler.h"

/* A time-out in nanoseconds: -1 for none (NULL, or beyond 30 years, which
 * also keeps the product from overflowing), else tv_sec * 1e9 + tv_nsec. */
static inline int64_t event_tmo_ns(const struct timespec *t)
{
	return !t || t->tv_sec > 1000000000 ? -1 : (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* True when one of the descriptors is a stream carried by RDMA. */
int event_any_rdma_pollfd(const struct pollfd *fds, nfds_t n);
int event_any_rdma_fdset(int nfds, const fd_set *r, const fd_set *w, const fd_set *e);
int event_fd_is_rdma(int fd);

/* Wake every epoll instance of the process that watches an RDMA stream so
 * that it looks at its streams again: a completion event it may
 * have slept on was consumed elsewhere (event/epoll/instance.c: it writes
 * the process's kick eventfd). Async-signal-unsafe, lock-free. */
void event_kick(void);

/* ppoll() over a set that holds RDMA streams: kernel descriptors are polled
 * by the kernel, RDMA streams by their transport, and the caller sleeps on
 * both (completion channels and control connections). tmo NULL = forever.
 * Returns the number of ready entries or -errno. Level-triggered, like poll. */
int event_poll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask);

/* pselect() on top of event_poll(); *tmo (if any) receives the time left,
 * as Linux's select() reports it. */
int event_select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timespec *tmo,
		 const sigset_t *mask);

#endif
