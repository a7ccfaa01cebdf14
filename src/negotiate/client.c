/* client.c - the client side: cm_client_begin (local check, probe),
 * cm_client_hello, cm_client_await (the answer, then the data connection:
 * dataconn.c). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>

#include "base/clock.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/proto.h"
#include "base/real.h"

#include "negotiate/internal.h"

/* The stream's rings and CQ: 0 or -errno (a RSOCK_FB_RESOURCES). Made once
 * the beacon answered, so a plain peer costs none; the QP follows while the
 * hello makes its round trip (cm_client_qp). */
int cm_client_prepare(struct cm_client *c, const struct cm_bufs *bufs)
{
	if (!c->tp) {
		if (tp_new(c->id->verbs, ring_size_for(bufs->rcvbuf, cm_settings.ring_kb * 1024),
			   ring_size_for(bufs->sndbuf, cm_settings.ring_kb * 1024), c->fd, &c->tp))
			return -ENOMEM;
		c->tp->ch = c->ch;
	}
	return tp_create_cq(c->tp) ? -ENOMEM : 0;
}

/* The stream's QP: its own (tp_prepare_qp, INIT on the bound data id's
 * device port), not the id's: the data id may be replaced before it
 * connects (a wrong hint, cm_client_await), and the QP does not have to
 * follow. 0 or -errno (a RSOCK_FB_RESOURCES). */
int cm_client_qp(struct cm_client *c)
{
	return tp_prepare_qp(c->tp, c->id->port_num) ? -ENOMEM : 0;
}

void cm_client_free(struct cm_client *c)
{
	int tp_owns_id;

	if (!c)
		return;
	if (c->shm && c->shm_lfd >= 0)
		ownfd_close(c->shm_lfd);
	if (c->shm)
		cm_shm_client_done(c->token);
	tp_owns_id = c->tp && c->tp->id;
	if (c->tp) {
		if (!tp_owns_id)
			c->tp->ch = NULL;
		tp_close(c->tp, 1);
	}
	if (!tp_owns_id) {
		if (c->id)
			rdma_destroy_id(c->id);
		cm_channel_free(c->ch);
	}
	free(c);
}

void cm_client_abandon(struct cm_client *c)
{
	cm_client_free(c);
}

/* The verbs device behind the route's source address at: c->ch and c->id,
 * bound there, which opens the device in librdmacm (its providers loaded
 * at the first). 0, or -EOPNOTSUPP with *why. */
static int client_device(struct cm_client *c, const struct sockaddr_storage *at,
			 enum rsock_fallback_reason *why)
{
	int e = 0;

	*why = RSOCK_FB_NO_DEVICE;
	if (!(c->ch = cm_channel_new()) || rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP)) {
		e = errno ? errno : ENODEV;
		c->id = NULL;
	} else if (rdma_bind_addr(c->id, (struct sockaddr *)at)) {
		e = errno ? errno : ENODEV;
	}
	if (e || !c->id->verbs) {
		if (e == EMFILE || e == ENFILE) /* (the channel's file, the device's) */
			*why = RSOCK_FB_RESOURCES;
		return -EOPNOTSUPP;
	}
	/* The probe is an rdma_cm connect, which on an iWARP device is a TCP
	 * connection to the peer's port: a plain listener there would accept
	 * it. Only InfiniBand and RoCE devices (their own CM) take part. */
	if (c->id->verbs->device->transport_type != IBV_TRANSPORT_IB) {
		log_debug("connect: the route's device %s is not InfiniBand or RoCE: TCP",
			  ibv_get_device_name(c->id->verbs->device));
		return -EOPNOTSUPP;
	}
	if (!cm_dev_usable(c->id->verbs)) {
		log_debug("connect: the RDMA device was opened by a parent process: TCP");
		*why = RSOCK_FB_NOT_IMPLEMENTED;
		return -EOPNOTSUPP;
	}
	return 0;
}

/* The local check, before any probe: the route's source address towards
 * c->peer (c->local, port 0) has an InfiniBand or RoCE device this process
 * may use. Decided from the routing table and sysfs (cm_dev_local) in
 * some 40 system calls, no device opened; only where sysfs cannot tell does
 * librdmacm decide (client_device, c->id then bound). A route without any
 * enters the negative cache (CM_NEG_NO_DEVICE). 0, or -EOPNOTSUPP with
 * *why. */
static int client_local(struct cm_client *c, enum rsock_fallback_reason *why)
{
	char dev[64];
	int rc = sa_route_source((struct sockaddr *)&c->peer, &c->local);

	if (rc) {
		if (rc == -EMFILE || rc == -ENFILE) /* (its look needs a socket) */
			*why = RSOCK_FB_RESOURCES;
		return -EOPNOTSUPP;
	}
	sa_set_port((struct sockaddr *)&c->local, 0);
	switch (cm_dev_local((struct sockaddr *)&c->local, dev, sizeof(dev))) {
	case CM_LOCAL_NONE:
		log_debug("connect: no InfiniBand or RoCE device behind the route's netdev: TCP");
		cm_neg_insert((struct sockaddr *)&c->peer, CM_NEG_NO_DEVICE);
		return -EOPNOTSUPP;
	case CM_LOCAL_RDMA:
		if (!cm_dev_parent_has(dev))
			return 0;
		log_debug("connect: the RDMA device %s was opened by a parent process: TCP", dev);
		*why = RSOCK_FB_NOT_IMPLEMENTED;
		return -EOPNOTSUPP;
	default:
		return client_device(c, &c->local, why);
	}
}

/* Learn our port before the SYN: bind the TCP socket fd (if unbound), at
 * the route's source unless the application chose an address. 0 with
 * *bound its address, or -errno. */
static int client_bind(struct cm_client *c, int fd, struct sockaddr_storage *bound)
{
	socklen_t bl = sizeof(*bound);

	if (rsock_real.getsockname(fd, (struct sockaddr *)bound, &bl))
		return -errno;
	if (sa_port((struct sockaddr *)bound) == 0) {
		/* Unbound, or bound with IP_BIND_ADDRESS_NO_PORT (curl does
		 * that): the port must be known before the SYN, so allocate it
		 * now, at the address the application chose if it chose one. */
		int off = 0;
		struct sockaddr_storage at;
		memcpy(&at, sa_is_any((struct sockaddr *)bound) ? &c->local : bound, sizeof(at));
		sa_map_for(bound->ss_family, &at); /* c->local is AF_INET for IPv4 */
		rsock_real.setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &off, sizeof(off));
		if (rsock_real.bind(fd, (struct sockaddr *)&at, sa_len((struct sockaddr *)&at)))
			return -errno;
		bl = sizeof(*bound);
		if (rsock_real.getsockname(fd, (struct sockaddr *)bound, &bl))
			return -errno;
		if (sa_port((struct sockaddr *)bound) == 0)
			return -EADDRNOTAVAIL;
	}
	return 0;
}

/* The tuple the probe announces: the bound address and port (c->local),
 * the route's source for the data id (c->src). */
static void client_tuple(struct cm_client *c, const struct sockaddr_storage *bound)
{
	memcpy(&c->src, &c->local, sizeof(c->src));
	memcpy(&c->local, bound, sizeof(*bound));
	sa_unmap(&c->local);
	if (sa_is_any((struct sockaddr *)&c->local)) {
		/* Bound to the wildcard address with a port (dig binds
		 * 0.0.0.0:0, which takes a port at once): the kernel picks the
		 * route's source at connect(), and the beacon must record that
		 * address, not 0.0.0.0. cm_client_hello checks the guess. */
		uint16_t port = sa_port((struct sockaddr *)&c->local);
		memcpy(&c->local, &c->src, sizeof(c->src));
		sa_set_port((struct sockaddr *)&c->local, port);
	}
}

int cm_client_begin(int fd, const struct sockaddr *addr, socklen_t len, const struct cm_bufs *bufs,
		    int shm, struct cm_client **state, enum rsock_fallback_reason *why)
{
	struct cm_client *c;
	struct sockaddr_storage peer, bound;
	int rc;

	*state = NULL;
	*why = RSOCK_FB_NO_DEVICE;
	if ((addr->sa_family != AF_INET && addr->sa_family != AF_INET6) || len < sa_len(addr))
		return -EOPNOTSUPP;
	addr = sa_copy_unmapped(&peer, addr); /* AF_INET for IPv4, whatever the socket */
	if (shm) {
		/* the same-host path first: a local look, microseconds */
		if (!(c = calloc(1, sizeof(*c)))) {
			*why = RSOCK_FB_RESOURCES;
			return -EOPNOTSUPP;
		}
		memcpy(&c->peer, &peer, sizeof(peer));
		c->fd = fd;
		if (cm_shm_client_begin(c, fd) == 0) {
			*state = c;
			return 0;
		}
		free(c);
	}
	if (sa_is_loopback(addr))
		return -EOPNOTSUPP;
	switch (cm_neg_lookup(addr)) {
	case CM_NEG_PEER:
		*why = RSOCK_FB_PEER;
		return -EOPNOTSUPP;
	case CM_NEG_NO_DEVICE:
		log_debug("connect: no InfiniBand or RoCE device behind the route to this peer "
			  "(the negative cache): TCP");
		return -EOPNOTSUPP;
	}
	if (atomic_load_explicit(&tp_creds_stale, memory_order_relaxed)) {
		log_debug("connect: fd %d stays on TCP: this process changed its credentials "
			  "since it opened the RDMA device", fd);
		return -EOPNOTSUPP;
	}
	if (!ownfd_room()) {
		log_debug("connect: fd %d stays on TCP: the limit on open files leaves no room "
			  "at %d and above for the stream's own descriptors", fd, OWNFD_BASE);
		*why = RSOCK_FB_RESOURCES;
		return -EOPNOTSUPP;
	}
	if (!(c = calloc(1, sizeof(*c)))) {
		*why = RSOCK_FB_RESOURCES;
		return -EOPNOTSUPP;
	}
	memcpy(&c->peer, &peer, sizeof(peer));
	if (client_local(c, why) || client_bind(c, fd, &bound))
		goto plain;
	client_tuple(c, &bound);
	c->fd = fd;
	rc = cm_probe(c, sa_port((struct sockaddr *)&bound));
	if (rc != 1) {
		log_debug("probe of port %u: %s (%d)", sa_port(addr), rc == 0 ? "plain peer" : "failed", rc);
		if (rc == 0 || rc == -ETIMEDOUT)
			cm_neg_insert(addr, CM_NEG_PEER);
		*why = rc == 0 || rc == -ETIMEDOUT			    ? RSOCK_FB_PEER
		       : rc == -EAGAIN || rc == -EMFILE || rc == -ENFILE ? RSOCK_FB_RESOURCES
									    : RSOCK_FB_NO_DEVICE;
		goto plain;
	}
	/* A librsock peer: now the device (if sysfs decided), rings and CQ */
	if (!c->id && client_device(c, &c->src, why))
		goto plain;
	if (cm_client_prepare(c, bufs)) {
		*why = RSOCK_FB_RESOURCES;
		goto plain;
	}
	getrandom(&c->token, sizeof(c->token), 0);
	c->probed_ms = clock_now_ms();
	cm_data_pre_resolve(c);
	*state = c;
	return 0;
plain:
	cm_client_free(c);
	return -EOPNOTSUPP;
}

/* Whether the connected stream has the tuple the probe announced (its
 * local address and port), soon enough that the server still holds it
 * (TUPLE_TTL_MS, with a margin). */
static int connected_as_probed(const struct cm_client *c, int fd)
{
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	uint8_t a[16], b[16];

	if (clock_now_ms() - c->probed_ms > TUPLE_TTL_MS / 2) {
		log_debug("hello: not sent on fd %d: the probe is too old", fd);
		return 0;
	}
	if (rsock_real.getsockname(fd, (struct sockaddr *)&me, &ml))
		return 0;
	sa_unmap(&me);
	sa_addr16((struct sockaddr *)&me, a);
	sa_addr16((struct sockaddr *)&c->local, b);
	if (me.ss_family != c->local.ss_family || memcmp(a, b, 16) ||
	    sa_port((struct sockaddr *)&me) != sa_port((struct sockaddr *)&c->local)) {
		log_debug("hello: not sent on fd %d: connected from another address or port "
			  "than the probe announced", fd);
		return 0;
	}
	return 1;
}

/* The hello goes out; the answer is awaited by cm_client_await, at once or
 * later (doc/design.md, "Choosing a path"). 0, or -EOPNOTSUPP with *why
 * (state freed). */
int cm_client_hello(struct cm_client *c, int fd, enum rsock_fallback_reason *why)
{
	struct proto_hello h = {.version = PROTO_VERSION};
	uint8_t buf[PROTO_HELLO_LEN];
	int rc;

	c->deadline = clock_now_ms() + cm_settings.handshake_ms;
	/* The hello goes only where the beacon recorded this very tuple:
	 * otherwise the server's accept() takes the stream for a plain
	 * client, and the hello would reach its application as data. */
	if (!connected_as_probed(c, fd))
		goto fail;
	if ((rc = fault_at(FAULT_HELLO_LATE))) /* (a slow wire: the server gives up first) */
		usleep((useconds_t)rc * 1000);
	h.token = c->token;
	if (c->shm) {
		h.flags = PROTO_HELLO_SHM;
		h.ring_addr = c->shm_secret;
		h.ring_size = c->shm_size;
	} else {
		h.ring_addr = (uintptr_t)c->tp->rx.buf;
		h.ring_rkey = c->tp->rx_mr->rkey;
		h.ring_size = c->tp->rx.size;
	}
	h.max_inline = 0;
	proto_hello_encode(&h, buf, sizeof(buf));
	if ((rc = cm_ctl_write(fd, buf, PROTO_HELLO_LEN, c->deadline))) {
		log_debug("hello: not sent (%d)", rc);
		goto fail;
	}
	log_debug("hello: sent on fd %d, %d ms left", fd, clock_left_ms(c->deadline));
	if (c->shm)
		return 0;
	cm_data_pre_route(c);
	/* while the hello makes its round trip */
	c->qp_why = cm_client_qp(c) ? RSOCK_FB_RESOURCES : 0;
	return 0;
fail:
	cm_client_free(c);
	*why = RSOCK_FB_PROTOCOL;
	return -EOPNOTSUPP;
}

/* Read the server's answer to the hello into *a, waiting until the hello's
 * deadline (a non-blocking socket: at most nonblock_ms). 0, or -errno with
 * *why: -ETIMEDOUT (no answer yet: the client cancels, *stale set),
 * -EPROTO (other bytes came: they are the application's), -ECONNREFUSED
 * (the server declined, its status in *why). */
static int answer_read(struct cm_client *c, int fd, int nb, struct proto_hello_ack *a,
		       int *stale, enum rsock_fallback_reason *why)
{
	uint8_t buf[PROTO_MSG_MAX_LEN];
	int64_t deadline = c->deadline;
	ssize_t r;
	int rc;

	/* Only the answer's wait is shortened for a non-blocking socket: once
	 * it came, the server waits for our connection, which is quick. */
	int64_t answer_by = deadline;
	unsigned nb_ms = cm_settings.nonblock_ms == CM_NONBLOCK_DEFAULT ? cm_settings.handshake_ms / 2
									 : cm_settings.nonblock_ms;
	if (nb && clock_now_ms() + nb_ms < answer_by)
		answer_by = clock_now_ms() + nb_ms;
	r = cm_ctl_peek_hello(fd, buf, 1, answer_by);
	log_debug("hello: answer %zd, %d ms left", r, clock_left_ms(deadline));
	if (r == -ETIMEDOUT) {
		if (answer_by != deadline)
			log_info("connect: fd %d: no answer to the hello within %u ms (RSOCK_NONBLOCK_MS) "
				 "on a non-blocking socket (a server that accepts late?): TCP",
				 fd, nb_ms);
		*stale = CM_STALE_ACK; /* the answer may still come: drop it then */
		*why = RSOCK_FB_PEER;
		return -ETIMEDOUT;
	}
	if (r <= 0 || (rc = proto_hello_ack_decode(buf, (size_t)r, a)) <= 0) {
		/* Not an answer: a librsock server that saw our hello only after
		 * writing application bytes; those bytes stay for the application. */
		*why = RSOCK_FB_PROTOCOL;
		return -EPROTO;
	}
	cm_ctl_consume(fd, (size_t)rc);
	if (a->status) {
		*why = a->status < RSOCK_FB_MAX ? a->status : RSOCK_FB_PROTOCOL;
		return -ECONNREFUSED;
	}
	return 0;
}

int cm_client_await(struct cm_client *c, int fd, int rdma_ok, int nb,
		    struct path_stream **out, int *stale, enum rsock_fallback_reason *why)
{
	struct proto_hello_ack a;
	uint8_t cancel[CM_CANCEL_LEN];
	int rc;

	*out = NULL;
	*stale = CM_STALE_NONE;
	if ((rc = fault_at(FAULT_ANSWER_SLOW))) /* (a stopped client: the server gives up first) */
		usleep((useconds_t)rc * 1000);
	if ((rc = answer_read(c, fd, nb, &a, stale, why))) {
		if (rc == -ETIMEDOUT)
			goto fail;
		goto fail_nocancel;
	}
	if (c->shm) {
		/* The server took its decision; the set-up connection carries
		 * ours (nothing more on TCP). */
		*why = rdma_ok ? RSOCK_FB_PROTOCOL : RSOCK_FB_NOT_IMPLEMENTED;
		if (cm_shm_client_await(c, fd, &a, rdma_ok, out))
			goto fail_nocancel;
		cm_client_free(c);
		log_debug("connect: fd %d carried by the same-host path", fd);
		return 0;
	}
	if (!rdma_ok) {
		*why = RSOCK_FB_NOT_IMPLEMENTED; /* declined: the stream goes to exec or stdio */
		goto fail;
	}
	if (c->qp_why) {
		*why = c->qp_why; /* the server waits for our connection or a cancel */
		goto fail;
	}
	if (cm_data_connect(c, &a, why))
		goto fail;
	cm_data_up(c);
	*out = &c->tp->s; /* handed upward as a path (path.h) */
	free(c);
	log_debug("connect: fd %d carried by RDMA", fd);
	return 0;
fail:
	/* Tell the server we stay on TCP; whatever follows is application data. */
	cm_ctl_write(fd, cancel, (size_t)cm_cancel_encode(cancel), clock_now_ms() + 1000);
fail_nocancel:
	cm_client_free(c);
	return -EOPNOTSUPP;
}
