/* ucm.h - a minimal client of the kernel's rdma_cm through its user ABI
 * (/dev/infiniband/rdma_cm, <rdma/rdma_user_cm.h>), used by the beacon.
 *
 * librdmacm opens the RDMA device (a verbs context) in user space as soon as
 * an id is bound to an address or receives a connect request, and a forked
 * child can never use its parent's context (the kernel refuses it). Talking
 * to the kernel's connection manager directly, listening and answering
 * probes needs no device in user space at all: a server that only listens
 * (the master of a listen-then-fork server, a postmaster) never opens one,
 * and the processes it forks open their own. doc/design.md, "Descriptors, fork, exec". */
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

/* Destroy an id (its pending events are dropped). Returns 0 or -errno. */
int ucm_destroy(int fd, uint32_t id);

/* The next event: 1 with *ev filled, 0 when there is none, or -errno. */
int ucm_get_event(int fd, struct ucm_event *ev);

/* Reject a connect request, with private data (at most 148 bytes on IB and
 * RoCE). Returns 0 or -errno. */
int ucm_reject(int fd, uint32_t id, const void *pdata, uint8_t len);

#endif
