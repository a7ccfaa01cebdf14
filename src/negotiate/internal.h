/* internal.h - what the files of src/negotiate share (cm.h is the public
 * interface): the locks and objects of the library's thread, the address, rdma_cm,
 * device, cache and table helpers, the hello I/O and the client's state.
 *
 * Locks: cm_lock protects the device list, the listeners, the beacons and
 * the pending server streams; it is taken before a tp's lock, never after,
 * and is never held while sleeping except in pthread_cond_timedwait on
 * cm_cond. */
#ifndef RSOCK_NEGOTIATE_INTERNAL_H
#define RSOCK_NEGOTIATE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <rdma/rdma_cma.h>

#include "base/proto.h"
#include "negotiate/cm.h"
#include "negotiate/ucm.h"
#include "path/rdma/transport.h"

extern pthread_mutex_t cm_lock RSOCK_HIDDEN;
extern pthread_cond_t cm_cond RSOCK_HIDDEN;

/* ---- addresses (addr.c) ---- */
uint16_t sa_port(const struct sockaddr *sa);
void sa_set_port(struct sockaddr *sa, uint16_t port);
/* Address bytes in the probe's layout (IPv4 in the first 4 of 16). */
void sa_addr16(const struct sockaddr *sa, uint8_t out[16]);
/* 1 for a loopback address (127/8, ::1, ::ffff:127.x), else 0. */
int sa_is_loopback(const struct sockaddr *sa);
/* The wildcard address of ss's family, port unchanged. */
void sa_wildcard(struct sockaddr_storage *ss);
/* 1 for the wildcard address, else 0. */
int sa_is_any(const struct sockaddr *sa);
/* The length of an AF_INET or AF_INET6 address. */
socklen_t sa_len(const struct sockaddr *sa);
/* An IPv4-mapped IPv6 address becomes the AF_INET one it stands for. */
void sa_unmap(struct sockaddr_storage *ss);
/* *out = sa, unmapped (sa_unmap); returns out as a sockaddr. */
struct sockaddr *sa_copy_unmapped(struct sockaddr_storage *out, const struct sockaddr *sa);
/* For a socket of family `family`: AF_INET becomes ::ffff:a.b.c.d. */
void sa_map_for(int family, struct sockaddr_storage *ss);
/* The source address the kernel would use to reach peer. 0 or -errno. */
int sa_route_source(const struct sockaddr *peer, struct sockaddr_storage *src);

/* ---- rdma_cm helpers (rdmacm.c) ---- */
/* A non-blocking event channel whose descriptor is the library's own
 * (ownfd.h), or NULL (errno set by librdmacm). */
struct rdma_event_channel *cm_channel_new(void);
/* Wait on a private channel for `want` until deadline (clock_now_ms()
 * units). 0 with *ev (ack it); another event in *ev too, with
 * -ECONNREFUSED for REJECTED and another -errno otherwise; -ETIMEDOUT. */
int cm_wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int64_t deadline,
		  struct rdma_cm_event **ev);
/* Acknowledge ev; NULL is ignored. */
void cm_ack(struct rdma_cm_event *ev);
/* What was asked already of an id's resolution (cm_resolve_from). */
enum { RESOLVE_NEW = 0, RESOLVE_ADDR, RESOLVE_ROUTE };
#define RESOLVE_FIRST_MS 25
/* Resolve address and route of id towards dst, going on from `asked`.
 * 0 or -errno. */
int cm_resolve_from(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct sockaddr *src,
		    struct sockaddr *dst, int64_t deadline, int asked);
/* cm_resolve_from() with nothing asked yet. */
int cm_resolve(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct sockaddr *src,
	       struct sockaddr *dst, int64_t deadline);

/* ---- devices (devices.c) ---- */
struct cm_dev;
/* The record of ctx when this process may use it, else NULL. Caller holds
 * cm_lock. */
struct cm_dev *cm_dev_mine(struct ibv_context *ctx);
/* cm_dev_mine() for a caller that does not hold cm_lock: 1 or 0. */
int cm_dev_usable(struct ibv_context *ctx);
/* ctx's device is being removed: forget its record and stop watching its
 * asynchronous events (the context goes once librdmacm closes it). Caller
 * holds cm_lock. */
void cm_dev_forget(struct ibv_context *ctx);
/* Make librdmacm look at the devices again: it closes the context of a
 * device that is gone once no id of it remains (rdma_get_devices is its
 * only way to learn of it), and opens those it had not. Takes cm_lock. */
void cm_dev_sync(void);
/* Whether a parent process opened the device called name (this process
 * cannot use it then): 1 or 0. Takes cm_lock. */
int cm_dev_parent_has(const char *name);
/* What an address's netdev has behind it, from sysfs alone (no device
 * opened): CM_LOCAL_NONE (no RDMA device, or only an iWARP one), _RDMA (an
 * InfiniBand or RoCE device, its name in dev), _UNSURE (rdma_cm must say:
 * IPoIB, a netdev sysfs does not show, a port that names no netdev). */
enum { CM_LOCAL_NONE = 0, CM_LOCAL_RDMA, CM_LOCAL_UNSURE };
int cm_dev_local(const struct sockaddr *src, char *dev, size_t len);
/* cm_dev_local() for the netdev ifname, under the sysfs root sys. */
int cm_dev_of_netdev(const char *sys, const char *ifname, char *dev, size_t len);

/* ---- the negative cache (negcache.c) ---- */
/* What an entry says of a peer (address, port): no librsock there (its
 * probe), or no RDMA device behind the route to it (the local check). */
enum { CM_NEG_PEER = 1, CM_NEG_NO_DEVICE = 2 };
/* CM_NEG_PEER or CM_NEG_NO_DEVICE when peer is cached, else 0. Takes
 * cm_lock. */
int cm_neg_lookup(const struct sockaddr *peer);
/* Cache peer as `kind` (CM_NEG_*) for cm_settings.neg_cache_s seconds
 * (the oldest of NEG_SLOTS entries goes), here and in the shared file.
 * Takes cm_lock. */
void cm_neg_insert(const struct sockaddr *peer, int kind);
#define NEG_SLOTS 64
#define NEG_FILE_SLOTS 256
/* Share the cache through the file at path (made 0600 if need be; NULL:
 * share nothing) instead of the default, /dev/shm/librsock-negcache.
 * LAYOUT.UID.NETNS, opened at the first look-up. 0, or -errno when the
 * file cannot be used (another owner's, others may write it, not a
 * regular file): this process's slots alone serve then. Caller holds
 * cm_lock (or is alone, as a unit test). */
int cm_neg_share(const char *path);
/* The network namespace's inode number (0 if unknown): ports and addresses
 * are per namespace, the shared memory directory need not be. */
unsigned long long cm_netns_id(void);

/* ---- the shared tuple table (tuples.c) ---- */
#define TUPLE_SLOTS 1024
#define TUPLE_TTL_MS 10000
/* This process's table: the named one of this user and network namespace,
 * else a private one. 0 or -ENOMEM (none to be had). Caller holds
 * cm_lock. */
int cm_tuples_create(void);
/* Use a private table (not shared with other processes), made if need
 * be. 0 or -ENOMEM. */
int cm_tuples_private(void);
/* Record a probe's tuple. 0, or -ENOSPC when the table is full. */
int cm_tuple_put(const struct proto_probe *pr);
/* Take the entry for a stream accepted from peer on local: 1 when there
 * was one, else 0. */
int cm_tuple_take(const struct sockaddr *peer, const struct sockaddr *local);

/* ---- the library thread's objects (thread.c, beacon.c, server.c) ---- */
enum { CTX_BEACON = 1, CTX_LISTENER, CTX_PENDING };
struct cm_obj {
	int kind;
};

struct beacon {
	struct cm_obj obj;
	const void *owner;
	uint32_t kid;       /* the kernel's id of the listening ucm id */
	struct sockaddr_storage addr; /* the TCP listener's address */
	pid_t pid;          /* the process whose library thread serves it */
	int shared;         /* no id of its own: another listener of the port
			     * (SO_REUSEPORT) has the beacon, which answers for
			     * this one too, through the shared tuple table */
	struct beacon *next;
};

struct listener {
	struct cm_obj obj;
	struct rdma_cm_id *id;
	pid_t pid;          /* listeners of a parent are not ours after fork */
	struct sockaddr_storage addr; /* local address, port = the rdma_cm port */
	int users;          /* handshakes using it (its id, device, address) */
	int dead;           /* its device is being removed: off the list, freed
			     * by its last user (cm_listener_put) */
	struct listener *next;
};

enum { PEND_WAIT = 0, PEND_ACCEPTING, PEND_UP, PEND_FAILED };
struct pending {
	struct cm_obj obj;
	uint64_t token;
	struct tp *tp;
	struct ibv_context *ctx;
	int state;
	int qp_err;         /* -errno: its QP could not be made for the request (rejected) */
	int path_event;     /* enum tp_cm_kind + 1 of an rdma_cm event that came for its
			     * id during the handshake (the stream fails over once up), or 0 */
	struct pending *next;
};

extern struct rdma_event_channel *cm_ch RSOCK_HIDDEN; /* the process's channel */
extern int cm_ucm RSOCK_HIDDEN;        /* the beacons' connection-manager file (ucm.h) */
extern pid_t cm_thread_pid RSOCK_HIDDEN; /* the process cm_ch and cm_ucm are for */
extern struct beacon *cm_beacons RSOCK_HIDDEN;     /* cm_lock */
extern struct listener *cm_listeners RSOCK_HIDDEN; /* cm_lock */
extern struct pending *cm_pendings RSOCK_HIDDEN;   /* cm_lock */

/* The process-wide channel, the ucm file and the thread that reads them,
 * started on first use (again in a forked child). 0 or -errno. Caller
 * holds cm_lock. */
int cm_start(void);

/* ---- beacons and data listeners (beacon.c) ---- */
/* A connect request on a beacon (library thread): answer it. */
void cm_beacon_request(const struct ucm_event *ev);
/* Whether owner's listening socket has a beacon: 1 or 0. */
int cm_has_beacon(const void *owner);
/* The per-process data listener on local, made if need be, or NULL.
 * Caller holds cm_lock. */
struct listener *cm_listener_for(const struct sockaddr *local);
/* A handshake is done with l (cm_listener_for, users counted): frees a
 * dead listener's id and memory with its last user. Takes cm_lock. */
void cm_listener_put(struct listener *l);
/* Destroy a dead listener's id (no unacknowledged event of it may be
 * held by the caller), free it and let librdmacm close its device. */
void cm_listener_free(struct listener *l);

/* ---- rdma_cm events of established streams (thread.c) ---- */
/* An event of kind (enum tp_cm_kind) that came for id while its stream
 * was being accepted: the stream, up now, fails over (tp_cm_event), in the
 * caller. */
void cm_stream_event(struct rdma_cm_id *id, int kind);
/* The stream t is up: RSOCK_FAULT's cm_addr_change, cm_removal and cq_err
 * sites make up their event for it (base/fault.h). */
void cm_fault_up(struct tp *t);

/* ---- hello I/O on the control connection (hello.c) ---- */
#define CM_CANCEL_LEN 8
#define CM_CANCEL_TYPE 5
/* Write all of buf to fd, waiting for room up to deadline. 0 or -errno. */
int cm_ctl_write(int fd, const void *buf, size_t len, int64_t deadline);
/* Peek `want` bytes once there: want, 0 at EOF, or -errno (-ETIMEDOUT). */
ssize_t cm_ctl_peek(int fd, void *buf, size_t want, int64_t deadline);
/* Peek a hello (ack 0) or hello_ack (ack 1) into buf (PROTO_MSG_MAX_LEN
 * bytes): its version-1 length, then as many as a later version's longer
 * one says it has (doc/design.md, "Wire protocol"). What cm_ctl_peek
 * returns for the last peek. */
ssize_t cm_ctl_peek_hello(int fd, uint8_t *buf, int ack, int64_t deadline);
/* Read and drop up to n bytes that are there. */
void cm_ctl_consume(int fd, size_t n);
/* The client's cancel in b (CM_CANCEL_LEN bytes): returns its length. */
int cm_cancel_encode(uint8_t *b);
/* Whether b (CM_CANCEL_LEN bytes) is a cancel: 1 or 0. */
int cm_is_cancel(const uint8_t *b);
/* Consume the client's cancel when it is next on the stream: 1 if it was,
 * else 0. */
int cm_drop_cancel(int fd);

/* ---- the client (probe.c, client.c) ---- */
struct cm_client {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id; /* bound to the local address; becomes the data id */
	struct sockaddr_storage local, peer; /* local: the tuple the probe announced */
	struct sockaddr_storage src; /* the data id's bind address (port 0) */
	int64_t probed_ms;     /* when the beacon answered */
	struct tp *tp;
	uint64_t token;
	int fd; /* the application's socket */
	uint16_t hint; /* the beacon's data port hint, 0 if none */
	int pre; /* what was asked ahead for the data id towards hint: RESOLVE_NEW
		  * (nothing), _ADDR, _ROUTE, or -1 spoiled (a fresh id is needed) */
	int64_t deadline; /* of the handshake: the hello's sending + handshake_ms */
	enum rsock_fallback_reason qp_why; /* our QP could not be made, else 0 */
	/* the same-host path (shmsetup.c) */
	int shm;               /* a librsock listener of this host: hello with PROTO_HELLO_SHM */
	int shm_lfd;           /* the set-up socket the server connects to, or -1 */
	uint64_t shm_secret;   /* in the hello; the server's set-up message echoes it */
	uint32_t shm_size;     /* each ring's */
};

/* ---- the same-host path (shmdisc.c, shmsetup.c) ---- */
/* A non-blocking, close-on-exec Unix socket of type, the library's own
 * (ownfd.h), or -1. */
int cm_shm_unix_socket(int type);
/* When c->peer is an address of this host whose port a librsock listener
 * of this network namespace holds (its discovery name): bind fd (its port
 * known before the SYN), open the set-up socket, tell the listener the
 * tuple, and set c->shm. 0, or -EOPNOTSUPP (nothing kept: RDMA or TCP
 * decide next). */
int cm_shm_client_begin(struct cm_client *c, int fd);
/* A client's set-up is over (its token leaves this process's table);
 * whether token is a client of this process awaiting its set-up: 1 or 0.
 * Take cm_lock. */
void cm_shm_client_done(uint64_t token);
int cm_shm_own_client(uint64_t token);
/* After the server's hello_ack a (status 0): take the shared memory from
 * the set-up connection, checked, and tell the server the outcome (ok 0:
 * declined). 0 and *out, or -EOPNOTSUPP (the stream stays on TCP). */
int cm_shm_client_await(struct cm_client *c, int fd, const struct proto_hello_ack *a, int ok,
			struct path_stream **out);
/* Server: the hello h asked for the same-host path: make the shared memory,
 * send it to the client's set-up socket, answer, and await the client's
 * word by deadline (ms). ok 0: decline. 0 and *out, or -EOPNOTSUPP with
 * *why (answered). */
int cm_shm_server(int fd, const struct proto_hello *h, int ok, int64_t deadline,
		  struct path_stream **out, enum rsock_fallback_reason *why);
/* Server: take the tuples clients sent to owner's discovery sockets into
 * the tuple table. 1 when owner has discovery sockets, else 0. Takes
 * cm_lock. */
int cm_shm_drain(const void *owner);

/* Ask the peer's beacon whether librsock serves the port, from c->local
 * to c->peer (ucm.h: no device opened): 1, 0 (a plain peer), or -errno
 * (-EAGAIN: the peer's CM kept refusing for want of resources). */
int cm_probe(struct cm_client *c, uint16_t cport);
/* The stream's rings and CQ: 0, or a fallback reason. */
int cm_client_prepare(struct cm_client *c, const struct cm_bufs *bufs);
/* The stream's own QP: 0, or a fallback reason. */
int cm_client_qp(struct cm_client *c);
/* Free c and what it holds (NULL is ignored). */
void cm_client_free(struct cm_client *c);

/* ---- the client's data connection (dataconn.c) ---- */
/* With the beacon's hint, start resolving the data id's address (no wait). */
void cm_data_pre_resolve(struct cm_client *c);
/* If the address resolved meanwhile, ask for the route too (no wait). */
void cm_data_pre_route(struct cm_client *c);
/* The data connection to the port the answer a names, with the rings it
 * describes, by c->deadline: 0, or -errno with *why. */
int cm_data_connect(struct cm_client *c, const struct proto_hello_ack *a,
		    enum rsock_fallback_reason *why);
/* The stream is up (tp_up); its id's later events go to the process's
 * channel. Takes cm_lock. */
void cm_data_up(struct cm_client *c);

#endif
