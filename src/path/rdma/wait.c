/* wait.c - waiting on a stream: the per-thread wake-up eventfd, the
 * stream's queue of sleepers, a blocking call's sleep (spin, arm, poll) and
 * its deadline, and the completion channel's arming and events
 * (doc/design.md, "Wire protocol"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "base/fault.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/stats.h"
#include "path/rdma/internal.h"

/* ---- the per-thread wake-up eventfd, and the sleepers it wakes ------------ */

static pthread_key_t wake_key;
static pthread_once_t wake_once = PTHREAD_ONCE_INIT;
static __thread int my_wakefd = -1;

static void wake_exit(void *unused)
{
	(void)unused;
	ownfd_close(my_wakefd);
	my_wakefd = -1;
}

static void wake_key_make(void)
{
	pthread_key_create(&wake_key, wake_exit);
}

int tp_thread_wakefd(void)
{
	if (my_wakefd < 0) {
		pthread_once(&wake_once, wake_key_make);
		if ((my_wakefd = ownfd_move(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))) >= 0)
			pthread_setspecific(wake_key, (void *)1);
	}
	return my_wakefd;
}

void tp_wake_fork_child(void)
{
	ownfd_close(my_wakefd);
	my_wakefd = -1;
}

/* Wake the other sleepers: something changed. Caller holds t->lock. */
void tp_waitq_wake(struct tp *t)
{
	for (struct path_waiter *w = t->waitq; w; w = w->next)
		if (!w->rung && w->fd != my_wakefd) {
			uint64_t one = 1;
			w->rung = 1;
			if (rsock_real.write(w->fd, &one, sizeof(one)) < 0) {
				/* a full counter is readable too */
			}
		}
}

static void waitq_add(struct tp *t, struct path_waiter *w)
{
	w->fd = tp_thread_wakefd();
	w->rung = 0;
	if (w->fd >= 0) {
		w->next = t->waitq;
		t->waitq = w;
	}
}

static void waitq_del(struct tp *t, struct path_waiter *w)
{
	if (w->fd < 0)
		return;
	for (struct path_waiter **p = &t->waitq; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	if (w->rung) {
		uint64_t v;
		if (rsock_real.read(w->fd, &v, sizeof(v)) < 0) {
			/* already drained by another stream's wake-up */
		}
	}
	w->fd = -1;
}

/* The deadline a blocking call on t keeps: the socket's SO_RCVTIMEO or
 * SO_SNDTIMEO (opt), which the application set on its descriptor, the same
 * kernel socket as t->tcp_fd; as read when the stream came up and after
 * each setsockopt of them (tp_sockopts_changed), so that a wait costs no
 * system call for it. 0: none (wait for ever). */
int64_t tp_timeo_deadline(struct tp *t, int opt)
{
	int64_t ns = atomic_load_explicit(&t->timeo_ns[opt == SO_RCVTIMEO ? 0 : 1], memory_order_relaxed);

	return ns ? clock_now_ns() + ns : 0;
}

/* Whether a blocking call with this deadline (0: none) has run out of time. */
int tp_timed_out(int64_t deadline)
{
	return deadline && clock_now_ns() >= deadline;
}

/* A signal handler ran while a blocking read or write slept (in poll(),
 * which the kernel never restarts). TCP's are restarted after a handler
 * installed with SA_RESTART unless the socket has a time-out, and fail with
 * EINTR otherwise. Which signal it was is not known here: the call fails
 * with EINTR when the socket has a time-out or some caught signal's handler
 * lacks SA_RESTART, and waits on when every handler restarts. qperf ends a
 * test with SIGALRM (no SA_RESTART) and waited in recv() for ever. Looked up
 * only after an interruption. */
int tp_intr_fails(int64_t deadline)
{
	struct sigaction sa;

	if (deadline)
		return 1;
	for (int s = 1; s < NSIG; s++) {
		/* The faults are raised by the faulting thread itself, never
		 * in a sleep: their handlers (a sanitizer's, a crash
		 * reporter's) say nothing about this interruption. */
		if (s == SIGKILL || s == SIGSTOP || s == SIGSEGV || s == SIGBUS || s == SIGFPE ||
		    s == SIGILL || s == SIGTRAP || s == SIGSYS || s == SIGABRT)
			continue;
		if (sigaction(s, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL &&
		    sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART))
			return 1;
	}
	return 0;
}

/* Sleep until a completion or a control-connection event, lock released
 * meanwhile. Caller holds t->lock; returns with it held.
 * deadline: CLOCK_MONOTONIC nanoseconds after which the caller gives up (0:
 * none); the wait returns by then. Returns -EINTR when a signal handler
 * interrupted the sleep, 1 when the wait took completions off the queue
 * itself (its spin, or its look after arming: the caller need not poll
 * again before it looks at the stream), else 0. */
int tp_wait_event(struct tp *t, int64_t deadline, int sink)
{
	struct pollfd p[3];
	struct path_waiter w;
	int rc, ms = -1, intr, prc;
	int64_t start = clock_now_ns();
	int64_t budget = path_spin_budget_ns(&t->wait);

	if (sink && budget > (int64_t)tp_settings.poll_us * 1000)
		budget = (int64_t)tp_settings.poll_us * 1000;

	/* Without a deadline the sleep has no time-out, as poll()'s in
	 * event.c: everything a blocked call waits for wakes it (doc/design.md,
	 * "Wire protocol"). */
	if (deadline) {
		if (start >= deadline)
			return 0;
		if (budget > deadline - start)
			budget = deadline - start;
		ms = (int)((deadline - start + 999999) / 1000000);
	}

	/* Bounded busy-poll first (adaptive, RSOCK_POLL_US .. RSOCK_POLL_MAX_US):
	 * a completion that arrives within it costs no sleep and no wake-up.
	 * An idle stream spins only RSOCK_POLL_US. */
	if (budget) {
		/* The clock is read every 16th poll (see src/event/epoll/wait.c's spin()), and
		 * not again when the event comes: the wait is noted as lasting
		 * until the last reading (at most 15 polls short). A reading
		 * is a system call where the clock source has no vDSO (the
		 * soft-RoCE guest's HPET: about 1.2 us), and one after the
		 * event would delay every message by that much. A spin that
		 * has lasted PATH_YIELD_AFTER_NS yields the CPU at each reading:
		 * the thread that makes the event may be waiting for it. */
		int64_t spun = 0;
		for (unsigned i = 1;; i++) {
			if (tp_progress(t)) {
				path_wait_note(&t->wait, spun, PATH_WAIT_SPUN);
				return 1;
			}
			tp_mark_asked(t);
			if (!(i & 15)) {
				if ((spun = clock_now_ns() - start) >= budget)
					break;
				path_spin_yield(spun);
			}
		}
	}
	atomic_fetch_add(&t->sleepers, 1); /* before tp_arm(): see tp_wait_fd */
	/* Failing over, the QP is frozen: only the control connection has
	 * news (the peer's SWITCH), and the bound is looked at in time. */
	if (RSOCK_UNLIKELY(t->fo_frozen)) {
		int64_t left = t->fo_look_ms - clock_now_ms();
		int fm = left > 0 ? (int)left + 1 : 1;
		if (ms < 0 || fm < ms)
			ms = fm;
	} else if ((rc = tp_arm(t))) {
		atomic_fetch_sub(&t->sleepers, 1);
		if (rc != -EACCES || !tp_creds_lost(t))
			tp_fail(t, -ECONNRESET, "arming the completion queue failed", TP_FAIL_PATH);
		return 0;
	}
	/* A completion that arrived before the arming raises no event: look
	 * once more now that the CQ is armed, and do not sleep if there was
	 * one (the caller re-evaluates its condition). */
	if (tp_progress(t)) {
		atomic_fetch_sub(&t->sleepers, 1);
		path_wait_note(&t->wait, clock_now_ns() - start, PATH_WAIT_SPUN);
		return 1;
	}
	/* A sleeper with a signalled write outstanding wakes when it is
	 * overdue (TP_STALL_MS): a device that neither completes nor fails it
	 * must not leave the stream asleep for ever. */
	if (t->sig_count && !t->fo_frozen) {
		int64_t left = t->sig[t->sig_head].ms + TP_STALL_MS - clock_coarse_ms();
		int sm = left > 0 ? (int)left + 10 : 10;
		if (ms < 0 || sm < ms)
			ms = sm;
	}
	p[0].fd = t->fo_frozen ? -1 : t->cc->fd;
	p[0].events = POLLIN;
	p[1].fd = t->tcp_fd;
	p[1].events = POLLIN | POLLRDHUP;
	waitq_add(t, &w);
	p[2].fd = w.fd; /* -1: ignored */
	p[2].events = POLLIN;
	mtx_unlock(&t->lock);
	prc = rsock_real.poll(p, 3, ms);
	intr = prc < 0 && errno == EINTR;
	atomic_fetch_sub(&t->sleepers, 1);
	mtx_lock(&t->lock);
	waitq_del(t, &w);
	path_wait_note(&t->wait, clock_now_ns() - start, prc == 0 ? PATH_WAIT_TIMEOUT : PATH_WAIT_SLEPT);
	tp_wait_done(t);
	if (!intr && p[1].revents)
		tp_check_control(t);
	if (prc == 0 && t->sig_count && !t->err && !tp_switched(t) && !tp_progress(t) && t->sig_count &&
	    clock_coarse_ms() - t->sig[t->sig_head].ms > TP_STALL_MS) {
		tp_fail(t, -ETIMEDOUT, "a write not completed within 3 s", TP_FAIL_PATH);
		tp_failover_due(t);
	}
	return intr ? -EINTR : 0;
}

void tp_wait_done(struct tp *t)
{
	/* An epoll instance watching this stream may have been sleeping on
	 * the event just consumed: make it look again. */
	if (tp_consume(t) && atomic_load_explicit(&t->watchers, memory_order_relaxed))
		tp_kick();
}

/* Arm cq and say so in `armed`: 0, or ibv_req_notify_cq's error. The
 * store of 1 comes after the arming, which may raise its event at once: a
 * thread that takes that event (tp_consume, no lock) stores 0 and re-arms
 * only when it sees sleepers. If it stored 0 and did not re-arm before our
 * late store of 1, `armed` would say 1 over a CQ that is no longer armed,
 * with no event pending: every later waiter (tp_wait_fd, tp_wait_event,
 * tp_ready) skips the arming and sleeps through every completion, both
 * directions of the stream stopped (each end's sender waiting in
 * poll(POLLOUT) for good). So the arming thread counts itself as a
 * sleeper until its store is done: such a thread then sees it and arms
 * again, after the event, and the last arming's store of 1 is true. */
static int arm_counted(struct tp *t, struct ibv_cq *cq)
{
	int rc;

	atomic_fetch_add(&t->sleepers, 1);
	if ((rc = ibv_req_notify_cq(cq, 0)) == 0) {
		stats_cq_arm();
		atomic_store(&t->armed, 1);
	}
	atomic_fetch_sub(&t->sleepers, 1);
	return rc;
}

int tp_consume(struct tp *t)
{
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	void *ctx;
	int got;

	if (t->owner != rsock_pid())
		return 0; /* the channel is the parent's */
	/* Counted, as callers need not hold the lock: a device's removal
	 * (tp_cm_event) closes the channel's file, putting a stand-in at its
	 * number, then waits for the threads that may have read an event
	 * from it before it destroys the CQ they re-arm. */
	atomic_fetch_add(&t->consumers, 1);
	cc = t->cc;
	if ((got = cc && ibv_get_cq_event(cc, &cq, &ctx) == 0)) {
		ibv_ack_cq_events(cq, 1);
		stats_cq_event();
		atomic_store(&t->armed, 0);
		/* Another thread may be asleep on the channel, relying on the
		 * arming this event used up (tp_wait_fd): arm again for it. */
		if (atomic_load(&t->sleepers) > 0)
			arm_counted(t, cq);
	}
	atomic_fetch_sub(&t->consumers, 1);
	return got;
}

/* Request a completion event unless one is already requested. */
int tp_arm(struct tp *t)
{
	int rc;

	if (atomic_load(&t->armed))
		return 0;
	if ((rc = fault_at(FAULT_REQ_NOTIFY) ?: arm_counted(t, t->cq)))
		return rc > 0 ? -rc : errno ? -errno : -EIO;
	return 0;
}

int tp_armed(struct tp *t)
{
	return t->owner != rsock_pid() || tp_switched(t) || atomic_load(&t->armed);
}

int tp_wait_fd(struct tp *t, struct path_waiter *w)
{
	int fd;

	w->fd = -1;
	w->on = 0;
	if (t->owner != rsock_pid() || tp_switched(t))
		return -1;
	mtx_lock(&t->lock);
	/* Counted before tp_arm() looks at `armed` (both sequentially
	 * consistent): a thread consuming the event that `armed` stands
	 * for either sees this sleeper and re-arms, or has cleared `armed`
	 * before the look, and tp_arm() arms. On the wait queue before the
	 * caller's look (under this lock): any progress after the look
	 * writes this thread's wake-up eventfd. */
	atomic_fetch_add(&t->sleepers, 1);
	fd = tp_switched(t) || tp_arm(t) ? -1 : t->cc->fd;
	if (fd < 0) {
		atomic_fetch_sub(&t->sleepers, 1);
	} else {
		w->on = 1;
		waitq_add(t, w); /* without a wake-up eventfd still counted */
	}
	mtx_unlock(&t->lock);
	return fd;
}

void tp_wait_end(struct tp *t, struct path_waiter *w)
{
	if (!w->on)
		return;
	mtx_lock(&t->lock);
	waitq_del(t, w);
	mtx_unlock(&t->lock);
	w->on = 0;
	atomic_fetch_sub(&t->sleepers, 1);
}

int tp_spin(struct tp *t)
{
	int n;

	if (t->owner != rsock_pid() || tp_switched(t) || mtx_trylock(&t->lock))
		return 0;
	n = tp_progress(t);
	mtx_unlock(&t->lock);
	return n > 0;
}

int tp_event_fd(struct tp *t)
{
	return t->owner == rsock_pid() && t->cc && !tp_switched(t) ? t->cc->fd : -1;
}
