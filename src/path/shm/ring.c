/* ring.c - see ring.h: the same-host path's rings, every index the peer
 * wrote validated before use. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <string.h>

#include "path/shm/ring.h"

int shm_ring_attach(void *base, uint32_t size, int side, struct shm_rx *rx, struct shm_tx *tx)
{
	struct shm_hdr *h = base;
	uint8_t *rings = (uint8_t *)base + SHM_HDR_SIZE;

	if (!base || !shm_ring_size_ok(size) || (side != 0 && side != 1))
		return -EINVAL;
	/* side 0 (the client) writes dir[0] and reads dir[1] */
	memset(rx, 0, sizeof(*rx));
	memset(tx, 0, sizeof(*tx));
	tx->d = &h->dir[side];
	tx->buf = rings + (size_t)side * size;
	tx->size = size;
	rx->d = &h->dir[!side];
	rx->buf = rings + (size_t)(!side) * size;
	rx->size = size;
	return 0;
}

int64_t shm_rx_avail(struct shm_rx *r)
{
	uint64_t t;

	if (r->err)
		return r->err;
	t = atomic_load_explicit(&r->d->tail, memory_order_acquire);
	/* A tail behind the one seen, or more than a ring ahead of what was
	 * consumed: no honest producer writes it. */
	if (t - r->tail > r->size || t - r->head > r->size) {
		r->err = -ECONNRESET;
		return r->err;
	}
	r->tail = t;
	return (int64_t)(t - r->head);
}

size_t shm_rx_peek(struct shm_rx *r, void *p, size_t skip, size_t len)
{
	uint64_t used = r->tail - r->head;
	uint32_t mask = r->size - 1, off, first;

	if (r->err || skip >= used)
		return 0;
	if (len > used - skip)
		len = (size_t)(used - skip);
	if (!p)
		return len;
	off = (uint32_t)((r->head + skip) & mask);
	first = r->size - off;
	if (first >= len) {
		memcpy(p, r->buf + off, len);
	} else {
		memcpy(p, r->buf + off, first);
		memcpy((uint8_t *)p + first, r->buf, len - first);
	}
	return len;
}

void shm_rx_consume(struct shm_rx *r, size_t n)
{
	if (r->err || n > r->tail - r->head)
		return;
	r->head += n;
	/* seq_cst: the producer's look at the consumer's arming (ring.h's
	 * doorbell) must not pass it */
	atomic_store(&r->d->head, r->head);
}

uint32_t shm_rx_flags(const struct shm_rx *r)
{
	return atomic_load_explicit(&r->d->flags, memory_order_acquire);
}

int64_t shm_tx_room(struct shm_tx *t)
{
	uint64_t h;

	if (t->err)
		return t->err;
	h = atomic_load_explicit(&t->d->head, memory_order_acquire);
	/* A head behind the one seen, or beyond the tail: no honest consumer
	 * writes it. */
	if (h - t->head > t->size || t->tail - h > t->size) {
		t->err = -ECONNRESET;
		return t->err;
	}
	t->head = h;
	return (int64_t)(t->size - (t->tail - h));
}

void shm_tx_put(struct shm_tx *t, const void *p, size_t len)
{
	uint32_t mask = t->size - 1, off, first;

	if (t->err || len > t->size - (t->tail - t->head))
		return;
	off = (uint32_t)(t->tail & mask);
	first = t->size - off;
	if (first >= len) {
		memcpy(t->buf + off, p, len);
	} else {
		memcpy(t->buf + off, p, first);
		memcpy(t->buf, (const uint8_t *)p + first, len - first);
	}
	t->tail += len;
	atomic_store(&t->d->tail, t->tail);
}

void shm_tx_flag(struct shm_tx *t, uint32_t f)
{
	atomic_fetch_or(&t->d->flags, f);
}
