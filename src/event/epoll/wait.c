/* epoll/wait.c - epoll_wait() on a tracked instance (ep_wait): the ready
 * and idle lists reported, a busy-poll of the streams' completion queues
 * before a sleep, the kernel wait on our duplicate of the instance, and our
 * tags in the kernel's answer acted on and dropped. See epoll.h and
 * doc/design.md, "Readiness". */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>

#include "event/epoll/internal.h"
#include "event/event.h"
#include "base/clock.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/stats.h"

/* pass_wait: the kernel's answer was only our tags, nothing for the
 * application. Never returned by ep_wait. */
#define WAIT_ONLY_OURS (1 << 30)

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
				ep_idle_add(ep, it);
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
		ev = (uint16_t)path_ready(it->c->stream, arm_now, &seq); /* RDNORM/WRNORM included */
		if (RSOCK_UNLIKELY(path_switched(it->c->stream)))
			ep_item_widen(ep, it);
		ev &= it->events | EPOLLERR | EPOLLHUP;
		report = ep_item_reportable(it, ev, seq);
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
				it->disabled = 1; /* EPOLL_CTL_MOD arms it (ep_item_check) */
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
		if (!arm_now && !path_armed(it->c->stream))
			ep_idle_add(ep, it);
	}
	DL_CONCAT(ep->ready, keep);
	return n;
}

/* Before sleeping: busy-poll the streams' completion queues for at most
 * RSOCK_POLL_US (an instance with few RDMA streams only: the cost grows
 * with them), as wait_event() does for a blocking call. A completion that
 * comes within it costs no sleep and no wake-up. start: when the wait
 * began. Returns 1 when a stream moved (it is on the ready list then).
 * Lock not held. */
#define EP_SPIN_MAX_STREAMS 16
/* Whether a spin started at start goes on until end; one that has lasted
 * PATH_YIELD_AFTER_NS, or one over a same-host stream (local), yields the
 * CPU first (path/adapt.h). */
static int spin_go_on(int64_t start, int64_t end, int local)
{
	int64_t now = clock_now_ns();

	if (now >= end)
		return 0;
	if (local)
		path_spin_yield_local();
	else
		path_spin_yield(now - start);
	return 1;
}

static int spin(struct ep *ep, int64_t start)
{
	int64_t end, budget = path_spin_budget_ns(&ep->wait);
	int found = 0, local = 0;
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
			if (!it->rdma || it->disabled)
				continue;
			local |= it->c->stream->ops->stats_path == STATS_SHM;
			if (path_spin(it->c->stream)) {
				ep_ready_add(ep, it);
				found = 1;
			}
		}
		pthread_mutex_unlock(&ep->lock);
	} while (!found && ((++rounds & 3) || spin_go_on(start, end, local)));
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
					ep_ready_add(ep, it);
			(*internal)++;
			continue;
		}
		if (tag == &ep->readyfd) {
			(*internal)++;
			continue;
		}
		int ctl = (uintptr_t)tag & 1;
		if (ctl)
			tag = (char *)tag - 1;
		HASH_FIND(hp, ep->tags, &tag, sizeof(tag), it);
		if (!it && ep->dead_n && ep_dead_tag(ep, tag)) {
			(*internal)++; /* removed while we slept */
			continue;
		}
		if (it && !mine) {
			(*internal)++;
			continue;
		}
		if (it && ctl) {
			path_control_event(it->c->stream);
			ep_ready_add(ep, it);
			(*internal)++;
			continue;
		}
		if (it) {
			if (path_consume(it->c->stream) && path_watchers(it->c->stream) > 1)
				event_kick(); /* other instances slept on it too */
			ep_ready_add(ep, it);
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
 * stream). Returns the events kept, -errno, or WAIT_ONLY_OURS when the
 * answer was only our tags (the caller waits again, through the RDMA
 * path). The caller counted itself in ep->waiters under ep->lock (so that
 * no other thread leaves a stream unarmed, ep_lazy, while this one may
 * sleep on it). */
static int pass_wait(struct ep *ep, int epfd, struct epoll_event *evs, int max, int64_t tmo_ns,
		     const sigset_t *mask)
{
	int k, m, internal = 0;

	k = kwait(epfd, evs, max, tmo_ns, mask);
	int e = errno;
	pthread_mutex_lock(&ep->lock);
	m = k > 0 && ep->kfd >= 0 ? absorb(ep, evs, 0, k, &internal) : k;
	ep_waiter_leave(ep);
	if (internal)
		ep_readyfd_update(ep);
	pthread_mutex_unlock(&ep->lock);
	if (k < 0)
		return -e;
	return m == 0 && internal ? WAIT_ONLY_OURS : m;
}

/* Once the instance has our helpers in its kernel set (the kick, readyfd,
 * the streams' tagged descriptors), the kernel's answer must pass through
 * here even when no RDMA stream is left: a pending kick handed to the
 * application raw is a pointer it takes for its own data (haproxy crashed
 * on one after its last RDMA stream moved to TCP and closed). Until then
 * (or in a child that shares its parent's instance) the kernel waits on the
 * application's descriptor (pass_wait). Caller holds ep->lock. Returns the
 * answer (the lock dropped), or WAIT_ONLY_OURS when the wait goes through
 * our helpers (the lock still held). */
static int wait_kernel_alone(struct ep *ep, int epfd, struct epoll_event *evs, int max,
			     int64_t tmo_ns, const sigset_t *mask)
{
	while (ep->kfd < 0 || ep->owner != rsock_pid()) {
		int r, mine = ep->owner == rsock_pid();
		atomic_fetch_add(&ep->waiters, 1);
		pthread_mutex_unlock(&ep->lock);
		r = pass_wait(ep, epfd, evs, max, tmo_ns, mask);
		if (r != WAIT_ONLY_OURS)
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
	return WAIT_ONLY_OURS;
}

int ep_wait(struct conn *epc, int epfd, struct epoll_event *evs, int max,
	    const struct timespec *tmo, const sigset_t *mask)
{
	struct ep *ep = epc->instance;
	int64_t tmo_ns = event_tmo_ns(tmo);
	int64_t deadline = 0, wstart = 0;
	int slept = 0; /* a kernel wait that could sleep happened (path_wait_note) */
	uint64_t gen;
	int r;

	if (max <= 0)
		return -EINVAL;
	if (tmo && (tmo->tv_sec < 0 || tmo->tv_nsec < 0 || tmo->tv_nsec >= 1000000000))
		return -EINVAL;
	pthread_mutex_lock(&ep->lock);
	ep_convert(ep, epfd);
	if ((r = wait_kernel_alone(ep, epfd, evs, max, tmo_ns, mask)) != WAIT_ONLY_OURS)
		return r;
	gen = ++ep->scan_gen;
	pthread_mutex_unlock(&ep->lock);
	for (;;) {
		int n, k, m, internal = 0;
		int64_t left = -1;

		pthread_mutex_lock(&ep->lock);
		ep_convert(ep, epfd);
		n = scan(ep, evs, max, gen, ep_lazy(ep, 0));
		if (n == max) {
			ep_readyfd_update(ep);
			pthread_mutex_unlock(&ep->lock);
			if (wstart)
				path_wait_note(&ep->wait, clock_now_ns() - wstart,
					     slept ? PATH_WAIT_SLEPT : PATH_WAIT_SPUN);
			return n;
		}
		pthread_mutex_unlock(&ep->lock);
		/* The clock is read only when there is a wait (where it is not a
		 * vDSO read, as in a TCG guest, each read is a system call). */
		if (n || tmo_ns == 0) {
			left = 0;
		} else {
			int64_t now = clock_now_ns();
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
		if (left != 0 && ep->idle && ep_idle_arm(ep)) {
			ep_waiter_leave(ep);
			pthread_mutex_unlock(&ep->lock);
			continue; /* one moved before its arming: report it */
		}
		pthread_mutex_unlock(&ep->lock);
		slept |= left != 0;
		k = kwait(ep->kfd, evs + n, max - n, left, mask);
		if (k < 0) {
			int e = errno;
			pthread_mutex_lock(&ep->lock);
			ep_waiter_leave(ep);
			ep_readyfd_update(ep);
			pthread_mutex_unlock(&ep->lock);
			return n ? n : -e;
		}
		/* Keep the application's events, act on our tags. */
		pthread_mutex_lock(&ep->lock);
		m = absorb(ep, evs, n, k, &internal);
		/* Streams that just woke up are reported with the rest. */
		if (internal && m < max)
			m += scan(ep, evs + m, max - m, gen, ep_lazy(ep, 1));
		ep_waiter_leave(ep);
		ep_readyfd_update(ep);
		pthread_mutex_unlock(&ep->lock);
		if (wstart && (m || (!internal && k == 0)))
			path_wait_note(&ep->wait, clock_now_ns() - wstart,
				     !slept ? PATH_WAIT_SPUN : m ? PATH_WAIT_SLEPT : PATH_WAIT_TIMEOUT);
		if (m)
			return m;
		if (!internal && k == 0)
			return 0; /* timed out */
	}
}
