/* Unit tests of the same-host path's rings (path/shm/ring.h): data both
 * ways with every offset wrapping, and a peer writing anything at all into
 * the shared indices (the reader never copies outside the ring, and a value
 * no honest peer writes ends the stream with ECONNRESET). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "path/shm/ring.h"

#define SZ SHM_RING_MIN

static uint8_t *map_new(void)
{
	uint8_t *m = aligned_alloc(4096, shm_map_len(SZ));
	assert_non_null(m);
	memset(m, 0, shm_map_len(SZ));
	return m;
}

static void test_attach(void **state)
{
	uint8_t *m = map_new();
	struct shm_rx rx;
	struct shm_tx tx;

	(void)state;
	assert_int_equal(shm_ring_attach(m, SZ, 0, &rx, &tx), 0);
	assert_int_equal(shm_ring_attach(m, SZ, 2, &rx, &tx), -EINVAL);
	assert_int_equal(shm_ring_attach(m, SZ + 1, 0, &rx, &tx), -EINVAL);
	assert_int_equal(shm_ring_attach(m, SZ / 2, 0, &rx, &tx), -EINVAL);
	assert_int_equal(shm_ring_attach(m, SHM_RING_MAX * 2u, 0, &rx, &tx), -EINVAL);
	assert_int_equal(shm_ring_attach(NULL, SZ, 0, &rx, &tx), -EINVAL);
	assert_int_equal(shm_rx_avail(&rx), 0);
	assert_int_equal(shm_tx_room(&tx), SZ);
	free(m);
}

/* Client and server over one mapping, odd-sized steps: every offset wraps. */
static void test_both_ways(void **state)
{
	uint8_t *m = map_new();
	struct shm_rx crx, srx;
	struct shm_tx ctx, stx;
	uint8_t in[1500], out[1500];
	uint64_t sent = 0, got = 0;

	(void)state;
	assert_int_equal(shm_ring_attach(m, SZ, 0, &crx, &ctx), 0);
	assert_int_equal(shm_ring_attach(m, SZ, 1, &srx, &stx), 0);
	for (int round = 0; round < 200; round++) {
		size_t n = 1 + (size_t)(round * 37) % sizeof(in);
		int64_t room = shm_tx_room(&ctx);
		assert_true(room >= 0);
		if ((size_t)room < n)
			n = (size_t)room;
		for (size_t i = 0; i < n; i++)
			in[i] = (uint8_t)(sent + i);
		shm_tx_put(&ctx, in, n);
		sent += n;
		int64_t avail = shm_rx_avail(&srx);
		assert_int_equal(avail, (int64_t)(sent - got));
		size_t take = (size_t)avail > sizeof(out) ? sizeof(out) : (size_t)avail;
		take = take > 3 ? take - 3 : take;
		assert_int_equal(shm_rx_peek(&srx, out, 0, take), take);
		for (size_t i = 0; i < take; i++)
			assert_int_equal(out[i], (uint8_t)(got + i));
		/* a peek at an offset sees the same bytes */
		if (take > 1) {
			assert_int_equal(shm_rx_peek(&srx, out, 1, 1), 1);
			assert_int_equal(out[0], (uint8_t)(got + 1));
		}
		shm_rx_consume(&srx, take);
		got += take;
	}
	/* the other direction is independent */
	assert_int_equal(shm_rx_avail(&crx), 0);
	shm_tx_put(&stx, "xyz", 3);
	assert_int_equal(shm_rx_avail(&crx), 3);
	assert_int_equal(shm_rx_peek(&crx, NULL, 0, 100), 3); /* MSG_TRUNC: nothing copied */
	/* room follows what the consumer consumed */
	assert_int_equal(shm_tx_room(&ctx), SZ - (int64_t)(sent - got));
	shm_tx_flag(&ctx, SHM_F_FIN);
	assert_int_equal(shm_rx_flags(&srx) & SHM_F_FIN, SHM_F_FIN);
	free(m);
}

static void test_corrupt(void **state)
{
	uint8_t *m = map_new();
	struct shm_hdr *h = (struct shm_hdr *)m;
	struct shm_rx rx;
	struct shm_tx tx;

	(void)state;
	assert_int_equal(shm_ring_attach(m, SZ, 1, &rx, &tx), 0);
	atomic_store(&h->dir[0].tail, SZ + 1); /* more than a ring ahead */
	assert_int_equal(shm_rx_avail(&rx), -ECONNRESET);
	atomic_store(&h->dir[0].tail, 1);
	assert_int_equal(shm_rx_avail(&rx), -ECONNRESET); /* sticky */
	assert_int_equal(shm_rx_peek(&rx, m, 0, 10), 0);

	assert_int_equal(shm_ring_attach(m, SZ, 1, &rx, &tx), 0);
	atomic_store(&h->dir[0].tail, 100);
	assert_int_equal(shm_rx_avail(&rx), 100);
	atomic_store(&h->dir[0].tail, 99); /* backwards */
	assert_int_equal(shm_rx_avail(&rx), -ECONNRESET);

	atomic_store(&h->dir[1].head, 1); /* consumed what was never written */
	assert_int_equal(shm_tx_room(&tx), -ECONNRESET);
	assert_int_equal(shm_ring_attach(m, SZ, 1, &rx, &tx), 0);
	atomic_store(&h->dir[1].head, 0);
	shm_tx_put(&tx, "abcd", 4);
	atomic_store(&h->dir[1].head, 4);
	assert_int_equal(shm_tx_room(&tx), SZ);
	atomic_store(&h->dir[1].head, 3); /* backwards */
	assert_int_equal(shm_tx_room(&tx), -ECONNRESET);
	free(m);
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* An interesting index near v: v itself, a ring or one byte around it, or
 * anything at all. */
static uint64_t near(uint64_t v)
{
	switch (rnd() % 8) {
	case 0: return v;
	case 1: return v + 1;
	case 2: return v - 1;
	case 3: return v + SZ;
	case 4: return v + SZ + 1;
	case 5: return v + rnd() % (2 * SZ);
	case 6: return UINT64_MAX - rnd() % 4;
	default: return rnd();
	}
}

/* A hostile peer writes arbitrary indices and flags between our calls; the
 * reader and the writer never copy outside the ring (the guard bytes after
 * the mapping stay intact, and ASan watches in the sanitizer builds), every
 * count they return is within the ring, and what they refuse stays refused. */
static void test_fuzz(void **state)
{
	const size_t len = shm_map_len(SZ);
	uint8_t *m = aligned_alloc(4096, len + 4096);
	struct shm_hdr *h = (struct shm_hdr *)m;
	static uint8_t buf[2 * SZ];
	int resets = 0, fine = 0;

	(void)state;
	assert_non_null(m);
	for (int iter = 0; iter < 20000; iter++) {
		struct shm_rx rx;
		struct shm_tx tx;
		memset(m, 0, len);
		memset(m + len, 0xa5, 4096);
		assert_int_equal(shm_ring_attach(m, SZ, (int)(rnd() & 1), &rx, &tx), 0);
		/* a plausible private state first */
		rx.head = rx.tail = tx.head = tx.tail = rnd() % 3 ? rnd() % (4 * SZ) : rnd();
		tx.tail += rnd() % SZ;
		for (int step = 0; step < 8; step++) {
			atomic_store(&rx.d->tail, near(rx.tail));
			atomic_store(&tx.d->head, near(tx.head));
			atomic_store(&rx.d->flags, (uint32_t)rnd());
			h->armed[0] = (uint32_t)rnd();
			int64_t a = shm_rx_avail(&rx);
			if (a < 0) {
				assert_int_equal(a, -ECONNRESET);
				assert_int_equal(shm_rx_avail(&rx), -ECONNRESET);
				assert_int_equal(shm_rx_peek(&rx, buf, 0, sizeof(buf)), 0);
				resets++;
			} else {
				assert_true(a <= SZ);
				size_t skip = rnd() % (SZ + 2), want = rnd() % sizeof(buf);
				size_t got = shm_rx_peek(&rx, buf, skip, want);
				assert_true(got <= want && got <= (size_t)a);
				uint64_t h0 = rx.head;
				shm_rx_consume(&rx, got);
				assert_int_equal(rx.head, h0 + got);
				fine++;
			}
			int64_t room = shm_tx_room(&tx);
			if (room < 0) {
				assert_int_equal(room, -ECONNRESET);
				resets++;
			} else {
				assert_true(room <= SZ);
				size_t n = (size_t)(rnd() % ((uint64_t)room + 1));
				shm_tx_put(&tx, buf, n);
				assert_true(tx.tail - tx.head <= SZ);
				fine++;
			}
			(void)shm_rx_flags(&rx);
		}
		for (size_t i = 0; i < 4096; i++)
			assert_int_equal(m[len + i], 0xa5);
	}
	assert_true(resets > 0 && fine > 0);
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attach),
		cmocka_unit_test(test_both_ways),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_fuzz),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
