/* stream.c - the same-host path's stream: its making, the doorbells, the
 * sleep of a blocking call and its wake-ups (doc/design.md, "The same-host
 * path"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/real.h"
#include "path/registry.h"
#include "path/rdma/transport.h"
#include "path/shm/internal.h"

struct shm_hooks shm_hooks RSOCK_HIDDEN;

extern const struct path_ops shm_ops RSOCK_HIDDEN;

static void own_close(int fd)
{
	if (fd >= 0)
		ownfd_close(fd);
}

int shm_stream_new(int memfd, uint32_t size, int side, int me, int peer, int live, int tcp_fd,
		   struct path_stream **out)
{
	struct shm_stream *st = calloc(1, sizeof(*st));
	int rc = -ENOMEM;

	*out = NULL;
	if (!st)
		goto fail;
	st->maplen = shm_map_len(size);
	st->map = mmap(NULL, st->maplen, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (st->map == MAP_FAILED) {
		rc = -errno;
		st->map = NULL;
		goto fail;
	}
	own_close(memfd);
	memfd = -1;
	if ((rc = shm_ring_attach(st->map, size, side, &st->rx, &st->tx)))
		goto fail;
	if ((st->tcp_fd = ownfd_dup_high(tcp_fd)) < 0) {
		rc = -errno;
		goto fail;
	}
	st->s.ops = &shm_ops;
	pthread_mutex_init(&st->lock, NULL);
	st->owner = rsock_pid();
	st->side = side;
	st->hdr = st->map;
	st->efd_me = me;
	st->efd_peer = peer;
	st->live_fd = live;
	st->pending = live >= 0;
	atomic_init(&st->rcvlowat, 1);
	path_adapt_init(&st->wait);
	shm_ops.sockopts_changed(&st->s);
	/* The library's thread watches the TCP connection for the peer's
	 * switch (switch.c) and answers other processes' requests. */
	st->fork_gen = atomic_load(&ho_forks);
	st->rec = ho_register(&st->s);
	*out = &st->s;
	return 0;
fail:
	if (st && st->map)
		munmap(st->map, st->maplen);
	free(st);
	own_close(memfd);
	own_close(me);
	own_close(peer);
	own_close(live);
	return rc;
}

void shm_ring_peer(struct shm_stream *st)
{
	_Atomic uint32_t *a = &st->hdr->armed[!st->side];

	/* seq_cst, after the index's seq_cst store (ring.c): either the
	 * peer's arming comes before this look and it is rung, or its look
	 * after arming sees the index. */
	if (atomic_load(a) && atomic_exchange(a, 0)) {
		uint64_t one = 1;
		if (rsock_real.write(st->efd_peer, &one, sizeof(one)) < 0) {
			/* a full counter is readable all the same */
		}
	}
}

void shm_check_live(struct shm_stream *st)
{
	char b;
	ssize_t r;

	if (st->peer_gone)
		return;
	r = rsock_real.recv(st->tcp_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	shm_pending_resolve(st);
	/* (Bytes there would be the peer's after a move to TCP: not an end.) */
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
		st->peer_gone = 1;
		log_debug("shm: the peer closed the stream or ended (%zd)", r);
	}
}

/* What a waiter saw: the peer's tail and head, its flags. */
struct seen {
	uint64_t tail, head;
	uint32_t flags;
	int gone, sw;
};

static int changed_since(struct shm_stream *st, const struct seen *v)
{
	uint32_t want = SHM_F_SEEN;

	return atomic_load(&st->rx.d->tail) != v->tail || atomic_load(&st->tx.d->head) != v->head ||
	       (shm_rx_flags(&st->rx) & want) != v->flags || st->peer_gone != v->gone ||
	       atomic_load(&st->sw) != v->sw ||
	       atomic_load_explicit(&st->ctl_dirty, memory_order_relaxed) || st->err ||
	       st->rx.err || st->tx.err;
}

int shm_changed(struct shm_stream *st)
{
	uint32_t want = SHM_F_SEEN;

	return atomic_load(&st->rx.d->tail) != st->rx.tail ||
	       atomic_load(&st->tx.d->head) != st->tx.head ||
	       (shm_rx_flags(&st->rx) & want) != st->flags_seen ||
	       atomic_load_explicit(&st->ctl_dirty, memory_order_relaxed) || st->err ||
	       st->rx.err || st->tx.err;
}

int64_t shm_deadline(struct shm_stream *st, int opt)
{
	int64_t ns = atomic_load_explicit(&st->timeo_ns[opt == SO_RCVTIMEO ? 0 : 1],
					  memory_order_relaxed);

	return ns ? clock_now_ns() + ns : 0;
}

void shm_waitq_wake(struct shm_stream *st)
{
	int mine = tp_thread_wakefd();

	for (struct path_waiter *w = st->waitq; w; w = w->next)
		if (!w->rung && w->fd != mine) {
			uint64_t one = 1;
			w->rung = 1;
			if (rsock_real.write(w->fd, &one, sizeof(one)) < 0) {
				/* a full counter is readable too */
			}
		}
}

int shm_consume(struct shm_stream *st, int kick)
{
	uint64_t v;

	if (st->owner != rsock_pid() || rsock_real.read(st->efd_me, &v, sizeof(v)) != sizeof(v))
		return 0;
	/* Other threads may sleep on the doorbell whose ring this took. */
	pthread_mutex_lock(&st->lock);
	shm_waitq_wake(st);
	pthread_mutex_unlock(&st->lock);
	if (kick && atomic_load_explicit(&st->watchers, memory_order_relaxed) && shm_hooks.kick)
		shm_hooks.kick();
	return 1;
}

/* Spin (lock released) for the adaptive budget: 1 when something changed
 * since v. */
static int spin(struct shm_stream *st, const struct seen *v, int64_t start)
{
	int64_t budget = path_spin_budget_ns(&st->wait);
	unsigned n = 0;

	if (budget <= 0)
		return 0;
	pthread_mutex_unlock(&st->lock);
	for (;;) {
		if (atomic_load_explicit(&st->rx.d->tail, memory_order_relaxed) != v->tail ||
		    atomic_load_explicit(&st->tx.d->head, memory_order_relaxed) != v->head ||
		    (atomic_load_explicit(&st->rx.d->flags, memory_order_relaxed) &
		     SHM_F_SEEN) != v->flags ||
		    atomic_load_explicit(&st->ctl_dirty, memory_order_relaxed) ||
		    atomic_load_explicit(&st->sw, memory_order_relaxed) != v->sw)
			break;
		if (!(++n % 16)) {
			int64_t spun = clock_now_ns() - start;
			if (spun >= budget) {
				pthread_mutex_lock(&st->lock);
				return 0;
			}
			path_spin_yield_local();
		}
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
	pthread_mutex_lock(&st->lock);
	path_wait_note(&st->wait, clock_now_ns() - start, PATH_WAIT_SPUN);
	return 1;
}

int shm_sleep(struct shm_stream *st, int64_t deadline)
{
	struct path_waiter w = {.fd = -1};
	struct pollfd p[4];
	int64_t start = clock_now_ns();
	struct seen v = {st->rx.tail, st->tx.head, st->flags_seen, st->peer_gone,
			 atomic_load(&st->sw)};
	int timeout = -1, r;

	/* What the caller saw (under the lock it held since) must still
	 * hold, both directions looked at anew, else it looks again. The
	 * sleep then compares with this thread's own copy: another thread
	 * of the stream moves st's while this one spins or sleeps. */
	shm_rx_avail(&st->rx);
	shm_tx_room(&st->tx);
	st->flags_seen = shm_rx_flags(&st->rx) & SHM_F_SEEN;
	if (st->rx.tail != v.tail || st->tx.head != v.head || st->flags_seen != v.flags ||
	    st->rx.err || st->tx.err)
		return 0;
	if (spin(st, &v, start))
		return 0;
	w.fd = tp_thread_wakefd();
	if (w.fd >= 0) {
		w.next = st->waitq;
		st->waitq = &w;
	}
	atomic_fetch_add(&st->sleepers, 1);
	atomic_store(&st->hdr->armed[st->side], 1);
	/* Armed, then look: a change before the arming rang no doorbell. */
	if (changed_since(st, &v)) {
		r = 0;
		goto out;
	}
	if (deadline) {
		int64_t left = deadline - start;
		if (left <= 0) {
			r = -ETIMEDOUT;
			goto out;
		}
		timeout = (int)((left + 999999) / 1000000);
	}
	p[0].fd = st->efd_me;
	p[0].events = POLLIN;
	p[1].fd = st->peer_gone ? -1 : st->tcp_fd;
	p[1].events = POLLIN | POLLRDHUP;
	p[2].fd = w.fd;
	p[2].events = POLLIN;
	p[3].fd = st->pending ? st->live_fd : -1; /* the client's word */
	p[3].events = POLLIN;
	pthread_mutex_unlock(&st->lock);
	r = rsock_real.poll(p, 4, timeout);
	int intr = r < 0 && errno == EINTR;
	if (r > 0 && p[0].revents)
		shm_consume(st, 1);
	pthread_mutex_lock(&st->lock);
	if (r > 0 && p[1].revents)
		shm_check_live(st);
	if (r > 0 && p[3].revents)
		shm_pending_resolve(st);
	path_wait_note(&st->wait, clock_now_ns() - start, r == 0 ? PATH_WAIT_TIMEOUT : PATH_WAIT_SLEPT);
	r = intr ? -EINTR : r == 0 && deadline ? -ETIMEDOUT : 0;
out:
	if (w.fd >= 0) {
		for (struct path_waiter **q = &st->waitq; *q; q = &(*q)->next)
			if (*q == &w) {
				*q = w.next;
				break;
			}
		if (w.rung) {
			uint64_t c;
			if (rsock_real.read(w.fd, &c, sizeof(c)) < 0) {
				/* drained by another wake-up */
			}
		}
	}
	atomic_fetch_sub(&st->sleepers, 1);
	return r;
}
