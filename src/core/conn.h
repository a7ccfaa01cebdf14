/* conn.h - the per-stream object an fd maps to.
 *
 * A conn is shared by every descriptor that refers to the same open socket
 * (dup, dup2, dup3, F_DUPFD, inheritance over fork): the fd table holds one
 * reference per descriptor, and each user of a looked-up conn holds one more
 * until conn_unref(). The application's descriptor is always a real kernel
 * socket; what the stream carries (TCP, or RDMA once negotiated) is `path`. */
#ifndef RSOCK_CONN_H
#define RSOCK_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/compiler.h"
#include "base/rules.h"

enum conn_role {
	CONN_ROLE_NONE = 0,  /* created, neither connected nor listening */
	CONN_ROLE_CLIENT,    /* connect() was called */
	CONN_ROLE_LISTENER,  /* listen() was called */
	CONN_ROLE_ACCEPTED,  /* returned by accept()/accept4() */
};

enum conn_path {
	CONN_PATH_UNDECIDED = 0,
	CONN_PATH_TCP,       /* kernel TCP carries the bytes */
	CONN_PATH_RDMA,      /* an RDMA connection carries the bytes */
};

struct path_stream;
struct cm_client;

struct later;
struct statpub_slot;

struct conn {
	_Atomic unsigned refs;  /* first: conn_new clears what follows it */
	int domain;             /* AF_INET or AF_INET6 */
	_Atomic int nonblock;   /* O_NONBLOCK of the open file description */
	pthread_mutex_t lock;   /* guards the set-up fields below */
	struct path_stream *stream; /* the stream's path object once path != TCP (then immutable) */
	_Atomic int stale;      /* enum cm_stale: a late negotiation message may head the
	                         * TCP stream (io.h drops it; lock) */
	int beacon;             /* a listener with a beacon */
	_Atomic int role;       /* enum conn_role */
	_Atomic int path;       /* enum conn_path */
	_Atomic int rules;      /* enum rules_transport decided at connect/listen */
	/* Its slot for rsock-stat (conn_publish), or NULL; beside path, which
	 * the data path reads with it. */
	struct statpub_slot *_Atomic pub;

	/* Not a stream but another descriptor the library tracks (an epoll
	 * instance): the object the layer that tracks it made (event/epoll's
	 * shadow), freed by conn_hooks.instance_free with the last reference.
	 * NULL for a stream. Set before the conn enters the fd table, then
	 * immutable. */
	void *instance;
	_Atomic int nfds;       /* descriptors of this process in the fd table */
	_Atomic int hello_due;  /* accepted from a librsock client, handshake not done yet */
	_Atomic uint32_t rcvbuf, sndbuf; /* SO_RCVBUF/SO_SNDBUF as asked for (0: never) */
	struct cm_client *client; /* a client whose hello's answer is awaited (lock) */
	struct later *later;    /* its entry on the list of conn_settle_later (its lock) */
	_Atomic int later_on;   /* later is set (read without the lock) */
	struct conn *pool_next; /* freed: the next in conn.c's pool */
};

/* What layers above core do when a conn changes, filled by init.c's
 * init_run() before any conn exists (conn_hooks_set). A hook left NULL (unit
 * tests) does nothing. */
struct conn_hooks {
	/* The last descriptor of the stream c is gone (conn_fd_gone): it leaves
	 * every epoll instance. */
	void (*stream_closed)(struct conn *c);
	/* A stream turned RDMA (conn_settle). */
	void (*stream_converted)(void);
	/* The last reference of a conn with an instance is gone: free it. */
	void (*instance_free)(void *instance);
};
/* Install the hooks (copied). Called once, before any conn exists. */
void conn_hooks_set(const struct conn_hooks *h);

/* A new conn with one reference, or NULL (out of memory). */
struct conn *conn_new(int domain);
/* Take another reference; returns c. */
struct conn *conn_ref(struct conn *c);
/* Take a reference unless the count is 0 (c freed, or being freed): for a
 * conn found without a lock (fdtab_get). Returns 1 when taken. */
int conn_tryref(struct conn *c);
/* Drop a reference; the last one tears the stream down (RDMA connection,
 * beacon) and frees the object. NULL is allowed. */
void conn_unref(struct conn *c);

/* A descriptor of c left the fd table (close, dup2 over it, close_range).
 * When it was the last one, c leaves every epoll instance, as a closed file
 * leaves the kernel's (conn_hooks.stream_closed). */
void conn_fd_gone(struct conn *c);

/* An accepted stream whose client probed us does its handshake (RDMA or
 * TCP) at its first use, in the process that uses it: every shim that looks
 * at a stream's path calls conn_settle_maybe() first. how: CONN_SETTLE_RDMA
 * takes RDMA if it can (without it RDMA is declined: the stream is handed
 * to exec or stdio). A connected stream whose socket is non-blocking waits
 * for its hello's answer at most RSOCK_NONBLOCK_MS (doc/design.md, "Choosing
 * a path"), unless CONN_SETTLE_FULL (RSOCK_MODE=rdma's connect(), and a decline,
 * which must read the answer). Blocks at most the handshake time; takes
 * c->lock. */
#define CONN_SETTLE_RDMA 1
#define CONN_SETTLE_FULL 2
void conn_settle(struct conn *c, int fd, int how);

/* A stream whose handshake waits (hello_due) is also put on a list that a
 * thread of the library serves (conn.c): an accepted one (client 0) has its
 * client's hello answered if it is still unused after RSOCK_SETTLE_MS in the
 * process that accepted it (no fork since); a connected one (client 1), whose
 * hello went out, has the answer awaited and the RDMA connection made if it
 * is still unused after RSOCK_SETTLE_MS, so that connect() need not wait
 * for them. 0, or -errno when it cannot be listed (-EOPNOTSUPP:
 * RSOCK_SETTLE_MS=0; -ENOMEM, -EMFILE...: no memory or descriptor, or no
 * thread): the caller settles the stream itself or leaves it to its first
 * use. */
int conn_settle_later(struct conn *c, int fd, int client);
/* Before a fork: every connected stream still awaiting its answer settles;
 * leaves the list's serving lock held for conn_fork_lock (called next). */
void conn_fork_settle_clients(void);
/* Around fork (init.c): the list's lock; the child drops the parent's list. */
void conn_fork_lock(void);
/* The pool of freed conns' lock, a leaf: taken late before a fork (only
 * the log's lock after it, init.c's fork_hooks[]), released
 * in the parent (the child re-initialises it in conn_fork_child). */
void conn_pool_fork_lock(void);
void conn_pool_fork_unlock(void);
void conn_fork_unlock(void);
void conn_fork_child(void);

static inline void conn_settle_maybe(struct conn *c, int fd)
{
	if (RSOCK_UNLIKELY(c && atomic_load_explicit(&c->hello_due, memory_order_acquire)))
		conn_settle(c, fd, CONN_SETTLE_RDMA);
}

/* Count bytes carried by this stream (r > 0 only) in the process's counters
 * (stats.c) and in the stream's slot for rsock-stat, if it has one. */
void conn_account_tx(struct conn *c, long long r);
void conn_account_rx(struct conn *c, long long r);

/* Publish the connected or accepted stream c (on fd) for rsock-stat
 * (base/statpub.h), or update what is published: its path (c->path), its
 * state st (enum statpub_state; 0 leaves it), and on TCP the fallback
 * reason why (-1 leaves it). peer, plen: the address connect() was given
 * (NULL: the kernel's). The process's segment is made at its first stream;
 * when it cannot be, nothing is published and nothing else changes. Takes
 * no lock of c's (the RDMA path's own lock, briefly). */
void conn_publish(struct conn *c, int fd, const struct sockaddr *peer, socklen_t plen, int st,
		  int why);
/* shutdown(how) succeeded on c's stream: its published state. */
void conn_publish_shut(struct conn *c, int how);

/* True for the sockets the library tracks: stream sockets of AF_INET/AF_INET6
 * whose protocol is 0 or IPPROTO_TCP. type may carry SOCK_NONBLOCK/CLOEXEC. */
int conn_eligible(int domain, int type, int protocol);

#endif
