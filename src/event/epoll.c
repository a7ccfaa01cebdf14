/* epoll.c - see epoll.h and doc/design.md section 12.
 *
 * Lock order: ep_glock (registrations: every conn's ep_items list and the
 * creation of shadows) -> ep->lock (items, ready list) -> tp->lock. ep_wait
 * takes ep->lock only, and never holds it while sleeping. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

static __thread int ep_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (ep_oom = 1)
#include <uthash.h>
#include <utlist.h>

#include "event/epoll.h"
#include "event/event.h"
#include "core/fdtab.h"
#include "base/ownfd.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"
#include "path/rdma/transport.h"

struct ep_item {
	UT_hash_handle hh;       /* ep->items, by fd */
	UT_hash_handle hp;       /* ep->tags, by address (the kernel-side tag) */
	struct ep *ep;
	struct conn *c;          /* the stream (a reference) */
	struct ep_item *cnext;   /* c->ep_items (ep_glock) */
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
	struct tp_adapt wait;   /* recent waits that had to wait (adaptive spin) */
	int kfd;                 /* our duplicate of the epoll descriptor, or -1 */
	int bell;                /* eventfd: readable while the ready list is not empty */
	int bell_on;
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

/* A removed item's tag, remembered while threads wait (item_remove). The
 * hash keeps insertion order: its head is the oldest. */
struct ep_dead {
	UT_hash_handle hh;
	void *tag;
};

/* At most this many per instance; past it the oldest are forgotten. */
#define EP_DEAD_MAX 65536

static pthread_mutex_t ep_glock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t ep_conv_gen;
static _Atomic int ep_kick_fd = -1;
static char ep_kick_tag; /* its address tags the kick descriptor */

void ep_stream_converted(void)
{
	atomic_fetch_add_explicit(&ep_conv_gen, 1, memory_order_release);
}

void event_kick(void)
{
	int fd = atomic_load_explicit(&ep_kick_fd, memory_order_acquire);
	uint64_t one = 1;

	if (fd >= 0 && rsock_real.write(fd, &one, sizeof(one)) < 0)
		log_debug("epoll: kick: %d", errno);
}

/* The process's kick descriptor (made once). */
static int kick_fd(void)
{
	int fd = atomic_load_explicit(&ep_kick_fd, memory_order_acquire), expect = -1;

	if (fd >= 0)
		return fd;
	fd = ownfd_move(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (fd < 0)
		return -errno;
	if (!atomic_compare_exchange_strong(&ep_kick_fd, &expect, fd)) {
		ownfd_close(fd);
		fd = expect;
	}
	return fd;
}

static struct ep *ep_new(void)
{
	struct ep *ep = calloc(1, sizeof(*ep));

	if (!ep)
		return NULL;
	pthread_mutex_init(&ep->lock, NULL);
	ep->owner = rsock_pid();
	ep->kfd = ep->bell = -1;
	tp_adapt_init(&ep->wait);
	return ep;
}

void ep_track_new(int epfd)
{
	struct conn *c;

	if (epfd < 0 || !(c = conn_new(AF_UNSPEC)))
		return;
	if (!(c->ep = ep_new()) || fdtab_insert(epfd, c))
		log_debug("epoll: fd %d not tracked", epfd);
	conn_unref(c);
}

/* Give ep its kernel-side helpers (our duplicate of the instance, the bell,
 * the kick) the first time it holds an RDMA stream. Caller holds ep->lock. */
static int ep_arm_kernel(struct ep *ep, int epfd)
{
	struct epoll_event e = {.events = EPOLLIN};
	int kick;

	if (ep->kfd >= 0)
		return 0;
	if ((kick = kick_fd()) < 0)
		return kick;
	ep->kfd = ownfd_dup(epfd);
	if (ep->kfd < 0)
		return -errno;
	ep->bell = ownfd_move(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (ep->bell < 0)
		goto fail;
	e.data.ptr = &ep->bell;
	if (rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_ADD, ep->bell, &e))
		goto fail; /* EINVAL: epfd is not an epoll instance */
	e.events = EPOLLIN | EPOLLET;
	e.data.ptr = &ep_kick_tag;
	if (rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_ADD, kick, &e))
		goto fail;
	return 0;
fail: {
	int rc = -errno;
	ownfd_close(ep->bell);
	ownfd_close(ep->kfd);
	ep->kfd = ep->bell = -1;
	return rc;
}
}

/* The bell follows the ready list. Caller holds ep->lock. */
static void bell_update(struct ep *ep)
{
	uint64_t v = 1;
	int want = ep->ready != NULL;

	if (ep->bell < 0 || want == ep->bell_on)
		return;
	if (want)
		(void)!rsock_real.write(ep->bell, &v, sizeof(v));
	else
		(void)!rsock_real.read(ep->bell, &v, sizeof(v));
	ep->bell_on = want;
}

static void idle_del(struct ep *ep, struct ep_item *it)
{
	if (!it->on_idle)
		return;
	DL_DELETE(ep->idle, it);
	it->on_idle = 0;
	ep->n_idle--;
}

static void idle_add(struct ep *ep, struct ep_item *it)
{
	DL_APPEND(ep->idle, it);
	it->on_idle = 1;
	ep->n_idle++;
}

static void ready_add(struct ep *ep, struct ep_item *it)
{
	if (it->on_ready || !it->rdma)
		return;
	idle_del(ep, it);
	DL_APPEND(ep->ready, it);
	it->on_ready = 1;
}

/* Off the ready and the idle list. */
static void ready_del(struct ep *ep, struct ep_item *it)
{
	idle_del(ep, it);
	if (!it->on_ready)
		return;
	DL_DELETE(ep->ready, it);
	it->on_ready = 0;
}

/* Whether a stream is worth reporting now: ev its readiness (tp_ready). */
static int item_reportable(const struct ep_item *it, uint32_t ev, uint64_t seq)
{
	return (ev & (it->events | EPOLLERR | EPOLLHUP)) &&
	       (!(it->events & EPOLLET) || seq != it->seen);
}

/* Lazy arming (doc/design.md section 12): a stream whose completion event
 * was consumed is not re-armed (a system call on some providers, and the
 * next event costs a read and an interrupt) while the instance's waits keep
 * looking at it anyway: it waits on ep->idle, is polled by each wait, and is
 * armed when a wait is about to sleep (idle_arm), after EP_IDLE_WAITS waits
 * without news, or past EP_IDLE_MAX idle streams (so that a server that
 * never sleeps polls at most that many quiet streams per wait). Not when
 * the instance is nested (an outer poll, select or epoll sleeps on the
 * kernel's readiness of it) or another thread sleeps in it: those need the
 * event. Caller holds ep->lock; self: whether the caller is counted in
 * ep->waiters. */
#define EP_IDLE_WAITS 16
#define EP_IDLE_MAX 64
static int ep_lazy(struct ep *ep, unsigned self)
{
	return !atomic_load_explicit(&ep->nested, memory_order_relaxed) &&
	       atomic_load(&ep->waiters) <= self;
}

/* Before a sleep: arm the idle streams and look at them once more (a
 * completion before the arming raised no event). Returns 1 when one is
 * ready (on the ready list then: do not sleep). Caller holds ep->lock. */
static int idle_arm(struct ep *ep)
{
	struct ep_item *it, *tmp;
	int found = 0;

	DL_FOREACH_SAFE(ep->idle, it, tmp)
	{
		uint64_t seq;
		uint32_t ev;

		idle_del(ep, it);
		ev = (uint16_t)tp_ready(it->c->tp, 1, &seq);
		if (!it->disabled && item_reportable(it, ev, seq)) {
			ready_add(ep, it);
			found = 1;
		}
	}
	return found;
}

void ep_nested(struct ep *ep)
{
	if (atomic_load_explicit(&ep->nested, memory_order_relaxed))
		return;
	pthread_mutex_lock(&ep->lock);
	atomic_store(&ep->nested, 1);
	idle_arm(ep);
	bell_update(ep);
	pthread_mutex_unlock(&ep->lock);
}

/* A stream handed over to TCP (doc/design.md section 6) has no completion
 * events left: its bytes and its send room are the kernel socket's, which
 * is registered (cfd) for EPOLLRDHUP alone while the stream is on RDMA. Once
 * it is switched, cfd is registered for what the application waits for, so
 * that the kernel wakes the instance when TCP bytes or room come (edge-
 * triggered: each wake-up is an event, sw_ready counts it). Without this an
 * item that was not ready at its last look slept through the TCP bytes that
 * followed: haproxy with splice-auto stalled both ways on a one-CPU guest.
 * EPOLL_CTL_MOD re-checks readiness, so nothing that came before is missed.
 * Caller holds ep->lock. */
static void item_widen(struct ep *ep, struct ep_item *it)
{
	struct epoll_event e;
	uint32_t want = EPOLLRDHUP | EPOLLET |
			(it->events & (EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDNORM | EPOLLWRNORM));

	if (it->cfd < 0 || it->cfd_events == want || !tp_switched(it->c->tp))
		return;
	e.events = want;
	e.data.ptr = (char *)it + 1;
	if (rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_MOD, it->cfd, &e) == 0)
		it->cfd_events = want;
}

/* Like the kernel's insertion: on the ready list only if ready now (and
 * completion events requested, for when it is not). Caller holds ep->lock. */
static void item_check(struct ep *ep, struct ep_item *it)
{
	uint64_t seq;
	uint32_t ev = (uint16_t)tp_ready(it->c->tp, 1, &seq);

	item_widen(ep, it);

	if (item_reportable(it, ev, seq)) /* (it->seen is UINT64_MAX here) */
		ready_add(ep, it);
}

/* Register the stream's completion channel and control connection in the
 * kernel set, tagged with it. A second item of the same stream (a dup
 * registered too) shares the first one's. Caller holds ep->lock. */
static int item_hook(struct ep *ep, struct ep_item *it)
{
	struct tp *t = it->c->tp;
	struct epoll_event e;
	int fds[2] = {tp_event_fd(t), t->tcp_fd};
	uint32_t evs[2] = {EPOLLIN, EPOLLRDHUP | EPOLLET};
	int *mine[2] = {&it->efd, &it->cfd};

	it->cfd_events = 0;
	for (int i = 0; i < 2; i++) {
		*mine[i] = -1;
		if (fds[i] < 0)
			continue;
		e.events = evs[i];
		e.data.ptr = (char *)it + i; /* odd: the control connection */
		if (rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_ADD, fds[i], &e) == 0)
			*mine[i] = fds[i];
		else if (errno != EEXIST)
			return -errno;
	}
	atomic_fetch_add_explicit(&t->watchers, 1, memory_order_relaxed);
	if (ep->owner != rsock_pid()) /* item_unhook will not take them out */
		atomic_store_explicit(&t->hooked_shared, 1, memory_order_relaxed);
	return 0;
}

/* Undo item_hook; a sibling item of the same stream takes the
 * registrations over. Caller holds ep->lock. */
static void item_unhook(struct ep *ep, struct ep_item *it)
{
	struct ep_item *o, *tmp;
	struct epoll_event e;

	atomic_fetch_sub_explicit(&it->c->tp->watchers, 1, memory_order_relaxed);
	if (ep->owner != rsock_pid())
		return; /* the kernel instance is shared with the parent: leave it */
	HASH_ITER(hh, ep->items, o, tmp)
	{
		if (o == it || o->c != it->c || !o->rdma)
			continue;
		/* Re-tag the registrations for the sibling. */
		e.data.ptr = o;
		if (it->efd >= 0) {
			e.events = EPOLLIN;
			rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_MOD, it->efd, &e);
			o->efd = it->efd;
		}
		if (it->cfd >= 0) {
			e.data.ptr = (char *)o + 1;
			e.events = EPOLLRDHUP | EPOLLET;
			rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_MOD, it->cfd, &e);
			o->cfd = it->cfd;
			o->cfd_events = 0; /* item_widen again, for o's events */
		}
		ready_add(ep, o);
		return;
	}
	if (it->efd >= 0)
		rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_DEL, it->efd, NULL);
	if (it->cfd >= 0)
		rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_DEL, it->cfd, NULL);
}

/* Forget the oldest n remembered tags (all: n = dead_n). Caller holds
 * ep->lock. */
static void dead_forget(struct ep *ep, unsigned n)
{
	struct ep_dead *d, *tmp;

	HASH_ITER(hh, ep->dead, d, tmp)
	{
		if (!n--)
			break;
		HASH_DEL(ep->dead, d);
		free(d);
		ep->dead_n--;
	}
}

/* Remember a removed item's tag (see item_remove). Caller holds ep->lock. */
static void dead_add(struct ep *ep, const struct ep_item *it)
{
	void *tag = (void *)it;
	struct ep_dead *d;

	HASH_FIND_PTR(ep->dead, &tag, d);
	if (d) { /* the address came back and went again: it is the newest */
		HASH_DEL(ep->dead, d);
		ep->dead_n--;
	} else if (!(d = malloc(sizeof(*d)))) {
		log_warn_rl("epoll: no memory to remember a removed stream's tag");
		return;
	}
	if (ep->dead_n >= EP_DEAD_MAX)
		dead_forget(ep, 1);
	d->tag = tag;
	ep_oom = 0;
	HASH_ADD_PTR(ep->dead, tag, d);
	if (ep_oom) {
		free(d);
		log_warn_rl("epoll: no memory to remember a removed stream's tag");
		return;
	}
	ep->dead_n++;
}

/* Unlink it from ep (caller holds ep->lock) and from its conn's list
 * (caller holds ep_glock). The caller drops it->c and frees it.
 *
 * Another thread may be back from the kernel wait with the item's tags in
 * its buffer, not yet under ep->lock: those must be recognised (and dropped)
 * rather than handed to the application as its data. While any thread is in
 * the wait, the tags of removed items are remembered (dead_tag), until the
 * last waiter leaves or EP_DEAD_MAX later removals have pushed them out: a
 * thread between the kernel's answer and the lock has taken the lock long
 * before (256 were too few: under ASan a thread that loops DEL/ADD took the
 * unfair mutex over 256 times while the waiter queued for it). The memory
 * is freed at once (a close never waits for a sleeper): a new item at the
 * same address that receives a stale tag is only looked at once more. */
static void item_remove(struct ep *ep, struct ep_item *it)
{
	struct ep_item **pp;

	if (it->rdma) {
		item_unhook(ep, it);
		/* Read after the kernel dropped the tags: a thread that enters
		 * the wait from now on cannot get them, one that entered
		 * before is counted. */
		if ((it->efd >= 0 || it->cfd >= 0) && ep->owner == rsock_pid() &&
		    atomic_load(&ep->waiters))
			dead_add(ep, it);
		ep->n_rdma--;
	} else {
		ep->n_watch--;
	}
	ready_del(ep, it);
	HASH_DELETE(hh, ep->items, it);
	HASH_DELETE(hp, ep->tags, it);
	for (pp = &it->c->ep_items; *pp; pp = &(*pp)->cnext)
		if (*pp == it) {
			*pp = it->cnext;
			break;
		}
	bell_update(ep);
}

static void item_free(struct ep_item *it)
{
	conn_unref(it->c);
	free(it);
}

/* A waiter is done with what the kernel gave it: when it was the last, no
 * thread can hold a removed item's tag any more. Caller holds ep->lock. */
static void waiter_leave(struct ep *ep)
{
	if (atomic_fetch_sub(&ep->waiters, 1) == 1 && ep->dead_n)
		dead_forget(ep, ep->dead_n);
}

/* Whether tag is a removed item's (caller holds ep->lock). */
static int dead_tag(struct ep *ep, void *tag)
{
	struct ep_dead *d;

	HASH_FIND_PTR(ep->dead, &tag, d);
	return d != NULL;
}

/* A shadow for epfd, with its conn referenced, or NULL. create: make one
 * for an instance made before we tracked it. Caller holds ep_glock. */
static struct conn *ep_lookup(int epfd, int create)
{
	struct conn *c = fdtab_maybe_tracked(epfd) ? fdtab_get(epfd) : NULL;

	if (c && c->ep)
		return c;
	if (c || !create) {
		conn_unref(c); /* a socket: the kernel says EINVAL */
		return NULL;
	}
	ep_track_new(epfd);
	c = fdtab_get(epfd);
	if (c && !c->ep) {
		conn_unref(c);
		c = NULL;
	}
	/* Made before we tracked it: it may have been nested unseen. */
	if (c)
		atomic_store(&c->ep->nested, 1);
	return c;
}

/* EPOLLEXCLUSIVE rules of the kernel (fs/eventpoll.c). */
#define EP_EXCLUSIVE_OK (EPOLLIN | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | \
			 EPOLLWRBAND | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE)

int ep_ctl(int epfd, int op, int fd, struct conn *sc, struct epoll_event *ev)
{
	struct conn *epc;
	struct ep *ep;
	struct ep_item *it;
	int path, rc = 0;
	int undecided;
	struct ep_item *gone = NULL;

	if (op == EPOLL_CTL_ADD)
		conn_settle_maybe(sc, fd);
	path = atomic_load(&sc->path);
	/* A stream moved to TCP with nothing of its RDMA past left to read is
	 * registered as the kernel socket it now is. */
	if (op == EPOLL_CTL_ADD && path == CONN_PATH_RDMA && sc->tp && tp_kernel_only(sc->tp))
		path = CONN_PATH_TCP;
	undecided = path == CONN_PATH_UNDECIDED && atomic_load(&sc->role) != CONN_ROLE_LISTENER;
	if (sc->ep && op == EPOLL_CTL_ADD)
		ep_nested(sc->ep); /* an epoll instance in another */
	if (sc->ep || (path != CONN_PATH_RDMA && !undecided && !sc->ep_items))
		return 1;
	if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL)
		return 1;
	pthread_mutex_lock(&ep_glock);
	epc = ep_lookup(epfd, path == CONN_PATH_RDMA || undecided);
	if (!epc) {
		pthread_mutex_unlock(&ep_glock);
		return 1;
	}
	ep = epc->ep;
	pthread_mutex_lock(&ep->lock);
	HASH_FIND_INT(ep->items, &fd, it);
	if (it && it->c != sc) {
		/* The number was reused behind our back: the old one is gone. */
		item_remove(ep, it);
		gone = it;
		it = NULL;
	}
	if (it && !it->rdma) {
		/* A kernel registration kept for conversion. */
		if (rsock_real.epoll_ctl(epfd, op, fd, ev)) {
			rc = -errno;
		} else if (op == EPOLL_CTL_DEL) {
			item_remove(ep, it);
			gone = it;
		}
		goto out;
	}
	if (path != CONN_PATH_RDMA && !it) {
		/* Kernel TCP (or not yet decided): the kernel's registration,
		 * and for an undecided stream an item to convert it later. */
		if (rsock_real.epoll_ctl(epfd, op, fd, ev)) {
			rc = -errno;
			goto out;
		}
		if (op != EPOLL_CTL_ADD || !undecided)
			goto out;
	}
	switch (op) {
	case EPOLL_CTL_ADD:
		if (it) {
			rc = -EEXIST;
			break;
		}
		if (!ev) {
			rc = -EFAULT;
			break;
		}
		if ((ev->events & EPOLLEXCLUSIVE) && (ev->events & ~EP_EXCLUSIVE_OK)) {
			rc = -EINVAL;
			break;
		}
		if (path == CONN_PATH_RDMA && (rc = ep_arm_kernel(ep, epfd)))
			break;
		it = calloc(1, sizeof(*it));
		if (!it) {
			rc = -ENOMEM;
			break;
		}
		it->ep = ep;
		it->c = conn_ref(sc);
		it->fd = fd;
		it->self = it;
		it->efd = it->cfd = -1;
		it->events = ev->events;
		it->data = ev->data;
		it->seen = UINT64_MAX;
		it->rdma = path == CONN_PATH_RDMA;
		if (it->rdma && (rc = item_hook(ep, it))) {
			item_unhook(ep, it);
			item_free(it);
			break;
		}
		ep_oom = 0;
		HASH_ADD_INT(ep->items, fd, it);
		if (!ep_oom)
			HASH_ADD(hp, ep->tags, self, sizeof(it->self), it);
		if (ep_oom) {
			HASH_DELETE(hh, ep->items, it);
			if (it->rdma)
				item_unhook(ep, it);
			else
				rsock_real.epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
			item_free(it);
			rc = -ENOMEM;
			break;
		}
		it->cnext = sc->ep_items;
		sc->ep_items = it;
		if (it->rdma) {
			ep->n_rdma++;
			item_check(ep, it);
		} else {
			ep->n_watch++;
		}
		break;
	case EPOLL_CTL_MOD:
		if (!it) {
			rc = -ENOENT;
			break;
		}
		if (!ev) {
			rc = -EFAULT;
			break;
		}
		if ((ev->events | it->events) & EPOLLEXCLUSIVE) {
			rc = -EINVAL;
			break;
		}
		it->events = ev->events;
		it->data = ev->data;
		it->disabled = 0;
		it->seen = UINT64_MAX; /* the kernel re-checks readiness on MOD */
		item_check(ep, it);
		break;
	case EPOLL_CTL_DEL:
		if (!it) {
			rc = -ENOENT;
			break;
		}
		item_remove(ep, it);
		gone = it;
		break;
	}
out:
	bell_update(ep);
	pthread_mutex_unlock(&ep->lock);
	pthread_mutex_unlock(&ep_glock);
	if (gone)
		item_free(gone);
	conn_unref(epc);
	return rc;
}

/* Items registered while their stream was undecided: the RDMA ones become
 * ours, the rest are forgotten. Caller holds ep->lock. */
static void convert(struct ep *ep, int epfd)
{
	struct ep_item *it, *tmp;
	uint64_t gen = atomic_load_explicit(&ep_conv_gen, memory_order_acquire);

	if (!ep->n_watch || gen == ep->conv_seen)
		return;
	ep->conv_seen = gen;
	HASH_ITER(hh, ep->items, it, tmp)
	{
		int path;
		if (it->rdma)
			continue;
		path = atomic_load(&it->c->path);
		if (path != CONN_PATH_RDMA || !it->c->tp || ep_arm_kernel(ep, epfd))
			continue;
		/* The kernel's registration of the control socket goes; the
		 * stream's readiness is ours from now on. */
		rsock_real.epoll_ctl(epfd, EPOLL_CTL_DEL, it->fd, NULL);
		it->rdma = 1;
		if (item_hook(ep, it)) {
			log_warn_rl("epoll: fd %d: cannot watch its RDMA stream", it->fd);
			item_unhook(ep, it);
			it->efd = it->cfd = -1;
		}
		ep->n_watch--;
		ep->n_rdma++;
		item_check(ep, it);
	}
}

/* Report what is ready on the ready and the idle list, at most max events.
 * Items that stay ready (level-triggered, or no room left) stay on the
 * ready list, the ones reported marked with gen (the ep_wait call), so that
 * a second scan in the same call reports none twice. The others have their
 * CQ armed (the next completion brings them back through the kernel), or
 * with lazy (ep_lazy) wait on the idle list. Nothing leaves the lists but
 * under ep->lock: another thread may remove any item while this one sleeps.
 * Caller holds ep->lock. Returns the number of events written. */
static int scan(struct ep *ep, struct epoll_event *evs, int max, uint64_t gen, int lazy)
{
	struct ep_item *list = ep->ready, *idle = ep->idle, *keep = NULL, *it, *tmp;
	int n = 0;

	ep->ready = ep->idle = NULL;
	ep->n_idle = 0;
	DL_CONCAT(list, idle);
	DL_FOREACH_SAFE(list, it, tmp)
	{
		uint64_t seq;
		uint32_t ev;
		int report, was_idle = it->on_idle, arm_now;

		DL_DELETE(list, it);
		it->on_idle = 0;
		if (it->scanned == gen) {
			/* reported by this call already */
			if (was_idle)
				idle_add(ep, it);
			else
				DL_APPEND(keep, it);
			continue;
		}
		it->on_ready = 0;
		if (it->disabled)
			continue;
		if (!was_idle)
			it->idle_n = 0;
		else if (it->idle_gen != gen)
			it->idle_n++; /* counted once per ep_wait call */
		it->idle_gen = gen;
		arm_now = !lazy || ep->n_idle >= EP_IDLE_MAX || it->idle_n >= EP_IDLE_WAITS;
		ev = (uint16_t)tp_ready(it->c->tp, arm_now, &seq); /* RDNORM/WRNORM included */
		if (RSOCK_UNLIKELY(tp_switched(it->c->tp)))
			item_widen(ep, it);
		ev &= it->events | EPOLLERR | EPOLLHUP;
		report = item_reportable(it, ev, seq);
		if (report && n == max) {
			DL_APPEND(keep, it); /* no room: next time */
			it->on_ready = 1;
			continue;
		}
		if (report) {
			evs[n].events = ev;
			evs[n++].data = it->data;
			it->seen = seq;
			it->scanned = gen;
			if (it->events & EPOLLONESHOT) {
				it->disabled = 1; /* EPOLL_CTL_MOD arms it (item_check) */
				continue;
			}
			if (!(it->events & EPOLLET)) {
				DL_APPEND(keep, it); /* level-triggered: look again next time */
				it->on_ready = 1;
				continue;
			}
			it->idle_n = 0;
		}
		/* Armed: the next completion event brings it back. */
		if (!arm_now && !tp_armed(it->c->tp))
			idle_add(ep, it);
	}
	DL_CONCAT(ep->ready, keep);
	return n;
}

static int64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Before sleeping: busy-poll the streams' completion queues for at most
 * RSOCK_POLL_US (an instance with few RDMA streams only: the cost grows
 * with them), as wait_event() does for a blocking call. A completion that
 * comes within it costs no sleep and no wake-up. start: when the wait
 * began. Returns 1 when a stream moved (it is on the ready list then).
 * Lock not held. */
#define EP_SPIN_MAX_STREAMS 16
/* Whether a spin started at start goes on until end; one that has lasted
 * TP_YIELD_AFTER_NS yields the CPU first (transport.h). */
static int spin_go_on(int64_t start, int64_t end)
{
	int64_t now = now_ns();

	if (now >= end)
		return 0;
	tp_spin_yield(now - start);
	return 1;
}

static int spin(struct ep *ep, int64_t start)
{
	int64_t end, budget = tp_spin_budget_ns(&ep->wait);
	int found = 0;
	unsigned rounds = 0;

	if (!budget || !ep->n_rdma || ep->n_rdma > EP_SPIN_MAX_STREAMS)
		return 0;
	end = start + budget;
	/* The clock is read every 4th round: where it is not a vDSO read (a
	 * guest's emulated HPET), reading it cost more than the polling. */
	do {
		struct ep_item *it, *tmp;
		pthread_mutex_lock(&ep->lock);
		HASH_ITER(hh, ep->items, it, tmp)
		{
			if (it->rdma && !it->disabled && tp_spin(it->c->tp)) {
				ready_add(ep, it);
				found = 1;
			}
		}
		pthread_mutex_unlock(&ep->lock);
	} while (!found && ((++rounds & 3) || spin_go_on(start, end)));
	return found;
}

/* One kernel wait on the instance: epoll_pwait2 when libc has it. */
static _Atomic int kwait_no_pwait2; /* the kernel said ENOSYS (before 5.11) */

static int kwait(int kfd, struct epoll_event *evs, int max, int64_t ns, const sigset_t *mask)
{
	struct timespec ts;

	if (rsock_real.epoll_pwait2 && !atomic_load_explicit(&kwait_no_pwait2, memory_order_relaxed)) {
		int r;
		ts.tv_sec = ns / 1000000000;
		ts.tv_nsec = ns % 1000000000;
		r = rsock_real.epoll_pwait2(kfd, evs, max, ns >= 0 ? &ts : NULL, mask);
		if (r >= 0 || errno != ENOSYS)
			return r;
		atomic_store_explicit(&kwait_no_pwait2, 1, memory_order_relaxed);
	}
	return rsock_real.epoll_pwait(kfd, evs, max,
				      ns < 0 ? -1 : (int)((ns + 999999) / 1000000), mask);
}

/* The kernel's answer evs[from .. from + k): the application's events are
 * kept (moved down over ours), our tags acted on and dropped. Returns the
 * end of what is kept; *internal counts our tags. In a forked child that
 * shares the instance with its parent (ep->owner), the parent's tags are
 * dropped without acting on streams that are not this process's. Caller
 * holds ep->lock, and was counted in ep->waiters while it waited (so that
 * the tags of items removed meanwhile are recognised). */
static int absorb(struct ep *ep, struct epoll_event *evs, int from, int k, int *internal)
{
	int m = from, mine = ep->owner == rsock_pid();

	for (int i = from; i < from + k; i++) {
		void *tag = evs[i].data.ptr;
		struct ep_item *it = NULL;

		if (tag == &ep_kick_tag) {
			/* Someone consumed a completion event of a
			 * stream we watch: look at all of them again. */
			struct ep_item *tmp;
			if (mine)
				HASH_ITER(hh, ep->items, it, tmp)
					ready_add(ep, it);
			(*internal)++;
			continue;
		}
		if (tag == &ep->bell) {
			(*internal)++;
			continue;
		}
		int ctl = (uintptr_t)tag & 1;
		if (ctl)
			tag = (char *)tag - 1;
		HASH_FIND(hp, ep->tags, &tag, sizeof(tag), it);
		if (!it && ep->dead_n && dead_tag(ep, tag)) {
			(*internal)++; /* removed while we slept */
			continue;
		}
		if (it && !mine) {
			(*internal)++;
			continue;
		}
		if (it && ctl) {
			tp_control_event(it->c->tp);
			ready_add(ep, it);
			(*internal)++;
			continue;
		}
		if (it) {
			if (tp_consume(it->c->tp) &&
			    atomic_load_explicit(&it->c->tp->watchers, memory_order_relaxed) > 1)
				event_kick(); /* other instances slept on it too */
			ready_add(ep, it);
			(*internal)++;
			continue;
		}
		evs[m++] = evs[i];
	}
	return m;
}

/* The wait of an instance the kernel alone serves (no RDMA stream yet, or
 * one shared with the parent process), on the application's descriptor.
 * The waiter is counted like ep_wait's, and the answer goes through
 * absorb when the instance has our helpers now: another thread may
 * register the first RDMA stream (our tags in the kernel set) while this
 * one sleeps, and the kernel then hands it tags that the application would
 * take for its own data (apache's event MPM crashed on one: its listener
 * thread slept in epoll_wait while a worker added a kept-alive RDMA
 * stream). Returns the events kept, -errno, or EP_PASS when the answer was
 * only our tags (the caller waits again, through the RDMA path). The caller
 * counted itself in ep->waiters under ep->lock (so that no other thread
 * leaves a stream unarmed, ep_lazy, while this one may sleep on it). */
static int pass_wait(struct ep *ep, int epfd, struct epoll_event *evs, int max, int64_t tmo_ns,
		     const sigset_t *mask)
{
	int k, m, internal = 0;

	k = kwait(epfd, evs, max, tmo_ns, mask);
	int e = errno;
	pthread_mutex_lock(&ep->lock);
	m = k > 0 && ep->kfd >= 0 ? absorb(ep, evs, 0, k, &internal) : k;
	waiter_leave(ep);
	if (internal)
		bell_update(ep);
	pthread_mutex_unlock(&ep->lock);
	if (k < 0)
		return -e;
	return m == 0 && internal ? EP_PASS : m;
}

int ep_wait(struct conn *epc, int epfd, struct epoll_event *evs, int max,
	    const struct timespec *tmo, const sigset_t *mask)
{
	struct ep *ep = epc->ep;
	int64_t tmo_ns = event_tmo_ns(tmo);
	int64_t deadline = 0, wstart = 0;
	int slept = 0; /* a kernel wait that could sleep happened (tp_wait_note) */
	uint64_t gen;

	if (max <= 0)
		return -EINVAL;
	if (tmo && (tmo->tv_sec < 0 || tmo->tv_nsec < 0 || tmo->tv_nsec >= 1000000000))
		return -EINVAL;
	pthread_mutex_lock(&ep->lock);
	convert(ep, epfd);
	/* Once the instance has our helpers in its kernel set (the kick, the
	 * bell, the streams' tagged descriptors), the kernel's answer must
	 * pass through here even when no RDMA stream is left: a pending kick
	 * handed to the application raw is a pointer it takes for its own data
	 * (haproxy crashed on one after its last RDMA stream moved to TCP and
	 * closed). */
	while (ep->kfd < 0 || ep->owner != rsock_pid()) {
		int r, mine = ep->owner == rsock_pid();
		atomic_fetch_add(&ep->waiters, 1);
		pthread_mutex_unlock(&ep->lock);
		r = pass_wait(ep, epfd, evs, max, tmo_ns, mask);
		if (r != EP_PASS)
			return r;
		/* Only our tags. In the instance's own process the first RDMA
		 * stream came meanwhile: wait again on its path (the whole
		 * time-out again; this happens once, when the instance takes
		 * its first stream). In a child sharing its parent's instance
		 * they were the parent's: a bounded wait ends as if it timed
		 * out (the clock is not read on this path). */
		if (!mine && tmo_ns >= 0)
			return 0;
		pthread_mutex_lock(&ep->lock);
	}
	gen = ++ep->scan_gen;
	pthread_mutex_unlock(&ep->lock);
	for (;;) {
		int n, k, m, internal = 0;
		int64_t left = -1;

		pthread_mutex_lock(&ep->lock);
		convert(ep, epfd);
		n = scan(ep, evs, max, gen, ep_lazy(ep, 0));
		if (n == max) {
			bell_update(ep);
			pthread_mutex_unlock(&ep->lock);
			if (wstart)
				tp_wait_note(&ep->wait, now_ns() - wstart, slept ? TP_WAIT_SLEPT : TP_WAIT_SPUN);
			return n;
		}
		pthread_mutex_unlock(&ep->lock);
		/* The clock is read only when there is a wait (where it is not a
		 * vDSO read, as in a TCG guest, each read is a system call). */
		if (n || tmo_ns == 0) {
			left = 0;
		} else {
			int64_t now = now_ns();
			if (!wstart) {
				wstart = now; /* a wait: the adaptive spin learns from these */
				deadline = now + tmo_ns;
			}
			if (tmo_ns > 0 && (left = deadline - now) < 0)
				left = 0;
		}
		if (left != 0 && spin(ep, wstart))
			continue; /* a stream moved: report it */
		pthread_mutex_lock(&ep->lock);
		/* Counted before the idle streams are armed, under the lock: a
		 * scan that leaves a stream unarmed from now on sees this
		 * sleeper (ep_lazy) and arms it instead. */
		atomic_fetch_add(&ep->waiters, 1);
		if (left != 0 && ep->idle && idle_arm(ep)) {
			waiter_leave(ep);
			pthread_mutex_unlock(&ep->lock);
			continue; /* one moved before its arming: report it */
		}
		pthread_mutex_unlock(&ep->lock);
		slept |= left != 0;
		k = kwait(ep->kfd, evs + n, max - n, left, mask);
		if (k < 0) {
			int e = errno;
			pthread_mutex_lock(&ep->lock);
			waiter_leave(ep);
			bell_update(ep);
			pthread_mutex_unlock(&ep->lock);
			return n ? n : -e;
		}
		/* Keep the application's events, act on our tags. */
		pthread_mutex_lock(&ep->lock);
		m = absorb(ep, evs, n, k, &internal);
		/* Streams that just woke up are reported with the rest. */
		if (internal && m < max)
			m += scan(ep, evs + m, max - m, gen, ep_lazy(ep, 1));
		waiter_leave(ep);
		bell_update(ep);
		pthread_mutex_unlock(&ep->lock);
		if (wstart && (m || (!internal && k == 0)))
			tp_wait_note(&ep->wait, now_ns() - wstart,
				     !slept ? TP_WAIT_SPUN : m ? TP_WAIT_SLEPT : TP_WAIT_TIMEOUT);
		if (m)
			return m;
		if (!internal && k == 0)
			return 0; /* timed out */
	}
}

void ep_conn_closed(struct conn *c)
{
	struct ep_item *it, *gone = NULL;

	pthread_mutex_lock(&ep_glock);
	while ((it = c->ep_items)) {
		struct ep *ep = it->ep;
		pthread_mutex_lock(&ep->lock);
		item_remove(ep, it); /* unlinks it from c->ep_items */
		pthread_mutex_unlock(&ep->lock);
		it->next = gone;
		gone = it;
	}
	pthread_mutex_unlock(&ep_glock);
	/* Outside the locks: the last reference of c may go with them. */
	while ((it = gone)) {
		gone = it->next;
		item_free(it);
	}
}

void ep_destroy(struct ep *ep)
{
	struct ep_item *it, *tmp, *gone = NULL;

	pthread_mutex_lock(&ep_glock);
	pthread_mutex_lock(&ep->lock);
	HASH_ITER(hh, ep->items, it, tmp)
	{
		item_remove(ep, it);
		it->next = gone;
		gone = it;
	}
	pthread_mutex_unlock(&ep->lock);
	pthread_mutex_unlock(&ep_glock);
	while ((it = gone)) {
		gone = it->next;
		item_free(it);
	}
	pthread_mutex_lock(&ep->lock);
	dead_forget(ep, ep->dead_n);
	pthread_mutex_unlock(&ep->lock);
	ownfd_close(ep->bell);
	ownfd_close(ep->kfd);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}

void ep_fork_lock(void)
{
	pthread_mutex_lock(&ep_glock);
}

void ep_fork_unlock(void)
{
	pthread_mutex_unlock(&ep_glock);
}
