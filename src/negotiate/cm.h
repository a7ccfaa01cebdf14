/* cm.h - choosing RDMA or TCP for a stream and setting the RDMA connection up
 * (doc/design.md, "Choosing a path"): the local device check, the probe, the beacon,
 * the shared tuple table, the hello exchange on the TCP control connection,
 * the per-process rdma_cm listener and its part of the library's thread.
 *
 * Every function returns 0, a count or -errno and never leaves the stream in a state
 * where application bytes could be misread: on any failure before the switch
 * the stream simply stays on kernel TCP. */
#ifndef RSOCK_CM_H
#define RSOCK_CM_H

#include <sys/socket.h>

#include "base/compiler.h"
#include "base/config.h"
#include "rsock/rsock.h"

struct path_stream;


/* The outcome of an attempt: 0 when the step succeeded (RDMA goes on, or
 * the stream is up on RDMA), or -EOPNOTSUPP when the stream stays on kernel
 * TCP, with the reason (for the fallback counters) in *why. The application
 * never sees these values: only the shim sets errno. */

/* Client: before the real connect(). Decides whether to try RDMA with the
 * peer at addr, and if so binds fd to the local address of the route (an
 * unbound socket only) and probes the peer. Returns 0 with *state when the
 * peer runs librsock (continue with cm_client_hello after the TCP
 * connection is up), else -EOPNOTSUPP with *why (*state NULL). shm: the
 * rules allow the same-host path, tried first for a peer on this host. *state is an
 * opaque object to pass to cm_client_hello / cm_client_abandon. */
struct cm_client;

/* The socket buffer sizes the application asked for (SO_RCVBUF, SO_SNDBUF;
 * 0 = never set): the stream's receive and send rings follow them
 * (ring_size_for), else RSOCK_RING_KB. */
struct cm_bufs {
	uint32_t rcvbuf, sndbuf;
};

int cm_client_begin(int fd, const struct sockaddr *addr, socklen_t len, const struct cm_bufs *bufs,
		    int shm, struct cm_client **state, enum rsock_fallback_reason *why);

/* Client: the TCP connection is up. cm_client_hello sends the hello: 0, or
 * -EOPNOTSUPP with *why (the stream stays on TCP, state consumed).
 * cm_client_await then reads the answer and makes the RDMA connection, by
 * the hello's deadline (handshake_ms from it), at the stream's first use or
 * when a thread of the library gets to it (conn.c): 0 with *out, or
 * -EOPNOTSUPP with *why (the stream stays on TCP; *stale set to CM_STALE_ACK
 * when a late answer from the server may still arrive first on TCP and
 * must be dropped). rdma_ok 0 declines RDMA after the answer (the stream goes to
 * exec, stdio or another process). nb: a non-blocking socket, whose
 * wait for the answer is at most nonblock_ms (then the stream stays on
 * TCP). Always consumes state. */
int cm_client_hello(struct cm_client *state, int fd, enum rsock_fallback_reason *why);
int cm_client_await(struct cm_client *state, int fd, int rdma_ok, int nb,
		    struct path_stream **out, int *stale, enum rsock_fallback_reason *why);
/* The stream stays on TCP before its hello went (connect failed, or not in
 * time) or the conn goes away: free state (NULL is ignored). */
void cm_client_abandon(struct cm_client *state);

/* A negotiation message that may still head a stream left on TCP after its
 * handshake gave up waiting (a cut wire, a stopped peer): it arrives late
 * and is the library's, never the application's (doc/design.md, "Choosing
 * a path": late messages). */
enum cm_stale {
	CM_STALE_NONE = 0,
	CM_STALE_ACK,    /* client: the server's hello_ack */
	CM_STALE_HELLO,  /* server: the client's hello, then its cancel */
	CM_STALE_CANCEL, /* server: the client's cancel (it had our answer too late) */
};

/* Drop what *stale expects at the head of fd's stream, if it is there
 * (never waits). Returns 0 when settled (*stale is CM_STALE_NONE: the
 * message was dropped, or other bytes or the end come first), -EAGAIN when
 * nothing is there yet, -EINPROGRESS when only the beginning of the message
 * is (*stale may have moved on from a hello to its cancel), or -errno of
 * the socket (*stale kept). */
int cm_drop_stale(int fd, int *stale);
/* Such a message is written at once and arrives whole: bytes that begin
 * like it and are not followed by its rest within this long are the
 * application's. */
#define CM_STALE_PARTIAL_MS 50

/* The first RDMA device under class_dir (sysfs: /sys/class/infiniband)
 * that is an iWARP RNIC (its node_type "4: RNIC"): 1 and its name in name
 * (len bytes), else 0. Such a device carries its connections on TCP
 * itself: an rdma_cm listen on it takes the TCP port of the same number,
 * and a connect to it opens a TCP connection to the peer's port, which a
 * plain TCP listener there would accept (doc/design.md, "Choosing a path"). */
int cm_iwarp_device(const char *class_dir, char *name, size_t len);

/* Server: listen() succeeded on a socket bound to addr: start its beacon.
 * owner identifies the listening socket (its conn). */
void cm_listen(const void *owner, const struct sockaddr *addr, socklen_t len);
/* Server: the listening socket is gone (last reference): stop its beacon. */
void cm_unlisten(const void *owner);

/* Server: listen() succeeded on fd, bound to addr, and the rules allow the
 * same-host path: make the port discoverable on this host (doc/design.md,
 * "The same-host path"). 0, or -errno (-EADDRINUSE: another listener of
 * the port is). cm_shm_unlisten: the listening socket is gone. */
int cm_shm_listen(const void *owner, int fd, const struct sockaddr *addr);
void cm_shm_unlisten(const void *owner);

/* Server: fd was accepted from the listening socket `owner`. Returns 0 with
 * *out when the stream now runs over RDMA, or -EOPNOTSUPP with *why. */
int cm_server_accept(const void *owner, int fd, const struct cm_bufs *bufs,
		     struct path_stream **out, enum rsock_fallback_reason *why);

/* The two halves of cm_server_accept(). cm_server_probed: 0 when the client
 * of the accepted fd probed our beacon (its hello comes first on the stream),
 * else -EOPNOTSUPP with *why. cm_server_handshake: the rest, done where the
 * stream is first used (doc/design.md, "Descriptors, fork, exec"): 0 and
 * *out, or -EOPNOTSUPP with *why and *stale (enum cm_stale: a late hello or
 * cancel may still head the stream). bufs NULL: consume the hello and decline,
 * the stream stays on TCP. */
int cm_server_probed(const void *owner, int fd, enum rsock_fallback_reason *why);
/* Whether a same-host hello from a client of this process is already
 * whole at the head of fd (never waits): the server then sets the stream
 * up in accept() itself (one thread may connect, accept, then use the
 * client first). Another process's client is answered at the stream's
 * first use, in whichever process that is: a child forked after accept()
 * keeps the same-host path. 1 or 0. */
int cm_server_shm_hello(int fd);
int cm_server_handshake(int fd, const struct cm_bufs *bufs, struct path_stream **out,
			int *stale, enum rsock_fallback_reason *why);

/* Start this process's library thread (service.h) if it has none, with
 * the process's rdma_cm channel and the beacons' ucm file watched first
 * when rdma_cm is there (the hand-over registry starts it so, through its
 * hook). 0 or -errno. */
int cm_service_start(void);

/* For init.c's pthread_atfork handlers: cm_lock is held across fork() (the
 * library thread takes it; a child inheriting it held would wait for ever). */
void cm_fork_lock(void);
void cm_fork_unlock(void);

/* Destroy a channel made by the library (its descriptor is one of our own,
 * ownfd.h). NULL is ignored. */
struct rdma_event_channel;
void cm_channel_free(struct rdma_event_channel *ch);

#endif
