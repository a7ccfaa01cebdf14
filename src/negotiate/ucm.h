/* ucm.h - a minimal client of the kernel's rdma_cm through its user ABI
 * (/dev/infiniband/rdma_cm, <rdma/rdma_user_cm.h>), used by the beacon and
 * the client's probe.
 *
 * librdmacm opens the RDMA device (a verbs context) in user space as soon as
 * an id is bound to an address or receives a connect request, and a forked
 * child can never use its parent's context (the kernel refuses it). Talking
 * to the kernel's connection manager directly, listening and answering
 * probes needs no device in user space at all: a server that only listens
 * (the master of a listen-then-fork server, a postmaster) never opens one,
 * and the processes it forks open their own; a client that probes a plain
 * peer opens none either (nor loads rdma-core's providers).
 * doc/design.md, "Descriptors, fork, exec". */
#ifndef RSOCK_UCM_H
#define RSOCK_UCM_H

#include <stdint.h>
#include <sys/socket.h>

#include "base/compiler.h"

/* The kernel's enum rdma_cm_event_type (same values as librdmacm's). */
#define UCM_EVENT_CONNECT_REQUEST 4

struct ucm_event {
	uint64_t uid;       /* the listening id's user value */
	uint32_t id;        /* the id the event is about (a new one for a request) */
	uint32_t event;
	int32_t status;
	uint8_t pdata_len;
	uint8_t pdata[256];
};

/* A connection-manager file: non-blocking, close-on-exec. Returns the
 * descriptor or -errno. */
int ucm_open(void);

/* A listening id on addr (RDMA_PS_TCP) whose events carry uid. Returns 0
 * and *id, or -errno (-EADDRINUSE, -ENODEV ...). */
int ucm_listen(int fd, const struct sockaddr *addr, socklen_t len, uint64_t uid, uint32_t *id,
	       int backlog);

/* A new id (RDMA_PS_TCP, RC) whose events carry uid, which must not be 0
 * (the kernel queues no events for uid 0). 0 and *id, or -errno. */
int ucm_create(int fd, uint64_t uid, uint32_t *id);

/* Resolve id's address from src (port 0; bound by the first call) to dst
 * (AF_INET or AF_INET6), within timeout_ms: ADDR_RESOLVED or ADDR_ERROR
 * follows. 0 or -errno. */
int ucm_resolve_ip(int fd, uint32_t id, const struct sockaddr *src, const struct sockaddr *dst,
		   int timeout_ms);

/* Resolve id's route: ROUTE_RESOLVED or ROUTE_ERROR follows. 0 or -errno. */
int ucm_resolve_route(int fd, uint32_t id, int timeout_ms);

/* A connect request from id with private data (at most 56 bytes on IB and
 * RoCE) on behalf of QP number qpn, which need not exist: the kernel's CM
 * sends it as the REQ's QP number. 0 or -errno. */
int ucm_connect(int fd, uint32_t id, uint32_t qpn, const void *pdata, uint8_t len);

/* Destroy an id (its pending events are dropped). Returns 0 or -errno. */
int ucm_destroy(int fd, uint32_t id);

/* The next event: 1 with *ev filled, 0 when there is none, or -errno. */
int ucm_get_event(int fd, struct ucm_event *ev);

/* Reject a connect request, with private data (at most 148 bytes on IB and
 * RoCE). Returns 0 or -errno. */
int ucm_reject(int fd, uint32_t id, const void *pdata, uint8_t len);

#endif
