/* close.c - the end of a stream: shutdown, close (FIN or RESET, then the
 * teardown, left to the reaper when there is one), the drain at exit. */
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
		if (!tp_switched(t)) {
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

/* ---- closed streams, torn down by the library's thread ---------------- */

static pthread_mutex_t reap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tp *reap_list;
static void teardown(struct tp *t, const char *when);
static struct tp *reap_pop(int *more);

/* Tear down one stream tp_close left to the library's thread, here: 1 if there
 * was one. */
int tp_reap_one(void)
{
	struct tp *t = tp_settings.ring_cache ? reap_pop(NULL) : NULL;

	if (!t)
		return 0;
	teardown(t, "for a new stream's rings");
	return 1;
}

/* Leave t to the reaper (the library's thread), if this process has one: 1 if taken. */
static int reap_defer(struct tp *t)
{
	int first;

	if (!tp_reaper_ready())
		return 0;
	pthread_mutex_lock(&reap_lock);
	first = !reap_list; /* else the thread has been told and not yet emptied it */
	t->reap_next = reap_list;
	reap_list = t;
	pthread_mutex_unlock(&reap_lock);
	if (first)
		tp_reaper_wake();
	return 1;
}

/* One stream off the list, or NULL; *more (if given): whether others wait. */
static struct tp *reap_pop(int *more)
{
	struct tp *t;

	pthread_mutex_lock(&reap_lock);
	if ((t = reap_list))
		reap_list = t->reap_next;
	if (more)
		*more = reap_list != NULL;
	pthread_mutex_unlock(&reap_lock);
	return t;
}

int tp_reap(void)
{
	int more;
	struct tp *t = reap_pop(&more);

	if (t)
		teardown(t, "by the library's thread");
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
	if (t->up && !tp_switched(t) && !t->err)
		tp_progress(t); /* a broken path fails over first */
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
		struct linger lg = {0, 0};
		socklen_t ll = sizeof(lg);
		tp_progress(t);
		abort |= tp_unread(t) > 0;
		/* SO_LINGER {1, 0}: the application asked for a reset. */
		if (rsock_real.getsockopt(t->tcp_fd, SOL_SOCKET, SO_LINGER, &lg, &ll) == 0 &&
		    lg.l_onoff && !lg.l_linger)
			abort = 1;
		if (abort) {
			post_ctl(t, PROTO_IMM_RESET);
		} else if (!t->fin_sent) {
			tp_send_credit(t);
			if (post_ctl(t, PROTO_IMM_FIN) == 0)
				t->fin_sent = 1;
		}
		/* Let what was posted reach the peer (bounded, like a short linger). */
		int64_t until = clock_now_ns() + TP_LINGER_MS * 1000000LL;
		for (;;) {
			tp_progress(t);
			if (!t->sq_busy || t->err || t->peer_gone || tp_switched(t) ||
			    tp_timed_out(until))
				break;
			tp_wait_event(t, until, 0);
		}
	}
	t->close_abort = abort;
	mtx_unlock(&t->lock);
	/* What the peer must see (data, FIN or RESET) has reached it; the
	 * rest is local work, left to the library's thread as TCP leaves a closed
	 * socket to the kernel. */
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
