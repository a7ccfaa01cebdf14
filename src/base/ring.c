/* ring.c - see ring.h.
 *
 * Invariants kept by every function (for a ring set up by ring_init /
 * ring_remote_init and changed only through this module):
 *   struct ring:         tail - head <= size
 *   struct ring_remote:  tail - acked <= size
 * Positions are free-running and wrap modulo 2^64; since size divides 2^64
 * the buffer offset pos & (size - 1) stays continuous across that wrap and
 * all differences are computed in unsigned 64-bit arithmetic. Every length
 * is checked against the current room before any position moves, so a
 * hostile value can never push a position past the other one. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <string.h>

#include "base/ring.h"

uint32_t ring_size_for(uint64_t requested, uint32_t dflt)
{
	uint32_t s = RING_SIZE_FLOOR;

	if (!requested)
		return dflt;
	while (s < requested && s < RING_SIZE_CEIL)
		s <<= 1;
	return s;
}

/* Returns 0, or -EINVAL when r or buf is NULL or size is not a power of two in
 * RING_MIN_SIZE..RING_MAX_SIZE (nothing is changed then). */
int ring_init(struct ring *r, void *buf, uint32_t size)
{
	if (!r || !buf || !ring_size_valid(size))
		return -EINVAL;
	r->buf = buf;
	r->size = size;
	r->head = 0;
	r->tail = 0;
	return 0;
}

/* Returns 0 (tail advanced by len), or -EPROTO when len exceeds the free
 * space (nothing is changed then). len 0 is accepted and changes nothing. */
int ring_produce(struct ring *r, uint32_t len)
{
	if (len > ring_room(r->size, r->tail, r->head))
		return -EPROTO;
	r->tail += len;
	return 0;
}

void ring_copy(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
	if (n >= RING_COPY_MIN) {
		size_t words = n / 8;

		/* The ABI keeps the direction flag clear. */
		__asm__ volatile("rep movsq" : "+D"(dst), "+S"(src), "+c"(words) : : "memory");
		n %= 8;
	}
#endif
	memcpy(dst, src, n);
}

/* Returns the number of bytes copied: min(len, ring_used(r)). */
size_t ring_peek(const struct ring *r, void *dst, size_t len)
{
	uint64_t used = r->tail - r->head;
	struct ring_span s[2];

	if (used > r->size) /* inconsistent: see ring_room() */
		used = 0;
	if ((uint64_t)len > used)
		len = (size_t)used;
	if (!len)
		return 0;
	ring_split(r->size, r->head, (uint32_t)len, s);
	ring_copy(dst, r->buf + s[0].off, s[0].len);
	if (s[1].len)
		ring_copy((uint8_t *)dst + s[0].len, r->buf, s[1].len);
	return len;
}

/* Returns the number of bytes copied: the least of ring_used(r), max and the
 * total length of the iovecs, filled in order. Empty iovecs are skipped; a
 * negative iovcnt copies nothing. */
size_t ring_peek_iov(const struct ring *r, const struct iovec *iov, int iovcnt, size_t max)
{
	uint64_t used = r->tail - r->head;
	uint32_t mask = r->size - 1;
	uint64_t pos = r->head;
	size_t want, done = 0;

	if (used > r->size)
		used = 0;
	want = (uint64_t)max > used ? (size_t)used : max;
	for (int i = 0; i < iovcnt && done < want; i++) {
		uint8_t *dst = iov[i].iov_base;
		size_t left = iov[i].iov_len;

		while (left && done < want) {
			uint32_t off = (uint32_t)(pos & mask);
			size_t n = r->size - off; /* contiguous bytes up to the end */

			if (n > left)
				n = left;
			if (n > want - done)
				n = want - done;
			ring_copy(dst, r->buf + off, n);
			dst += n;
			left -= n;
			done += n;
			pos += n;
		}
	}
	return done;
}

uint64_t ring_unread_iov(const struct ring *r, struct iovec v[2])
{
	uint64_t used = r->tail - r->head;
	struct ring_span s[2];

	v[0] = v[1] = (struct iovec){NULL, 0};
	if (!used || used > r->size) /* empty, or inconsistent: see ring_room() */
		return 0;
	ring_split(r->size, r->head, (uint32_t)used, s);
	v[0] = (struct iovec){r->buf + s[0].off, s[0].len};
	if (s[1].len)
		v[1] = (struct iovec){r->buf, s[1].len};
	return used;
}

/* Returns 0 (head advanced by len), or -EINVAL when len exceeds ring_used(r). */
int ring_consume(struct ring *r, size_t len)
{
	uint64_t used = r->tail - r->head;

	if (used > r->size || (uint64_t)len > used)
		return -EINVAL;
	r->head += len;
	return 0;
}

/* Returns 0 (len bytes copied at tail, tail advanced, out[0..1] = the spans
 * written, out[1].len = 0 without wrap), or -ENOSPC when len exceeds the free
 * space (nothing is changed then). out may be NULL when the spans are not
 * needed. */
int ring_write(struct ring *r, const void *src, uint32_t len, struct ring_span out[2])
{
	struct ring_span s[2];

	if (len > ring_room(r->size, r->tail, r->head))
		return -ENOSPC;
	ring_split(r->size, r->tail, len, s);
	if (s[0].len)
		ring_copy(r->buf + s[0].off, src, s[0].len);
	if (s[1].len)
		ring_copy(r->buf, (const uint8_t *)src + s[0].len, s[1].len);
	r->tail += len;
	if (out) {
		out[0] = s[0];
		out[1] = s[1];
	}
	return 0;
}

/* Returns 0, or -EINVAL when rr is NULL or size is not a power of two in
 * RING_MIN_SIZE..RING_MAX_SIZE (nothing is changed then). */
int ring_remote_init(struct ring_remote *rr, uint32_t size)
{
	if (!rr || !ring_size_valid(size))
		return -EINVAL;
	rr->size = size;
	rr->tail = 0;
	rr->acked = 0;
	return 0;
}

/* Returns 0 (acked advanced by consumed), or -EPROTO when consumed exceeds
 * the bytes written but not yet acknowledged (nothing is changed then). */
int ring_remote_ack(struct ring_remote *rr, uint64_t consumed)
{
	uint64_t outstanding = rr->tail - rr->acked;

	if (outstanding > rr->size || consumed > outstanding)
		return -EPROTO;
	rr->acked += consumed;
	return 0;
}
