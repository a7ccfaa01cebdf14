/* epoll/internal.h - what the files of src/event/epoll/ share: the shadow of
 * an instance (struct ep), its items, the global registration lock and the
 * kick. Not for other layers (they include event/epoll.h).
 *
 * Lock order (doc/design.md, "Lock order and lifetimes"): ep_glock (the
 * registrations: the table of each stream's items, item.c, and the creation
 * of shadows) -> ep->lock (items, ready list) -> tp->lock. ep_wait takes
 * ep->lock only, and never holds it while sleeping. */
#ifndef RSOCK_EPOLL_INTERNAL_H
#define RSOCK_EPOLL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

/* uthash reports a failed allocation here instead of aborting: set it to 0
 * before an insertion, look at it after. One per thread. */
extern __thread int ep_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (ep_oom = 1)
#include <uthash.h>
#include <utlist.h>

#include "event/epoll.h"
#include "path/adapt.h"
#include "path/path.h"

struct ep_item {
	UT_hash_handle hh;       /* ep->items, by fd */
	UT_hash_handle hp;       /* ep->tags, by address (the kernel-side tag) */
	struct ep *ep;
	struct conn *c;          /* the stream (a reference) */
	struct ep_item *cnext;   /* the stream's other items (item.c's table, ep_glock) */
	struct ep_item *prev, *next; /* ep->ready or ep->idle */
	int fd;                  /* the application's descriptor */
	int rdma;                /* 1: ours; 0: the kernel holds it, kept to convert it */
	int on_ready;
	int on_idle;
	unsigned idle_n;         /* waits it stayed on ep->idle without news */
	uint64_t idle_gen;       /* the ep_wait call that last counted it in idle_n */
	int disabled;            /* EPOLLONESHOT fired */
	int efd, cfd;            /* internal descriptors registered for it, or -1 */
	uint32_t cfd_events;     /* what cfd is registered for (0: EPOLLRDHUP | EPOLLET) */
	uint32_t events;
	epoll_data_t data;
	uint64_t seen;           /* EPOLLET: the stream's event count when last reported */
	uint64_t scanned;        /* the ep_wait call that last reported it (ep->scan_gen) */
	struct ep_item *self;    /* key of hp */
};

struct ep {
	pthread_mutex_t lock;
	pid_t owner;             /* the process that made the shadow */
	struct path_adapt wait;   /* recent waits that had to wait (adaptive spin) */
	int kfd;                 /* our duplicate of the epoll descriptor, or -1 */
	int readyfd;             /* eventfd: readable while the ready list is not empty */
	int readyfd_set;         /* readyfd holds a count (is readable) */
	struct ep_item *items, *tags, *ready;
	struct ep_item *idle;    /* looked at by each wait, CQ not armed (lazy arming) */
	unsigned n_idle;
	_Atomic int nested;      /* watched by poll, select or another epoll: no lazy arming */
	unsigned n_rdma, n_watch;
	uint64_t conv_seen;
	uint64_t scan_gen;       /* numbers the ep_wait calls */
	_Atomic unsigned waiters; /* threads in (or just back from) the kernel wait */
	struct ep_dead *dead;    /* tags of items removed while a thread waited */
	unsigned dead_n;
};

/* A removed item's tag, remembered while threads wait (ep_item_remove). The
 * hash keeps insertion order: its head is the oldest. */
struct ep_dead {
	UT_hash_handle hh;
	void *tag;
};

/* At most this many per instance; past it the oldest are forgotten. */
#define EP_DEAD_MAX 65536

extern pthread_mutex_t ep_glock;
/* Counts the streams that turned RDMA (ep_stream_converted). */
extern _Atomic uint64_t ep_conv_gen;
/* Its address tags the process's kick descriptor in every kernel set. */
extern char ep_kick_tag;

/* ---- instance.c ---- */

/* The shadow of the instance epfd, with its conn referenced, or NULL.
 * create: make one for an instance made before we tracked it. Caller holds
 * ep_glock. */
struct conn *ep_lookup(int epfd, int create);
/* Give ep its kernel-side helpers (our duplicate of the instance, readyfd,
 * the kick) the first time it holds an RDMA stream. 0 or -errno. Caller
 * holds ep->lock. */
int ep_arm_kernel(struct ep *ep, int epfd);
/* readyfd follows the ready list. Caller holds ep->lock. */
void ep_readyfd_update(struct ep *ep);

/* ---- item.c ---- */

/* On the idle list (lazy arming: looked at by each wait, its completion
 * event not requested). Caller holds ep->lock. */
void ep_idle_add(struct ep *ep, struct ep_item *it);
/* On the ready list (off the idle list); not for a kernel-held item.
 * Caller holds ep->lock. */
void ep_ready_add(struct ep *ep, struct ep_item *it);
/* Whether a stream is worth reporting now: ev its readiness (path_ready),
 * seq its event count. */
static inline int ep_item_reportable(const struct ep_item *it, uint32_t ev, uint64_t seq)
{
	return (ev & (it->events | EPOLLERR | EPOLLHUP)) &&
	       (!(it->events & EPOLLET) || seq != it->seen);
}
/* Lazy arming (doc/design.md, "Readiness"): whether a wait may leave a quiet
 * stream's completion event unrequested. Caller holds ep->lock; self:
 * whether the caller is counted in ep->waiters. */
#define EP_IDLE_WAITS 16
#define EP_IDLE_MAX 64
static inline int ep_lazy(struct ep *ep, unsigned self)
{
	return !atomic_load_explicit(&ep->nested, memory_order_relaxed) &&
	       atomic_load(&ep->waiters) <= self;
}
/* Before a sleep: arm the idle streams and look at them once more. Returns
 * 1 when one is ready (on the ready list then). Caller holds ep->lock. */
int ep_idle_arm(struct ep *ep);
/* The registrations of a stream handed over to TCP follow what the
 * application waits for. Caller holds ep->lock. */
void ep_item_widen(struct ep *ep, struct ep_item *it);
/* Like the kernel's insertion: on the ready list only if ready now. Caller
 * holds ep->lock. */
void ep_item_check(struct ep *ep, struct ep_item *it);
/* Register the stream's completion channel and control connection in the
 * kernel set, tagged with it: 0 or -errno; ep_item_unhook undoes it. Caller
 * holds ep->lock. */
int ep_item_hook(struct ep *ep, struct ep_item *it);
void ep_item_unhook(struct ep *ep, struct ep_item *it);
/* A new item of stream c in ep (it->c set): on c's list of items. 0 or
 * -ENOMEM. Caller holds ep_glock and ep->lock. */
int ep_item_link(struct ep_item *it);
/* Unlink it from ep and from its stream's items. The caller drops it with
 * ep_item_free. Caller holds ep_glock and ep->lock. */
void ep_item_remove(struct ep *ep, struct ep_item *it);
/* Drop the item's reference on its stream and free it (no lock held: the
 * last reference of the stream may go). */
void ep_item_free(struct ep_item *it);
/* A waiter is done with what the kernel gave it. Caller holds ep->lock. */
void ep_waiter_leave(struct ep *ep);
/* Whether tag is a removed item's. Caller holds ep->lock. */
int ep_dead_tag(struct ep *ep, void *tag);
/* Forget the oldest n remembered tags. Caller holds ep->lock. */
void ep_dead_forget(struct ep *ep, unsigned n);
/* Items registered while their stream was undecided: the RDMA ones become
 * ours. Caller holds ep->lock. */
void ep_convert(struct ep *ep, int epfd);

#endif
