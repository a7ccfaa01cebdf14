/* flow.c - the stream's flow control beyond flow.h's accounting: posting
 * credits, moving unread bytes to the spill, and the room a send has now
 * (doc/design.md, "Wire protocol"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <sys/mman.h>

#include "base/log.h"
#include "path/rdma/internal.h"

/* Return consumed bytes to the peer. Caller holds the lock. The credit
 * covers everything read (up to rx.head), so it frees at the sender exactly
 * the messages fully read, never the ones merely received. A refused post
 * breaks the path (tp_post_refused). */
void tp_send_credit(struct tp *t)
{
	int rc;

	if (!t->rx_unacked || t->err || t->path_down || t->sq_busy >= TP_SQ_DEPTH)
		return;
	tp_rx_msgs_read(t);
	rc = tp_post_write(t, NULL, 0, proto_imm_encode(PROTO_IMM_CREDIT, (uint32_t)t->rx_unacked), 0);
	if (rc == 0)
		tp_credit_sent(t);
	else
		tp_post_refused(t, rc, "posting a credit failed");
}

/* After a read: credit once a quarter of the ring or half the sender's
 * message allowance has been read (doc/design.md, "Wire protocol"); the
 * read mark follows within TP_MARK_MS (mark.c). */
void tp_maybe_credit(struct tp *t)
{
	if (tp_credit_due(t))
		tp_send_credit(t);
	tp_mark_due(t);
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
