/* fuzz_proto.c - libFuzzer target for the wire decoders and the rings.
 *
 * The first byte of an input picks a harness, the rest is its input. For a
 * decoder, the input's prefixes of length 0, 1, 2 ... are decoded
 * and must follow "-EAGAIN ... then either -EPROTO for good or the message
 * length L for good", with L reached exactly at prefix length L (a decoder
 * never claims bytes it was not given, never changes its mind, and never
 * asks for more once a prefix is refused). A decoded message is encoded and
 * decoded again and must give the same structure. The immediate harness
 * checks proto_imm_decode/encode on the first 4 bytes; the ring harness runs
 * the bytes as operations on a ring and a remote ring against a model.
 *
 * Built with -DFUZZ_STANDALONE (no libFuzzer) it is a plain regression test:
 *   fuzz_proto_regress                 built-in corpus + deterministic mutations
 *   fuzz_proto_regress FILE...         run these inputs (reproduce a crash)
 *   fuzz_proto_regress --write-corpus DIR   write the built-in corpus as seeds
 * test/fuzz/run-fuzz.sh builds and runs the libFuzzer variant. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <rsock/rsock.h>

#include "base/proto.h"
#include "base/ring.h"

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
				#cond);                                               \
			abort();                                                      \
		}                                                                     \
	} while (0)

/* The longest prefix examined: beyond the largest message any decoder takes. */
#define PREFIX_MAX (PROTO_MSG_MAX_LEN + 8)

union msg {
	struct proto_probe p;
	struct proto_beacon b;
	struct proto_hello h;
	struct proto_hello_ack a;
	struct proto_switch s;
};

struct codec {
	const char *name;
	size_t v1len;
	size_t maxlen; /* the most a decoder may consume */
	int (*dec)(const void *, size_t, union msg *);
	int (*enc)(const union msg *, void *, size_t);
	int (*eq)(const union msg *, const union msg *);
};

static int dec_probe(const void *b, size_t l, union msg *m) { return proto_probe_decode(b, l, &m->p); }
static int dec_beacon(const void *b, size_t l, union msg *m) { return proto_beacon_decode(b, l, &m->b); }
static int dec_hello(const void *b, size_t l, union msg *m) { return proto_hello_decode(b, l, &m->h); }
static int dec_ack(const void *b, size_t l, union msg *m) { return proto_hello_ack_decode(b, l, &m->a); }
static int dec_switch(const void *b, size_t l, union msg *m) { return proto_switch_decode(b, l, &m->s); }
static int enc_switch(const union msg *m, void *b, size_t l) { return proto_switch_encode(&m->s, b, l); }
static int enc_probe(const union msg *m, void *b, size_t l) { return proto_probe_encode(&m->p, b, l); }
static int enc_beacon(const union msg *m, void *b, size_t l) { return proto_beacon_encode(&m->b, b, l); }
static int enc_hello(const union msg *m, void *b, size_t l) { return proto_hello_encode(&m->h, b, l); }
static int enc_ack(const union msg *m, void *b, size_t l) { return proto_hello_ack_encode(&m->a, b, l); }

static int eq_probe(const union msg *x, const union msg *y)
{
	const struct proto_probe *a = &x->p, *b = &y->p;

	return a->version == b->version && a->family == b->family &&
	       a->client_port == b->client_port && a->server_port == b->server_port &&
	       !memcmp(a->client_addr, b->client_addr, 16) && !memcmp(a->server_addr, b->server_addr, 16);
}

static int eq_beacon(const union msg *x, const union msg *y)
{
	return x->b.version == y->b.version && x->b.flags == y->b.flags;
}

static int eq_hello(const union msg *x, const union msg *y)
{
	const struct proto_hello *a = &x->h, *b = &y->h;

	return a->version == b->version && a->flags == b->flags && a->token == b->token &&
	       a->ring_addr == b->ring_addr && a->ring_rkey == b->ring_rkey &&
	       a->ring_size == b->ring_size && a->max_inline == b->max_inline;
}

static int eq_ack(const union msg *x, const union msg *y)
{
	const struct proto_hello_ack *a = &x->a, *b = &y->a;

	return a->version == b->version && a->status == b->status && a->rdma_port == b->rdma_port &&
	       a->token == b->token && a->ring_addr == b->ring_addr && a->ring_rkey == b->ring_rkey &&
	       a->ring_size == b->ring_size && a->max_inline == b->max_inline;
}

static int eq_switch(const union msg *x, const union msg *y)
{
	return x->s.version == y->s.version && x->s.flags == y->s.flags &&
	       x->s.rdma_bytes == y->s.rdma_bytes && x->s.rx_bytes == y->s.rx_bytes;
}

static const struct codec codecs[] = {
	{"probe", PROTO_PROBE_LEN, PROTO_PROBE_LEN, dec_probe, enc_probe, eq_probe},
	{"beacon", PROTO_BEACON_LEN, PROTO_BEACON_LEN, dec_beacon, enc_beacon, eq_beacon},
	{"hello", PROTO_HELLO_LEN, PROTO_MSG_MAX_LEN, dec_hello, enc_hello, eq_hello},
	{"hello_ack", PROTO_HELLO_ACK_LEN, PROTO_MSG_MAX_LEN, dec_ack, enc_ack, eq_ack},
	{"switch", PROTO_SWITCH_LEN, PROTO_MSG_MAX_LEN, dec_switch, enc_switch, eq_switch},
};
#define NCODECS (sizeof(codecs) / sizeof(codecs[0]))

static void check_semantics(const struct codec *c, const union msg *m)
{
	if (c->dec == dec_hello) {
		CHECK(m->h.version >= 1 && m->h.token != 0);
		CHECK(m->h.ring_size >= RING_MIN_SIZE && m->h.ring_size <= RING_MAX_SIZE);
		CHECK((m->h.ring_size & (m->h.ring_size - 1)) == 0);
		CHECK(m->h.ring_addr <= UINT64_MAX - m->h.ring_size);
		CHECK(m->h.max_inline <= PROTO_MAX_INLINE);
	} else if (c->dec == dec_ack) {
		CHECK(m->a.version >= 1 && m->a.status < RSOCK_FB_MAX);
		if (m->a.status == 0) {
			CHECK(m->a.token != 0 && m->a.rdma_port != 0);
			CHECK(m->a.ring_size >= RING_MIN_SIZE && m->a.ring_size <= RING_MAX_SIZE);
			CHECK((m->a.ring_size & (m->a.ring_size - 1)) == 0);
			CHECK(m->a.max_inline <= PROTO_MAX_INLINE);
		} else {
			CHECK(m->a.token == 0 && m->a.ring_size == 0 && m->a.rdma_port == 0);
		}
	} else if (c->dec == dec_switch) {
		CHECK(m->s.version >= PROTO_VERSION_SWITCH);
		/* version 2 carries neither a flag nor a received count */
		CHECK(m->s.version > PROTO_VERSION_SWITCH || (!m->s.flags && !m->s.rx_bytes));
	} else if (c->dec == dec_probe) {
		CHECK(m->p.version >= 1 && m->p.client_port && m->p.server_port);
		CHECK(m->p.family == AF_INET || m->p.family == AF_INET6);
	} else {
		CHECK(m->b.version >= 1);
	}
}

/* The prefix length from which the answer must be final (not -EAGAIN): the
 * fixed length, or for a TCP message once its u16 length is there, that. */
static size_t final_at(const struct codec *c, const uint8_t *data, size_t l)
{
	size_t mlen;

	if (c->maxlen == c->v1len || l < 8)
		return c->v1len;
	mlen = (size_t)data[6] | (size_t)data[7] << 8;
	if (mlen > c->maxlen)
		return 8; /* refused as soon as the length is known */
	return mlen > c->v1len ? mlen : c->v1len;
}

static void fuzz_codec(const struct codec *c, const uint8_t *data, size_t size)
{
	size_t lim = size < PREFIX_MAX ? size : PREFIX_MAX;
	int state = -EAGAIN; /* the answer for the previous prefix */
	union msg m, m2, first;
	uint8_t enc[PROTO_MSG_MAX_LEN];
	size_t final_l = 0;
	int n;

	memset(&first, 0, sizeof(first));

	for (size_t l = 0; l <= lim; l++) {
		int rc;
		/* once final, the answer is checked one byte later and at the end */
		if (state != -EAGAIN && l != final_l + 1 && l != lim)
			continue;
		memset(&m, 0xa5, sizeof(m));
		rc = c->dec(data, l, &m);
		CHECK(rc == -EAGAIN || rc == -EPROTO || rc > 0);
		if (state == -EPROTO) {
			CHECK(rc == -EPROTO); /* refused stays refused */
			continue;
		}
		if (state > 0) {
			CHECK(rc == state); /* the same message whatever follows it */
			CHECK(c->eq(&m, &first));
			continue;
		}
		if (rc == -EAGAIN) {
			CHECK(l < c->maxlen); /* never waits beyond the sane maximum */
			CHECK(l < final_at(c, data, l)); /* nor for a complete message */
		}
		if (rc > 0) {
			CHECK((size_t)rc == l); /* complete exactly when all of it is there */
			CHECK((size_t)rc >= c->v1len && (size_t)rc <= c->maxlen);
			check_semantics(c, &m);
			first = m;
		}
		if (rc != -EAGAIN)
			final_l = l;
		state = rc;
	}
	if (state <= 0)
		return;
	/* round trip: the shortest encoding of what was decoded (a version-3
	 * switch: 32 bytes) decodes the same */
	size_t elen = c->dec == dec_switch && first.s.version > PROTO_VERSION_SWITCH ? PROTO_SWITCH3_LEN
										     : c->v1len;
	n = c->enc(&first, enc, sizeof(enc));
	CHECK(n == (int)elen);
	CHECK(c->enc(&first, enc, elen - 1) == -ENOSPC);
	memset(&m2, 0x5a, sizeof(m2));
	CHECK(c->dec(enc, (size_t)n, &m2) == n);
	CHECK(c->eq(&first, &m2));
}

static void fuzz_imm(const uint8_t *data, size_t size)
{
	enum proto_imm_type t;
	uint32_t imm, v;

	if (size < 4)
		return;
	imm = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
	      (uint32_t)data[3] << 24;
	if (proto_imm_decode(imm, &t, &v) == 0) {
		CHECK((unsigned)t <= PROTO_IMM_RESET && v <= PROTO_IMM_VALUE_MAX);
		CHECK((t <= PROTO_IMM_CREDIT) == (v != 0));
		CHECK(proto_imm_encode(t, v) == imm);
	} else {
		/* the only refused immediates */
		t = (enum proto_imm_type)(imm >> 30);
		v = imm & PROTO_IMM_VALUE_MAX;
		CHECK((t <= PROTO_IMM_CREDIT) == (v == 0));
	}
	/* encoding arbitrary (type, value) gives a valid immediate only for a
	 * valid pair, and then exactly that pair */
	t = (enum proto_imm_type)(data[0] & 7);
	v = imm >> 2 | (uint32_t)(data[0] & 0x80) << 24;
	{
		enum proto_imm_type t2;
		uint32_t v2, e = proto_imm_encode(t, v);
		int valid = (unsigned)t <= PROTO_IMM_RESET && v <= PROTO_IMM_VALUE_MAX &&
			    ((t <= PROTO_IMM_CREDIT) == (v != 0));
		CHECK((proto_imm_decode(e, &t2, &v2) == 0) == valid);
		if (valid)
			CHECK(t2 == t && v2 == v);
	}
}

#define RSZ RING_MIN_SIZE

/* model[pos..pos+n) (ring offsets, wrapping) = src, or compared with it. */
static void model_set(uint8_t *model, uint64_t pos, const uint8_t *src, size_t n)
{
	size_t off = (size_t)(pos & (RSZ - 1)), first = RSZ - off < n ? RSZ - off : n;

	memcpy(model + off, src, first);
	memcpy(model, src + first, n - first);
}

static int model_eq(const uint8_t *model, uint64_t pos, const uint8_t *p, size_t n)
{
	size_t off = (size_t)(pos & (RSZ - 1)), first = RSZ - off < n ? RSZ - off : n;

	return !memcmp(model + off, p, first) && !memcmp(model, p + first, n - first);
}

/* The rest of the input as operations on a ring and its remote view,
 * checked against a byte model; values come straight from the input, so
 * most are hostile. */
static void fuzz_ring(const uint8_t *data, size_t size)
{
	static uint8_t buf[RSZ], model[RSZ], tmp[RSZ + 64];
	struct ring r;
	struct ring_remote rr;
	struct ring_span sp[2];
	uint64_t start;

	if (size < 8)
		return;
	memcpy(&start, data, 8); /* arbitrary start position, also near 2^64 */
	CHECK(ring_init(&r, buf, sizeof(buf)) == 0);
	CHECK(ring_remote_init(&rr, sizeof(buf)) == 0);
	r.head = r.tail = start;
	rr.tail = rr.acked = ~start;
	for (size_t i = 8; i + 3 <= size; i += 3) {
		uint32_t v = (uint32_t)data[i + 1] | (uint32_t)data[i + 2] << 8;
		uint64_t used = ring_used(&r), space = ring_remote_space(&rr);
		uint64_t out = rr.tail - rr.acked;

		if (data[i + 2] & 0x80) /* sometimes a huge value */
			v = v << 16 | v;
		switch (data[i] % 6) {
		case 0: /* the peer wrote v bytes at tail (RDMA) and says so */
			if (v <= RSZ - used) {
				memset(tmp, data[i] ^ 0x5a, v);
				model_set(buf, r.tail, tmp, v);
				model_set(model, r.tail, tmp, v);
				CHECK(ring_produce(&r, v) == 0);
			} else {
				CHECK(ring_produce(&r, v) == -EPROTO);
				CHECK(ring_used(&r) == used);
			}
			break;
		case 1: /* local write */
			if (v <= RSZ - used) {
				memset(tmp, data[i], v);
				CHECK(ring_write(&r, tmp, v, sp) == 0);
				CHECK(sp[0].len + sp[1].len == v);
				CHECK(sp[0].off == ((r.tail - v) & (RSZ - 1)));
				CHECK(sp[0].off + sp[0].len <= RSZ);
				CHECK(sp[1].len == 0 || (sp[1].off == 0 && sp[0].off + sp[0].len == RSZ));
				model_set(model, r.tail - v, tmp, v);
			} else {
				CHECK(ring_write(&r, tmp, v, sp) == -ENOSPC);
				CHECK(ring_used(&r) == used);
			}
			break;
		case 2: { /* peek + consume */
			size_t got = ring_peek(&r, tmp, v < sizeof(tmp) ? v : sizeof(tmp));
			CHECK(got <= used && got <= v);
			CHECK(got == (used < v ? used : v));
			CHECK(model_eq(model, r.head, tmp, got));
			if (v <= used)
				CHECK(ring_consume(&r, v) == 0);
			else
				CHECK(ring_consume(&r, v) == -EINVAL);
			break;
		}
		case 3: { /* peek_iov over v % 17 + 1 iovecs */
			struct iovec iov[17];
			int cnt = (int)(v % 17) + 1;
			size_t per = sizeof(tmp) / 17, got, pos = 0, room = 0;
			for (int k = 0; k < cnt; k++) {
				iov[k].iov_base = tmp + (size_t)k * per;
				iov[k].iov_len = (size_t)((v >> 5) + (unsigned)k) % (per + 1);
				room += iov[k].iov_len;
			}
			got = ring_peek_iov(&r, iov, cnt, v);
			CHECK(got <= used && got <= v && got <= room);
			CHECK(got == used || got == v || got == room);
			for (int k = 0; k < cnt && pos < got; k++) {
				size_t n = iov[k].iov_len < got - pos ? iov[k].iov_len : got - pos;
				CHECK(model_eq(model, r.head + pos, iov[k].iov_base, n));
				pos += n;
			}
			CHECK(pos == got);
			break;
		}
		case 4: /* reserve in the peer's ring */
			if (v <= space) {
				CHECK(ring_remote_reserve(&rr, v, sp) == 0);
				CHECK(sp[0].len + sp[1].len == v);
				CHECK(sp[0].off + sp[0].len <= RSZ);
				CHECK(sp[1].len == 0 || (sp[1].off == 0 && sp[0].off + sp[0].len == RSZ));
			} else {
				CHECK(ring_remote_reserve(&rr, v, sp) == -ENOSPC);
				CHECK(rr.tail - rr.acked == out);
			}
			break;
		case 5: /* the peer's credit, possibly hostile */
			if (v <= out)
				CHECK(ring_remote_ack(&rr, v) == 0);
			else
				CHECK(ring_remote_ack(&rr, v) == -EPROTO);
			CHECK(ring_remote_ack(&rr, UINT64_MAX - v) == -EPROTO);
			break;
		}
		CHECK(ring_used(&r) <= RSZ);
		CHECK(rr.tail - rr.acked <= RSZ);
	}
}

#define NHARNESS (NCODECS + 2) /* the decoders, the immediates, the rings */

static void run_one(unsigned harness, const uint8_t *data, size_t size)
{
	if (harness < NCODECS)
		fuzz_codec(&codecs[harness], data, size);
	else if (harness == NCODECS)
		fuzz_imm(data, size);
	else
		fuzz_ring(data, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The first byte picks the harness (so that the fuzzer's feedback is not
 * diluted across all of them); the rest is its input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size)
		run_one(data[0] % NHARNESS, data + 1, size - 1);
	return 0;
}

#ifdef FUZZ_STANDALONE
#include <dirent.h>
#include <sys/stat.h>

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

struct seed {
	uint8_t b[PREFIX_MAX];
	size_t n;
};

/* Valid messages of every kind and version, and the odd invalid one. */
static size_t make_corpus(struct seed *s, size_t cap)
{
	struct proto_probe p = {.version = 1, .family = AF_INET, .client_port = 40000,
				.server_port = 6379, .client_addr = {10, 0, 0, 1},
				.server_addr = {10, 0, 0, 2}};
	struct proto_beacon b = {.version = 1};
	struct proto_hello h = {.version = 1, .token = 0x1122334455667788ull,
				.ring_addr = 0x7f0000000000ull, .ring_rkey = 0x1234,
				.ring_size = 1u << 18, .max_inline = 64};
	struct proto_hello_ack a = {.version = 1, .rdma_port = 18515, .token = 0x1122334455667788ull,
				    .ring_addr = 0x7f0000100000ull, .ring_rkey = 0x5678,
				    .ring_size = RING_MIN_SIZE, .max_inline = 0};
	size_t n = 0;

#define ADD(expr)                                                             \
	do {                                                                  \
		if (n < cap) {                                                \
			memset(s[n].b, 0, sizeof(s[n].b));                   \
			int len_ = (expr);                                    \
			CHECK(len_ > 0);                                      \
			s[n++].n = (size_t)len_;                              \
		}                                                             \
	} while (0)
	ADD(proto_probe_encode(&p, s[n].b, sizeof(s[n].b)));
	p.family = AF_INET6;
	memset(p.client_addr, 0xfe, 16);
	ADD(proto_probe_encode(&p, s[n].b, sizeof(s[n].b)));
	ADD(proto_probe_encode(&p, s[n].b, sizeof(s[n].b)) + 8); /* rdma_cm padding */
	ADD(proto_beacon_encode(&b, s[n].b, sizeof(s[n].b)));
	b.version = 2;
	b.flags = 0x8000;
	ADD(proto_beacon_encode(&b, s[n].b, sizeof(s[n].b)) + 136);
	ADD(proto_hello_encode(&h, s[n].b, sizeof(s[n].b)));
	h.version = 2;
	h.flags = 5;
	ADD((proto_hello_encode(&h, s[n].b, sizeof(s[n].b)), put16(s[n].b + 6, 80),
	     memset(s[n].b + 44, 0xcc, 36), 80 + 4)); /* a later, longer hello + 4 bytes */
	ADD(proto_hello_ack_encode(&a, s[n].b, sizeof(s[n].b)));
	a.status = 2;
	a.token = 0;
	ADD(proto_hello_ack_encode(&a, s[n].b, sizeof(s[n].b)));
	a.status = 0;
	a.version = 9;
	a.token = 1;
	ADD((proto_hello_ack_encode(&a, s[n].b, sizeof(s[n].b)), put16(s[n].b + 6, PROTO_MSG_MAX_LEN),
	     PROTO_MSG_MAX_LEN));
	ADD((memcpy(s[n].b, "RSK1\x05\0\x08\0", 8), 8)); /* cancel */
	struct proto_switch sw = {.version = 2, .rdma_bytes = 123456789};
	ADD(proto_switch_encode(&sw, s[n].b, sizeof(s[n].b)) + 5); /* + application bytes */
	sw.version = 3;
	sw.flags = PROTO_SWITCH_FAILOVER;
	sw.rx_bytes = 987654321;
	ADD(proto_switch_encode(&sw, s[n].b, sizeof(s[n].b)) + 3); /* a failover */
	ADD((proto_switch_encode(&sw, s[n].b, sizeof(s[n].b)), put16(s[n].b + 6, 40), 40));
	ADD((memcpy(s[n].b, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27), 27));
	/* ring operation streams and immediates */
	ADD((memcpy(s[n].b, "\xf0\xff\xff\xff\xff\xff\xff\xff"
			    "\x01\x00\x08\x00\x10\x00\x02\x00\x04\x04\x00\x02\x05\x00\x01"
			    "\x03\xff\x03\x00\x40\x00\x02\x00\x10",
		    32), 32));
	ADD((memcpy(s[n].b, "\x01\x00\x00\x40" "\x00\x00\x00\x00" "\x00\xff\x7f\x01\xff\x7f", 14), 14));
	ADD((memcpy(s[n].b, "\x00\x00\x00\x80", 4), 4));
#undef ADD
	return n;
}

static int run_file(const char *path)
{
	static uint8_t buf[1 << 20];
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f) {
		perror(path);
		return 1;
	}
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	return 0;
}

int main(int argc, char **argv)
{
	static struct seed seeds[32];
	size_t ns = make_corpus(seeds, 32), runs = 0;
	static const uint8_t vals[] = {0x00, 0x01, 0x02, 0x05, 0x10, 0x7f, 0x80, 0xff};

	if (argc == 3 && !strcmp(argv[1], "--write-corpus")) {
		/* every seed for every harness: messages meet the other decoders */
		for (size_t i = 0; i < ns; i++) {
			for (unsigned h = 0; h < NHARNESS; h++) {
				char path[4096];
				uint8_t sel = (uint8_t)h;
				FILE *f;
				snprintf(path, sizeof(path), "%s/seed-%02zu-%u", argv[2], i, h);
				if (!(f = fopen(path, "wb")) || fwrite(&sel, 1, 1, f) != 1 ||
				    fwrite(seeds[i].b, 1, seeds[i].n, f) != seeds[i].n) {
					perror(path);
					return 1;
				}
				fclose(f);
			}
		}
		return 0;
	}
	if (argc > 1) {
		int rc = 0;
		for (int i = 1; i < argc; i++)
			rc |= run_file(argv[i]);
		return rc;
	}
	/* every seed, then every seed with each byte set to a few values, and
	 * every truncation */
	for (size_t i = 0; i < ns; i++) {
		for (unsigned h = 0; h < NHARNESS; h++) {
			uint8_t b[PREFIX_MAX];
			run_one(h, seeds[i].b, seeds[i].n);
			runs++;
			for (size_t k = 0; k < seeds[i].n && k < 64; k++) {
				for (size_t v = 0; v < sizeof(vals); v++) {
					memcpy(b, seeds[i].b, seeds[i].n);
					b[k] = vals[v];
					run_one(h, b, seeds[i].n);
					b[k] ^= 0xff;
					run_one(h, b, seeds[i].n);
					runs += 2;
				}
			}
			for (size_t l = 0; l < seeds[i].n; l++, runs++)
				run_one(h, seeds[i].b, l);
		}
	}
	printf("fuzz_proto: %zu seeds, %zu inputs, all invariants held\n", ns, runs);
	return 0;
}
#endif
