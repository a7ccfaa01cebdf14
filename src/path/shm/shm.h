/* shm.h - the same-host path (doc/design.md, "The same-host path"): a
 * stream whose bytes move through rings in memory that the two processes
 * of one host share (ring.h), set up by negotiation (negotiate/shmsetup.c)
 * and handed upward as a struct path_stream (path.h). */
#ifndef RSOCK_PATH_SHM_SHM_H
#define RSOCK_PATH_SHM_SHM_H

#include <stdint.h>
#include <sys/types.h>

#include "base/compiler.h"

struct path_stream;

/* What the path calls above itself, filled by init.c before any stream
 * exists. NULL does nothing (unit tests). */
struct shm_hooks {
	/* A thread consumed a stream's doorbell outside any epoll instance
	 * that watches the stream: every instance looks again (event_kick). */
	void (*kick)(void);
};
extern struct shm_hooks shm_hooks RSOCK_HIDDEN;

/* A stream over the mapping of memfd (shm_map_len(size) bytes, which the
 * caller checked), for side (0 client, 1 server); me: this side's doorbell
 * eventfd (the peer writes it), peer: the peer's; tcp_fd: the stream's TCP
 * socket, of which the stream keeps its own duplicate (the control
 * connection: nothing comes on it while both sides use the rings, and its
 * end says the peer's process closed the stream or died). live (>= 0, the
 * server's): the set-up connection on which the client's word (1: it took
 * the memory; 0 or the end: TCP) is still to come; until it comes the
 * stream is pending, and a decline moves it to TCP with what this side
 * wrote into the ring sent again there. Takes ownership of memfd, me, peer
 * and live (closed on failure too). 0 and *out, or -errno. */
int shm_stream_new(int memfd, uint32_t size, int side, int me, int peer, int live, int tcp_fd,
		   struct path_stream **out);
/* Name stream s by key (the hello's token, the same at both ends): when
 * both ends are streams of this process, one moving to TCP makes the other
 * follow at once (a library's thread busy with the first cannot watch for
 * the second). */
void shm_stream_key(struct path_stream *s, uint64_t key);

/* The first bytes a client that gave up on its hello sent (a cancel,
 * negotiate/hello.c): its length when b (n bytes) starts with one, else 0. */
int shm_cancel_len(const uint8_t *b, size_t n);

#endif
