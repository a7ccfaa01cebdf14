/* ring.h - byte rings over caller-owned memory, no RDMA dependency.
 *
 * Positions are free-running 64-bit byte counters; the offset in the buffer
 * is pos & (size - 1), size a power of two. Two views exist:
 *
 *  - struct ring: memory this process holds (the receive ring the peer writes
 *    into, or the local send staging ring). head = consumer position, tail =
 *    producer position; used = tail - head.
 *  - struct ring_remote: the sender's book-keeping of the PEER's receive ring:
 *    tail = bytes written so far, acked = bytes the peer reported consumed;
 *    space = size - (tail - acked).
 *
 * Every value that comes from the wire goes through a validating function
 * that returns -EPROTO instead of corrupting state. No locking: the caller
 * serialises access to one ring. */
#ifndef RSOCK_RING_H
#define RSOCK_RING_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define RING_MIN_SIZE 4096u
#define RING_MAX_SIZE (1u << 30)

/* A ring size both ends accept: a power of two in [RING_MIN_SIZE,
 * RING_MAX_SIZE] (the wire protocol's rule for a ring descriptor too). */
static inline int ring_size_valid(uint32_t size)
{
	return size >= RING_MIN_SIZE && size <= RING_MAX_SIZE && (size & (size - 1)) == 0;
}

struct ring {
	uint8_t *buf;
	uint32_t size; /* power of two, RING_MIN_SIZE..RING_MAX_SIZE */
	uint64_t head; /* consumer */
	uint64_t tail; /* producer */
};

struct ring_remote {
	uint32_t size;
	uint64_t tail;  /* bytes written into the peer's ring */
	uint64_t acked; /* bytes the peer has consumed */
};

/* One contiguous piece of a ring: offset in the buffer and length. */
struct ring_span {
	uint32_t off;
	uint32_t len;
};

/* Bytes that may still be added at tail; 0 if the ring state is inconsistent
 * (which cannot happen through this module, but a caller may have touched
 * the fields directly). */
static inline uint64_t ring_room(uint32_t size, uint64_t tail, uint64_t head)
{
	uint64_t used = tail - head;

	return used > size ? 0 : size - used;
}

/* Split len bytes starting at position pos into at most two spans. */
static inline void ring_split(uint32_t size, uint64_t pos, uint32_t len, struct ring_span out[2])
{
	uint32_t off = (uint32_t)(pos & (size - 1));
	uint32_t first = size - off;

	if (first > len)
		first = len;
	out[0].off = off;
	out[0].len = first;
	out[1].off = 0;
	out[1].len = len - first;
}

/* 0, or -EINVAL (size not a power of two in range, buf NULL). */
int ring_init(struct ring *r, void *buf, uint32_t size);

/* The ring size for a socket buffer the application asked for with
 * SO_RCVBUF/SO_SNDBUF (requested bytes, 0 = never set): dflt when unset,
 * else requested rounded up to a power of two within [RING_SIZE_FLOOR,
 * RING_SIZE_CEIL]. */
#define RING_SIZE_FLOOR (16u * 1024)
#define RING_SIZE_CEIL (1u << 20)
uint32_t ring_size_for(uint64_t requested, uint32_t dflt);
static inline uint64_t ring_used(const struct ring *r) { return r->tail - r->head; }
static inline uint64_t ring_free(const struct ring *r) { return r->size - (r->tail - r->head); }

/* The peer (or the local producer) added len bytes at tail. 0, or -EPROTO
 * when len exceeds the free space (a hostile or broken peer). */
int ring_produce(struct ring *r, uint32_t len);

/* Copy n bytes between non-overlapping buffers: every copy into or out of a
 * ring goes through it. memcpy below RING_COPY_MIN; above it, on x86-64,
 * `rep movsq` (eight bytes a step) instead of glibc's `rep movsb` path,
 * which an emulated CPU (QEMU's TCG) runs a byte at a time, seven times
 * slower; on a real CPU the two are alike (doc/design.md, "Wire protocol"). */
#define RING_COPY_MIN 2048u
void ring_copy(void *dst, const void *src, size_t n);

/* Copy up to len bytes from head into dst without consuming. Returns the count. */
size_t ring_peek(const struct ring *r, void *dst, size_t len);
/* Copy into an iovec array (at most max bytes) without consuming; returns the count. */
size_t ring_peek_iov(const struct ring *r, const struct iovec *iov, int iovcnt, size_t max);
/* The unread bytes in place: v[0] from head, v[1] the wrapped rest (both
 * {NULL, 0} when empty). Returns ring_used(r). */
uint64_t ring_unread_iov(const struct ring *r, struct iovec v[2]);
/* Consume len bytes (len <= used, else -EINVAL). */
int ring_consume(struct ring *r, size_t len);

/* Local producer: copy len bytes at tail (len <= free, else -ENOSPC) and
 * advance tail; the spans written are stored in out[0..1] (out[1].len = 0 when
 * no wrap). Returns 0 or -ENOSPC. */
int ring_write(struct ring *r, const void *src, uint32_t len, struct ring_span out[2]);

/* Remote view. */
int ring_remote_init(struct ring_remote *rr, uint32_t size);
static inline uint64_t ring_remote_space(const struct ring_remote *rr)
{
	return rr->size - (rr->tail - rr->acked);
}
/* Reserve len bytes (len <= space, else -ENOSPC, nothing changed) at tail:
 * fills out[0..1] with the one or two spans of the peer's buffer to write
 * (out[1].len = 0 without wrap; out may be NULL), then advances tail. Inline:
 * every data message on the send path takes one. */
static inline int ring_remote_reserve(struct ring_remote *rr, uint32_t len, struct ring_span out[2])
{
	struct ring_span s[2];

	if (len > ring_room(rr->size, rr->tail, rr->acked))
		return -ENOSPC;
	ring_split(rr->size, rr->tail, len, s);
	rr->tail += len;
	if (out) {
		out[0] = s[0];
		out[1] = s[1];
	}
	return 0;
}
/* The peer reports `consumed` more bytes consumed. 0, or -EPROTO when that
 * would ack more than was written. */
int ring_remote_ack(struct ring_remote *rr, uint64_t consumed);

#endif
