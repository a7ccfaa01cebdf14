/* close.c - the end of a stream: shutdown, close (FIN or RESET; the wait for
 * its completion and the teardown left to the library's thread when there
 * is one), the drain at exit. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/stats.h"
#include "path/handover.h"
#include "path/rdma/internal.h"

/* Post a control immediate (FIN/RESET), waiting for send-queue room. */
static int post_ctl(struct tp *t, enum proto_imm_type type)
{
	for (int i = 0; i < 100 && t->sq_busy >= TP_SQ_DEPTH && !t->err; i++) {
		tp_progress(t);
		if (t->sq_busy >= TP_SQ_DEPTH)
			tp_wait_event(t, 0, 0);
	}
	if (t->err)
		return t->err;
	return tp_post_write(t, NULL, 0, proto_imm_encode(type, 0), 0);
}

int tp_shutdown_rd(struct tp *t, int fd)
{
	if (t->owner != rsock_pid() || tp_switched(t))
		return tp_sw_enter(t) ? -EIO : rsock_real.shutdown(fd, SHUT_RD) ? -errno : 0;
	mtx_lock(&t->lock);
	t->rd_shut = 1;
	mtx_unlock(&t->lock);
	/* The kernel socket's input ends too: that wakes every thread blocked
	 * on this stream (they sleep on it), as TCP's shutdown wakes readers. */
	return rsock_real.shutdown(fd, SHUT_RD) ? -errno : 0;
}

int tp_shutdown_wr(struct tp *t)
{
	int rc = 0;

	if (t->owner != rsock_pid() || tp_switched(t))
		return tp_sw_enter(t) ? -EIO : rsock_real.shutdown(t->tcp_fd, SHUT_WR) ? -errno : 0;
	mtx_lock(&t->lock);
	if (tp_switched(t)) {
		mtx_unlock(&t->lock);
		return rsock_real.shutdown(t->tcp_fd, SHUT_WR) ? -errno : 0;
	}
	if (!t->fin_sent) {
		tp_progress(t);
		if (t->path_down && !tp_switched(t) && !t->err) {
			t->fin_sent = 1; /* a failover under way: TCP's FIN ends it */
		} else if (!tp_switched(t)) {
			tp_send_credit(t);
			rc = post_ctl(t, PROTO_IMM_FIN);
			if (rc == 0)
				t->fin_sent = 1;
			else if (rc != -EPIPE && !t->err) {
				/* The path broke under the FIN: a failover, and
				 * TCP's FIN ends the stream. */
				tp_fail(t, -ECONNRESET, "posting FIN failed", TP_FAIL_PATH);
				tp_failover_due(t);
			}
		}
		if (tp_switched(t)) {
			mtx_unlock(&t->lock);
			return rsock_real.shutdown(t->tcp_fd, SHUT_WR) ? -errno : 0;
		}
	}
	mtx_unlock(&t->lock);
	return rc == -EPIPE ? 0 : rc;
}

/* ---- closed streams, drained and torn down by the library's thread -----
 *
 * A stream the application closed goes on reap_list with its FIN (or RESET)
 * posted, as a TCP socket closed with bytes in flight stays with the
 * kernel: its rings stay registered and mapped, its QP up, until the
 * completions say the peer has everything (drained(), bounded by
 * TP_LINGER_MS), then it is torn down. The list is shared: a closer
 * pushes, the library's thread (tp_reap) takes it whole for one turn and
 * puts back what still waits, a new stream may take one whose rings it
 * needs (tp_reap_one); whoever took a stream off the list owns it. */

static pthread_mutex_t reap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tp *reap_list;
/* The process whose exit drained the list (tp_exit_reap): its thread tears
 * nothing down any more, the kernel does at the process's end. */
static _Atomic pid_t reap_exit_pid;
static void teardown(struct tp *t, const char *when);

/* Whether what the closed stream t posted is done with: complete, failed,
 * or moved to TCP by a failover (the peer's SWITCH, or the path breaking
 * now: tp_progress runs it), or the peer gone, or TP_LINGER_MS passed
 * since the close (the QP goes with the rest; the peer's reads end as at
 * a peer killed). Takes t->lock. */
static int drained(struct tp *t, int64_t now_ms)
{
	int done;

	mtx_lock(&t->lock);
	if ((t->sq_busy || t->path_down) && !t->err && !t->peer_gone && !tp_switched(t)) {
		tp_progress(t);
		if ((t->sq_busy || t->path_down) && !t->err && !tp_switched(t))
			tp_check_control(t);
		/* Only unsignalled ones (FIN or RESET could not be posted): a
		 * fence's completion will say they are done. */
		if (t->sq_busy && !t->sig_count && !t->err && !tp_switched(t) &&
		    t->sq_busy < TP_SQ_DEPTH && !atomic_load(&tp_creds_stale))
			tp_post_fence(t);
	}
	/* A failover under way ends in its own time (its bound: fo_bound). */
	done = (!t->sq_busy && !t->path_down) || t->err || t->peer_gone || tp_switched(t);
	if (!done && now_ms >= t->reap_until && !t->path_down) {
		log_debug("fd %d: %u posted writes not complete %d ms after the close", t->tcp_fd,
			  t->sq_busy, TP_LINGER_MS);
		done = 1;
	}
	mtx_unlock(&t->lock);
	return done;
}

/* Put the streams of list (linked by reap_next) on reap_list. Returns
 * whether reap_list was empty. */
static int reap_push(struct tp *list)
{
	struct tp *last = list;
	int first;

	while (last->reap_next)
		last = last->reap_next;
	pthread_mutex_lock(&reap_lock);
	first = !reap_list;
	last->reap_next = reap_list;
	reap_list = list;
	pthread_mutex_unlock(&reap_lock);
	return first;
}

/* The first look at a closed stream within REAP_LOOK_MS; the library's
 * thread keeps looking that often for REAP_HOT_MS after a close, so that
 * closes in a row find a turn due and pay no system call for their wake
 * (service_wake_after). */
#define REAP_LOOK_MS 8
#define REAP_HOT_MS 64
static _Atomic int64_t reap_last_close; /* ms */

/* Leave t to the library's thread, if this process has one: 1 if taken. */
static int reap_defer(struct tp *t)
{
	if (!tp_reaper_ready())
		return 0;
	t->reap_next = NULL;
	/* Read before the push: from then t is the library thread's, which
	 * may tear it down (free it) at once. */
	atomic_store_explicit(&reap_last_close, t->reap_until - TP_LINGER_MS, memory_order_relaxed);
	reap_push(t);
	/* Not at once: a thread woken now would take the CPU from the closer
	 * (its teardown, about a millisecond in the guest), and the FIN's
	 * completion comes meanwhile. */
	tp_reaper_wake(REAP_LOOK_MS);
	return 1;
}

/* Take reap_list whole: the streams are the caller's. */
static struct tp *reap_take(void)
{
	struct tp *t;

	pthread_mutex_lock(&reap_lock);
	t = reap_list;
	reap_list = NULL;
	pthread_mutex_unlock(&reap_lock);
	return t;
}

/* Tear down a closed stream that is drained (it is looked at first), for a
 * new stream that found the ring cache empty: 1 if there was one. */
int tp_reap_one(void)
{
	struct tp *t, *next, *keep = NULL;
	int found = 0;

	if (!tp_settings.ring_cache || reap_exit_pid == rsock_pid())
		return 0;
	for (t = reap_take(); t; t = next) {
		next = t->reap_next;
		if (!found && (t->reap_drained || (t->reap_drained = drained(t, clock_now_ms())))) {
			teardown(t, "for a new stream's rings");
			found = 1;
			continue;
		}
		t->reap_next = keep;
		keep = t;
	}
	if (keep && reap_push(keep))
		tp_reaper_wake(REAP_LOOK_MS);
	return found;
}

int tp_reap(void)
{
	struct tp *t, *next, *keep = NULL;
	int more = 0, torn = 0;
	int64_t now = clock_now_ms(), look = -1;

	if (reap_exit_pid == rsock_pid())
		return 0;
	/* One teardown a turn (the thread's other work waits at most that);
	 * the others are looked at, and looked at again after a quarter of
	 * their age (1 to 16 ms) while they wait; with none, again within
	 * REAP_LOOK_MS while closes were recent (reap_defer). */
	for (t = reap_take(); t; t = next) {
		next = t->reap_next;
		if (!t->reap_drained)
			t->reap_drained = drained(t, now);
		if (t->reap_drained && !torn) {
			teardown(t, "by the library's thread");
			torn = 1;
			continue;
		}
		t->reap_next = keep;
		keep = t;
		if (t->reap_drained) {
			more = 1;
		} else {
			int64_t age = now - (t->reap_until - TP_LINGER_MS), in = age / 4;
			in = in < 1 ? 1 : in > 16 ? 16 : in;
			if (look < 0 || in < look)
				look = in;
		}
	}
	if (keep)
		reap_push(keep);
	else if (now - atomic_load_explicit(&reap_last_close, memory_order_relaxed) < REAP_HOT_MS)
		look = REAP_LOOK_MS;
	if (!more && look >= 0)
		tp_reaper_wake((int)look);
	return more;
}

/* Drop a copy of a stream whose verbs objects are another process's (a
 * forked child's inheritance): our descriptors and memory only. */
static void copy_drop(struct tp *t)
{
	if (tp_switched(t))
		ho_pre_free(t->pre);
	ownfd_close(t->tcp_fd);
	tp_mem_free(t);
	free(t);
}

void tp_reap_fork_child(void)
{
	struct tp *t = reap_list;

	tp_mark_fork_child();
	reap_list = NULL;
	while (t) {
		struct tp *next = t->reap_next;
		copy_drop(t);
		t = next;
	}
}

void tp_exit_reap(pid_t self, int64_t until_ns)
{
	struct tp *mine = NULL, *others = NULL, *t, *next;
	unsigned n = 0, busy = 0, left = 0;

	/* This process's streams only: in a child sharing our memory (vfork)
	 * the list is its parent's. */
	pthread_mutex_lock(&reap_lock);
	reap_exit_pid = self;
	for (t = reap_list; t; t = next) {
		next = t->reap_next;
		if (t->owner == self) {
			t->reap_next = mine;
			mine = t;
		} else {
			t->reap_next = others;
			others = t;
		}
	}
	reap_list = others;
	pthread_mutex_unlock(&reap_lock);
	/* Left to the kernel once drained: it destroys the verbs objects with
	 * the process. */
	for (t = mine; t; t = t->reap_next) {
		n++;
		if (t->reap_drained)
			continue;
		mtx_lock(&t->lock);
		if (t->qp && t->sq_busy && !tp_switched(t) && !t->peer_gone && !t->err) {
			busy++;
			tp_await_posted(t, until_ns / 1000000);
			left += t->sq_busy > 0;
		}
		mtx_unlock(&t->lock);
	}
	if (n)
		log_debug("at exit, %u closed streams left to the kernel; posted writes awaited on %u, "
			  "%u not complete",
			  n, busy, left);
}

/* Post what the closed stream's peer must see: FIN after the data, or
 * RESET (abort: unread data, SO_LINGER {1, 0}). No credit: nothing more is
 * read. Returns how long close() itself waits for it (ms): SO_LINGER's
 * time, else 0 (the library's thread waits); *abort is updated. Caller
 * holds t->lock. */
static int64_t close_post(struct tp *t, int *abort)
{
	int linger = atomic_load_explicit(&t->linger_s, memory_order_relaxed);

	tp_progress(t);
	*abort |= tp_unread(t) > 0 || linger == 0; /* {1, 0}: the application asks for a reset */
	if (*abort)
		post_ctl(t, PROTO_IMM_RESET);
	else if (!t->fin_sent && post_ctl(t, PROTO_IMM_FIN) == 0)
		t->fin_sent = 1;
	/* A lingering close blocks, as TCP's */
	return linger > 0 ? (int64_t)linger * 1000 : 0;
}

/* Wait until what was posted reached the peer, by until (ns). Caller holds
 * t->lock. */
static void close_wait(struct tp *t, int64_t until)
{
	for (;;) {
		tp_progress(t);
		if (!t->sq_busy || t->err || t->peer_gone || tp_switched(t) || tp_timed_out(until))
			break;
		tp_wait_event(t, until, 0);
	}
}

void tp_close(struct tp *t, int abort)
{
	int forked, published, pfd = -1;

	if (t->owner != rsock_pid()) {
		/* An inherited copy in a forked child: the verbs objects belong
		 * to the parent (the device file is shared), so touching them
		 * here would tear the parent's stream down. Drop our copy only. */
		copy_drop(t);
		return;
	}
	/* A child forked since the stream came up may still hold the socket:
	 * closing here must not end the stream for it (TCP's reference
	 * semantics), so the stream moves to TCP instead of sending FIN, and
	 * what was not read stays for the child (the prefix is kept open). */
	forked = t->fork_gen != atomic_load(&ho_forks);
	mtx_lock(&t->lock);
	published = tp_switch_for_children(t, forked, clock_now_ms() + TP_SWITCH_MS, &pfd);
	mtx_unlock(&t->lock);
	if (published)
		ho_publish(&t->s, pfd);
	ho_unregister(&t->s, forked);
	mtx_lock(&t->lock);
	tp_mark_drop(t);
	if (t->up && !tp_switched(t) && !t->err) {
		tp_progress(t); /* a broken path fails over first, to its end */
		tp_failover_wait(t, clock_now_ms() + TP_SWITCH_MS);
	}
	if (tp_switched(t)) {
		/* Like TCP closing with unread data (unless another process may
		 * hold the socket): the peer sees a reset. */
		abort = !forked && ho_pre_left(t->pre);
	} else if (atomic_load_explicit(&tp_creds_stale, memory_order_relaxed) && t->up &&
		   !t->err && !t->peer_gone) {
		/* The device refuses this process (creds_lost): FIN and RESET
		 * cannot be posted. Closing the control connection says it (the
		 * peer reads what landed, then EOF); what was posted gets a
		 * moment to go out first. */
		for (int i = 0; i < 100 && t->sig_count && !t->err; i++) {
			tp_progress(t);
			rsock_real.poll(NULL, 0, 1);
		}
	} else if (t->up && !t->err && !t->peer_gone) {
		int64_t linger = close_post(t, &abort);
		/* The wait for its completion is the library's thread's (TCP's
		 * close leaves it to the kernel), but a lingering close's or
		 * one in a process without that thread. */
		if (linger || !tp_reaper_ready())
			close_wait(t, clock_now_ns() + (linger ? linger : TP_LINGER_MS) * 1000000LL);
	}
	t->close_abort = abort;
	t->reap_until = clock_now_ms() + TP_LINGER_MS;
	t->reap_drained = 0;
	mtx_unlock(&t->lock);
	/* The rest is local work, left to the library's thread as TCP leaves a
	 * closed socket to the kernel. */
	if (t->up && reap_defer(t))
		return;
	teardown(t, "at close");
}

/* The end of tp_close: the verbs objects, the rings (to the cache), the
 * control connection. Caller holds nothing; t is nobody else's. */
static void teardown(struct tp *t, const char *when)
{
	int abort = t->close_abort;

	log_debug("fd %d: %s stream torn down %s", t->tcp_fd, t->up ? "closed" : "unused", when);
	if (t->id)
		rdma_disconnect(t->id);
	tp_qp_destroy(t);
	if (tp_set_keep(t)) {
		t->mem = NULL; /* the cache's now, still registered */
	} else if (!t->released) {
		tp_regs_free(t);
		stats_registered(-(int64_t)t->mem_len);
	}
	if (t->released) {
		/* The channel's number holds its stand-in; the context the
		 * channel was made on may be closed by now: free what
		 * ibv_destroy_comp_channel would, without it. */
		ownfd_close(t->cc->fd);
		free(t->cc);
		t->cc = NULL;
	}
	tp_cq_free(t); /* not kept (set_keep takes both or neither) */
	/* The id last: the last id of a device being removed lets librdmacm
	 * close the device, and nothing of ours may be left on it then. */
	if (t->id)
		rdma_destroy_id(t->id);
	if (t->ch) { /* the id's private channel */
		ownfd_forget(t->ch->fd);
		rdma_destroy_event_channel(t->ch);
	}
	ho_pre_free(t->pre);
	if (t->rec)
		ho_unwatch(t->tcp_fd);
	if (abort && (t->up || tp_switched(t))) {
		/* Like TCP closing with unread data: the peer sees a reset. */
		struct linger lg = {.l_onoff = 1, .l_linger = 0};
		rsock_real.setsockopt(t->tcp_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	ownfd_close(t->tcp_fd);
	tp_mem_free(t);
	free(t);
}

/* At exit (init.c's destructor: exit(), or a return from main): what this
 * process posted on t, a stream it never closed, reaches the peer before
 * the kernel destroys the QP with the process. A device executes a post
 * after the call returned, and a QP destroyed with work queued drops it,
 * where kernel TCP keeps a dead process's sent bytes and delivers them.
 * (Soft-RoCE does a post's work inside the call, so nothing is ever left
 * there.) No FIN: the kernel's closing of the control connection tells the
 * end, as for a process killed. A stream another thread is in, or whose
 * owner is another process (a forked child; the pid is the kernel's, for a
 * vfork child that calls exit()), is passed over. */
void tp_exit_drain(struct tp *t, pid_t self, int64_t until_ns)
{
	unsigned busy;
	int pfd;

	if (t->owner != self || mtx_trylock(&t->lock))
		return;
	/* A child forked since the stream came up may hold the socket and go
	 * on using it (a client that forks and exits, as `( ... ) & exit` in
	 * a shell does): as close() does, the stream moves to TCP for it
	 * (within what is left of the exit's bound). Bytes unread here are
	 * out of the child's reach once this process is gone (it gets EIO);
	 * with none it goes on. */
	if (until_ns - clock_now_ns() > 50 * 1000000LL &&
	    tp_switch_for_children(t, t->fork_gen != atomic_load(&ho_forks), until_ns / 1000000, &pfd)) {
		mtx_unlock(&t->lock);
		ho_publish(&t->s, pfd);
		log_debug("fd %d: at exit, moved to TCP for a child that may hold it", t->tcp_fd);
		return;
	}
	if (t->up && !tp_switched(t) && !t->err && t->path_down)
		tp_failover_wait(t, until_ns / 1000000); /* the peer's missing bytes, on TCP */
	if (t->up && t->qp && !tp_switched(t) && !t->peer_gone)
		tp_send_mark(t); /* what was read (mark.c) */
	busy = t->sq_busy;
	if (t->up && t->qp && !tp_switched(t) && !t->peer_gone)
		tp_await_posted(t, until_ns / 1000000);
	if (busy)
		log_debug("fd %d: at exit, %u posted writes awaited: %u left", t->tcp_fd, busy,
			  t->sq_busy);
	mtx_unlock(&t->lock);
}

void tp_fork_lock(void)
{
	pthread_mutex_lock(&tp_set_lock);
	pthread_mutex_lock(&reap_lock);
	tp_mark_lock();
}

void tp_fork_unlock(void)
{
	tp_mark_unlock();
	pthread_mutex_unlock(&reap_lock);
	pthread_mutex_unlock(&tp_set_lock);
}
