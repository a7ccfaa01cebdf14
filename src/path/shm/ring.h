/* ring.h - the same-host path's shared memory (doc/design.md, "The same-host
 * path"): one memfd both processes map, a header page then two byte rings,
 * one a direction, each with a single producer and a single consumer.
 *
 * Nothing read from the shared memory is trusted: each side keeps its own
 * copy of the index it writes and of the ring's size, and checks every index
 * the peer wrote against them before use. A value no honest peer can write
 * makes the ring's error sticky (-ECONNRESET); a byte copy is always within
 * the ring. The peer may change the data bytes at any time, which changes
 * only what this side reads. No pointer is ever stored in the memory. */
#ifndef RSOCK_PATH_SHM_RING_H
#define RSOCK_PATH_SHM_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SHM_MAGIC 0x4d48534bu /* "KSHM" */
#define SHM_HDR_SIZE 4096u
#define SHM_RING_MIN 4096u
#define SHM_RING_MAX (1u << 26) /* 64 MiB a direction */

/* A producer's flags (struct shm_dir.flags), set once, never cleared. */
#define SHM_F_FIN 1u    /* no more data: shutdown(SHUT_WR) or close */
#define SHM_F_RESET 2u  /* an abortive close: the reader gets ECONNRESET */
#define SHM_F_CLOSED 4u /* the producer's process closed the stream (reads no more) */
#define SHM_F_SWITCH 8u /* the producer writes on the TCP connection from its tail on */
#define SHM_F_MARK 16u  /* ... after a switch message (it moved first: wire protocol's switch) */
/* The flags a waiter watches for a change. */
#define SHM_F_SEEN (SHM_F_FIN | SHM_F_RESET | SHM_F_CLOSED | SHM_F_SWITCH)

/* One direction's indices, each on its own cache line: tail (bytes ever
 * written, the producer's), head (bytes ever consumed, the consumer's),
 * the producer's flags. */
struct shm_dir {
	_Atomic uint64_t tail;
	uint8_t pad0[56];
	_Atomic uint64_t head;
	uint8_t pad1[56];
	_Atomic uint32_t flags;
	uint8_t pad2[60];
};

/* The header page. dir[0] carries client to server, dir[1] server to
 * client; armed[s]: side s (0 client, 1 server) sleeps or waits in poll and
 * wants its doorbell rung at the next change (the peer clears it and rings). */
struct shm_hdr {
	uint32_t magic, ring_size; /* written by the server, for a debugger only */
	uint8_t pad0[56];
	struct shm_dir dir[2];
	_Atomic uint32_t armed[2];
};

/* The consumer's view of one direction. */
struct shm_rx {
	struct shm_dir *d;
	const uint8_t *buf;
	uint32_t size;   /* a power of two, this side's own copy */
	uint64_t head;   /* consumed: this side's own count */
	uint64_t tail;   /* the peer's tail as last validated */
	int err;         /* sticky: -ECONNRESET once the peer wrote nonsense */
};

/* The producer's view of one direction. */
struct shm_tx {
	struct shm_dir *d;
	uint8_t *buf;
	uint32_t size;
	uint64_t tail;   /* written: this side's own count */
	uint64_t head;   /* the peer's head as last validated */
	int err;
};

/* 1 for a ring size both sides accept: a power of two in
 * [SHM_RING_MIN, SHM_RING_MAX]. */
static inline int shm_ring_size_ok(uint64_t size)
{
	return size >= SHM_RING_MIN && size <= SHM_RING_MAX && (size & (size - 1)) == 0;
}

/* The memfd's length for rings of size bytes. */
static inline size_t shm_map_len(uint32_t size)
{
	return SHM_HDR_SIZE + 2 * (size_t)size;
}

/* The views of side (0 client, 1 server) over a mapping of shm_map_len(size)
 * bytes at base, with nothing sent or received yet. 0, or -EINVAL (a size
 * shm_ring_size_ok refuses, side not 0 or 1). */
int shm_ring_attach(void *base, uint32_t size, int side, struct shm_rx *rx, struct shm_tx *tx);

/* Bytes readable now (the peer's tail validated: never behind what was seen
 * before, never more than size ahead of head), or -ECONNRESET. */
int64_t shm_rx_avail(struct shm_rx *r);
/* Copy up to len readable bytes at offset skip from the head into p
 * (p NULL: none copied, as MSG_TRUNC). Returns the count (at most what
 * shm_rx_avail last said beyond skip), never -errno. */
size_t shm_rx_peek(struct shm_rx *r, void *p, size_t skip, size_t len);
/* Consume n bytes (n at most what shm_rx_avail last said) and publish the
 * head. */
void shm_rx_consume(struct shm_rx *r, size_t n);
/* The producer's flags (SHM_F_*), as read now. */
uint32_t shm_rx_flags(const struct shm_rx *r);

/* Room for writing now (the peer's head validated: never behind what was
 * seen, never beyond the tail), or -ECONNRESET. */
int64_t shm_tx_room(struct shm_tx *t);
/* Copy len bytes (at most what shm_tx_room last said) from p to the tail,
 * and publish it. */
void shm_tx_put(struct shm_tx *t, const void *p, size_t len);
/* Bytes written and not consumed by the peer, as last validated. */
static inline uint64_t shm_tx_unread(const struct shm_tx *t)
{
	return t->tail - t->head;
}
/* Set producer flags (SHM_F_*). */
void shm_tx_flag(struct shm_tx *t, uint32_t f);

#endif
