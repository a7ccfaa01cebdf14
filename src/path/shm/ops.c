/* ops.c - the same-host path as a path (path.h): readiness, waiting, the
 * ends and what the hand-over asks, over stream.c and data.c. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/stats.h"
#include "path/prefix.h"
#include "path/registry.h"
#include "base/real.h"
#include "path/rdma/transport.h"
#include "path/shm/internal.h"

static ssize_t ops_send(struct path_stream *s, const struct iovec *iov, int iovcnt, int flags,
			int nonblock)
{
	return shm_send(shm_of(s), iov, iovcnt, flags, nonblock);
}

static ssize_t ops_recv(struct path_stream *s, const struct iovec *iov, int iovcnt, int flags,
			int nonblock)
{
	return shm_recv(shm_of(s), iov, iovcnt, flags, nonblock);
}

static int ops_readable_bytes(struct path_stream *s)
{
	struct shm_stream *st = shm_of(s);
	int64_t a;

	int k = 0;

	if (st->owner != rsock_pid())
		return shm_child_readable(st);
	pthread_mutex_lock(&st->lock);
	shm_pending_resolve(st);
	int sw = shm_peer_switched(st); /* before the ring: its bytes come first */
	a = shm_unread(st);
	if (a <= 0 && sw && shm_marker_take(st) == 1)
		rsock_real.ioctl(st->tcp_fd, FIONREAD, &k); /* the ring is read: TCP's bytes */
	if (a < 0)
		a = 0;
	a += (int64_t)(st->pre ? ho_pre_left(st->pre) : 0) + (k > 0 ? k : 0);
	pthread_mutex_unlock(&st->lock);
	return a > INT32_MAX ? INT32_MAX : (int)a;
}

/* An event count that grows with every change the peer makes: the bytes it
 * wrote and consumed, its flags, its end (edge-triggered epoll's edges). */
static uint64_t evseq(struct shm_stream *st)
{
	return st->rx.tail + st->tx.head + ((uint64_t)st->flags_seen << 40) +
	       ((uint64_t)st->peer_gone << 44) + ((uint64_t)st->rd_shut << 45) +
	       ((uint64_t)(st->err != 0) << 46);
}

static short ops_ready(struct path_stream *s, int do_arm, uint64_t *seq)
{
	struct shm_stream *st = shm_of(s);
	short ev;

	if (st->owner != rsock_pid()) {
		if (seq)
			*seq = 0;
		return shm_child_ready(st);
	}
	pthread_mutex_lock(&st->lock);
	if (atomic_exchange_explicit(&st->ctl_dirty, 0, memory_order_relaxed))
		shm_check_live(st);
	if (do_arm)
		atomic_store(&st->hdr->armed[st->side], 1); /* then look: ring.h's doorbell */
	ev = shm_ready_locked(st);
	st->flags_seen = shm_rx_flags(&st->rx) & SHM_F_SEEN;
	if (seq)
		*seq = evseq(st);
	pthread_mutex_unlock(&st->lock);
	return ev;
}

static short ops_poll_events(struct path_stream *s)
{
	return ops_ready(s, 0, NULL);
}

static int ops_armed(struct path_stream *s)
{
	struct shm_stream *st = shm_of(s);

	return st->owner != rsock_pid() || atomic_load(&st->hdr->armed[st->side]);
}

static int ops_spin(struct path_stream *s)
{
	struct shm_stream *st = shm_of(s);
	int n;

	if (st->owner != rsock_pid() || pthread_mutex_trylock(&st->lock))
		return 0;
	n = shm_changed(st);
	pthread_mutex_unlock(&st->lock);
	return n;
}

static int ops_consume(struct path_stream *s)
{
	return shm_consume(shm_of(s), 0);
}

static int ops_event_fd(struct path_stream *s)
{
	struct shm_stream *st = shm_of(s);

	return st->owner == rsock_pid() ? st->efd_me : -1;
}

static int ops_wait_fd(struct path_stream *s, struct path_waiter *w)
{
	struct shm_stream *st = shm_of(s);

	w->fd = -1;
	w->on = 0;
	if (st->owner != rsock_pid())
		return -1;
	pthread_mutex_lock(&st->lock);
	atomic_fetch_add(&st->sleepers, 1);
	w->on = 1;
	w->rung = 0;
	if ((w->fd = tp_thread_wakefd()) >= 0) {
		w->next = st->waitq;
		st->waitq = w;
	}
	atomic_store(&st->hdr->armed[st->side], 1);
	pthread_mutex_unlock(&st->lock);
	return st->efd_me;
}

static void ops_wait_end(struct path_stream *s, struct path_waiter *w)
{
	struct shm_stream *st = shm_of(s);

	if (!w->on)
		return;
	pthread_mutex_lock(&st->lock);
	if (w->fd >= 0) {
		for (struct path_waiter **q = &st->waitq; *q; q = &(*q)->next)
			if (*q == w) {
				*q = w->next;
				break;
			}
		if (w->rung) {
			uint64_t v;
			if (rsock_real.read(w->fd, &v, sizeof(v)) < 0) {
				/* drained by another wake-up */
			}
		}
	}
	pthread_mutex_unlock(&st->lock);
	w->fd = -1;
	w->on = 0;
	atomic_fetch_sub(&st->sleepers, 1);
}

static void ops_wait_done(struct path_stream *s)
{
	shm_consume(shm_of(s), 1);
}

static void ops_control_event(struct path_stream *s)
{
	atomic_store_explicit(&shm_of(s)->ctl_dirty, 1, memory_order_relaxed);
}

static int ops_forked(struct path_stream *s)
{
	struct shm_stream *st = shm_of(s);

	return st->owner == rsock_pid() && st->fork_gen != atomic_load(&ho_forks);
}

static int ops_switched(struct path_stream *s)
{
	struct shm_stream *st = shm_of(s);

	if (st->owner != rsock_pid())
		return st->child_pid == rsock_pid() && !st->child_rc;
	return atomic_load_explicit(&st->sw, memory_order_acquire);
}

/* Both sides moved, the ring and the prefix read: the kernel socket is the
 * stream. */
static int ops_kernel_only(struct path_stream *s)
{
	struct shm_stream *st = shm_of(s);
	int r;

	if (st->owner != rsock_pid())
		return st->child_pid == rsock_pid() && !st->child_rc &&
		       !(st->child_pre && ho_pre_left(st->child_pre));
	if (!atomic_load_explicit(&st->sw, memory_order_acquire) || !shm_peer_switched(st) ||
	    (st->pre && ho_pre_left(st->pre)))
		return 0;
	pthread_mutex_lock(&st->lock);
	r = shm_unread(st) == 0 && shm_marker_take(st) == 1;
	pthread_mutex_unlock(&st->lock);
	return r;
}

/* The library's thread saw the TCP connection move (registry.c): the
 * peer's switch message, or its end. Follow the peer; watch on while
 * neither happened. */
static int ops_control_watch(struct path_stream *s)
{
	struct shm_stream *st = shm_of(s);
	int on;

	if (st->owner != rsock_pid())
		return 0;
	pthread_mutex_lock(&st->lock);
	shm_check_live(st);
	shm_follow(st);
	on = !st->peer_gone && !atomic_load(&st->sw);
	pthread_mutex_unlock(&st->lock);
	return on;
}

static int ops_watchers_add(struct path_stream *s, int delta, int shared)
{
	(void)shared;
	return atomic_fetch_add(&shm_of(s)->watchers, delta) + delta;
}

static int ops_control_fd(struct path_stream *s)
{
	return shm_of(s)->tcp_fd;
}

static int ops_shutdown_rd(struct path_stream *s, int fd)
{
	struct shm_stream *st = shm_of(s);

	if (st->owner != rsock_pid())
		return shm_child_enter(st) ? -EIO : rsock_real.shutdown(fd, SHUT_RD) ? -errno : 0;
	/* After a move to TCP the kernel socket's input ends too; before it,
	 * its end must keep saying the peer's. */
	if (atomic_load(&st->sw) && rsock_real.shutdown(fd, SHUT_RD))
		return -errno;
	pthread_mutex_lock(&st->lock);
	st->rd_shut = 1;
	shm_waitq_wake(st); /* blocked readers return */
	pthread_mutex_unlock(&st->lock);
	if (atomic_load(&st->watchers) && shm_hooks.kick)
		shm_hooks.kick();
	return 0;
}

static int ops_shutdown_wr(struct path_stream *s)
{
	struct shm_stream *st = shm_of(s);

	if (st->owner != rsock_pid())
		return shm_child_enter(st) ? -EIO
		       : rsock_real.shutdown(st->tcp_fd, SHUT_WR) ? -errno : 0;
	pthread_mutex_lock(&st->lock);
	shm_follow(st);
	if (atomic_load(&st->sw)) { /* writes go on TCP: so does the FIN */
		pthread_mutex_unlock(&st->lock);
		return rsock_real.shutdown(st->tcp_fd, SHUT_WR) ? -errno : 0;
	}
	if (!st->wr_shut) {
		st->wr_shut = 1;
		shm_tx_flag(&st->tx, SHM_F_FIN);
		shm_ring_peer(st);
	}
	shm_waitq_wake(st);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

/* The owner's close after a fork: a child may hold the stream and go on
 * with it, so it moves to TCP (switch.c) instead of ending, and the record
 * tells children so, with the prefix (left open until this process exits,
 * for them to open). 1 when done. */
static int close_for_children(struct shm_stream *st)
{
	if (!st->rec || st->fork_gen == atomic_load(&ho_forks) || shm_handover(st))
		return 0;
	ho_publish(&st->s, st->pre ? ho_pre_fd(st->pre) : -1);
	ho_pre_forget(st->pre);
	st->pre = NULL;
	return 1;
}

static void ops_close(struct path_stream *s, int abort)
{
	struct shm_stream *st = shm_of(s);
	int forked = st->fork_gen != atomic_load(&ho_forks);

	if (st->owner == rsock_pid() && !close_for_children(st)) {
		pthread_mutex_lock(&st->lock);
		/* The peer's switch message is not the application's unread
		 * data: taken off, so that the kernel does not reset for it. */
		for (int i = 0; i < 100 && shm_peer_switched(st) && shm_marker_take(st) == 0; i++)
			rsock_real.poll(NULL, 0, 1);
		int64_t a = shm_unread(st) + (st->pre ? (int64_t)ho_pre_left(st->pre) : 0);
		struct linger lg0 = {0, 0};
		socklen_t ll = sizeof(lg0);
		/* SO_LINGER {1, 0}: the application asked for a reset. */
		if (rsock_real.getsockopt(st->tcp_fd, SOL_SOCKET, SO_LINGER, &lg0, &ll) == 0 &&
		    lg0.l_onoff && !lg0.l_linger)
			abort = 1;
		/* Unread data, or an abortive close: a reset, as TCP's (the
		 * kernel socket sends one too, for its peer's next write). */
		if (abort || a > 0) {
			struct linger lg = {.l_onoff = 1, .l_linger = 0};
			shm_tx_flag(&st->tx, SHM_F_RESET | SHM_F_CLOSED);
			rsock_real.setsockopt(st->tcp_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		} else {
			shm_tx_flag(&st->tx, SHM_F_FIN | SHM_F_CLOSED);
		}
		shm_ring_peer(st);
		pthread_mutex_unlock(&st->lock);
	}
	shm_local_forget(st);
	if (st->rec && st->owner == rsock_pid())
		ho_unregister(&st->s, forked);
	ho_pre_free(st->pre);
	ho_pre_free(st->child_pre);
	free(st->spill);
	munmap(st->map, st->maplen);
	if (st->live_fd >= 0)
		ownfd_close(st->live_fd);
	ownfd_close(st->efd_me);
	ownfd_close(st->efd_peer);
	ownfd_close(st->tcp_fd);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

static int ops_sock_error(struct path_stream *s)
{
	return shm_sock_error(shm_of(s));
}

static void ops_sockopts_changed(struct path_stream *s)
{
	struct shm_stream *st = shm_of(s);
	static const int opt[2] = {SO_RCVTIMEO, SO_SNDTIMEO};
	int v = 1;
	socklen_t l = sizeof(v);

	if (rsock_real.getsockopt(st->tcp_fd, SOL_SOCKET, SO_RCVLOWAT, &v, &l) == 0)
		atomic_store_explicit(&st->rcvlowat, v > 1 ? v : 1, memory_order_relaxed);
	for (int i = 0; i < 2; i++) {
		struct timeval tv;
		int64_t ns = 0;
		l = sizeof(tv);
		if (rsock_real.getsockopt(st->tcp_fd, SOL_SOCKET, opt[i], &tv, &l) == 0 &&
		    l == sizeof(tv) && (tv.tv_sec > 0 || tv.tv_usec > 0))
			ns = (int64_t)tv.tv_sec * 1000000000 + (int64_t)tv.tv_usec * 1000;
		atomic_store_explicit(&st->timeo_ns[i], ns, memory_order_relaxed);
	}
}

static void ops_exit_drain(struct path_stream *s, pid_t self, int64_t until_ns)
{
	/* Nothing is in flight: what was written is in the shared memory. */
	(void)s;
	(void)self;
	(void)until_ns;
}

static int ops_handover(struct path_stream *s)
{
	return shm_handover(shm_of(s));
}

static struct ho_pre *ops_prefix(struct path_stream *s)
{
	return shm_of(s)->pre;
}

static size_t ops_prefix_left(struct path_stream *s)
{
	struct ho_pre *p = shm_of(s)->pre;

	return p ? ho_pre_left(p) : 0;
}

static int ops_prefix_fd(struct path_stream *s)
{
	struct ho_pre *p = shm_of(s)->pre;

	return p ? ho_pre_fd(p) : -1;
}

const struct path_ops shm_ops RSOCK_HIDDEN = {
	.name = "shm",
	.transport = RSOCK_TRANSPORT_SHM,
	.stats_path = STATS_SHM,
	.send = ops_send,
	.recv = ops_recv,
	.readable_bytes = ops_readable_bytes,
	.poll_events = ops_poll_events,
	.ready = ops_ready,
	.armed = ops_armed,
	.spin = ops_spin,
	.consume = ops_consume,
	.event_fd = ops_event_fd,
	.wait_fd = ops_wait_fd,
	.wait_end = ops_wait_end,
	.wait_done = ops_wait_done,
	.control_event = ops_control_event,
	.kernel_only = ops_kernel_only,
	.watchers_add = ops_watchers_add,
	.control_fd = ops_control_fd,
	.shutdown_rd = ops_shutdown_rd,
	.shutdown_wr = ops_shutdown_wr,
	.close = ops_close,
	.sockopts_changed = ops_sockopts_changed,
	.sock_error = ops_sock_error,
	.exit_drain = ops_exit_drain,
	.handover = ops_handover,
	.handover_shared = ops_handover,
	.switched = ops_switched,
	.prefix = ops_prefix,
	.prefix_left = ops_prefix_left,
	.prefix_fd = ops_prefix_fd,
	.forked = ops_forked,
	.control_watch = ops_control_watch,
	.publish = NULL,
};
