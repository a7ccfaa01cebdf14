/* rsock.h - the small public API of librsock.
 *
 * Applications do not need it: librsock works on unmodified programs. It is
 * for tools and tests that want to know what the library did. A program that
 * may run without the library should look the functions up at run time
 * (dlsym(RTLD_DEFAULT, "rsock_stats_get")) rather than link against them. */
#ifndef RSOCK_RSOCK_H
#define RSOCK_RSOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the library, e.g. "0.1.0". Never NULL. */
const char *rsock_version(void);

enum rsock_transport {
	RSOCK_TRANSPORT_NONE = 0,  /* not a stream socket the library tracks */
	RSOCK_TRANSPORT_UNDECIDED, /* tracked, not connected yet */
	RSOCK_TRANSPORT_TCP,       /* carried by kernel TCP */
	RSOCK_TRANSPORT_RDMA,      /* carried by RDMA */
	RSOCK_TRANSPORT_SHM,       /* carried by memory shared with a process of this host
	                              (API version 2) */
};

/* The API's version: 2 added RSOCK_TRANSPORT_SHM and the stats' _shm fields. */
#define RSOCK_API_VERSION 2

/* Which transport carries fd. Returns an enum rsock_transport value, or -1
 * with errno EBADF when fd is not an open descriptor. */
int rsock_fd_transport(int fd);

/* Fallback reasons counted in rsock_stats.fallbacks[]. */
enum rsock_fallback_reason {
	RSOCK_FB_RULES = 0,   /* an RSOCK_CONF rule or RSOCK_MODE=tcp said TCP */
	RSOCK_FB_NO_DEVICE,   /* no RDMA device, or no RDMA route to the peer */
	RSOCK_FB_PEER,        /* the peer does not run librsock (or refused RDMA) */
	RSOCK_FB_RESOURCES,   /* out of memory, queue pairs or registrations */
	RSOCK_FB_PROTOCOL,    /* the negotiation failed or was malformed */
	RSOCK_FB_NOT_IMPLEMENTED, /* this build has no RDMA transport for the case */
	RSOCK_FB_MAX = 16,
};

struct rsock_stats {
	uint32_t size;            /* bytes filled in by the library */
	uint32_t version;         /* 6 (1 had no handovers, 2 no cq_ counters, 3 no zcopy_bytes,
	                             4 no failovers, 5 no _shm counters) */
	uint64_t streams_tcp;     /* streams (connected or accepted) on kernel TCP */
	uint64_t streams_rdma;    /* streams carried by RDMA */
	uint64_t tx_bytes_tcp, rx_bytes_tcp;
	uint64_t tx_bytes_rdma, rx_bytes_rdma;
	uint64_t fallbacks[RSOCK_FB_MAX];  /* indexed by enum rsock_fallback_reason */
	uint64_t registered_bytes; /* memory registered with RDMA devices now */
	uint64_t tracked_fds;      /* descriptors in the fd table now */
	/* version 2 */
	uint64_t handovers;        /* RDMA streams moved to kernel TCP (exec, fork; design.md 6) */
	/* version 3 */
	uint64_t cq_events;        /* completion events read (each one an interrupt and a read()) */
	uint64_t cq_arms;          /* completion events requested (ibv_req_notify_cq) */
	/* version 4 */
	uint64_t zcopy_bytes;      /* bytes of large blocking sends sent from the application's
	                              own buffer, registered for the call (no copy) */
	/* version 5 */
	uint64_t failovers;        /* RDMA streams moved to kernel TCP because their RDMA
	                              path broke, nothing lost (design.md 5) */
	/* version 6 */
	uint64_t streams_shm;      /* streams carried by memory shared on this host */
	uint64_t tx_bytes_shm, rx_bytes_shm;
};

/* Copy the process-wide counters into *st; size is sizeof(*st) as the caller
 * knows it (older callers pass a smaller size). Returns 0, or -1 with errno
 * EINVAL when st is NULL or size is smaller than the first two fields. */
int rsock_stats_get(struct rsock_stats *st, size_t size);

#ifdef __cplusplus
}
#endif
#endif
