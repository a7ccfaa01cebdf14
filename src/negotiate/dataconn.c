/* dataconn.c - the client's data connection: its address and route
 * resolved ahead towards the beacon's hint while the hello makes its round
 * trip, then the connection to the port the answer names. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "base/log.h"
#include "base/proc.h"
#include "base/proto.h"

#include "negotiate/internal.h"

/* With the beacon's hint, start resolving the data id's address at once:
 * TCP's handshake and the hello's round trip hide it (cm_data_pre_route and
 * data_resolve go on from there). The neighbour entry is fresh (the probe
 * just resolved the same address), so a short time-out does; an error is
 * dealt with by data_resolve. */
void cm_data_pre_resolve(struct cm_client *c)
{
	struct sockaddr_storage dst;

	if (!c->hint)
		return;
	memcpy(&dst, &c->peer, sizeof(dst));
	sa_set_port((struct sockaddr *)&dst, c->hint);
	if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&dst, RESOLVE_FIRST_MS) == 0)
		c->pre = RESOLVE_ADDR;
}

/* If the address resolved meanwhile, ask for the route too (no wait). */
void cm_data_pre_route(struct cm_client *c)
{
	struct rdma_cm_event *ev;

	if (c->pre != RESOLVE_ADDR || rdma_get_cm_event(c->ch, &ev))
		return; /* not yet: data_resolve waits for it */
	if (ev->event == RDMA_CM_EVENT_ADDR_RESOLVED)
		c->pre = rdma_resolve_route(c->id, cm_settings.handshake_ms) ? -1 : RESOLVE_ROUTE;
	else /* ADDR_ERROR: the id is bound again */
		c->pre = ev->event == RDMA_CM_EVENT_ADDR_ERROR ? RESOLVE_NEW : -1;
	cm_ack(ev);
}

/* The data id afresh, bound where the first one was (its resolution went
 * towards a port that HELLO_ACK did not name). 0 or -errno. */
static int data_id_renew(struct cm_client *c)
{
	rdma_destroy_id(c->id); /* the kernel drops the events it had not given us */
	c->id = NULL;
	c->pre = RESOLVE_NEW;
	if (rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP)) {
		c->id = NULL;
		return -errno;
	}
	return rdma_bind_addr(c->id, (struct sockaddr *)&c->src) ? -errno : 0;
}

/* Resolve the data id's address and route towards dst (HELLO_ACK's port),
 * going on from what cm_data_pre_resolve and cm_data_pre_route began if the
 * hint was right. 0 or -errno. */
static int data_resolve(struct cm_client *c, struct sockaddr *dst, int64_t deadline)
{
	int rc;

	if (c->pre < 0 || (c->pre && sa_port(dst) != c->hint)) {
		log_debug("data connection: resolved again (hint %u, port %u)", c->hint, sa_port(dst));
		if ((rc = data_id_renew(c)))
			return rc;
	}
	return cm_resolve_from(c->ch, c->id, NULL, dst, deadline, c->pre);
}

/* The data connection to the port the answer a named, with the rings it
 * describes: 0, or -errno with *why. */
int cm_data_connect(struct cm_client *c, const struct proto_hello_ack *a,
			enum rsock_fallback_reason *why)
{
	struct sockaddr_storage dst;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev = NULL;
	int rc;

	*why = RSOCK_FB_PROTOCOL;
	if (a->token != c->token ||
	    tp_set_peer(c->tp, a->ring_addr, a->ring_rkey, a->ring_size, a->max_inline, a->version))
		return -EPROTO;
	memcpy(&dst, &c->peer, sizeof(dst));
	sa_set_port((struct sockaddr *)&dst, a->rdma_port);
	*why = RSOCK_FB_NO_DEVICE;
	if ((rc = data_resolve(c, (struct sockaddr *)&dst, c->deadline))) {
		log_debug("data connection: resolve failed (%d)", rc);
		return rc;
	}
	uint64_t wire_token = htole64(c->token); /* little-endian on the wire */
	tp_conn_param(&cp, &wire_token, sizeof(wire_token));
	cp.qp_num = tp_own_qp_num(c->tp);
	*why = RSOCK_FB_PEER;
	if (rdma_connect(c->id, &cp))
		return -errno;
	/* The QP is not the id's: the reply comes as CONNECT_RESPONSE, and we
	 * move the QP to RTR and RTS (tp_create_qp) and send the RTU. */
	rc = cm_wait_event(c->ch, RDMA_CM_EVENT_CONNECT_RESPONSE, c->deadline, &ev);
	cm_ack(ev);
	if (rc == 0 && ((rc = tp_create_qp(c->tp, c->id)) || (rc = rdma_establish(c->id) ? -errno : 0)))
		*why = RSOCK_FB_RESOURCES;
	if (rc)
		log_debug("data connection: not established (%d)", rc);
	return rc;
}

/* The stream is up: its id's later events (a disconnect) go to the
 * process's channel, which the library's thread acknowledges: one descriptor less
 * per stream. */
void cm_data_up(struct cm_client *c)
{
	tp_up(c->tp);
	pthread_mutex_lock(&cm_lock);
	c->id->context = NULL;
	if (cm_ch && cm_thread_pid == rsock_pid() && rdma_migrate_id(c->id, cm_ch) == 0) {
		cm_channel_free(c->tp->ch);
		c->tp->ch = NULL;
	}
	pthread_mutex_unlock(&cm_lock);
	cm_fault_up(c->tp);
}
