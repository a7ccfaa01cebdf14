/* epoll/item.c - registrations of streams in instances: the items, their
 * ready and idle lists (lazy arming), their descriptors in the kernel set,
 * the tags of removed ones, the conversion of items registered while their
 * stream was undecided, and the table from a stream to its items (what a
 * close takes out). See epoll.h and doc/design.md, "Readiness". */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <stdlib.h>

#include "event/epoll/internal.h"
#include "event/event.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"

/* A stream's items in every instance (cnext-linked), keyed by its conn.
 * Under ep_glock; ep_n_watched (the number of entries) is read without it,
 * so that a process whose instances hold no stream's item pays no lock at
 * a close or an epoll_ctl of a TCP stream. */
struct ep_watch {
	UT_hash_handle hh;
	struct conn *c;
	struct ep_item *items;
};

static struct ep_watch *ep_watched;
static _Atomic unsigned ep_n_watched;

int ep_item_link(struct ep_item *it)
{
	struct ep_watch *w;

	HASH_FIND_PTR(ep_watched, &it->c, w);
	if (!w) {
		if (!(w = calloc(1, sizeof(*w))))
			return -ENOMEM;
		w->c = it->c;
		ep_oom = 0;
		HASH_ADD_PTR(ep_watched, c, w);
		if (ep_oom) {
			free(w);
			return -ENOMEM;
		}
		atomic_fetch_add_explicit(&ep_n_watched, 1, memory_order_relaxed);
	}
	it->cnext = w->items;
	w->items = it;
	return 0;
}

/* Undo ep_item_link. Caller holds ep_glock. */
static void item_unlink(struct ep_item *it)
{
	struct ep_watch *w;
	struct ep_item **pp;

	HASH_FIND_PTR(ep_watched, &it->c, w);
	if (!w)
		return;
	for (pp = &w->items; *pp; pp = &(*pp)->cnext)
		if (*pp == it) {
			*pp = it->cnext;
			break;
		}
	if (!w->items) {
		HASH_DEL(ep_watched, w);
		free(w);
		atomic_fetch_sub_explicit(&ep_n_watched, 1, memory_order_relaxed);
	}
}

/* The first item of stream c, or NULL. Caller holds ep_glock. */
static struct ep_item *conn_items(struct conn *c)
{
	struct ep_watch *w;

	HASH_FIND_PTR(ep_watched, &c, w);
	return w ? w->items : NULL;
}

int ep_stream_watched(struct conn *c)
{
	int r;

	if (!atomic_load_explicit(&ep_n_watched, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&ep_glock);
	r = conn_items(c) != NULL;
	pthread_mutex_unlock(&ep_glock);
	return r;
}

static void idle_del(struct ep *ep, struct ep_item *it)
{
	if (!it->on_idle)
		return;
	DL_DELETE(ep->idle, it);
	it->on_idle = 0;
	ep->n_idle--;
}

void ep_idle_add(struct ep *ep, struct ep_item *it)
{
	DL_APPEND(ep->idle, it);
	it->on_idle = 1;
	ep->n_idle++;
}

void ep_ready_add(struct ep *ep, struct ep_item *it)
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

/* Lazy arming (doc/design.md, "Readiness"): a stream whose completion event
 * was consumed is not re-armed (a system call on some providers, and the
 * next event costs a read and an interrupt) while the instance's waits keep
 * looking at it anyway: it waits on ep->idle, is polled by each wait, and is
 * armed when a wait is about to sleep (here), after EP_IDLE_WAITS waits
 * without news, or past EP_IDLE_MAX idle streams (so that a server that
 * never sleeps polls at most that many quiet streams per wait). Not when
 * the instance is nested (an outer poll, select or epoll sleeps on the
 * kernel's readiness of it) or another thread sleeps in it: those need the
 * event (ep_lazy). A completion before the arming raised no event: each
 * stream is looked at once more. */
int ep_idle_arm(struct ep *ep)
{
	struct ep_item *it, *tmp;
	int found = 0;

	DL_FOREACH_SAFE(ep->idle, it, tmp)
	{
		uint64_t seq;
		uint32_t ev;

		idle_del(ep, it);
		ev = (uint16_t)path_ready(it->c->stream, 1, &seq);
		if (!it->disabled && ep_item_reportable(it, ev, seq)) {
			ep_ready_add(ep, it);
			found = 1;
		}
	}
	return found;
}

/* A stream handed over to TCP (doc/design.md, "Descriptors, fork, exec")
 * has no completion events left: its bytes and its send room are the kernel
 * socket's, which is registered (cfd) for EPOLLRDHUP alone while the stream
 * is on RDMA. Once it is switched, cfd is registered for what the
 * application waits for, so that the kernel wakes the instance when TCP
 * bytes or room come (edge-triggered: each wake-up is an event, sw_ready
 * counts it). Without this an item that was not ready at its last look
 * slept through the TCP bytes that followed: haproxy with splice-auto
 * stalled both ways on a one-CPU guest. EPOLL_CTL_MOD re-checks readiness,
 * so nothing that came before is missed. */
void ep_item_widen(struct ep *ep, struct ep_item *it)
{
	struct epoll_event e;
	uint32_t want = EPOLLRDHUP | EPOLLET |
			(it->events & (EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDNORM | EPOLLWRNORM));

	if (it->cfd < 0 || it->cfd_events == want || !path_switched(it->c->stream))
		return;
	e.events = want;
	e.data.ptr = (char *)it + 1;
	if (rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_MOD, it->cfd, &e) == 0)
		it->cfd_events = want;
}

/* (Completion events requested, for when it is not ready.) */
void ep_item_check(struct ep *ep, struct ep_item *it)
{
	uint64_t seq;
	uint32_t ev = (uint16_t)path_ready(it->c->stream, 1, &seq);

	ep_item_widen(ep, it);

	if (ep_item_reportable(it, ev, seq)) /* (it->seen is UINT64_MAX here) */
		ep_ready_add(ep, it);
}

/* A second item of the same stream (a dup registered too) shares the first
 * one's registrations. */
int ep_item_hook(struct ep *ep, struct ep_item *it)
{
	struct path_stream *s = it->c->stream;
	struct epoll_event e;
	int fds[2] = {path_event_fd(s), path_control_fd(s)};
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
	/* shared: ep_item_unhook will not take them out */
	path_watchers_add(s, 1, ep->owner != rsock_pid());
	return 0;
}

/* A sibling item of the same stream takes the registrations over. */
void ep_item_unhook(struct ep *ep, struct ep_item *it)
{
	struct ep_item *o, *tmp;
	struct epoll_event e;

	path_watchers_add(it->c->stream, -1, 0);
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
			o->cfd_events = 0; /* ep_item_widen again, for o's events */
		}
		ep_ready_add(ep, o);
		return;
	}
	if (it->efd >= 0)
		rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_DEL, it->efd, NULL);
	if (it->cfd >= 0)
		rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_DEL, it->cfd, NULL);
}

/* (All: n = dead_n.) */
void ep_dead_forget(struct ep *ep, unsigned n)
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

/* Remember a removed item's tag (see ep_item_remove). Caller holds ep->lock. */
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
		ep_dead_forget(ep, 1);
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

/* Another thread may be back from the kernel wait with the item's tags in
 * its buffer, not yet under ep->lock: those must be recognised (and dropped)
 * rather than handed to the application as its data. While any thread is in
 * the wait, the tags of removed items are remembered (ep_dead_tag), until
 * the last waiter leaves or EP_DEAD_MAX later removals have pushed them
 * out: a thread between the kernel's answer and the lock has taken the lock
 * long before (256 were too few: under ASan a thread that loops DEL/ADD took
 * the unfair mutex over 256 times while the waiter queued for it). The
 * memory is freed at once (a close never waits for a sleeper): a new item
 * at the same address that receives a stale tag is only looked at once
 * more. */
void ep_item_remove(struct ep *ep, struct ep_item *it)
{
	if (it->rdma) {
		ep_item_unhook(ep, it);
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
	item_unlink(it);
	ep_readyfd_update(ep);
}

void ep_item_free(struct ep_item *it)
{
	conn_unref(it->c);
	free(it);
}

/* When it was the last, no thread can hold a removed item's tag any more. */
void ep_waiter_leave(struct ep *ep)
{
	if (atomic_fetch_sub(&ep->waiters, 1) == 1 && ep->dead_n)
		ep_dead_forget(ep, ep->dead_n);
}

int ep_dead_tag(struct ep *ep, void *tag)
{
	struct ep_dead *d;

	HASH_FIND_PTR(ep->dead, &tag, d);
	return d != NULL;
}

/* The rest stay the kernel's. */
void ep_convert(struct ep *ep, int epfd)
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
		if (path != CONN_PATH_RDMA || !it->c->stream || ep_arm_kernel(ep, epfd))
			continue;
		/* The kernel's registration of the control socket goes; the
		 * stream's readiness is ours from now on. */
		rsock_real.epoll_ctl(epfd, EPOLL_CTL_DEL, it->fd, NULL);
		it->rdma = 1;
		if (ep_item_hook(ep, it)) {
			log_warn_rl("epoll: fd %d: cannot watch its RDMA stream", it->fd);
			ep_item_unhook(ep, it);
			it->efd = it->cfd = -1;
		}
		ep->n_watch--;
		ep->n_rdma++;
		ep_item_check(ep, it);
	}
}

void ep_conn_closed(struct conn *c)
{
	struct ep_item *it, *gone = NULL;

	if (!atomic_load_explicit(&ep_n_watched, memory_order_relaxed))
		return;
	pthread_mutex_lock(&ep_glock);
	while ((it = conn_items(c))) {
		struct ep *ep = it->ep;
		pthread_mutex_lock(&ep->lock);
		ep_item_remove(ep, it); /* unlinks it from c's items */
		pthread_mutex_unlock(&ep->lock);
		it->next = gone;
		gone = it;
	}
	pthread_mutex_unlock(&ep_glock);
	/* Outside the locks: the last reference of c may go with them. */
	while ((it = gone)) {
		gone = it->next;
		ep_item_free(it);
	}
}
