/* flow.c - the stream's flow control beyond flow.h's accounting: posting
 * credits, moving unread bytes to the spill, and the room a send has now
 * (doc/design.md, "Wire protocol"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <sys/mman.h>

#include "base/log.h"
#include "path/rdma/internal.h"
#include "service/service.h"

/* Return consumed bytes to the peer. Caller holds the lock. The credit
 * covers everything read (up to rx.head), so it frees at the sender exactly
 * the messages fully read, never the ones merely received. */
void tp_send_credit(struct tp *t)
{
	if (!t->rx_unacked || t->err || t->sq_busy >= TP_SQ_DEPTH)
		return;
	tp_rx_msgs_read(t);
	if (tp_post_write(t, NULL, 0, proto_imm_encode(PROTO_IMM_CREDIT, (uint32_t)t->rx_unacked), 0) == 0)
		tp_credit_sent(t);
}

/* ---- late credits -------------------------------------------------------- */

/* The streams whose reader owes the peer a credit below the thresholds,
 * newest first; the lock is a leaf below t->lock (the library's thread
 * only tries a stream's lock while holding it). */
static pthread_mutex_t late_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tp *late_head;
static _Atomic int64_t late_due; /* when the list's oldest is due (ms), 0: empty */

static void late_unlink(struct tp *t)
{
	if (t->late_next)
		t->late_next->late_pprev = t->late_pprev;
	*t->late_pprev = t->late_next;
	t->late_next = NULL;
	t->late_pprev = NULL;
}

/* t owes a credit (caller holds t->lock): on the list, the library's thread
 * asked for a turn when it is the first. 0, or -EAGAIN when this process
 * has no thread to send it. */
static int late_add(struct tp *t)
{
	int first;

	if (t->late_pprev)
		return 0;
	if (!service_running())
		return -EAGAIN;
	pthread_mutex_lock(&late_lock);
	first = !late_head;
	t->late_next = late_head;
	if (late_head)
		late_head->late_pprev = &t->late_next;
	t->late_pprev = &late_head;
	late_head = t;
	if (first)
		atomic_store(&late_due, clock_now_ms() + TP_LATE_CREDIT_MS);
	pthread_mutex_unlock(&late_lock);
	if (first)
		service_turn_in(TP_LATE_CREDIT_MS);
	return 0;
}

/* After a read: credit once a quarter of the ring or half the sender's
 * message allowance has been read (doc/design.md, "Wire protocol"); less
 * owed goes within TP_LATE_CREDIT_MS, so that a peer that sees this
 * process die tells from its credits whether we left bytes unread (our
 * kernel's TCP would send a reset then). A thread sends it, not this read:
 * a request and its answer cost no work request more. */
void tp_maybe_credit(struct tp *t)
{
	if (tp_credit_due(t) || (t->rx_unacked && late_add(t)))
		tp_send_credit(t);
}

int tp_credit_late_turn(void)
{
	int64_t due = atomic_load(&late_due);
	struct tp *t, *next;
	int left = 0;

	if (!due || due > clock_now_ms())
		return 0; /* (a turn asked for comes when due) */
	pthread_mutex_lock(&late_lock);
	for (t = late_head; t; t = next) {
		next = t->late_next;
		if (mtx_trylock(&t->lock)) {
			left = 1; /* in use: the next turn */
			continue;
		}
		if (t->up && !tp_switched(t) && !t->fo_frozen && !t->path_down)
			tp_send_credit(t);
		if (t->rx_unacked && !t->err && t->sq_busy >= TP_SQ_DEPTH)
			left = 1; /* the send queue was full: the next turn */
		else
			late_unlink(t);
		mtx_unlock(&t->lock);
	}
	atomic_store(&late_due, left ? clock_now_ms() + 1 : 0);
	pthread_mutex_unlock(&late_lock);
	if (left)
		service_turn_in(1);
	return 0;
}

void tp_credit_late_drop(struct tp *t)
{
	if (!t->late_pprev)
		return;
	pthread_mutex_lock(&late_lock);
	late_unlink(t);
	pthread_mutex_unlock(&late_lock);
}

void tp_credit_late_lock(void)
{
	pthread_mutex_lock(&late_lock);
}

void tp_credit_late_unlock(void)
{
	pthread_mutex_unlock(&late_lock);
}

void tp_credit_late_fork_child(void)
{
	late_head = NULL; /* the parent's streams: our copies never go on it */
	atomic_store(&late_due, 0);
}

/* A blocking send that waited TP_SPILL_AFTER_MS for room while our own ring
 * holds unread bytes: the peer may be blocked the same way, each waiting for
 * the other to read (an echo server, and a client that writes its whole
 * request before it reads). Kernel TCP's buffers, megabytes, absorb that;
 * the rings alone would deadlock both. So the unread bytes move into the
 * spill (unregistered memory, at most TP_SPILL_MAX, read before the ring)
 * and the peer gets their credit. Returns the bytes moved. Caller holds the
 * lock. */
uint64_t tp_spill(struct tp *t)
{
	uint64_t n = ring_used(&t->rx), room = tp_spill_room(t);
	struct ring_span sp[2];

	if (n > room)
		n = room;
	if (!n)
		return 0;
	if (!t->spill.buf) {
		void *m = mmap(NULL, TP_SPILL_MAX, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED || ring_init(&t->spill, m, TP_SPILL_MAX)) {
			if (m != MAP_FAILED)
				munmap(m, TP_SPILL_MAX);
			return 0;
		}
	}
	struct iovec v[2];
	uint64_t left = n;
	ring_unread_iov(&t->rx, v);
	for (int i = 0; i < 2 && left; i++) {
		uint32_t l = v[i].iov_len < left ? (uint32_t)v[i].iov_len : (uint32_t)left;
		ring_write(&t->spill, v[i].iov_base, l, sp);
		left -= l;
	}
	ring_consume(&t->rx, (size_t)n);
	t->rx_unacked += n;
	tp_send_credit(t);
	log_debug("fd %d: %llu unread bytes kept beyond the ring (%llu in all)",
		  t->tcp_fd, (unsigned long long)n, (unsigned long long)ring_used(&t->spill));
	return n;
}

/* SO_RCVLOWAT above 1: fewer unread bytes than that do not make the stream
 * readable, and a blocking read waits for that many (as TCP). The unread
 * bytes in the ring then go to the spill, and the peer gets their credit:
 * else a sender held back by the ring or the message allowance could never
 * send what makes up the rest, where TCP's receive buffer would take it.
 * Caller holds the lock. */
void tp_lowat_wait_prep(struct tp *t)
{
	if (ring_used(&t->rx))
		tp_spill(t);
}

/* Bytes that may be sent now as one message. Caller holds the lock. */
uint32_t tp_send_room(struct tp *t, size_t want, int zc)
{
	uint64_t room = ring_remote_space(&t->peer);
	uint32_t mask = t->peer.size - 1;
	uint32_t contig = t->peer.size - (uint32_t)(t->peer.tail & mask);

	if (t->msg_count >= TP_MAX_DATA_MSGS || t->sq_busy + TP_CTL_RESERVE >= TP_SQ_DEPTH)
		return 0;
	if (room > contig)
		room = contig;
	if (!zc) {
		if (room > TP_MAX_CHUNK)
			room = TP_MAX_CHUNK;
	} else {
		/* Nothing staged to pipeline: larger messages, fewer work
		 * requests, doorbells and the receiver's wake-ups; half the
		 * ring at most, so that one is read while the next arrives. */
		uint32_t cap = t->peer.size / 2 < TP_MAX_ZC_CHUNK ? t->peer.size / 2 : TP_MAX_ZC_CHUNK;
		if (room > cap)
			room = cap;
	}
	if (room > want)
		room = want;
	if (!zc) {
		/* A staged message (inline ones too, whose copy a failover may
		 * need): it needs contiguous room in the send ring.
		 * Less than TP_MIN_STAGE there (or than the message) is not
		 * worth a work request: skip the ring's end if the start has
		 * room, else wait for completions (one is signalled whenever
		 * the ring is more than half full). Trickling small pieces
		 * would spend the message and receive budget on nothing. */
		uint32_t tmask = t->tx.size - 1;
		uint64_t tfree = ring_free(&t->tx);
		uint32_t tcontig = t->tx.size - (uint32_t)(t->tx.tail & tmask);
		uint32_t need = room < TP_MIN_STAGE ? (uint32_t)room : TP_MIN_STAGE;
		if (tcontig < need && tfree >= (uint64_t)tcontig + need) {
			t->tx.tail += tcontig; /* released with the next signalled completion */
			tfree -= tcontig;
			tcontig = t->tx.size;
		}
		if (tfree < tcontig)
			tcontig = (uint32_t)tfree;
		if (tcontig < need)
			return 0;
		if (room > tcontig)
			room = tcontig;
	}
	return (uint32_t)room;
}
