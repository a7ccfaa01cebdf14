/* probe.c - the client's probe of the peer's beacon: an rdma_cm connect
 * request carrying the stream's tuple, always rejected, with the beacon's
 * answer in the reject's private data (doc/design.md, "Choosing a path"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/proto.h"

#include "negotiate/internal.h"

/* IB CM reject reasons (IBA 12.6.7.2) that say something about the peer. */
#define CM_REJ_NO_RESOURCES 3
#define CM_REJ_STALE_CONN 10
#define CM_REJ_CONSUMER 28

/* A probe request goes out on its own id (*id; the caller destroys it),
 * on the stream's event channel c->ch. The data id asks nothing before the
 * probe is answered, so every event there is the probe's until its id is
 * destroyed, which drops the events the kernel had not given us. */

/* Send one probe request. 0 (sent: probe_wait() for the answer) or -errno. */
static int probe_send(struct cm_client *c, uint16_t cport, int64_t deadline, struct rdma_cm_id **id)
{
	struct proto_probe pr = {.version = PROTO_VERSION};
	uint8_t buf[PROTO_PROBE_LEN];
	struct rdma_conn_param cp;
	struct sockaddr_storage src;
	uint32_t qpn = 0;
	int rc;

	if (rdma_create_id(c->ch, id, NULL, RDMA_PS_TCP)) {
		*id = NULL;
		return -errno;
	}
	memcpy(&src, &c->local, sizeof(src));
	sa_set_port((struct sockaddr *)&src, 0);
	rc = cm_resolve(c->ch, *id, (struct sockaddr *)&src, (struct sockaddr *)&c->peer, deadline);
	if (rc) {
		log_debug("probe: address/route resolution failed (%d)", rc);
		return rc;
	}
	pr.family = c->peer.ss_family;
	pr.client_port = cport;
	pr.server_port = sa_port((struct sockaddr *)&c->peer);
	sa_addr16((struct sockaddr *)&c->local, pr.client_addr);
	sa_addr16((struct sockaddr *)&c->peer, pr.server_addr);
	proto_probe_encode(&pr, buf, sizeof(buf));
	tp_conn_param(&cp, buf, sizeof(buf));
	/* No QP: the request is always rejected. The peer's CM still keys
	 * requests by (our device, QP number), and concurrent probes with one
	 * number would be rejected as stale connections: each gets its own,
	 * from the top of the 24-bit space where real QPs rarely are. */
	if (getrandom(&qpn, sizeof(qpn), 0) != sizeof(qpn))
		qpn = (uint32_t)clock_now_ms() * 2654435761u;
	cp.qp_num = 0x800000u | (qpn & 0x7fffffu);
	if (rdma_connect(*id, &cp))
		return -errno;
	return 0;
}

/* The answer to a probe sent. Returns 1 (a librsock beacon answered:
 * c->hint is its data port hint), 0 (a plain peer), -EAGAIN (a transient
 * reject: try again), or -errno. */
static int probe_wait(struct cm_client *c, int64_t deadline)
{
	struct rdma_cm_event *ev = NULL;
	int rc = cm_wait_event(c->ch, RDMA_CM_EVENT_ESTABLISHED, deadline, &ev);

	if (rc == -ECONNREFUSED) {
		struct proto_beacon b;
		int d = ev->param.conn.private_data
				? proto_beacon_decode(ev->param.conn.private_data,
						      ev->param.conn.private_data_len, &b)
				: -EPROTO;
		log_debug("probe: rejected (status %d, %u bytes of private data, beacon %d)",
			  ev->status, ev->param.conn.private_data_len, d);
		if (d <= 0 && (ev->status == CM_REJ_STALE_CONN || ev->status == CM_REJ_NO_RESOURCES))
			rc = -EAGAIN;
		else
			rc = d > 0;
		if (d > 0)
			c->hint = b.data_port;
	} else if (rc == 0) {
		rc = -EPROTO; /* something accepted a request without a QP */
	}
	cm_ack(ev);
	return rc;
}

/* Ask the peer's beacon whether librsock serves the port (doc/design.md
 * "Choosing a path"). Returns 1, 0 (a plain peer), or -errno (-EAGAIN: the peer's
 * CM kept refusing for want of resources; not the peer's nature). While
 * the first request makes its round trip, the stream's rings and CQ are
 * made ready (cm_client_prepare). */
int cm_probe(struct cm_client *c, uint16_t cport, const struct cm_bufs *bufs)
{
	int64_t deadline = clock_now_ms() + cm_settings.probe_ms;
	int rc = -EAGAIN;

	for (int i = 0; i < 4 && rc == -EAGAIN && clock_left_ms(deadline) > 0; i++) {
		struct rdma_cm_id *id = NULL;
		if ((rc = probe_send(c, cport, deadline, &id)) == 0) {
			if (i == 0)
				cm_client_prepare(c, bufs); /* failures are seen again after */
			rc = probe_wait(c, deadline);
		}
		if (id)
			rdma_destroy_id(id);
	}
	return rc;
}
