/* switch.c - the same-host stream's move to kernel TCP (doc/design.md, "The
 * same-host path"): a side sets SHM_F_SWITCH after its last ring byte and
 * writes on the TCP connection from then on; the peer, at its next look,
 * does the same; each reads the ring to its end, then the TCP connection. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/proto.h"
#include "base/real.h"
#include "base/stats.h"
#include "path/prefix.h"
#include "path/shm/internal.h"

#define SHM_SWITCH_NS (10 * 1000000000LL) /* the peer's answer, at most */

void shm_switch_locked(struct shm_stream *st, int mark)
{
	if (atomic_load(&st->sw))
		return;
	struct proto_switch m = {.version = PROTO_VERSION, .rdma_bytes = st->tx.tail,
				 .rx_bytes = st->rx.head};
	uint8_t b[PROTO_SWITCH3_LEN];

	atomic_store(&st->sw, 1);
	/* The first to move sends the switch message ahead of what it writes
	 * on TCP (before the flag, so that it is there when the peer sees the
	 * flag): the peer's library thread, which watches the connection,
	 * wakes for it and follows even while its application leaves the
	 * stream alone; the peer's reader takes it off. A follower sends
	 * none: nothing waits for it. */
	int n = mark ? proto_switch_encode(&m, b, sizeof(b)) : 0;
	if (n > 0 && rsock_real.send(st->tcp_fd, b, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n) {
		log_debug("shm: the switch message was not sent (%d): the peer is gone", errno);
		n = 0;
	}
	shm_tx_flag(&st->tx, SHM_F_SWITCH | (n > 0 ? SHM_F_MARK : 0));
	shm_ring_peer(st);
	if (mark)
		shm_local_nudge(st);
	shm_waitq_wake(st);
	if (atomic_load_explicit(&st->watchers, memory_order_relaxed) && shm_hooks.kick)
		shm_hooks.kick();
}

/* The ring's last byte is known: the peer switched, ended its writing, or
 * its process is gone. */
static int ring_final(struct shm_stream *st)
{
	return st->peer_gone || st->err || (shm_rx_flags(&st->rx) & SHM_F_SEEN);
}

int shm_handover(struct shm_stream *st)
{
	int64_t deadline = clock_now_ns() + SHM_SWITCH_NS;
	int rc = 0;

	if (st->owner != rsock_pid())
		return -EIO;
	pthread_mutex_lock(&st->lock);
	shm_pending_resolve(st);
	shm_switch_locked(st, 1);
	while (!ring_final(st)) {
		int w = shm_sleep(st, deadline);
		if (atomic_exchange_explicit(&st->ctl_dirty, 0, memory_order_relaxed))
			shm_check_live(st);
		if (w == -ETIMEDOUT && !ring_final(st)) {
			log_warn_rl("shm: the peer did not follow the move to TCP within 10 s");
			rc = -ETIMEDOUT;
			break;
		}
	}
	int64_t a = shm_rx_avail(&st->rx);
	if (!rc && (a > 0 || st->spill_len) && !st->pre) {
		/* What the application has not read (the spill's, then the
		 * ring's) goes where every process that holds the stream reads
		 * it first (exec, stdio, ...). */
		uint32_t off = (uint32_t)(st->rx.head & (st->rx.size - 1)), first = st->rx.size - off;
		size_t ra = a > 0 ? (size_t)a : 0;
		struct iovec v[3] = {{st->spill + st->spill_off, st->spill_len},
				     {(void *)(st->rx.buf + off), ra < first ? ra : first},
				     {(void *)st->rx.buf, ra > first ? ra - first : 0}};
		if ((rc = ho_pre_new(v, 3, &st->pre)) == 0) {
			st->spill_len = st->spill_off = 0;
			if (ra) {
				shm_rx_consume(&st->rx, ra);
				shm_ring_peer(st);
			}
		}
	}
	pthread_mutex_unlock(&st->lock);
	if (!rc)
		stats_handover();
	return rc;
}

int shm_marker_take(struct shm_stream *st)
{
	uint8_t b[PROTO_MSG_MAX_LEN];
	struct proto_switch m;
	ssize_t r;
	int d;

	if (atomic_load_explicit(&st->marker_in, memory_order_acquire))
		return 1;
	if (!(shm_rx_flags(&st->rx) & SHM_F_MARK)) { /* it followed: no message */
		atomic_store(&st->marker_in, 1);
		return 1;
	}
	r = rsock_real.recv(st->tcp_fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
		/* The connection ended (or was reset) with no message: the
		 * kernel tells the reader so. */
		atomic_store(&st->marker_in, 1);
		return 1;
	}
	if (r < 0)
		return 0;
	d = proto_switch_decode(b, (size_t)r, &m);
	if (d == -EAGAIN)
		return 0;
	shm_rx_avail(&st->rx); /* the ring's last tail, to compare */
	if (d <= 0 || m.rdma_bytes != st->rx.tail) {
		log_warn_rl("shm: the peer's switch message is malformed or does not match its ring: "
			    "the stream is reset");
		st->err = -ECONNRESET;
		return -ECONNRESET;
	}
	if (rsock_real.recv(st->tcp_fd, b, (size_t)d, MSG_DONTWAIT) != d) {
		st->err = -ECONNRESET;
		return -ECONNRESET;
	}
	atomic_store(&st->marker_in, 1);
	return 1;
}

int shm_cancel_len(const uint8_t *b, size_t n)
{
	/* magic, type 5, length 8 (doc/design.md, "Wire protocol") */
	static const uint8_t c[8] = {PROTO_MAGIC & 0xff, (PROTO_MAGIC >> 8) & 0xff,
				     (PROTO_MAGIC >> 16) & 0xff, PROTO_MAGIC >> 24, 5, 0, 8, 0};

	return n >= sizeof(c) && !memcmp(b, c, sizeof(c)) ? (int)sizeof(c) : 0;
}

/* The client declined (or gave up): what this side wrote into the ring,
 * which it never read, goes on TCP first; a cancel it sent is taken off;
 * the stream is TCP's from here. Caller holds the lock. */
static void decline(struct shm_stream *st)
{
	uint8_t b[8];
	uint64_t n = shm_tx_unread(&st->tx);
	uint32_t off = (uint32_t)(st->tx.head & (st->tx.size - 1)), first = st->tx.size - off;
	int fl;

	log_debug("shm: the client stays on TCP: %llu bytes written into the ring go there",
		  (unsigned long long)n);
	st->declined = 1;
	atomic_store(&st->marker_in, 1);
	atomic_store(&st->sw, 1);
	if ((fl = fcntl(st->tcp_fd, F_GETFL)) >= 0 && (fl & O_NONBLOCK))
		fcntl(st->tcp_fd, F_SETFL, fl & ~O_NONBLOCK);
	for (int i = 0; i < 2 && n; i++) {
		const uint8_t *p = i ? st->tx.buf : st->tx.buf + off;
		size_t len = i ? (size_t)n : (size_t)(n < first ? n : first);
		n -= len;
		while (len) {
			ssize_t w = rsock_real.send(st->tcp_fd, p, len, MSG_NOSIGNAL);
			if (w <= 0) {
				n = 0;
				break;
			}
			p += w;
			len -= (size_t)w;
		}
	}
	if (fl >= 0 && (fl & O_NONBLOCK))
		fcntl(st->tcp_fd, F_SETFL, fl);
	if (rsock_real.recv(st->tcp_fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT) == (ssize_t)sizeof(b) &&
	    shm_cancel_len(b, sizeof(b)))
		rsock_real.recv(st->tcp_fd, b, sizeof(b), MSG_DONTWAIT);
	shm_waitq_wake(st);
	if (atomic_load_explicit(&st->watchers, memory_order_relaxed) && shm_hooks.kick)
		shm_hooks.kick();
}

void shm_pending_resolve(struct shm_stream *st)
{
	uint8_t w;
	ssize_t r;

	if (!st->pending)
		return;
	r = rsock_real.recv(st->live_fd, &w, 1, MSG_DONTWAIT);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	st->pending = 0;
	ownfd_close(st->live_fd);
	st->live_fd = -1;
	if (r == 1 && w == 1)
		return;
	decline(st);
}

/* This process's keyed streams (a leaf lock: taken under a stream's lock,
 * which it only ever tries). */
static pthread_mutex_t local_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_stream *local_list;

void shm_stream_key(struct path_stream *s, uint64_t key)
{
	struct shm_stream *st = shm_of(s);

	pthread_mutex_lock(&local_lock);
	st->key = key;
	st->next = local_list;
	local_list = st;
	pthread_mutex_unlock(&local_lock);
}

void shm_local_forget(struct shm_stream *st)
{
	if (!st->key)
		return;
	pthread_mutex_lock(&local_lock);
	for (struct shm_stream **p = &local_list; *p; p = &(*p)->next)
		if (*p == st) {
			*p = st->next;
			break;
		}
	pthread_mutex_unlock(&local_lock);
}

void shm_local_nudge(struct shm_stream *st)
{
	if (!st->key)
		return;
	pthread_mutex_lock(&local_lock);
	for (struct shm_stream *o = local_list; o; o = o->next)
		if (o != st && o->key == st->key && o->side != st->side &&
		    o->owner == rsock_pid() && pthread_mutex_trylock(&o->lock) == 0) {
			/* (busy: its holder looks at the flags before it sleeps) */
			shm_follow(o);
			pthread_mutex_unlock(&o->lock);
		}
	pthread_mutex_unlock(&local_lock);
}
