/* Unit tests of the byte rings (local and remote views). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/ring.h"

#define SZ RING_MIN_SIZE

static uint8_t mem[SZ];

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static void test_init(void **state)
{
	struct ring r;
	struct ring_remote rr;
	static uint8_t big[2 * SZ];

	assert_int_equal(ring_init(&r, mem, SZ), 0);
	assert_ptr_equal(r.buf, mem);
	assert_int_equal(r.size, SZ);
	assert_int_equal(ring_used(&r), 0);
	assert_int_equal(ring_free(&r), SZ);
	assert_int_equal(ring_init(&r, big, 2 * SZ), 0);
	assert_int_equal(ring_init(&r, NULL, SZ), -EINVAL);
	assert_int_equal(ring_init(&r, mem, SZ / 2), -EINVAL);     /* below the minimum */
	assert_int_equal(ring_init(&r, mem, SZ + 1), -EINVAL);     /* not a power of two */
	assert_int_equal(ring_init(&r, mem, 3 * SZ), -EINVAL);
	assert_int_equal(ring_init(&r, mem, 0), -EINVAL);
	assert_int_equal(ring_init(&r, mem, RING_MAX_SIZE * 2u), -EINVAL); /* 2^31 */
	assert_int_equal(ring_init(&r, mem, 0x80000000u), -EINVAL);
	assert_int_equal(ring_init(NULL, mem, SZ), -EINVAL);

	assert_int_equal(ring_remote_init(&rr, RING_MAX_SIZE), 0);
	assert_int_equal(ring_remote_space(&rr), RING_MAX_SIZE);
	assert_int_equal(ring_remote_init(&rr, RING_MIN_SIZE), 0);
	assert_int_equal(ring_remote_init(&rr, RING_MIN_SIZE - 1), -EINVAL);
	assert_int_equal(ring_remote_init(&rr, 0), -EINVAL);
	assert_int_equal(ring_remote_init(&rr, 0xffffffffu), -EINVAL);
	assert_int_equal(ring_remote_init(&rr, 12288), -EINVAL);
	assert_int_equal(ring_remote_init(NULL, SZ), -EINVAL);
}

/* Write, peek and consume in odd-sized steps so that every offset wraps. */
static void test_write_peek_wrap(void **state)
{
	struct ring r;
	uint8_t in[1500], out[1500];
	struct ring_span sp[2];
	uint64_t total = 0;

	assert_int_equal(ring_init(&r, mem, SZ), 0);
	for (unsigned i = 0; i < 200; i++) {
		uint32_t n = 1 + (i * 397) % sizeof(in);
		uint64_t off = r.tail & (SZ - 1);

		fill(in, n, i);
		assert_int_equal(ring_write(&r, in, n, sp), 0);
		assert_int_equal(sp[0].off, off);
		if (off + n <= SZ) {
			assert_int_equal(sp[0].len, n);
			assert_int_equal(sp[1].len, 0);
		} else {
			assert_int_equal(sp[0].len, SZ - off);
			assert_int_equal(sp[1].off, 0);
			assert_int_equal(sp[1].len, n - (SZ - off));
		}
		assert_int_equal(ring_used(&r), n);
		memset(out, 0, sizeof(out));
		assert_int_equal(ring_peek(&r, out, sizeof(out)), n); /* at most used */
		assert_memory_equal(in, out, n);
		assert_int_equal(ring_used(&r), n); /* peek does not consume */
		assert_int_equal(ring_consume(&r, n), 0);
		assert_int_equal(ring_used(&r), 0);
		total += n;
	}
	assert_int_equal(r.head, total);
	assert_int_equal(r.tail, total);
	assert_true(total > 10 * SZ);
}

static void test_full_and_errors(void **state)
{
	struct ring r;
	static uint8_t in[SZ + 1], out[SZ];
	struct ring_span sp[2] = {{7, 7}, {7, 7}};

	assert_int_equal(ring_init(&r, mem, SZ), 0);
	fill(in, sizeof(in), 3);
	assert_int_equal(ring_write(&r, in, SZ + 1, sp), -ENOSPC);
	assert_int_equal(ring_used(&r), 0);
	assert_int_equal(sp[0].off, 7); /* untouched on error */
	assert_int_equal(ring_write(&r, in, 0, sp), 0);
	assert_int_equal(sp[0].len, 0);
	assert_int_equal(sp[1].len, 0);
	assert_int_equal(ring_write(&r, in, SZ, NULL), 0);
	assert_int_equal(ring_free(&r), 0);
	assert_int_equal(ring_write(&r, in, 1, sp), -ENOSPC);
	assert_int_equal(ring_produce(&r, 1), -EPROTO);
	assert_int_equal(ring_produce(&r, 0), 0);
	assert_int_equal(ring_peek(&r, out, SZ), SZ);
	assert_memory_equal(in, out, SZ);
	assert_int_equal(ring_consume(&r, SZ + 1), -EINVAL);
	assert_int_equal(ring_consume(&r, (size_t)-1), -EINVAL);
	assert_int_equal(ring_used(&r), SZ);
	assert_int_equal(ring_consume(&r, 100), 0);
	assert_int_equal(ring_consume(&r, SZ - 100), 0);
	assert_int_equal(ring_consume(&r, 1), -EINVAL);
	assert_int_equal(ring_consume(&r, 0), 0);
	assert_int_equal(ring_peek(&r, out, SZ), 0);
}

/* Positions just below 2^64: the offsets and differences keep working. */
static void test_positions_near_wrap(void **state)
{
	struct ring r;
	uint8_t in[3000], out[3000];
	struct ring_span sp[2];

	assert_int_equal(ring_init(&r, mem, SZ), 0);
	r.head = r.tail = UINT64_MAX - 1000; /* offset SZ - 1001 */
	fill(in, sizeof(in), 11);
	assert_int_equal(ring_write(&r, in, sizeof(in), sp), 0);
	assert_int_equal(sp[0].off, SZ - 1001);
	assert_int_equal(sp[0].len, 1001);
	assert_int_equal(sp[1].off, 0);
	assert_int_equal(sp[1].len, sizeof(in) - 1001);
	assert_true(r.tail < r.head); /* the counter wrapped */
	assert_int_equal(ring_used(&r), sizeof(in));
	assert_int_equal(ring_free(&r), SZ - sizeof(in));
	assert_int_equal(ring_peek(&r, out, sizeof(out)), sizeof(out));
	assert_memory_equal(in, out, sizeof(in));
	/* produce across the wrap of the counter */
	assert_int_equal(ring_produce(&r, SZ - sizeof(in) + 1), -EPROTO);
	assert_int_equal(ring_produce(&r, SZ - sizeof(in)), 0);
	assert_int_equal(ring_free(&r), 0);
	assert_int_equal(ring_consume(&r, SZ), 0);
	assert_int_equal(r.head, r.tail);
	assert_int_equal(r.head, (uint64_t)(UINT64_MAX - 1000) + SZ);

	/* remote view at the same place */
	struct ring_remote rr;
	assert_int_equal(ring_remote_init(&rr, SZ), 0);
	rr.tail = rr.acked = UINT64_MAX - 10;
	assert_int_equal(ring_remote_reserve(&rr, 100, sp), 0);
	assert_int_equal(sp[0].off, SZ - 11);
	assert_int_equal(sp[0].len, 11);
	assert_int_equal(sp[1].off, 0);
	assert_int_equal(sp[1].len, 89);
	assert_int_equal(rr.tail, 89);
	assert_int_equal(ring_remote_space(&rr), SZ - 100);
	assert_int_equal(ring_remote_ack(&rr, 101), -EPROTO);
	assert_int_equal(ring_remote_ack(&rr, 60), 0);
	assert_int_equal(ring_remote_ack(&rr, 40), 0);
	assert_int_equal(rr.acked, rr.tail);
	assert_int_equal(ring_remote_space(&rr), SZ);
}

/* Every value a peer can send: nothing past the free space is accepted and
 * a refused value leaves the state as it was. */
static void test_hostile_produce_ack(void **state)
{
	struct ring r;
	struct ring_remote rr;
	struct ring_span sp[2];
	static const uint64_t bad_acks[] = {1, 2, 0x3fffffff, 0x40000000, 0xffffffffull,
					    1ull << 32, 1ull << 63, UINT64_MAX, UINT64_MAX - 1};

	assert_int_equal(ring_init(&r, mem, SZ), 0);
	assert_int_equal(ring_produce(&r, SZ + 1), -EPROTO);
	assert_int_equal(ring_produce(&r, UINT32_MAX), -EPROTO);
	assert_int_equal(ring_produce(&r, 0x3fffffff), -EPROTO);
	assert_int_equal(ring_used(&r), 0);
	assert_int_equal(ring_produce(&r, SZ - 1), 0);
	assert_int_equal(ring_produce(&r, 2), -EPROTO);
	assert_int_equal(ring_produce(&r, 1), 0);
	assert_int_equal(ring_produce(&r, 1), -EPROTO);
	assert_int_equal(ring_used(&r), SZ);
	/* consume half, then the peer may fill exactly that half */
	assert_int_equal(ring_consume(&r, SZ / 2), 0);
	assert_int_equal(ring_produce(&r, SZ / 2 + 1), -EPROTO);
	assert_int_equal(ring_produce(&r, SZ / 2), 0);

	assert_int_equal(ring_remote_init(&rr, SZ), 0);
	for (size_t i = 0; i < sizeof(bad_acks) / sizeof(bad_acks[0]); i++)
		assert_int_equal(ring_remote_ack(&rr, bad_acks[i]), -EPROTO);
	assert_int_equal(ring_remote_ack(&rr, 0), 0);
	assert_int_equal(ring_remote_reserve(&rr, 1000, sp), 0);
	for (size_t i = 0; i < sizeof(bad_acks) / sizeof(bad_acks[0]); i++)
		if (bad_acks[i] > 1000)
			assert_int_equal(ring_remote_ack(&rr, bad_acks[i]), -EPROTO);
	assert_int_equal(rr.acked, 0);
	assert_int_equal(rr.tail, 1000);
	assert_int_equal(ring_remote_ack(&rr, 1000), 0);
	assert_int_equal(ring_remote_ack(&rr, 1), -EPROTO);
	/* a corrupted remote state is refused, not trusted */
	rr.acked = rr.tail + 1;
	assert_int_equal(ring_remote_ack(&rr, 0), -EPROTO);
	assert_int_equal(ring_remote_reserve(&rr, 1, sp), -ENOSPC);
	/* a corrupted local state gives no room and nothing to read */
	r.head = r.tail + 1;
	assert_int_equal(ring_produce(&r, 1), -EPROTO);
	assert_int_equal(ring_peek(&r, mem, 10), 0);
	assert_int_equal(ring_consume(&r, 0), -EINVAL);
}

static void test_remote_reserve(void **state)
{
	struct ring_remote rr;
	struct ring_span sp[2] = {{1, 1}, {1, 1}};

	assert_int_equal(ring_remote_init(&rr, SZ), 0);
	assert_int_equal(ring_remote_reserve(&rr, SZ + 1, sp), -ENOSPC);
	assert_int_equal(sp[0].off, 1); /* untouched */
	assert_int_equal(ring_remote_reserve(&rr, SZ - 100, sp), 0);
	assert_int_equal(sp[0].off, 0);
	assert_int_equal(sp[0].len, SZ - 100);
	assert_int_equal(sp[1].len, 0);
	assert_int_equal(ring_remote_reserve(&rr, 101, sp), -ENOSPC);
	assert_int_equal(ring_remote_ack(&rr, 500), 0);
	assert_int_equal(ring_remote_space(&rr), 600);
	assert_int_equal(ring_remote_reserve(&rr, 601, sp), -ENOSPC);
	/* 600 free bytes: 100 at the end and 500 at the start */
	assert_int_equal(ring_remote_reserve(&rr, 600, sp), 0);
	assert_int_equal(sp[0].off, SZ - 100);
	assert_int_equal(sp[0].len, 100);
	assert_int_equal(sp[1].off, 0);
	assert_int_equal(sp[1].len, 500);
	assert_int_equal(ring_remote_space(&rr), 0);
	assert_int_equal(ring_remote_reserve(&rr, 1, sp), -ENOSPC);
	assert_int_equal(ring_remote_reserve(&rr, 0, sp), 0);
	assert_int_equal(sp[0].off, 500);
	assert_int_equal(sp[0].len, 0);
	assert_int_equal(sp[1].len, 0);
	/* ending exactly at the buffer's end: one span */
	assert_int_equal(ring_remote_ack(&rr, SZ), 0);
	assert_int_equal(ring_remote_reserve(&rr, SZ - 500, sp), 0);
	assert_int_equal(sp[0].off, 500);
	assert_int_equal(sp[0].len, SZ - 500);
	assert_int_equal(sp[1].len, 0);
	assert_int_equal(ring_remote_reserve(&rr, 0, NULL), 0);

	/* the largest ring */
	assert_int_equal(ring_remote_init(&rr, RING_MAX_SIZE), 0);
	assert_int_equal(ring_remote_reserve(&rr, RING_MAX_SIZE, sp), 0);
	assert_int_equal(sp[0].len, RING_MAX_SIZE);
	assert_int_equal(ring_remote_space(&rr), 0);
	assert_int_equal(ring_remote_ack(&rr, RING_MAX_SIZE + 1ull), -EPROTO);
	assert_int_equal(ring_remote_ack(&rr, RING_MAX_SIZE), 0);
}

/* Peek into many small, empty and uneven iovecs across the buffer's end. */
static void test_peek_iov(void **state)
{
	struct ring r;
	static uint8_t in[SZ], out[SZ + 64];
	struct iovec iov[200];
	size_t pos = 0;
	int n = 0;

	assert_int_equal(ring_init(&r, mem, SZ), 0);
	r.head = r.tail = SZ - 500; /* data wraps after 500 bytes */
	fill(in, 3000, 5);
	assert_int_equal(ring_write(&r, in, 3000, NULL), 0);

	memset(out, 0xee, sizeof(out));
	for (int i = 0; i < 200; i++) {
		size_t len = i % 5 == 0 ? 0 : (size_t)(i * 13 % 61) + 1;
		iov[i].iov_base = out + pos;
		iov[i].iov_len = len;
		pos += len;
		n++;
		if (pos > 3500)
			break;
	}
	assert_true(pos > 3000);
	assert_int_equal(ring_peek_iov(&r, iov, n, SIZE_MAX), 3000);
	assert_memory_equal(out, in, 3000);
	assert_int_equal(out[3000], 0xee); /* nothing beyond */
	assert_int_equal(ring_used(&r), 3000);

	/* max below used, stopping in the middle of an iovec and across the wrap */
	memset(out, 0xee, sizeof(out));
	assert_int_equal(ring_peek_iov(&r, iov, n, 777), 777);
	assert_memory_equal(out, in, 777);
	assert_int_equal(out[777], 0xee);

	/* iovecs shorter than the data */
	memset(out, 0xee, sizeof(out));
	assert_int_equal(ring_peek_iov(&r, iov, 10, SIZE_MAX), (size_t)((uint8_t *)iov[9].iov_base + iov[9].iov_len - out));
	assert_int_equal(ring_peek_iov(&r, iov, 0, SIZE_MAX), 0);
	assert_int_equal(ring_peek_iov(&r, iov, -1, SIZE_MAX), 0);
	assert_int_equal(ring_peek_iov(&r, iov, n, 0), 0);

	/* one byte per iovec, 64 iovecs, straddling the end of the buffer */
	struct iovec one[64];
	assert_int_equal(ring_consume(&r, 470), 0); /* head 30 bytes before the end */
	for (int i = 0; i < 64; i++) {
		one[i].iov_base = out + i;
		one[i].iov_len = 1;
	}
	assert_int_equal(ring_peek_iov(&r, one, 64, SIZE_MAX), 64);
	assert_memory_equal(out, in + 470, 64);

	/* empty ring */
	assert_int_equal(ring_consume(&r, ring_used(&r)), 0);
	assert_int_equal(ring_peek_iov(&r, one, 64, SIZE_MAX), 0);
}

/* A long random run against a simple model. */
/* Ring sizes from SO_RCVBUF/SO_SNDBUF: the default when never set, else a
 * power of two covering the request, within the floor and the ceiling. */
/* ring_copy: every length around RING_COPY_MIN and its 8-byte words, at
 * every alignment of source and destination, copies exactly n bytes. */
static void test_copy(void **state)
{
	enum { MAX = 3 * RING_COPY_MIN + 200 };
	static uint8_t src[MAX + 64], dst[MAX + 64 + 2];
	static const size_t lens[] = {0, 1, 15, 16, 63, 64, 65, RING_COPY_MIN - 1, RING_COPY_MIN,
				      RING_COPY_MIN + 1, RING_COPY_MIN + 63, RING_COPY_MIN + 64,
				      2 * RING_COPY_MIN + 17, MAX};
	(void)state;

	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 7 + 3);
	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
		for (size_t so = 0; so < 17; so += 3)
			for (size_t dof = 0; dof < 17; dof += 5) {
				size_t n = lens[li];
				memset(dst, 0xa5, sizeof(dst));
				ring_copy(dst + 1 + dof, src + so, n);
				assert_memory_equal(dst + 1 + dof, src + so, n);
				assert_int_equal(dst[dof], 0xa5); /* nothing before */
				assert_int_equal(dst[1 + dof + n], 0xa5); /* nothing after */
			}
}

/* ring_unread_iov: the unread bytes in place, wrapped or not, or none. */
static void test_unread_iov(void **state)
{
	struct ring r;
	struct iovec v[2];
	uint8_t in[SZ];
	(void)state;

	assert_int_equal(ring_init(&r, mem, SZ), 0);
	assert_int_equal(ring_unread_iov(&r, v), 0);
	assert_null(v[0].iov_base);
	assert_int_equal(v[0].iov_len + v[1].iov_len, 0);
	fill(in, SZ, 5);
	r.head = r.tail = SZ - 100;
	assert_int_equal(ring_write(&r, in, 300, NULL), 0);
	assert_int_equal(ring_unread_iov(&r, v), 300);
	assert_ptr_equal(v[0].iov_base, mem + SZ - 100);
	assert_int_equal(v[0].iov_len, 100);
	assert_ptr_equal(v[1].iov_base, mem);
	assert_int_equal(v[1].iov_len, 200);
	assert_memory_equal(v[0].iov_base, in, 100);
	assert_memory_equal(v[1].iov_base, in + 100, 200);
	assert_int_equal(ring_consume(&r, 150), 0);
	assert_int_equal(ring_unread_iov(&r, v), 150);
	assert_ptr_equal(v[0].iov_base, mem + 50);
	assert_int_equal(v[0].iov_len, 150);
	assert_int_equal(v[1].iov_len, 0);
}

static void test_size_for(void **state)
{
	(void)state;
	assert_int_equal(ring_size_for(0, 262144), 262144);
	assert_int_equal(ring_size_for(1, 262144), RING_SIZE_FLOOR);
	assert_int_equal(ring_size_for(16384, 262144), 16384);
	assert_int_equal(ring_size_for(16385, 262144), 32768);
	assert_int_equal(ring_size_for(100000, 262144), 131072);
	assert_int_equal(ring_size_for(1u << 20, 262144), 1u << 20);
	assert_int_equal(ring_size_for(64u << 20, 262144), RING_SIZE_CEIL);
	assert_int_equal(ring_size_for(UINT64_MAX, 4096), RING_SIZE_CEIL);
}

static void test_model(void **state)
{
	struct ring r;
	static uint8_t model[1 << 16], tmp[SZ];
	uint64_t mh = 0, mt = 0;
	unsigned seed = 12345;

	assert_int_equal(ring_init(&r, mem, SZ), 0);
	r.head = r.tail = UINT64_MAX - 3 * SZ; /* run through the counter's wrap */
	for (int i = 0; i < 20000; i++) {
		seed = seed * 1103515245 + 12345;
		uint32_t n = (seed >> 8) % (SZ / 2);
		if (seed & 0x80000000u) {
			for (uint32_t k = 0; k < n; k++)
				tmp[k] = (uint8_t)(seed >> 3) + (uint8_t)k;
			int rc = ring_write(&r, tmp, n, NULL);
			if (mt - mh + n > SZ) {
				assert_int_equal(rc, -ENOSPC);
			} else {
				assert_int_equal(rc, 0);
				for (uint32_t k = 0; k < n; k++)
					model[(mt + k) % sizeof(model)] = tmp[k];
				mt += n;
			}
		} else {
			size_t got = ring_peek(&r, tmp, n);
			size_t exp = n < mt - mh ? n : (size_t)(mt - mh);
			assert_int_equal(got, exp);
			for (size_t k = 0; k < got; k++)
				assert_int_equal(tmp[k], model[(mh + k) % sizeof(model)]);
			assert_int_equal(ring_consume(&r, got), 0);
			mh += got;
		}
		assert_int_equal(ring_used(&r), mt - mh);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init),
		cmocka_unit_test(test_write_peek_wrap),
		cmocka_unit_test(test_full_and_errors),
		cmocka_unit_test(test_positions_near_wrap),
		cmocka_unit_test(test_hostile_produce_ack),
		cmocka_unit_test(test_remote_reserve),
		cmocka_unit_test(test_peek_iov),
		cmocka_unit_test(test_model),
		cmocka_unit_test(test_size_for),
		cmocka_unit_test(test_copy),
		cmocka_unit_test(test_unread_iov),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
