/* Unit tests of the wire messages (doc/design.md, "Wire protocol"). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include <rsock/rsock.h>

#include "base/proto.h"
#include "base/ring.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static const struct proto_probe probe4 = {
	.version = 1, .family = AF_INET, .client_port = 40000, .server_port = 6379,
	.client_addr = {10, 0, 0, 1}, .server_addr = {10, 0, 0, 2}};

static const struct proto_hello hello1 = {
	.version = 1, .flags = 0, .token = 0x0123456789abcdefull,
	.ring_addr = 0x00007f0012340000ull, .ring_rkey = 0xdeadbeef,
	.ring_size = 256 * 1024, .max_inline = 220};

static const struct proto_hello_ack ack1 = {
	.version = 1, .status = 0, .rdma_port = 18515, .token = 0x0123456789abcdefull,
	.ring_addr = 0x00007f0056780000ull, .ring_rkey = 0x11223344,
	.ring_size = 64 * 1024, .max_inline = 0};

static void assert_probe_eq(const struct proto_probe *a, const struct proto_probe *b)
{
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->family, b->family);
	assert_int_equal(a->client_port, b->client_port);
	assert_int_equal(a->server_port, b->server_port);
	assert_memory_equal(a->client_addr, b->client_addr, 16);
	assert_memory_equal(a->server_addr, b->server_addr, 16);
}

static void assert_hello_eq(const struct proto_hello *a, const struct proto_hello *b)
{
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->token, b->token);
	assert_int_equal(a->ring_addr, b->ring_addr);
	assert_int_equal(a->ring_rkey, b->ring_rkey);
	assert_int_equal(a->ring_size, b->ring_size);
	assert_int_equal(a->max_inline, b->max_inline);
}

static void assert_ack_eq(const struct proto_hello_ack *a, const struct proto_hello_ack *b)
{
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->status, b->status);
	assert_int_equal(a->rdma_port, b->rdma_port);
	assert_int_equal(a->token, b->token);
	assert_int_equal(a->ring_addr, b->ring_addr);
	assert_int_equal(a->ring_rkey, b->ring_rkey);
	assert_int_equal(a->ring_size, b->ring_size);
	assert_int_equal(a->max_inline, b->max_inline);
}

/* ---- exact byte layouts --------------------------------------------------- */

static void test_layouts(void **state)
{
	uint8_t b[64];
	static const uint8_t magic[4] = {'R', 'S', 'K', '1'};
	struct proto_beacon bc = {.version = 1, .flags = 0};

	memset(b, 0xaa, sizeof(b));
	assert_int_equal(proto_probe_encode(&probe4, b, sizeof(b)), PROTO_PROBE_LEN);
	assert_memory_equal(b, magic, 4);
	static const uint8_t probe_bytes[16] = {'R', 'S', 'K', '1', 1, 0, 1, 0, 2, 0,
						0x40, 0x9c, 0xeb, 0x18, 0, 0};
	assert_memory_equal(b, probe_bytes, 16);
	assert_int_equal(b[16], 10);
	assert_int_equal(b[19], 1);
	for (int i = 20; i < 32; i++)
		assert_int_equal(b[i], 0);
	assert_int_equal(b[32], 10);
	assert_int_equal(b[35], 2);
	for (int i = 36; i < 48; i++)
		assert_int_equal(b[i], 0);
	assert_int_equal(b[48], 0xaa); /* nothing written beyond */

	memset(b, 0xaa, sizeof(b));
	assert_int_equal(proto_beacon_encode(&bc, b, sizeof(b)), PROTO_BEACON_LEN);
	static const uint8_t beacon_bytes[12] = {'R', 'S', 'K', '1', 2, 0, 1, 0, 0, 0, 0, 0};
	assert_memory_equal(b, beacon_bytes, 12);
	assert_int_equal(b[12], 0xaa);

	memset(b, 0xaa, sizeof(b));
	assert_int_equal(proto_hello_encode(&hello1, b, sizeof(b)), PROTO_HELLO_LEN);
	static const uint8_t hello_bytes[44] = {
		'R', 'S', 'K', '1', 3, 0, 44, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,
		0x00, 0x00, 0x34, 0x12, 0x00, 0x7f, 0x00, 0x00,
		0xef, 0xbe, 0xad, 0xde, 0x00, 0x00, 0x04, 0x00, 220, 0, 0, 0};
	assert_memory_equal(b, hello_bytes, 44);
	assert_int_equal(b[44], 0xaa);

	memset(b, 0xaa, sizeof(b));
	assert_int_equal(proto_hello_ack_encode(&ack1, b, sizeof(b)), PROTO_HELLO_ACK_LEN);
	static const uint8_t ack_bytes[44] = {
		'R', 'S', 'K', '1', 4, 0, 44, 0, 1, 0, 0, 0, 0x53, 0x48, 0, 0,
		0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,
		0x00, 0x00, 0x78, 0x56, 0x00, 0x7f, 0x00, 0x00,
		0x44, 0x33, 0x22, 0x11, 0x00, 0x00, 0x01, 0x00, 0, 0, 0, 0};
	assert_memory_equal(b, ack_bytes, 44);
	assert_int_equal(b[44], 0xaa);
}

static void test_encode_nospc(void **state)
{
	uint8_t b[64];
	struct proto_beacon bc = {.version = 1};

	assert_int_equal(proto_probe_encode(&probe4, b, PROTO_PROBE_LEN - 1), -ENOSPC);
	assert_int_equal(proto_beacon_encode(&bc, b, PROTO_BEACON_LEN - 1), -ENOSPC);
	assert_int_equal(proto_hello_encode(&hello1, b, PROTO_HELLO_LEN - 1), -ENOSPC);
	assert_int_equal(proto_hello_ack_encode(&ack1, b, PROTO_HELLO_ACK_LEN - 1), -ENOSPC);
	assert_int_equal(proto_hello_encode(&hello1, b, 0), -ENOSPC);
	assert_int_equal(proto_hello_encode(NULL, b, sizeof(b)), -EINVAL);
	assert_int_equal(proto_hello_encode(&hello1, NULL, sizeof(b)), -EINVAL);
}

/* ---- round trips ------------------------------------------------------ */

static void test_roundtrip_probe(void **state)
{
	uint8_t b[56]; /* the RDMA_PS_TCP private data size */
	struct proto_probe p6 = {.version = 1, .family = AF_INET6, .client_port = 1,
				 .server_port = 65535};
	struct proto_probe out;

	for (int i = 0; i < 16; i++) {
		p6.client_addr[i] = (uint8_t)(0xf0 + i);
		p6.server_addr[i] = (uint8_t)i;
	}
	assert_int_equal(proto_probe_encode(&probe4, b, sizeof(b)), PROTO_PROBE_LEN);
	assert_int_equal(proto_probe_decode(b, PROTO_PROBE_LEN, &out), PROTO_PROBE_LEN);
	assert_probe_eq(&out, &probe4);
	assert_int_equal(proto_probe_encode(&p6, b, sizeof(b)), PROTO_PROBE_LEN);
	assert_int_equal(proto_probe_decode(b, PROTO_PROBE_LEN, &out), PROTO_PROBE_LEN);
	assert_probe_eq(&out, &p6);
	/* rdma_cm pads private data: the padding is not part of the message */
	memset(b + PROTO_PROBE_LEN, 0, sizeof(b) - PROTO_PROBE_LEN);
	assert_int_equal(proto_probe_decode(b, sizeof(b), &out), PROTO_PROBE_LEN);
	assert_probe_eq(&out, &p6);

	/* the encoder sends only the 4 bytes of an IPv4 address */
	struct proto_probe dirty = probe4;
	memset(dirty.client_addr + 4, 0x55, 12);
	memset(dirty.server_addr + 4, 0x66, 12);
	assert_int_equal(proto_probe_encode(&dirty, b, sizeof(b)), PROTO_PROBE_LEN);
	assert_int_equal(proto_probe_decode(b, sizeof(b), &out), PROTO_PROBE_LEN);
	assert_probe_eq(&out, &probe4);
}

static void test_roundtrip_beacon(void **state)
{
	uint8_t b[148]; /* an IB REJ carries this much private data */
	struct proto_beacon in = {.version = 1, .flags = 0}, out = {0, 0, 0};

	memset(b, 0, sizeof(b));
	assert_int_equal(proto_beacon_encode(&in, b, sizeof(b)), PROTO_BEACON_LEN);
	assert_int_equal(proto_beacon_decode(b, PROTO_BEACON_LEN, &out), PROTO_BEACON_LEN);
	assert_int_equal(out.version, 1);
	assert_int_equal(out.flags, 0);
	assert_int_equal(proto_beacon_decode(b, sizeof(b), &out), PROTO_BEACON_LEN);
	/* a later version with flags */
	in.version = 7;
	in.flags = 0x8001;
	assert_int_equal(proto_beacon_encode(&in, b, sizeof(b)), PROTO_BEACON_LEN);
	assert_int_equal(proto_beacon_decode(b, sizeof(b), &out), PROTO_BEACON_LEN);
	assert_int_equal(out.version, 7);
	assert_int_equal(out.flags, 0x8001);
	assert_int_equal(out.data_port, 0);
	/* version 2 carries the data port hint (bytes 10-11); version 1 cannot */
	in.version = 2;
	in.flags = 0;
	in.data_port = 40123;
	assert_int_equal(proto_beacon_encode(&in, b, sizeof(b)), PROTO_BEACON_LEN);
	assert_int_equal(b[10], 40123 & 0xff);
	assert_int_equal(b[11], 40123 >> 8);
	assert_int_equal(proto_beacon_decode(b, sizeof(b), &out), PROTO_BEACON_LEN);
	assert_int_equal(out.data_port, 40123);
	in.version = 1;
	assert_int_equal(proto_beacon_encode(&in, b, sizeof(b)), PROTO_BEACON_LEN);
	assert_int_equal(proto_beacon_decode(b, sizeof(b), &out), PROTO_BEACON_LEN);
	assert_int_equal(out.data_port, 0);
}

static void test_roundtrip_hello(void **state)
{
	uint8_t b[PROTO_HELLO_LEN];
	struct proto_hello out, h = hello1;

	assert_int_equal(proto_hello_encode(&h, b, sizeof(b)), PROTO_HELLO_LEN);
	assert_int_equal(proto_hello_decode(b, sizeof(b), &out), PROTO_HELLO_LEN);
	assert_hello_eq(&out, &h);
	/* boundary values that are all valid */
	h.token = UINT64_MAX;
	h.ring_addr = UINT64_MAX - RING_MAX_SIZE;
	h.ring_size = RING_MAX_SIZE;
	h.ring_rkey = 0;
	h.max_inline = PROTO_MAX_INLINE;
	assert_int_equal(proto_hello_encode(&h, b, sizeof(b)), PROTO_HELLO_LEN);
	assert_int_equal(proto_hello_decode(b, sizeof(b), &out), PROTO_HELLO_LEN);
	assert_hello_eq(&out, &h);
	h.token = 1;
	h.ring_addr = 0;
	h.ring_size = RING_MIN_SIZE;
	h.max_inline = 0;
	assert_int_equal(proto_hello_encode(&h, b, sizeof(b)), PROTO_HELLO_LEN);
	assert_int_equal(proto_hello_decode(b, sizeof(b), &out), PROTO_HELLO_LEN);
	assert_hello_eq(&out, &h);
}

static void test_roundtrip_hello_ack(void **state)
{
	uint8_t b[PROTO_HELLO_ACK_LEN];
	struct proto_hello_ack out, a = ack1;

	assert_int_equal(proto_hello_ack_encode(&a, b, sizeof(b)), PROTO_HELLO_ACK_LEN);
	assert_int_equal(proto_hello_ack_decode(b, sizeof(b), &out), PROTO_HELLO_ACK_LEN);
	assert_ack_eq(&out, &a);
	/* a refusal: only version and status count (what negotiate/server.c's send_nak sends) */
	struct proto_hello_ack nak = {.version = PROTO_VERSION, .status = RSOCK_FB_RESOURCES};
	assert_int_equal(proto_hello_ack_encode(&nak, b, sizeof(b)), PROTO_HELLO_ACK_LEN);
	assert_int_equal(proto_hello_ack_decode(b, sizeof(b), &out), PROTO_HELLO_ACK_LEN);
	assert_ack_eq(&out, &nak);
	/* a refusal with junk in the other fields: they are ignored and cleared */
	nak = ack1;
	nak.status = RSOCK_FB_MAX - 1;
	nak.ring_size = 3;
	nak.token = 0;
	nak.max_inline = 99999;
	nak.rdma_port = 0;
	assert_int_equal(proto_hello_ack_encode(&nak, b, sizeof(b)), PROTO_HELLO_ACK_LEN);
	assert_int_equal(proto_hello_ack_decode(b, sizeof(b), &out), PROTO_HELLO_ACK_LEN);
	assert_int_equal(out.status, RSOCK_FB_MAX - 1);
	assert_int_equal(out.version, 1);
	assert_int_equal(out.token, 0);
	assert_int_equal(out.ring_size, 0);
	assert_int_equal(out.ring_addr, 0);
	assert_int_equal(out.ring_rkey, 0);
	assert_int_equal(out.max_inline, 0);
	assert_int_equal(out.rdma_port, 0);
}

/* ---- hostile values, field by field ---------------------------------------- */

typedef int (*decode_fn)(const void *, size_t, void *);

static int dec_probe(const void *b, size_t l, void *m) { return proto_probe_decode(b, l, m); }
static int dec_beacon(const void *b, size_t l, void *m) { return proto_beacon_decode(b, l, m); }
static int dec_hello(const void *b, size_t l, void *m) { return proto_hello_decode(b, l, m); }
static int dec_ack(const void *b, size_t l, void *m) { return proto_hello_ack_decode(b, l, m); }

/* Decode buf; on -EPROTO check that every prefix long enough to hold the
 * offending field [off, off+width) is also refused, and that the output was
 * not written. */
static void expect_eproto(decode_fn fn, const uint8_t *buf, size_t len, size_t off, size_t width)
{
	union {
		struct proto_probe p;
		struct proto_beacon b;
		struct proto_hello h;
		struct proto_hello_ack a;
	} out;
	uint8_t canary[sizeof(out)];

	memset(&out, 0x5a, sizeof(out));
	memcpy(canary, &out, sizeof(out));
	assert_int_equal(fn(buf, len, &out), -EPROTO);
	assert_memory_equal(&out, canary, sizeof(out));
	for (size_t l = off + width; l < len; l++)
		assert_int_equal(fn(buf, l, &out), -EPROTO);
}

static void test_hostile_header(void **state)
{
	uint8_t good[4][PROTO_PROBE_LEN];
	const decode_fn fns[4] = {dec_probe, dec_beacon, dec_hello, dec_ack};
	const size_t lens[4] = {PROTO_PROBE_LEN, PROTO_BEACON_LEN, PROTO_HELLO_LEN, PROTO_HELLO_ACK_LEN};
	struct proto_beacon bc = {.version = 1};

	proto_probe_encode(&probe4, good[0], sizeof(good[0]));
	proto_beacon_encode(&bc, good[1], sizeof(good[1]));
	proto_hello_encode(&hello1, good[2], sizeof(good[2]));
	proto_hello_ack_encode(&ack1, good[3], sizeof(good[3]));
	for (int k = 0; k < 4; k++) {
		uint8_t b[PROTO_PROBE_LEN];
		union {
			struct proto_probe p;
			struct proto_hello h;
			struct proto_hello_ack a;
		} out;

		/* any byte of magic or type wrong: refused from that byte on */
		for (size_t i = 0; i < 6; i++) {
			memcpy(b, good[k], lens[k]);
			b[i] ^= 0x01;
			for (size_t l = i + 1; l <= lens[k]; l++)
				assert_int_equal(fns[k](b, l, &out), -EPROTO);
			/* the prefix before the bad byte is still a possible message */
			if (i)
				assert_int_equal(fns[k](b, i, &out), -EAGAIN);
		}
		/* each message is refused by every other decoder */
		for (int j = 0; j < 4; j++)
			if (j != k)
				assert_int_equal(fns[j](good[k], lens[k], &out), -EPROTO);
		/* the cancel message (src/negotiate/hello.c) is not a hello_ack */
		static const uint8_t cancel[8] = {'R', 'S', 'K', '1', 5, 0, 8, 0};
		assert_int_equal(fns[k](cancel, sizeof(cancel), &out), -EPROTO);
		/* application bytes: refused at once */
		assert_int_equal(fns[k]("GET / HTTP/1.1\r\n", 16, &out), -EPROTO);
		assert_int_equal(fns[k]("G", 1, &out), -EPROTO);
		assert_int_equal(fns[k]("", 0, &out), -EAGAIN);
		assert_int_equal(fns[k](NULL, 0, &out), -EAGAIN);
		assert_int_equal(fns[k](NULL, 10, &out), -EINVAL);
		assert_int_equal(fns[k](good[k], lens[k], NULL), -EINVAL);
	}
}

static void test_hostile_probe(void **state)
{
	uint8_t g[PROTO_PROBE_LEN], b[PROTO_PROBE_LEN];
	struct proto_probe p6 = probe4;

	assert_int_equal(proto_probe_encode(&probe4, g, sizeof(g)), PROTO_PROBE_LEN);
#define MUT(stmt, off, width)                                                     \
	do {                                                                      \
		memcpy(b, g, sizeof(b));                                          \
		stmt;                                                             \
		expect_eproto(dec_probe, b, sizeof(b), off, width);               \
	} while (0)
	MUT(put16(b + 6, 0), 6, 2);           /* version 0 */
	MUT(put16(b + 8, 0), 8, 2);           /* family */
	MUT(put16(b + 8, AF_UNIX), 8, 2);
	MUT(put16(b + 8, 28), 8, 2);          /* BSD's AF_INET6 */
	MUT(put16(b + 8, 0xffff), 8, 2);
	MUT(put16(b + 10, 0), 10, 2);         /* client port 0 */
	MUT(put16(b + 12, 0), 12, 2);         /* server port 0 */
	MUT(put16(b + 14, 1), 14, 2);         /* reserved */
	MUT(b[20] = 1, 16, 16);               /* IPv4: bytes 4-15 must be 0 */
	MUT(b[31] = 0x80, 16, 16);
	MUT(b[36] = 1, 32, 16);
	MUT(b[47] = 1, 32, 16);
	/* the same bytes are fine for IPv6 */
	p6.family = AF_INET6;
	memset(p6.client_addr, 0xff, 16);
	memset(p6.server_addr, 0x01, 16);
	assert_int_equal(proto_probe_encode(&p6, b, sizeof(b)), PROTO_PROBE_LEN);
	assert_int_equal(proto_probe_decode(b, sizeof(b), &p6), PROTO_PROBE_LEN);
	/* a later version may use the reserved field */
	memcpy(b, g, sizeof(b));
	put16(b + 6, 2);
	put16(b + 14, 0xbeef);
	assert_int_equal(proto_probe_decode(b, sizeof(b), &p6), PROTO_PROBE_LEN);
	assert_int_equal(p6.version, 2);
#undef MUT
}

static void test_hostile_beacon(void **state)
{
	uint8_t g[PROTO_BEACON_LEN], b[PROTO_BEACON_LEN];
	struct proto_beacon bc = {.version = 1};

	assert_int_equal(proto_beacon_encode(&bc, g, sizeof(g)), PROTO_BEACON_LEN);
	memcpy(b, g, sizeof(b));
	put16(b + 6, 0);
	expect_eproto(dec_beacon, b, sizeof(b), 6, 2);
	memcpy(b, g, sizeof(b));
	put16(b + 8, 1); /* version 1 defines no flags */
	expect_eproto(dec_beacon, b, sizeof(b), 8, 2);
	memcpy(b, g, sizeof(b));
	put16(b + 10, 0x100); /* no data port in version 1 */
	expect_eproto(dec_beacon, b, sizeof(b), 10, 2);
}

static void test_hostile_hello(void **state)
{
	uint8_t g[PROTO_HELLO_LEN], b[PROTO_HELLO_LEN];

	assert_int_equal(proto_hello_encode(&hello1, g, sizeof(g)), PROTO_HELLO_LEN);
#define MUT(stmt, off, width)                                                     \
	do {                                                                      \
		memcpy(b, g, sizeof(b));                                          \
		stmt;                                                             \
		expect_eproto(dec_hello, b, sizeof(b), off, width);               \
	} while (0)
	MUT(put16(b + 6, 0), 6, 2);                     /* length */
	MUT(put16(b + 6, PROTO_HELLO_LEN - 1), 6, 2);
	MUT(put16(b + 6, PROTO_MSG_MAX_LEN + 1), 6, 2); /* beyond the sane maximum */
	MUT(put16(b + 6, 0xffff), 6, 2);
	MUT(put16(b + 6, PROTO_HELLO_LEN + 1), 8, 2);   /* version 1 is exactly 44 */
	MUT(put16(b + 8, 0), 8, 2);                     /* version */
	MUT(put16(b + 10, 1), 10, 2);                   /* reserved */
	MUT(put32(b + 12, 1), 12, 4);                   /* flags */
	MUT(put32(b + 12, 0x80000000u), 12, 4);
	MUT(put64(b + 16, 0), 16, 8);                   /* token */
	MUT(put32(b + 36, 0), 24, 16);                  /* ring size */
	MUT(put32(b + 36, RING_MIN_SIZE / 2), 24, 16);
	MUT(put32(b + 36, RING_MIN_SIZE + 1), 24, 16);
	MUT(put32(b + 36, 3u << 20), 24, 16);
	MUT(put32(b + 36, RING_MAX_SIZE * 2u), 24, 16);
	MUT(put32(b + 36, 0xffffffffu), 24, 16);
	MUT(put64(b + 24, UINT64_MAX - 100), 24, 16);   /* ring wraps the address space */
	MUT(put64(b + 24, UINT64_MAX - hello1.ring_size + 1), 24, 16);
	MUT(put32(b + 40, PROTO_MAX_INLINE + 1), 40, 4); /* max_inline */
	MUT(put32(b + 40, 0xffffffffu), 40, 4);
#undef MUT
}

/* A same-host stream's answer names no port: its flag says so (version >= 2). */
static void test_hello_ack_shm(void **state)
{
	struct proto_hello_ack a = {.version = PROTO_VERSION, .flags = PROTO_ACK_SHM, .token = 7,
				    .ring_size = 1u << 18}, out;
	uint8_t b[PROTO_HELLO_ACK_LEN];

	(void)state;
	assert_int_equal(proto_hello_ack_encode(&a, b, sizeof(b)), PROTO_HELLO_ACK_LEN);
	assert_int_equal(proto_hello_ack_decode(b, sizeof(b), &out), PROTO_HELLO_ACK_LEN);
	assert_int_equal(out.flags, PROTO_ACK_SHM);
	assert_int_equal(out.rdma_port, 0);
	assert_int_equal(out.ring_size, 1u << 18);
	a.flags = 0; /* without it, port 0 is refused */
	assert_int_equal(proto_hello_ack_encode(&a, b, sizeof(b)), PROTO_HELLO_ACK_LEN);
	assert_int_equal(proto_hello_ack_decode(b, sizeof(b), &out), -EPROTO);
}

static void test_hostile_hello_ack(void **state)
{
	uint8_t g[PROTO_HELLO_ACK_LEN], b[PROTO_HELLO_ACK_LEN];

	assert_int_equal(proto_hello_ack_encode(&ack1, g, sizeof(g)), PROTO_HELLO_ACK_LEN);
#define MUT(stmt, off, width)                                                     \
	do {                                                                      \
		memcpy(b, g, sizeof(b));                                          \
		stmt;                                                             \
		expect_eproto(dec_ack, b, sizeof(b), off, width);                 \
	} while (0)
	MUT(put16(b + 6, 12), 6, 2);
	MUT(put16(b + 6, PROTO_MSG_MAX_LEN + 1), 6, 2);
	MUT(put16(b + 6, 60), 8, 2);                    /* version 1 with a longer length */
	MUT(put16(b + 8, 0), 8, 2);
	MUT(put16(b + 10, RSOCK_FB_MAX), 10, 2);        /* status out of range */
	MUT(put16(b + 10, 0xffff), 10, 2);
	MUT(put16(b + 12, 0), 12, 4);                   /* rdma_port 0 (told with the flags beside it) */
	MUT(put16(b + 14, 1), 14, 2);                   /* reserved */
	MUT(put64(b + 16, 0), 16, 8);                   /* token */
	MUT(put32(b + 36, 0), 24, 16);
	MUT(put32(b + 36, 5000), 24, 16);
	MUT(put32(b + 36, 1u << 31), 24, 16);
	MUT(put64(b + 24, UINT64_MAX), 24, 16);
	MUT(put32(b + 40, PROTO_MAX_INLINE + 1), 40, 4);
	/* a refusal still needs a sane header and status */
	MUT((put16(b + 10, RSOCK_FB_PEER), put16(b + 14, 7)), 14, 2);
	MUT((put16(b + 10, RSOCK_FB_PEER), put16(b + 8, 0)), 8, 2);
#undef MUT
}

/* ---- truncation and later versions ------------------------------------- */

static void test_truncated(void **state)
{
	uint8_t b[4][PROTO_PROBE_LEN];
	const decode_fn fns[4] = {dec_probe, dec_beacon, dec_hello, dec_ack};
	const size_t lens[4] = {PROTO_PROBE_LEN, PROTO_BEACON_LEN, PROTO_HELLO_LEN, PROTO_HELLO_ACK_LEN};
	struct proto_beacon bc = {.version = 1};
	union {
		struct proto_probe p;
		struct proto_hello h;
		struct proto_hello_ack a;
	} out;
	uint8_t canary[sizeof(out)];

	proto_probe_encode(&probe4, b[0], sizeof(b[0]));
	proto_beacon_encode(&bc, b[1], sizeof(b[1]));
	proto_hello_encode(&hello1, b[2], sizeof(b[2]));
	proto_hello_ack_encode(&ack1, b[3], sizeof(b[3]));
	for (int k = 0; k < 4; k++) {
		for (size_t l = 0; l < lens[k]; l++) {
			memset(&out, 0x77, sizeof(out));
			memcpy(canary, &out, sizeof(out));
			assert_int_equal(fns[k](b[k], l, &out), -EAGAIN);
			assert_memory_equal(&out, canary, sizeof(out));
		}
		assert_int_equal(fns[k](b[k], lens[k], &out), (int)lens[k]);
	}
}

/* A hello of a later version, longer, with fields a v1 decoder does not know. */
static void test_future_version(void **state)
{
	uint8_t b[PROTO_MSG_MAX_LEN + 16];
	struct proto_hello h = hello1, out;
	struct proto_hello_ack a = ack1, aout;
	const size_t flen = 60;

	memset(b, 0, sizeof(b));
	h.version = 2;
	assert_int_equal(proto_hello_encode(&h, b, sizeof(b)), PROTO_HELLO_LEN);
	put16(b + 6, (uint16_t)flen);
	put16(b + 10, 0x1234);       /* reserved: a later version may use it */
	put32(b + 12, 0x80000003u);  /* so may flags */
	memset(b + PROTO_HELLO_LEN, 0xcc, flen - PROTO_HELLO_LEN);
	memcpy(b + flen, "app data", 8); /* the stream goes on after the message */
	for (size_t l = 0; l < flen; l++)
		assert_int_equal(proto_hello_decode(b, l, &out), -EAGAIN);
	/* the length a reader peeks for, from the first 8 bytes */
	for (size_t l = 0; l < 8; l++)
		assert_int_equal(proto_hello_len(b, l, 0), -EAGAIN);
	assert_int_equal(proto_hello_len(b, 8, 0), (int)flen);
	assert_int_equal(proto_hello_len(b, PROTO_HELLO_LEN, 0), (int)flen);
	assert_int_equal(proto_hello_len(b, 8, 1), -EPROTO); /* not a hello_ack */
	assert_int_equal(proto_hello_len(NULL, 8, 0), -EINVAL);
	assert_int_equal(proto_hello_decode(b, flen, &out), (int)flen);
	assert_int_equal(proto_hello_decode(b, flen + 8, &out), (int)flen);
	h.flags = 0x80000003u;
	assert_hello_eq(&out, &h);
	/* at the sane maximum */
	put16(b + 6, PROTO_MSG_MAX_LEN);
	assert_int_equal(proto_hello_decode(b, PROTO_MSG_MAX_LEN - 1, &out), -EAGAIN);
	assert_int_equal(proto_hello_decode(b, PROTO_MSG_MAX_LEN, &out), PROTO_MSG_MAX_LEN);
	/* beyond it: refused, not waited for */
	put16(b + 6, PROTO_MSG_MAX_LEN + 1);
	assert_int_equal(proto_hello_decode(b, 8, &out), -EPROTO);
	assert_int_equal(proto_hello_len(b, 8, 0), -EPROTO);
	put16(b + 6, PROTO_HELLO_LEN - 1); /* shorter than version 1's */
	assert_int_equal(proto_hello_len(b, 8, 0), -EPROTO);
	/* a later version of version-1 length */
	put16(b + 6, PROTO_HELLO_LEN);
	assert_int_equal(proto_hello_decode(b, PROTO_HELLO_LEN, &out), PROTO_HELLO_LEN);
	/* a later version still has its fields validated */
	put64(b + 16, 0);
	assert_int_equal(proto_hello_decode(b, PROTO_HELLO_LEN, &out), -EPROTO);

	a.version = 0xffff;
	assert_int_equal(proto_hello_ack_encode(&a, b, sizeof(b)), PROTO_HELLO_ACK_LEN);
	put16(b + 6, 100);
	put16(b + 14, 0xffff);
	assert_int_equal(proto_hello_len(b, 8, 1), 100);
	assert_int_equal(proto_hello_ack_decode(b, 99, &aout), -EAGAIN);
	assert_int_equal(proto_hello_ack_decode(b, 100, &aout), 100);
	assert_ack_eq(&aout, &a);

	/* probe and beacon: no length field, longer private data is accepted */
	struct proto_probe p = probe4, pout;
	uint8_t pd[56];
	p.version = 3;
	memset(pd, 0xdd, sizeof(pd));
	assert_int_equal(proto_probe_encode(&p, pd, sizeof(pd)), PROTO_PROBE_LEN);
	assert_int_equal(proto_probe_decode(pd, sizeof(pd), &pout), PROTO_PROBE_LEN);
	assert_probe_eq(&pout, &p);
}

/* ---- switch (versions 2 and 3) ---------------------------------------- */

static void test_switch(void **state)
{
	struct proto_switch m = {.version = 2, .flags = 0, .rdma_bytes = 0x0102030405060708ull}, out;
	uint8_t b[PROTO_MSG_MAX_LEN + 8];
	static const uint8_t want[PROTO_SWITCH_LEN] = {
		'R', 'S', 'K', '1', 6, 0, 24, 0, 2, 0, 0, 0, 0, 0, 0, 0,
		8, 7, 6, 5, 4, 3, 2, 1};

	(void)state;
	assert_int_equal(proto_switch_encode(&m, b, PROTO_SWITCH_LEN - 1), -ENOSPC);
	assert_int_equal(proto_switch_encode(NULL, b, sizeof(b)), -EINVAL);
	assert_int_equal(proto_switch_encode(&m, b, sizeof(b)), PROTO_SWITCH_LEN);
	assert_memory_equal(b, want, PROTO_SWITCH_LEN);
	memcpy(b + PROTO_SWITCH_LEN, "data", 4); /* application bytes follow */
	for (size_t l = 0; l < PROTO_SWITCH_LEN; l++)
		assert_int_equal(proto_switch_decode(b, l, &out), -EAGAIN);
	assert_int_equal(proto_switch_decode(b, PROTO_SWITCH_LEN + 4, &out), PROTO_SWITCH_LEN);
	assert_int_equal(out.version, 2);
	assert_int_equal(out.rdma_bytes, m.rdma_bytes);
	assert_int_equal(proto_switch_decode(b, 4, NULL), -EINVAL);

	/* hostile or from a peer that cannot speak it */
	put16(b + 8, 1); /* version 1 has no SWITCH */
	assert_int_equal(proto_switch_decode(b, PROTO_SWITCH_LEN, &out), -EPROTO);
	put16(b + 8, 2);
	put16(b + 6, 25); /* version 2 is exactly 24 bytes */
	assert_int_equal(proto_switch_decode(b, 8, &out), -EAGAIN);
	assert_int_equal(proto_switch_decode(b, 10, &out), -EPROTO);
	put16(b + 6, 23);
	assert_int_equal(proto_switch_decode(b, 8, &out), -EPROTO);
	put16(b + 6, PROTO_MSG_MAX_LEN + 1);
	assert_int_equal(proto_switch_decode(b, 8, &out), -EPROTO);
	put16(b + 6, 24);
	put16(b + 10, 1); /* reserved */
	assert_int_equal(proto_switch_decode(b, PROTO_SWITCH_LEN, &out), -EPROTO);
	put16(b + 10, 0);
	put32(b + 12, 4); /* flags */
	assert_int_equal(proto_switch_decode(b, PROTO_SWITCH_LEN, &out), -EPROTO);
	put32(b + 12, 0);
	b[5] = 7; /* another type */
	assert_int_equal(proto_switch_decode(b, 6, &out), -EPROTO);
	b[5] = 0;
	memcpy(b, "HTTP", 4);
	assert_int_equal(proto_switch_decode(b, 1, &out), -EPROTO);

	/* version 3: FAILOVER and rx_bytes, 32 bytes */
	m.version = 3;
	m.flags = PROTO_SWITCH_FAILOVER;
	m.rx_bytes = 0x1112131415161718ull;
	assert_int_equal(proto_switch_encode(&m, b, PROTO_SWITCH3_LEN - 1), -ENOSPC);
	assert_int_equal(proto_switch_encode(&m, b, sizeof(b)), PROTO_SWITCH3_LEN);
	static const uint8_t want3[PROTO_SWITCH3_LEN] = {
		'R', 'S', 'K', '1', 6, 0, 32, 0, 3, 0, 0, 0, 1, 0, 0, 0,
		8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11};
	assert_memory_equal(b, want3, PROTO_SWITCH3_LEN);
	for (size_t l = 0; l < PROTO_SWITCH3_LEN; l++)
		assert_int_equal(proto_switch_decode(b, l, &out), -EAGAIN);
	assert_int_equal(proto_switch_decode(b, PROTO_SWITCH3_LEN + 3, &out), PROTO_SWITCH3_LEN);
	assert_int_equal(out.version, 3);
	assert_int_equal(out.flags, PROTO_SWITCH_FAILOVER);
	assert_int_equal(out.rdma_bytes, m.rdma_bytes);
	assert_int_equal(out.rx_bytes, m.rx_bytes);
	put16(b + 6, 24); /* version 3 has rx_bytes: at least 32 bytes */
	assert_int_equal(proto_switch_decode(b, 10, &out), -EPROTO);
	put16(b + 6, 31);
	assert_int_equal(proto_switch_decode(b, 10, &out), -EPROTO);
	/* a version-2 message never carries rx_bytes nor a flag */
	m.version = 2;
	assert_int_equal(proto_switch_encode(&m, b, sizeof(b)), PROTO_SWITCH_LEN);
	assert_int_equal(proto_switch_decode(b, PROTO_SWITCH_LEN, &out), -EPROTO);
	m.flags = 0;
	assert_int_equal(proto_switch_encode(&m, b, sizeof(b)), PROTO_SWITCH_LEN);
	assert_int_equal(proto_switch_decode(b, PROTO_SWITCH_LEN, &out), PROTO_SWITCH_LEN);
	assert_int_equal(out.rx_bytes, 0);

	/* a later version may be longer and use the reserved fields */
	m.version = 4;
	assert_int_equal(proto_switch_encode(&m, b, sizeof(b)), PROTO_SWITCH3_LEN);
	put16(b + 6, 40);
	put16(b + 10, 9);
	put32(b + 12, 0x80000000u);
	assert_int_equal(proto_switch_decode(b, 39, &out), -EAGAIN);
	assert_int_equal(proto_switch_decode(b, 40, &out), 40);
	assert_int_equal(out.flags, 0x80000000u);
	assert_int_equal(out.rx_bytes, m.rx_bytes);
}

/* ---- immediates --------------------------------------------------------- */

static void test_imm(void **state)
{
	enum proto_imm_type t = PROTO_IMM_RESET;
	uint32_t v = 77;

	assert_int_equal(proto_imm_encode(PROTO_IMM_DATA, 1), 1);
	assert_int_equal(proto_imm_encode(PROTO_IMM_CREDIT, 1), 0x40000001u);
	assert_int_equal(proto_imm_encode(PROTO_IMM_FIN, 0), 0x80000000u);
	assert_int_equal(proto_imm_encode(PROTO_IMM_RESET, 0), 0xc0000000u);
	assert_int_equal(proto_imm_encode(PROTO_IMM_DATA, PROTO_IMM_VALUE_MAX), 0x3fffffffu);

	assert_int_equal(proto_imm_decode(1, &t, &v), 0);
	assert_int_equal(t, PROTO_IMM_DATA);
	assert_int_equal(v, 1);
	assert_int_equal(proto_imm_decode(0x3fffffffu, &t, &v), 0);
	assert_int_equal(t, PROTO_IMM_DATA);
	assert_int_equal(v, PROTO_IMM_VALUE_MAX);
	assert_int_equal(proto_imm_decode(0x7fffffffu, &t, &v), 0);
	assert_int_equal(t, PROTO_IMM_CREDIT);
	assert_int_equal(v, PROTO_IMM_VALUE_MAX);
	assert_int_equal(proto_imm_decode(0x80000000u, &t, &v), 0);
	assert_int_equal(t, PROTO_IMM_FIN);
	assert_int_equal(v, 0);
	assert_int_equal(proto_imm_decode(0xc0000000u, &t, &v), 0);
	assert_int_equal(t, PROTO_IMM_RESET);

	/* refused, outputs untouched */
	t = PROTO_IMM_CREDIT;
	v = 99;
	assert_int_equal(proto_imm_decode(0, &t, &v), -EPROTO);           /* DATA 0 */
	assert_int_equal(proto_imm_decode(0x40000000u, &t, &v), -EPROTO); /* CREDIT 0 */
	assert_int_equal(proto_imm_decode(0x80000001u, &t, &v), -EPROTO); /* FIN 1 */
	assert_int_equal(proto_imm_decode(0xbfffffffu, &t, &v), -EPROTO);
	assert_int_equal(proto_imm_decode(0xc0000001u, &t, &v), -EPROTO); /* RESET 1 */
	assert_int_equal(proto_imm_decode(0xffffffffu, &t, &v), -EPROTO);
	assert_int_equal(t, PROTO_IMM_CREDIT);
	assert_int_equal(v, 99);

	/* out-of-range input never encodes to a valid immediate */
	assert_int_equal(proto_imm_decode(proto_imm_encode(PROTO_IMM_DATA, 1u << 30), &t, &v), -EPROTO);
	assert_int_equal(proto_imm_decode(proto_imm_encode(PROTO_IMM_CREDIT, (1u << 30) + 5), &t, &v), -EPROTO);
	assert_int_equal(proto_imm_decode(proto_imm_encode(PROTO_IMM_DATA, UINT32_MAX), &t, &v), -EPROTO);
	assert_int_equal(proto_imm_decode(proto_imm_encode(PROTO_IMM_DATA, 0), &t, &v), -EPROTO);
	assert_int_equal(proto_imm_decode(proto_imm_encode(PROTO_IMM_FIN, 1), &t, &v), -EPROTO);
	assert_int_equal(proto_imm_decode(proto_imm_encode(PROTO_IMM_RESET, 1u << 29), &t, &v), -EPROTO);
	assert_int_equal(proto_imm_decode(proto_imm_encode((enum proto_imm_type)4, 1), &t, &v), -EPROTO);
	assert_int_equal(proto_imm_decode(proto_imm_encode((enum proto_imm_type)-1, 1), &t, &v), -EPROTO);

	/* every valid immediate round-trips (sampled over the value range) */
	for (uint32_t x = 1; x && x <= PROTO_IMM_VALUE_MAX; x = x * 3 + 1) {
		for (int ty = PROTO_IMM_DATA; ty <= PROTO_IMM_CREDIT; ty++) {
			uint32_t imm = proto_imm_encode((enum proto_imm_type)ty, x);
			assert_int_equal(proto_imm_decode(imm, &t, &v), 0);
			assert_int_equal(t, ty);
			assert_int_equal(v, x);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layouts),
		cmocka_unit_test(test_encode_nospc),
		cmocka_unit_test(test_roundtrip_probe),
		cmocka_unit_test(test_roundtrip_beacon),
		cmocka_unit_test(test_roundtrip_hello),
		cmocka_unit_test(test_roundtrip_hello_ack),
		cmocka_unit_test(test_hostile_header),
		cmocka_unit_test(test_hostile_probe),
		cmocka_unit_test(test_hostile_beacon),
		cmocka_unit_test(test_hostile_hello),
		cmocka_unit_test(test_hostile_hello_ack),
		cmocka_unit_test(test_hello_ack_shm),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_future_version),
		cmocka_unit_test(test_imm),
		cmocka_unit_test(test_switch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
