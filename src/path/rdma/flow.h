/* flow.h - the RDMA path's flow accounting, pure logic on a struct tp's
 * fields with no verbs call: the data messages a credit releases (the
 * sender's message allowance, and the receiver's record of what it owes),
 * when a reader credits, and the unread bytes of the ring and the spill
 * (doc/design.md, "Wire protocol"). test/unit/test_flow.c drives it on the
 * host. The caller holds t->lock. */
#ifndef RSOCK_PATH_RDMA_FLOW_H
#define RSOCK_PATH_RDMA_FLOW_H

#include <errno.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/compiler.h"
#include "base/ring.h"
#include "base/statpub.h"
#include "path/rdma/transport.h"

#define TP_SPILL_MAX (8u << 20) /* the most a stream keeps read beyond its ring */

/* ---- the sender: its data messages not yet credited ---------------------- */

/* The credits in use, in the stream's slot for rsock-stat when it has one:
 * data messages outstanding and bytes in the peer's ring not yet credited.
 * Stored where a credit arrives and where the sender waits for one, not
 * at every post (a store a message that only rsock-stat reads). */
static inline void tp_pub_credits(struct tp *t)
{
	struct statpub_slot *p = atomic_load_explicit(&t->pub, memory_order_relaxed);

	if (p)
		statpub_credits(p, t->msg_count, t->peer.tail - t->peer.acked);
}

/* A data message whose bytes are at src, ending at the peer's tail, is
 * posted: its end is recorded until the peer's credit covers it (the
 * message allowance), with where its bytes are (a failover's resend). It
 * starts where the one before it ends (msg_base for the oldest). The
 * caller has checked that fewer than TP_MAX_DATA_MSGS are outstanding. */
static inline void tp_data_msg_posted(struct tp *t, const uint8_t *src)
{
	unsigned i = (t->msg_head + t->msg_count++) % RSOCK_ARRAY_SIZE(t->msg_end);

	t->msg_end[i] = t->peer.tail;
	t->msg_src[i] = src;
}

/* The peer's credit of v consumed bytes: the messages it fully covers are
 * released. 0, or -EPROTO when it credits bytes never sent (nothing
 * changes then). */
static inline int tp_credit_take(struct tp *t, uint32_t v)
{
	if (ring_remote_ack(&t->peer, v))
		return -EPROTO;
	while (t->msg_count && t->msg_end[t->msg_head] <= t->peer.acked) {
		t->msg_base = t->msg_end[t->msg_head];
		t->msg_head = (t->msg_head + 1) % RSOCK_ARRAY_SIZE(t->msg_end);
		t->msg_count--;
	}
	tp_pub_credits(t);
	return 0;
}

/* ---- the failover's resend (doc/design.md, "Descriptors, fork, exec") --- */

/* The peer's failover SWITCH says it received rx bytes of ours over RDMA.
 * 0 when this side can send again exactly what follows: no fewer than the
 * peer credited or our completions say landed (those bytes' copies may be
 * gone), no more than we wrote; else -EPROTO (a hostile or broken peer). */
static inline int tp_resend_check(const struct tp *t, uint64_t rx)
{
	if (rx > t->peer.tail || rx < t->peer.acked || rx < t->tx_landed)
		return -EPROTO;
	return 0;
}

/* The bytes from rx (checked by tp_resend_check) to the tail, in order, as
 * at most TP_MAX_DATA_MSGS pieces of the data messages not yet credited.
 * Returns the count of pieces in v, or -EPROTO when those messages do not
 * cover the span. */
static inline int tp_resend_iov(const struct tp *t, uint64_t rx, struct iovec *v)
{
	const unsigned cap = RSOCK_ARRAY_SIZE(t->msg_end);
	uint64_t at = rx, start, end = t->msg_base;
	int n = 0;

	for (unsigned k = 0; k < t->msg_count; k++) {
		unsigned i = (t->msg_head + k) % cap;
		start = end;
		end = t->msg_end[i];
		if (end <= at)
			continue;
		if (start > at)
			return -EPROTO; /* a hole: never with messages posted in order */
		v[n].iov_base = (void *)(uintptr_t)(t->msg_src[i] + (at - start));
		v[n++].iov_len = (size_t)(end - at);
		at = end;
	}
	return at == t->peer.tail ? n : -EPROTO;
}

/* The peer's read mark in our word (mark.c): what its application read of
 * our bytes, plus one; 0 when it never wrote one. Little-endian. */
static inline uint64_t tp_peer_mark(const struct tp *t)
{
	uint64_t v = 0;

	if (t->mark_in)
		for (int i = 7; i >= 0; i--)
			v = v << 8 | ((const volatile uint8_t *)t->mark_in)[i];
	return v;
}

/* The peer's process ended without a FIN or RESET over RDMA (its kernel
 * closed the control connection): whether it left bytes of ours unread,
 * when its TCP socket would have sent a reset. Its read mark says what its
 * application read (written within TP_MARK_MS of a read): any byte more
 * we wrote was unread, in its ring or its spill, or in flight. Without a
 * mark (a version-3 peer) only the credits tell: fewer uncredited than a
 * quarter of its ring and than half the message allowance may have been
 * read (tp_credit_due). */
static inline int tp_peer_left_unread(const struct tp *t)
{
	uint64_t m = t->peer_version >= PROTO_VERSION_MARK ? tp_peer_mark(t) : 0;

	if (m)
		return m - 1 != t->peer.tail;
	return t->peer.tail - t->peer.acked >= t->peer.size / 4 ||
	       t->msg_count >= TP_MAX_DATA_MSGS / 2;
}

/* ---- the receiver: the peer's data messages it has not credited ---------- */

/* A data message of v bytes landed in the receive ring: its end is kept
 * until a credit covers it. 0, or -EPROTO when the peer exceeds its message
 * allowance or writes beyond its credit (nothing changes then). */
static inline int tp_rx_msg_arrived(struct tp *t, uint32_t v)
{
	/* More data messages outstanding than the sender may have is a
	 * protocol violation, like a write beyond the credit. */
	if (t->rx_msg_count >= TP_MAX_DATA_MSGS || ring_produce(&t->rx, v))
		return -EPROTO;
	t->rx_msg_end[(t->rx_msg_head + t->rx_msg_count++) % RSOCK_ARRAY_SIZE(t->rx_msg_end)] =
		t->rx.tail;
	return 0;
}

/* Count the received data messages now fully read. */
static inline void tp_rx_msgs_read(struct tp *t)
{
	const unsigned cap = RSOCK_ARRAY_SIZE(t->rx_msg_end);

	while (t->rx_msg_read < t->rx_msg_count &&
	       t->rx_msg_end[(t->rx_msg_head + t->rx_msg_read) % cap] <= t->rx.head)
		t->rx_msg_read++;
}

/* After a read: whether to credit now, once a quarter of the ring or half
 * the sender's message allowance has been read (doc/design.md, "Wire
 * protocol"). Counts the messages fully read first. */
static inline int tp_credit_due(struct tp *t)
{
	tp_rx_msgs_read(t);
	return t->rx_unacked >= t->rx.size / 4 || t->rx_msg_read >= TP_MAX_DATA_MSGS / 2;
}

/* A credit for everything read (rx_unacked bytes, up to rx.head) is
 * posted: the messages fully read (tp_rx_msgs_read) are no longer owed.
 * The credit frees at the sender exactly those, never the ones merely
 * received. */
static inline void tp_credit_sent(struct tp *t)
{
	t->rx_unacked = 0;
	t->rx_msg_head = (t->rx_msg_head + t->rx_msg_read) % RSOCK_ARRAY_SIZE(t->rx_msg_end);
	t->rx_msg_count -= t->rx_msg_read;
	t->rx_msg_read = 0;
}

/* ---- unread bytes: the spill's, then the ring's -------------------------- */

/* Unread bytes: the spill's, then the ring's. */
static inline uint64_t tp_unread(const struct tp *t)
{
	return ring_used(&t->spill) + ring_used(&t->rx);
}

/* Room left in the spill (it is mapped at its first use). */
static inline uint64_t tp_spill_room(const struct tp *t)
{
	return t->spill.buf ? ring_free(&t->spill) : TP_SPILL_MAX;
}

/* The switch's step 4 (doc/design.md, "Wire protocol"): the peer's SWITCH
 * says its RDMA bytes end at peer_total; the ring has received up to
 * rx_tail. 1: every one of them is here, TCP carries what follows; 0: more
 * are on their way; -EPROTO: more arrived than the peer says it wrote. */
static inline int tp_switch_rx_done(uint64_t rx_tail, uint64_t peer_total)
{
	if (rx_tail < peer_total)
		return 0;
	return rx_tail == peer_total ? 1 : -EPROTO;
}

/* Consume n unread bytes, the spill's first; the ring's are owed to the
 * peer. All count as read (the read mark). */
static inline void tp_unread_consume(struct tp *t, size_t n)
{
	size_t s = (size_t)ring_used(&t->spill);

	t->rx_read += n;
	if (s) {
		s = n < s ? n : s;
		ring_consume(&t->spill, s);
		n -= s;
	}
	if (n) {
		ring_consume(&t->rx, n);
		t->rx_unacked += n;
	}
}

#endif
