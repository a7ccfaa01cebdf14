/* proto.c - see proto.h; the byte layouts are in doc/design.md, "Wire protocol".
 *
 * Encoders write the version-1 layout field by field (little-endian),
 * reserved fields as 0. Decoders read the same way and validate each field
 * as soon as all of its bytes are present, in wire order: a buffer whose
 * available prefix already contradicts the format gives -EPROTO at once
 * (application bytes at the head of a TCP stream are told from a message
 * without waiting for more), a consistent but incomplete one gives -EAGAIN.
 * The output structure is written only when the whole message is valid. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <rsock/rsock.h>

#include "base/proto.h"
#include "base/ring.h"

/* The address families travel with Linux's numbering. */
_Static_assert(AF_INET == 2 && AF_INET6 == 10, "wire address families are Linux's");
_Static_assert(PROTO_MSG_MAX_LEN >= PROTO_HELLO_LEN && PROTO_MSG_MAX_LEN <= 0xffff,
	       "PROTO_MSG_MAX_LEN must fit the u16 length field");

/* Message types (u16 after the magic). 5 is the cancel (src/negotiate/hello.c). */
enum {
	TYPE_PROBE = 1,
	TYPE_BEACON = 2,
	TYPE_HELLO = 3,
	TYPE_HELLO_ACK = 4,
	TYPE_SWITCH = 6,
};

#define HDR_LEN 6 /* u32 magic | u16 type */

/* ---- little-endian field access ----------------------------------------- */

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

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) | (uint32_t)get16(p + 2) << 16;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* A cursor over the received bytes. Each rd_* returns 1 and advances when
 * the whole field is present, else 0 (the caller answers -EAGAIN). */
struct rd {
	const uint8_t *p;
	size_t len;
	size_t off;
};

static int rd_u16(struct rd *r, uint16_t *v)
{
	if (r->len - r->off < 2)
		return 0;
	*v = get16(r->p + r->off);
	r->off += 2;
	return 1;
}

static int rd_u32(struct rd *r, uint32_t *v)
{
	if (r->len - r->off < 4)
		return 0;
	*v = get32(r->p + r->off);
	r->off += 4;
	return 1;
}

static int rd_u64(struct rd *r, uint64_t *v)
{
	if (r->len - r->off < 8)
		return 0;
	*v = get64(r->p + r->off);
	r->off += 8;
	return 1;
}

static int rd_bytes(struct rd *r, uint8_t *dst, size_t n)
{
	if (r->len - r->off < n)
		return 0;
	memcpy(dst, r->p + r->off, n);
	r->off += n;
	return 1;
}

/* Magic and type: compared byte by byte, so that even one or two bytes of
 * something else are refused. 0 (cursor after the header), -EAGAIN, -EPROTO. */
static int rd_header(struct rd *r, const void *buf, size_t len, uint16_t type)
{
	uint8_t want[HDR_LEN];
	size_t n = len < HDR_LEN ? len : HDR_LEN;

	r->p = buf;
	r->len = len;
	r->off = 0;
	if (!buf)
		return len ? -EINVAL : -EAGAIN;
	put32(want, PROTO_MAGIC);
	put16(want + 4, type);
	if (memcmp(buf, want, n))
		return -EPROTO;
	if (n < HDR_LEN)
		return -EAGAIN;
	r->off = HDR_LEN;
	return 0;
}

static int put_header(uint8_t *p, uint16_t type)
{
	put32(p, PROTO_MAGIC);
	put16(p + 4, type);
	return HDR_LEN;
}

/* ---- shared field checks -------------------------------------------------- */

/* A ring descriptor: the size in range and the region not wrapping the
 * address space. */
static int ring_desc_ok(uint64_t addr, uint32_t size)
{
	return ring_size_valid(size) && addr <= UINT64_MAX - size;
}

/* The u16 length of a TCP message: at least version 1's, at most the sane
 * maximum; exactly version 1's when the version is 1. */
static int length_ok(uint16_t mlen, size_t v1len)
{
	return mlen >= v1len && mlen <= PROTO_MSG_MAX_LEN;
}

static int version_ok(uint16_t version, uint16_t mlen, size_t v1len)
{
	return version >= 1 && (version > 1 || mlen == v1len);
}

/* ---- probe ---------------------------------------------------------------- */

/* Returns PROTO_PROBE_LEN, or -ENOSPC (len too small) / -EINVAL (NULL). For
 * AF_INET only the first 4 bytes of each address are sent (the rest as 0). */
int proto_probe_encode(const struct proto_probe *m, void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t alen = m && m->family == AF_INET ? 4 : 16;

	if (!m || !buf)
		return -EINVAL;
	if (len < PROTO_PROBE_LEN)
		return -ENOSPC;
	memset(p, 0, PROTO_PROBE_LEN);
	put_header(p, TYPE_PROBE);
	put16(p + 6, m->version);
	put16(p + 8, m->family);
	put16(p + 10, m->client_port);
	put16(p + 12, m->server_port);
	/* p + 14: u16 reserved, 0 */
	memcpy(p + 16, m->client_addr, alen);
	memcpy(p + 32, m->server_addr, alen);
	return PROTO_PROBE_LEN;
}

static int zero(const uint8_t *p, size_t n)
{
	while (n)
		if (p[--n])
			return 0;
	return 1;
}

/* Returns PROTO_PROBE_LEN (bytes after it are rdma_cm padding or fields of a
 * later version and are ignored), -EAGAIN, -EPROTO, or -EINVAL (NULL). */
int proto_probe_decode(const void *buf, size_t len, struct proto_probe *m)
{
	struct proto_probe v;
	struct rd r;
	uint16_t resv;
	int rc;

	if (!m)
		return -EINVAL;
	if ((rc = rd_header(&r, buf, len, TYPE_PROBE)))
		return rc;
	memset(&v, 0, sizeof(v));
	if (!rd_u16(&r, &v.version))
		return -EAGAIN;
	if (v.version < 1)
		return -EPROTO;
	if (!rd_u16(&r, &v.family))
		return -EAGAIN;
	if (v.family != AF_INET && v.family != AF_INET6)
		return -EPROTO;
	if (!rd_u16(&r, &v.client_port))
		return -EAGAIN;
	if (!v.client_port)
		return -EPROTO;
	if (!rd_u16(&r, &v.server_port))
		return -EAGAIN;
	if (!v.server_port)
		return -EPROTO;
	if (!rd_u16(&r, &resv))
		return -EAGAIN;
	if (resv && v.version == 1)
		return -EPROTO;
	if (!rd_bytes(&r, v.client_addr, 16))
		return -EAGAIN;
	if (v.family == AF_INET && !zero(v.client_addr + 4, 12))
		return -EPROTO;
	if (!rd_bytes(&r, v.server_addr, 16))
		return -EAGAIN;
	if (v.family == AF_INET && !zero(v.server_addr + 4, 12))
		return -EPROTO;
	*m = v;
	return PROTO_PROBE_LEN;
}

/* ---- beacon --------------------------------------------------------------- */

/* Returns PROTO_BEACON_LEN, or -ENOSPC (len too small) / -EINVAL (NULL). */
int proto_beacon_encode(const struct proto_beacon *m, void *buf, size_t len)
{
	uint8_t *p = buf;

	if (!m || !buf)
		return -EINVAL;
	if (len < PROTO_BEACON_LEN)
		return -ENOSPC;
	put_header(p, TYPE_BEACON);
	put16(p + 6, m->version);
	put16(p + 8, m->flags);
	put16(p + 10, m->version >= 2 ? m->data_port : 0);
	return PROTO_BEACON_LEN;
}

/* Returns PROTO_BEACON_LEN (bytes after it are ignored, as for the probe),
 * -EAGAIN, -EPROTO, or -EINVAL (NULL). Version 1 defines no flags and no
 * data port (its bytes 10-11 are 0). */
int proto_beacon_decode(const void *buf, size_t len, struct proto_beacon *m)
{
	struct proto_beacon v;
	struct rd r;
	int rc;

	if (!m)
		return -EINVAL;
	if ((rc = rd_header(&r, buf, len, TYPE_BEACON)))
		return rc;
	memset(&v, 0, sizeof(v));
	if (!rd_u16(&r, &v.version))
		return -EAGAIN;
	if (v.version < 1)
		return -EPROTO;
	if (!rd_u16(&r, &v.flags))
		return -EAGAIN;
	if (v.flags && v.version == 1)
		return -EPROTO;
	if (!rd_u16(&r, &v.data_port))
		return -EAGAIN;
	if (v.data_port && v.version == 1)
		return -EPROTO;
	*m = v;
	return PROTO_BEACON_LEN;
}

/* ---- hello ---------------------------------------------------------------- */

/* Returns PROTO_HELLO_LEN (length field = PROTO_HELLO_LEN), or -ENOSPC (len
 * too small) / -EINVAL (NULL). */
int proto_hello_encode(const struct proto_hello *m, void *buf, size_t len)
{
	uint8_t *p = buf;

	if (!m || !buf)
		return -EINVAL;
	if (len < PROTO_HELLO_LEN)
		return -ENOSPC;
	put_header(p, TYPE_HELLO);
	put16(p + 6, PROTO_HELLO_LEN);
	put16(p + 8, m->version);
	put16(p + 10, 0);
	put32(p + 12, m->flags);
	put64(p + 16, m->token);
	put64(p + 24, m->ring_addr);
	put32(p + 32, m->ring_rkey);
	put32(p + 36, m->ring_size);
	put32(p + 40, m->max_inline);
	return PROTO_HELLO_LEN;
}

/* Returns the message's length field (PROTO_HELLO_LEN for version 1; more
 * for a later version, whose extra bytes are skipped), -EAGAIN, -EPROTO, or
 * -EINVAL (NULL). */
int proto_hello_decode(const void *buf, size_t len, struct proto_hello *m)
{
	struct proto_hello v;
	struct rd r;
	uint16_t mlen, resv;
	int rc;

	if (!m)
		return -EINVAL;
	if ((rc = rd_header(&r, buf, len, TYPE_HELLO)))
		return rc;
	memset(&v, 0, sizeof(v));
	if (!rd_u16(&r, &mlen))
		return -EAGAIN;
	if (!length_ok(mlen, PROTO_HELLO_LEN))
		return -EPROTO;
	if (!rd_u16(&r, &v.version))
		return -EAGAIN;
	if (!version_ok(v.version, mlen, PROTO_HELLO_LEN))
		return -EPROTO;
	if (!rd_u16(&r, &resv))
		return -EAGAIN;
	if (resv && v.version == 1)
		return -EPROTO;
	if (!rd_u32(&r, &v.flags))
		return -EAGAIN;
	if (v.flags && v.version == 1)
		return -EPROTO;
	if (!rd_u64(&r, &v.token))
		return -EAGAIN;
	if (!v.token)
		return -EPROTO;
	if (!rd_u64(&r, &v.ring_addr) || !rd_u32(&r, &v.ring_rkey) || !rd_u32(&r, &v.ring_size))
		return -EAGAIN;
	if (!ring_desc_ok(v.ring_addr, v.ring_size))
		return -EPROTO;
	if (!rd_u32(&r, &v.max_inline))
		return -EAGAIN;
	if (v.max_inline > PROTO_MAX_INLINE)
		return -EPROTO;
	if (len < mlen)
		return -EAGAIN;
	*m = v;
	return mlen;
}

int proto_hello_len(const void *buf, size_t len, int ack)
{
	struct rd r;
	uint16_t mlen;
	int rc;

	if ((rc = rd_header(&r, buf, len, ack ? TYPE_HELLO_ACK : TYPE_HELLO)))
		return rc;
	if (!rd_u16(&r, &mlen))
		return -EAGAIN;
	return length_ok(mlen, ack ? PROTO_HELLO_ACK_LEN : PROTO_HELLO_LEN) ? mlen : -EPROTO;
}

/* ---- hello_ack ------------------------------------------------------------ */

/* Returns PROTO_HELLO_ACK_LEN (length field = PROTO_HELLO_ACK_LEN), or
 * -ENOSPC (len too small) / -EINVAL (NULL). */
int proto_hello_ack_encode(const struct proto_hello_ack *m, void *buf, size_t len)
{
	uint8_t *p = buf;

	if (!m || !buf)
		return -EINVAL;
	if (len < PROTO_HELLO_ACK_LEN)
		return -ENOSPC;
	put_header(p, TYPE_HELLO_ACK);
	put16(p + 6, PROTO_HELLO_ACK_LEN);
	put16(p + 8, m->version);
	put16(p + 10, m->status);
	put16(p + 12, m->rdma_port);
	put16(p + 14, m->flags);
	put64(p + 16, m->token);
	put64(p + 24, m->ring_addr);
	put32(p + 32, m->ring_rkey);
	put32(p + 36, m->ring_size);
	put32(p + 40, m->max_inline);
	return PROTO_HELLO_ACK_LEN;
}

/* Returns the message's length field (as for the hello), -EAGAIN, -EPROTO, or
 * -EINVAL (NULL). With a non-zero status (a refusal) only version and status
 * are reported; the other fields are neither validated nor returned (0). */
int proto_hello_ack_decode(const void *buf, size_t len, struct proto_hello_ack *m)
{
	struct proto_hello_ack v;
	struct rd r;
	uint16_t mlen, resv;
	int rc, go;

	if (!m)
		return -EINVAL;
	if ((rc = rd_header(&r, buf, len, TYPE_HELLO_ACK)))
		return rc;
	memset(&v, 0, sizeof(v));
	if (!rd_u16(&r, &mlen))
		return -EAGAIN;
	if (!length_ok(mlen, PROTO_HELLO_ACK_LEN))
		return -EPROTO;
	if (!rd_u16(&r, &v.version))
		return -EAGAIN;
	if (!version_ok(v.version, mlen, PROTO_HELLO_ACK_LEN))
		return -EPROTO;
	if (!rd_u16(&r, &v.status))
		return -EAGAIN;
	if (v.status >= RSOCK_FB_MAX)
		return -EPROTO;
	go = v.status == 0;
	if (!rd_u16(&r, &v.rdma_port))
		return -EAGAIN;
	if (!rd_u16(&r, &resv))
		return -EAGAIN;
	if (resv && v.version == 1)
		return -EPROTO;
	/* rdma_port is checked with the flags beside it: a same-host
	 * stream's answer names no port */
	if (go && !v.rdma_port && !(resv & PROTO_ACK_SHM))
		return -EPROTO;
	if (go)
		v.flags = resv;
	if (!rd_u64(&r, &v.token))
		return -EAGAIN;
	if (go && !v.token)
		return -EPROTO;
	if (!rd_u64(&r, &v.ring_addr) || !rd_u32(&r, &v.ring_rkey) || !rd_u32(&r, &v.ring_size))
		return -EAGAIN;
	if (go && !ring_desc_ok(v.ring_addr, v.ring_size))
		return -EPROTO;
	if (!rd_u32(&r, &v.max_inline))
		return -EAGAIN;
	if (go && v.max_inline > PROTO_MAX_INLINE)
		return -EPROTO;
	if (len < mlen)
		return -EAGAIN;
	if (!go) {
		v.rdma_port = 0;
		v.token = 0;
		v.ring_addr = 0;
		v.ring_rkey = 0;
		v.ring_size = 0;
		v.max_inline = 0;
	}
	*m = v;
	return mlen;
}

/* ---- switch (versions 2 and 3) ---------------------------------------- */

/* Returns the bytes written (PROTO_SWITCH_LEN for version 2, else
 * PROTO_SWITCH3_LEN), or -ENOSPC / -EINVAL. */
int proto_switch_encode(const struct proto_switch *m, void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t n;

	if (!m || !buf)
		return -EINVAL;
	n = m->version <= PROTO_VERSION_SWITCH ? PROTO_SWITCH_LEN : PROTO_SWITCH3_LEN;
	if (len < n)
		return -ENOSPC;
	memset(p, 0, n);
	put_header(p, TYPE_SWITCH);
	put16(p + 6, (uint16_t)n);
	put16(p + 8, m->version);
	put32(p + 12, m->flags);
	put64(p + 16, m->rdma_bytes);
	if (n > PROTO_SWITCH_LEN)
		put64(p + 24, m->rx_bytes);
	return (int)n;
}

/* Returns the length field, -EAGAIN, -EPROTO or -EINVAL. Version 2 is the
 * first with this message: exactly 24 bytes, reserved and flags 0. Version
 * 3 and later: at least 32 bytes (rx_bytes; up to PROTO_MSG_MAX_LEN, the
 * rest skipped), flags reported. */
int proto_switch_decode(const void *buf, size_t len, struct proto_switch *m)
{
	struct proto_switch v;
	struct rd r;
	uint16_t mlen, resv;
	int rc;

	if (!m)
		return -EINVAL;
	if ((rc = rd_header(&r, buf, len, TYPE_SWITCH)))
		return rc;
	memset(&v, 0, sizeof(v));
	if (!rd_u16(&r, &mlen))
		return -EAGAIN;
	if (!length_ok(mlen, PROTO_SWITCH_LEN))
		return -EPROTO;
	if (!rd_u16(&r, &v.version))
		return -EAGAIN;
	if (v.version < PROTO_VERSION_SWITCH ||
	    (v.version == PROTO_VERSION_SWITCH && mlen != PROTO_SWITCH_LEN) ||
	    (v.version > PROTO_VERSION_SWITCH && mlen < PROTO_SWITCH3_LEN))
		return -EPROTO;
	if (!rd_u16(&r, &resv))
		return -EAGAIN;
	if (resv && v.version == PROTO_VERSION_SWITCH)
		return -EPROTO;
	if (!rd_u32(&r, &v.flags))
		return -EAGAIN;
	if (v.flags && v.version == PROTO_VERSION_SWITCH)
		return -EPROTO;
	if (!rd_u64(&r, &v.rdma_bytes))
		return -EAGAIN;
	if (v.version > PROTO_VERSION_SWITCH && !rd_u64(&r, &v.rx_bytes))
		return -EAGAIN;
	if (len < mlen)
		return -EAGAIN;
	*m = v;
	return mlen;
}

/* ---- immediate data ----------------------------------------------------- */

/* Returns 0 with *type and *value set, or -EPROTO (DATA or CREDIT with value
 * 0, FIN or RESET with a non-zero value; outputs untouched then). */
int proto_imm_decode(uint32_t imm, enum proto_imm_type *type, uint32_t *value)
{
	enum proto_imm_type t = (enum proto_imm_type)(imm >> 30);
	uint32_t v = imm & PROTO_IMM_VALUE_MAX;

	switch (t) {
	case PROTO_IMM_DATA:
	case PROTO_IMM_CREDIT:
		if (!v)
			return -EPROTO;
		break;
	case PROTO_IMM_FIN:
	case PROTO_IMM_RESET:
		if (v)
			return -EPROTO;
		break;
	default:
		return -EPROTO; /* unreachable with two bits */
	}
	*type = t;
	*value = v;
	return 0;
}
