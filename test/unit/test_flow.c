/* Unit tests of the RDMA path's flow accounting (src/path/rdma/flow.h): the
 * data messages a credit releases at the sender, the receiver's record of
 * the messages it owes a credit for and when it credits, and the unread
 * bytes of the ring and the spill. No device: a struct tp on the heap with
 * its rings over plain memory. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "path/rdma/flow.h"

#define PEER_SIZE (64u * 1024)
#define RX_SIZE (64u * 1024)

static uint8_t rx_mem[RX_SIZE];
static uint8_t spill_mem[RING_MIN_SIZE];

static struct tp *tp_make(void)
{
	struct tp *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	assert_int_equal(ring_remote_init(&t->peer, PEER_SIZE), 0);
	assert_int_equal(ring_init(&t->rx, rx_mem, RX_SIZE), 0);
	return t;
}

/* The sender posts a data message of n bytes (what tp_send does around
 * tp_data_msg_posted). */
static void post(struct tp *t, uint32_t n)
{
	struct ring_span rs[2];

	assert_int_equal(ring_remote_reserve(&t->peer, n, rs), 0);
	tp_data_msg_posted(t, NULL);
}

/* The peer writes a data message of n bytes into our ring. */
static void arrive(struct tp *t, uint32_t n)
{
	assert_int_equal(tp_rx_msg_arrived(t, n), 0);
}

static void test_credit_covers_several(void **state)
{
	struct tp *t = tp_make();

	(void)state;
	post(t, 100);
	post(t, 100);
	post(t, 100);
	assert_int_equal(t->msg_count, 3);
	/* 250 bytes read at the peer: the first two messages are free */
	assert_int_equal(tp_credit_take(t, 250), 0);
	assert_int_equal(t->msg_count, 1);
	assert_int_equal(t->peer.acked, 250);
	/* a credit inside the last message releases nothing more */
	assert_int_equal(tp_credit_take(t, 49), 0);
	assert_int_equal(t->msg_count, 1);
	assert_int_equal(tp_credit_take(t, 1), 0);
	assert_int_equal(t->msg_count, 0);
	assert_int_equal(t->msg_head, 3);
	/* a zero credit changes nothing */
	assert_int_equal(tp_credit_take(t, 0), 0);
	assert_int_equal(t->msg_count, 0);
	free(t);
}

/* A peer of version 4 gone without FIN or RESET left bytes unread when its
 * read mark (what its application read, plus one) falls short of what we
 * wrote, whatever it credited (a spill's bytes are credited, not read). */
static void test_peer_left_unread(void **state)
{
	struct tp *t = tp_make();
	uint8_t word[8] = {0};

	(void)state;
	t->peer_version = PROTO_VERSION_MARK;
	t->mark_in = word;
	word[0] = 1; /* read nothing, wrote nothing */
	assert_false(tp_peer_left_unread(t));
	post(t, 300);
	assert_true(tp_peer_left_unread(t));
	assert_int_equal(tp_credit_take(t, 300), 0); /* credited (spilled), not read */
	assert_true(tp_peer_left_unread(t));
	word[0] = 45, word[1] = 1; /* 300 read: 301, little-endian */
	assert_false(tp_peer_left_unread(t));
	free(t);
}

/* A peer of version 4 that never wrote a mark (its word 0): the credits
 * decide, as for an older peer. */
static void test_peer_left_unread_no_mark(void **state)
{
	struct tp *t = tp_make();
	uint8_t word[8] = {0};

	(void)state;
	t->peer_version = PROTO_VERSION_MARK;
	t->mark_in = word;
	post(t, 100);
	assert_false(tp_peer_left_unread(t));
	free(t);
}

/* An older peer surely left bytes unread only when more are uncredited than
 * its credit thresholds let a reader that read everything keep: a quarter
 * of its ring, or half the message allowance. */
static void test_peer_left_unread_v3(void **state)
{
	struct tp *t = tp_make();
	int i;

	(void)state;
	t->peer_version = PROTO_VERSION_FAILOVER;
	assert_false(tp_peer_left_unread(t));
	post(t, PEER_SIZE / 4 - 1); /* all of it may have been read */
	assert_false(tp_peer_left_unread(t));
	post(t, 1);
	assert_true(tp_peer_left_unread(t));
	assert_int_equal(tp_credit_take(t, PEER_SIZE / 4), 0);
	assert_false(tp_peer_left_unread(t));
	for (i = 0; i < TP_MAX_DATA_MSGS / 2 - 1; i++)
		post(t, 1);
	assert_false(tp_peer_left_unread(t));
	post(t, 1); /* 32 small messages: one at least not fully read */
	assert_true(tp_peer_left_unread(t));
	free(t);
}

static void test_credit_never_sent(void **state)
{
	struct tp *t = tp_make();

	(void)state;
	/* nothing sent: any credit is a protocol error */
	assert_int_equal(tp_credit_take(t, 1), -EPROTO);
	post(t, 10);
	assert_int_equal(tp_credit_take(t, 11), -EPROTO);
	assert_int_equal(t->msg_count, 1); /* nothing changed */
	assert_int_equal(t->peer.acked, 0);
	assert_int_equal(tp_credit_take(t, 10), 0);
	assert_int_equal(t->msg_count, 0);
	assert_int_equal(tp_credit_take(t, 1), -EPROTO);
	free(t);
}

/* The message allowance: TP_MAX_DATA_MSGS outstanding fill it, and the
 * index of the oldest wraps around the array of ends many times. */
static void test_allowance_wraps(void **state)
{
	struct tp *t = tp_make();
	unsigned cap = RSOCK_ARRAY_SIZE(t->msg_end);

	(void)state;
	for (unsigned round = 0; round < 5 * cap; round++) {
		while (t->msg_count < TP_MAX_DATA_MSGS)
			post(t, 8);
		assert_int_equal(t->msg_count, TP_MAX_DATA_MSGS);
		/* the oldest is released alone, then one more post fills it */
		assert_int_equal(tp_credit_take(t, 8), 0);
		assert_int_equal(t->msg_count, TP_MAX_DATA_MSGS - 1);
		assert_true(t->msg_head < cap);
	}
	/* everything credited at once */
	assert_int_equal(tp_credit_take(t, (uint32_t)(t->peer.tail - t->peer.acked)), 0);
	assert_int_equal(t->msg_count, 0);
	free(t);
}

/* Positions near the 2^32 boundary (the wire's credit is 32 bits, the
 * positions 64): ends compare as 64-bit positions. */
static void test_positions_past_32_bits(void **state)
{
	struct tp *t = tp_make();

	(void)state;
	t->peer.tail = t->peer.acked = (1ull << 32) - 150;
	post(t, 100);
	post(t, 100); /* ends past 2^32 */
	assert_int_equal(tp_credit_take(t, 100), 0);
	assert_int_equal(t->msg_count, 1);
	assert_int_equal(tp_credit_take(t, 100), 0);
	assert_int_equal(t->msg_count, 0);
	free(t);
}

/* The receiver: TP_MAX_DATA_MSGS messages uncredited is the most a sender
 * may have; one more is a protocol error, as is a write beyond the ring. */
static void test_rx_allowance(void **state)
{
	struct tp *t = tp_make();

	(void)state;
	for (unsigned i = 0; i < TP_MAX_DATA_MSGS; i++)
		arrive(t, 16);
	assert_int_equal(t->rx_msg_count, TP_MAX_DATA_MSGS);
	assert_int_equal(tp_rx_msg_arrived(t, 16), -EPROTO);
	assert_int_equal(t->rx_msg_count, TP_MAX_DATA_MSGS); /* nothing changed */
	assert_int_equal(ring_used(&t->rx), TP_MAX_DATA_MSGS * 16);
	free(t);

	t = tp_make();
	arrive(t, RX_SIZE - 1);
	assert_int_equal(tp_rx_msg_arrived(t, 2), -EPROTO); /* beyond the credit */
	assert_int_equal(t->rx_msg_count, 1);
	arrive(t, 1);
	free(t);
}

/* What a credit covers on the receiving side: the messages fully read,
 * never the one read in part. */
static void test_rx_credit_covers_read(void **state)
{
	struct tp *t = tp_make();

	(void)state;
	arrive(t, 100);
	arrive(t, 100);
	arrive(t, 100);
	tp_unread_consume(t, 250); /* two read, the third in part */
	assert_int_equal(t->rx_unacked, 250);
	assert_false(tp_credit_due(t)); /* far below a quarter of the ring */
	assert_int_equal(t->rx_msg_read, 2);
	tp_credit_sent(t);
	assert_int_equal(t->rx_unacked, 0);
	assert_int_equal(t->rx_msg_count, 1);
	assert_int_equal(t->rx_msg_head, 2);
	assert_int_equal(t->rx_msg_read, 0);
	tp_unread_consume(t, 50);
	tp_rx_msgs_read(t);
	assert_int_equal(t->rx_msg_read, 1);
	tp_credit_sent(t);
	assert_int_equal(t->rx_msg_count, 0);
	free(t);
}

/* The thresholds: a quarter of the ring read, or half the message
 * allowance read, whichever comes first. */
static void test_rx_thresholds(void **state)
{
	struct tp *t = tp_make();

	(void)state;
	/* bytes: one large message, read up to a quarter of the ring */
	arrive(t, RX_SIZE / 2);
	tp_unread_consume(t, RX_SIZE / 4 - 1);
	assert_false(tp_credit_due(t));
	tp_unread_consume(t, 1);
	assert_true(tp_credit_due(t));
	assert_int_equal(t->rx_msg_read, 0); /* read in part: still owed */
	tp_credit_sent(t);
	assert_int_equal(t->rx_msg_count, 1);
	tp_unread_consume(t, RX_SIZE / 4);
	tp_credit_due(t);
	tp_credit_sent(t);
	assert_int_equal(t->rx_msg_count, 0);
	free(t);

	/* messages: TP_MAX_DATA_MSGS / 2 small ones read */
	t = tp_make();
	for (unsigned i = 0; i < TP_MAX_DATA_MSGS; i++)
		arrive(t, 4);
	tp_unread_consume(t, 4 * (TP_MAX_DATA_MSGS / 2 - 1));
	assert_false(tp_credit_due(t));
	assert_int_equal(t->rx_msg_read, TP_MAX_DATA_MSGS / 2 - 1);
	tp_unread_consume(t, 4);
	assert_true(tp_credit_due(t));
	tp_credit_sent(t);
	assert_int_equal(t->rx_msg_count, TP_MAX_DATA_MSGS - TP_MAX_DATA_MSGS / 2);
	free(t);
}

/* The receiver's array of ends wraps: many rounds of arrive, read, credit. */
static void test_rx_wraps(void **state)
{
	struct tp *t = tp_make();
	unsigned cap = RSOCK_ARRAY_SIZE(t->rx_msg_end);

	(void)state;
	for (unsigned round = 0; round < 3 * cap; round++) {
		arrive(t, 1000);
		arrive(t, 24);
		tp_unread_consume(t, 1024);
		tp_rx_msgs_read(t);
		assert_int_equal(t->rx_msg_read, 2);
		tp_credit_sent(t);
		assert_int_equal(t->rx_msg_count, 0);
		assert_true(t->rx_msg_head < cap);
	}
	assert_int_equal(t->rx.head, 3ull * cap * 1024);
	free(t);
}

/* Unread bytes: the spill's first, and only the ring's are owed to the
 * peer; the spill's room before and after it is mapped. */
static void test_spill_accounting(void **state)
{
	struct tp *t = tp_make();
	struct ring_span sp[2];
	uint8_t b[100] = {0};

	(void)state;
	assert_int_equal(tp_spill_room(t), TP_SPILL_MAX); /* not mapped yet */
	assert_int_equal(tp_unread(t), 0);
	assert_int_equal(ring_init(&t->spill, spill_mem, sizeof(spill_mem)), 0);
	assert_int_equal(tp_spill_room(t), sizeof(spill_mem));
	assert_int_equal(ring_write(&t->spill, b, sizeof(b), sp), 0);
	assert_int_equal(tp_spill_room(t), sizeof(spill_mem) - sizeof(b));
	arrive(t, 50);
	assert_int_equal(tp_unread(t), 150);
	tp_unread_consume(t, 60); /* from the spill: nothing owed */
	assert_int_equal(t->rx_unacked, 0);
	assert_int_equal(tp_unread(t), 90);
	tp_unread_consume(t, 60); /* 40 from the spill, 20 from the ring */
	assert_int_equal(ring_used(&t->spill), 0);
	assert_int_equal(t->rx_unacked, 20);
	assert_int_equal(tp_unread(t), 30);
	tp_unread_consume(t, 30);
	assert_int_equal(t->rx_unacked, 50);
	assert_int_equal(tp_unread(t), 0);
	assert_int_equal(t->rx_read, 150); /* the read mark counts both */
	free(t);
}

/* The switch's step 4: the receiver waits for exactly the peer's RDMA total,
 * also across 2^32 and when the peer wrote nothing over RDMA. */
static void test_switch_rx_done(void **state)
{
	(void)state;
	assert_int_equal(tp_switch_rx_done(0, 0), 1);
	assert_int_equal(tp_switch_rx_done(100, 4096), 0);
	assert_int_equal(tp_switch_rx_done(4096, 4096), 1);
	assert_int_equal(tp_switch_rx_done(4097, 4096), -EPROTO);
	assert_int_equal(tp_switch_rx_done((1ull << 32) - 1, 1ull << 32), 0);
	assert_int_equal(tp_switch_rx_done(1ull << 32, 1ull << 32), 1);
	assert_int_equal(tp_switch_rx_done((1ull << 32) + 1, 1ull << 32), -EPROTO);
}

/* The failover's resend: a peer's received count is checked against what
 * was credited, landed and written, and the bytes from it come from each
 * message's copy, in order, the first one from its middle when the count
 * falls there. */
static void test_resend(void **state)
{
	static uint8_t src[300];
	struct tp *t = tp_make();
	struct iovec v[TP_MAX_DATA_MSGS + 1];
	struct ring_span rs[2];

	(void)state;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ring_remote_reserve(&t->peer, 100, rs), 0);
		tp_data_msg_posted(t, src + 100 * i);
	}
	assert_int_equal(tp_resend_check(t, 301), -EPROTO); /* more than written */
	assert_int_equal(tp_resend_check(t, 300), 0);
	assert_int_equal(tp_resend_iov(t, 300, v), 0); /* nothing to send again */
	assert_int_equal(tp_resend_check(t, 0), 0);
	assert_int_equal(tp_resend_iov(t, 0, v), 3);
	assert_ptr_equal(v[0].iov_base, src);
	assert_int_equal(v[2].iov_len, 100);
	assert_int_equal(tp_resend_iov(t, 150, v), 2);
	assert_ptr_equal(v[0].iov_base, src + 150);
	assert_int_equal(v[0].iov_len, 50);
	assert_ptr_equal(v[1].iov_base, src + 200);
	/* 120 credited: the first message is released; fewer is hostile */
	assert_int_equal(tp_credit_take(t, 120), 0);
	assert_int_equal(tp_resend_check(t, 119), -EPROTO);
	assert_int_equal(tp_resend_check(t, 120), 0);
	assert_int_equal(tp_resend_iov(t, 120, v), 2);
	assert_ptr_equal(v[0].iov_base, src + 120);
	/* our completions say 200 landed: fewer is hostile too */
	t->tx_landed = 200;
	assert_int_equal(tp_resend_check(t, 150), -EPROTO);
	assert_int_equal(tp_resend_check(t, 200), 0);
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_credit_covers_several),
		cmocka_unit_test(test_peer_left_unread),
		cmocka_unit_test(test_peer_left_unread_no_mark),
		cmocka_unit_test(test_peer_left_unread_v3),
		cmocka_unit_test(test_credit_never_sent),
		cmocka_unit_test(test_allowance_wraps),
		cmocka_unit_test(test_positions_past_32_bits),
		cmocka_unit_test(test_resend),
		cmocka_unit_test(test_rx_allowance),
		cmocka_unit_test(test_rx_credit_covers_read),
		cmocka_unit_test(test_rx_thresholds),
		cmocka_unit_test(test_rx_wraps),
		cmocka_unit_test(test_spill_accounting),
		cmocka_unit_test(test_switch_rx_done),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
