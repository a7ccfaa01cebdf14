/* epoll.h - epoll instances that watch streams carried by RDMA.
 *
 * The application's descriptor of an RDMA stream is a quiet kernel socket, so
 * the kernel cannot say when the stream is readable or writable. An epoll
 * instance that holds such streams therefore has a shadow (struct ep, the
 * instance's conn's `instance`): one item per RDMA stream with the
 * application's events and data, a ready list the library re-polls (like the
 * kernel's own), and in the kernel set, tagged with the item, the stream's
 * completion channel and control connection, so that a completion or a
 * peer's FIN wakes the sleeper. Streams carried by TCP stay plain kernel
 * registrations. An eventfd in the set (the instance's readyfd) is readable
 * while the ready list is not empty, which makes the instance readable for an
 * outer epoll, poll or select that nests it. doc/design.md, "Readiness".
 * The implementation is src/event/epoll/ (instance.c, item.c, ctl.c, wait.c).
 *
 * ep_ctl and ep_wait return 0 or a count, -errno, or EP_PASS: not ours, the
 * caller makes the same call to the kernel unchanged. */
#ifndef RSOCK_EPOLL_H
#define RSOCK_EPOLL_H

#include <signal.h>
#include <sys/epoll.h>
#include <time.h>

#include "base/compiler.h"
#include "core/conn.h"

struct ep;

/* Not ours: call the kernel (a positive value no count reaches: the kernel
 * caps epoll_wait's maxevents at INT_MAX / sizeof(struct epoll_event)). */
#define EP_PASS (1 << 30)

/* Track a new epoll descriptor (epoll_create*). Failure is harmless: an
 * untracked instance gets its shadow when it first receives an RDMA stream. */
void ep_track_new(int epfd);

/* epoll_ctl() for a tracked socket: sc is fd's conn (caller's reference).
 * Returns 0 or -errno when handled, or EP_PASS. Takes the global epoll lock,
 * then the instance's. */
int ep_ctl(int epfd, int op, int fd, struct conn *sc, struct epoll_event *ev);

/* epoll_pwait2() on a tracked instance epfd (epc its conn, epc->instance
 * set, caller's reference). tmo NULL = forever. Returns the number of events
 * or -errno (never EP_PASS). An instance that holds no RDMA stream is the
 * kernel's alone, but its answer still passes through here (another thread
 * may give it its first stream, and our tags, meanwhile). Takes ep->lock,
 * never while sleeping. */
int ep_wait(struct conn *epc, int epfd, struct epoll_event *evs, int max,
	    const struct timespec *tmo, const sigset_t *mask);

/* Whether an epoll instance holds the stream c (an item of it). Takes the
 * global epoll lock, unless no instance holds any stream. */
int ep_stream_watched(struct conn *c);

/* conn_hooks.stream_closed: the last descriptor of the stream c was closed:
 * remove it from every instance (the kernel drops a closed file's
 * registrations too). Takes the global epoll lock, then each instance's,
 * unless no instance holds any stream. */
void ep_conn_closed(struct conn *c);

/* conn_hooks.instance_free: the last reference of an epoll conn is gone:
 * free its shadow (a struct ep). */
void ep_destroy(void *shadow);

/* conn_hooks.stream_converted: a stream turned RDMA (connect, accept):
 * instances that registered it while undecided convert their kernel
 * registration at their next wait. Lock-free. */
void ep_stream_converted(void);

/* The instance ep is watched from outside (poll, select, or an outer
 * epoll): from now on its streams' completion events are always requested
 * (no lazy arming), since the outer wait sleeps on them. Takes ep->lock. */
void ep_nested(struct ep *ep);

/* For init.c's pthread_atfork handlers: the global epoll lock is held
 * across fork(). */
void ep_fork_lock(void);
void ep_fork_unlock(void);

#endif
