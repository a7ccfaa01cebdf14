/* rdmacm.c - rdma_cm helpers: the library's event channels, waiting for
 * an event, address and route resolution. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#include "base/clock.h"
#include "base/ownfd.h"
#include "base/real.h"

#include "negotiate/internal.h"

struct rdma_event_channel *cm_channel_new(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	if (ch) {
		fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
		ch->fd = ownfd_move(ch->fd); /* out of the application's way */
	}
	return ch;
}

void cm_channel_free(struct rdma_event_channel *ch)
{
	if (!ch)
		return;
	ownfd_forget(ch->fd);
	rdma_destroy_event_channel(ch);
}

/* Wait on a private channel for `want`. On success *ev holds the event (ack
 * it). Any other event is returned in *ev too, with -ECONNREFUSED for
 * REJECTED and another -errno otherwise. -ETIMEDOUT after timeout_ms. */
int cm_wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int64_t deadline,
		      struct rdma_cm_event **ev)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};

	*ev = NULL;
	for (;;) {
		if (rdma_get_cm_event(ch, ev) == 0)
			break;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		int r = rsock_real.poll(&p, 1, clock_left_ms(deadline));
		if (r == 0)
			return -ETIMEDOUT;
	}
	if ((*ev)->event == want)
		return 0;
	switch ((*ev)->event) {
	case RDMA_CM_EVENT_REJECTED:
		return -ECONNREFUSED;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return (*ev)->status < 0 ? (*ev)->status : -EHOSTUNREACH;
	case RDMA_CM_EVENT_UNREACHABLE:
		return -EHOSTUNREACH;
	default:
		return -ECONNRESET;
	}
}

void cm_ack(struct rdma_cm_event *ev)
{
	if (ev)
		rdma_ack_cm_event(ev);
}

/* Resolve address and route of id towards dst (src may be NULL), going on
 * from what was already asked: RESOLVE_NEW nothing, RESOLVE_ADDR the address
 * (with a 25 ms time-out, as here), RESOLVE_ROUTE the route too.
 *
 * Address resolution is retried with growing time-outs (25 ms, doubling)
 * until the deadline: the kernel's rdma_cm resolver does not always notice
 * that the neighbour entry it asked for became valid, and then reports only
 * when its own time-out expires (measured on soft-RoCE: a cold ARP cache
 * always costs the full time-out given). A short first attempt followed by a
 * retry finds the entry that the first one made the kernel resolve. */

int cm_resolve_from(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct sockaddr *src,
			struct sockaddr *dst, int64_t deadline, int asked)
{
	struct rdma_cm_event *ev;
	int rc = 0, step = RESOLVE_FIRST_MS;

	for (; asked < RESOLVE_ROUTE; asked = RESOLVE_NEW) {
		int t = clock_left_ms(deadline);
		if (t > step)
			t = step;
		if (asked == RESOLVE_NEW && rdma_resolve_addr(id, src, dst, t ?: 1))
			return -errno;
		rc = cm_wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, &ev);
		cm_ack(ev);
		if (rc != -ETIMEDOUT || !ev || clock_left_ms(deadline) == 0)
			break;
		/* ADDR_ERROR with ETIMEDOUT: the id is bound again, try anew
		 * (the source is bound already). */
		src = NULL;
		step *= 2;
	}
	if (rc)
		return rc;
	if (asked < RESOLVE_ROUTE && rdma_resolve_route(id, clock_left_ms(deadline) ?: 1))
		return -errno;
	rc = cm_wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, &ev);
	cm_ack(ev);
	return rc;
}

int cm_resolve(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct sockaddr *src,
		   struct sockaddr *dst, int64_t deadline)
{
	return cm_resolve_from(ch, id, src, dst, deadline, RESOLVE_NEW);
}
