/* probe.c - the client's probe of the peer's beacon: an rdma_cm connect
 * request carrying the stream's tuple, sent through the kernel's user ABI
 * (ucm.h), always rejected, with the beacon's answer in the reject's
 * private data (doc/design.md, "Choosing a path"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/random.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/ownfd.h"
#include "base/proto.h"
#include "base/real.h"

#include "negotiate/internal.h"

/* IB CM reject reasons (IBA 12.6.7.2) that say something about the peer. */
#define CM_REJ_NO_RESOURCES 3
#define CM_REJ_STALE_CONN 10
#define CM_REJ_CONSUMER 28

/* Each probe has a connection-manager file of its own (ucm.h), closed
 * with it: no verbs device is opened and no rdma-core provider loaded for
 * it, so a connect to a plain peer costs the route's resolution and one
 * REQ/REJ exchange. Every event on the file is about the one id it holds at
 * a time (destroying an id drops the events the kernel had not given). */

/* The next event about id by deadline: 0 when it is `want`, else -errno
 * as cm_wait_event() maps it (-ECONNREFUSED for a reject, *ev holding it);
 * -ETIMEDOUT with ev->event RDMA_CM_EVENT_ADDR_ERROR when the kernel gave
 * up resolving, with ev->event ~0 when no event came at all. */
static int probe_event(int fd, uint32_t id, uint32_t want, int64_t deadline, struct ucm_event *ev)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int rc;

	ev->event = ~0u;
	for (;;) {
		while ((rc = ucm_get_event(fd, ev)) == 1 && ev->id != id)
			;
		if (rc < 0)
			return rc;
		if (rc == 1)
			break;
		if (rsock_real.poll(&p, 1, clock_left_ms(deadline)) == 0) {
			ev->event = ~0u;
			return -ETIMEDOUT;
		}
	}
	if (ev->event == want)
		return 0;
	switch (ev->event) {
	case RDMA_CM_EVENT_REJECTED:
		return -ECONNREFUSED;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return ev->status < 0 ? ev->status : -EHOSTUNREACH;
	case RDMA_CM_EVENT_UNREACHABLE:
		return -EHOSTUNREACH;
	default:
		return -ECONNRESET;
	}
}

/* Resolve id's address and route towards the peer, as cm_resolve_from()
 * does: address resolution retried with time-outs from 25 ms, doubling,
 * since the kernel's resolver may not notice a neighbour entry it asked for
 * become valid. 0 or -errno. */
static int probe_resolve(int fd, uint32_t id, const struct sockaddr *src, const struct sockaddr *dst,
			 int64_t deadline)
{
	struct ucm_event ev;
	int rc, step = RESOLVE_FIRST_MS;

	for (;;) {
		int t = clock_left_ms(deadline);
		if ((rc = ucm_resolve_ip(fd, id, src, dst, (t > step ? step : t) ?: 1)))
			return rc;
		rc = probe_event(fd, id, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, &ev);
		if (rc != -ETIMEDOUT || ev.event == ~0u || clock_left_ms(deadline) == 0)
			break;
		step *= 2; /* ADDR_ERROR with ETIMEDOUT: the id is bound, try anew */
	}
	if (rc || (rc = ucm_resolve_route(fd, id, clock_left_ms(deadline) ?: 1)))
		return rc;
	return probe_event(fd, id, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, &ev);
}

/* One probe request and its answer: 1 (a librsock beacon answered: c->hint
 * is its data port hint), 0 (a plain peer), -EAGAIN (a transient reject:
 * try again), or -errno. */
static int probe_once(struct cm_client *c, int fd, uint16_t cport, int64_t deadline)
{
	struct proto_probe pr = {.version = PROTO_VERSION};
	uint8_t buf[PROTO_PROBE_LEN];
	struct sockaddr_storage src;
	struct ucm_event ev;
	uint32_t id, qpn = 0;
	int rc;

	if ((rc = ucm_create(fd, 1, &id))) /* (the kernel drops the events of uid 0) */
		return rc;
	memcpy(&src, &c->local, sizeof(src));
	sa_set_port((struct sockaddr *)&src, 0);
	rc = probe_resolve(fd, id, (struct sockaddr *)&src, (struct sockaddr *)&c->peer, deadline);
	if (rc) {
		log_debug("probe: address/route resolution failed (%d)", rc);
		goto out;
	}
	pr.family = c->peer.ss_family;
	pr.client_port = cport;
	pr.server_port = sa_port((struct sockaddr *)&c->peer);
	sa_addr16((struct sockaddr *)&c->local, pr.client_addr);
	sa_addr16((struct sockaddr *)&c->peer, pr.server_addr);
	proto_probe_encode(&pr, buf, sizeof(buf));
	/* No QP: the request is always rejected. The peer's CM still keys
	 * requests by (our device, QP number), and concurrent probes with one
	 * number would be rejected as stale connections: each gets its own,
	 * from the top of the 24-bit space where real QPs rarely are. */
	if (getrandom(&qpn, sizeof(qpn), 0) != sizeof(qpn))
		qpn = (uint32_t)clock_now_ms() * 2654435761u;
	if ((rc = ucm_connect(fd, id, 0x800000u | (qpn & 0x7fffffu), buf, sizeof(buf))))
		goto out;
	rc = probe_event(fd, id, RDMA_CM_EVENT_ESTABLISHED, deadline, &ev);
	if (rc == -ECONNREFUSED) {
		struct proto_beacon b;
		int d = proto_beacon_decode(ev.pdata, ev.pdata_len, &b);
		log_debug("probe: rejected (status %d, %u bytes of private data, beacon %d)",
			  ev.status, ev.pdata_len, d);
		if (d <= 0 && (ev.status == CM_REJ_STALE_CONN || ev.status == CM_REJ_NO_RESOURCES))
			rc = -EAGAIN;
		else
			rc = d > 0;
		if (d > 0)
			c->hint = b.data_port;
	} else if (rc == 0) {
		rc = -EPROTO; /* something accepted a request without a QP */
	}
out:
	ucm_destroy(fd, id);
	return rc;
}

/* Ask the peer's beacon whether librsock serves the port (doc/design.md
 * "Choosing a path"). Returns 1, 0 (a plain peer), or -errno (-EAGAIN: the
 * peer's CM kept refusing for want of resources; not the peer's nature). */
int cm_probe(struct cm_client *c, uint16_t cport)
{
	int64_t deadline = clock_now_ms() + cm_settings.probe_ms;
	int rc = -EAGAIN, fd = ucm_open();

	if (fd < 0)
		return fd;
	fd = ownfd_move(fd);
	for (int i = 0; i < 4 && rc == -EAGAIN && clock_left_ms(deadline) > 0; i++)
		rc = probe_once(c, fd, cport, deadline);
	ownfd_close(fd);
	return rc;
}
