/* beacon.c - the beacons of this process's listening sockets (through
 * ucm.h), their answers to probes, and the per-process data listeners. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/proto.h"

#include "negotiate/internal.h"

struct beacon *cm_beacons;
struct listener *cm_listeners;

/* The port of this process's data listener on the probe's server address,
 * or 0: the beacon's hint (proto.h), so that the client can resolve its
 * data connection while the hello makes its round trip. Only a hint: in a
 * listen-then-fork server another process accepts (the master has no
 * listener, so gives none). Caller holds cm_lock. */
static uint16_t data_port_hint(const struct proto_probe *pr)
{
	for (struct listener *l = cm_listeners; l; l = l->next) {
		uint8_t a[16];
		if (l->pid != rsock_pid() || l->addr.ss_family != pr->family)
			continue;
		sa_addr16((struct sockaddr *)&l->addr, a);
		if (!memcmp(a, pr->server_addr, 16))
			return sa_port((struct sockaddr *)&l->addr);
	}
	return 0;
}

/* A connect request on a beacon (through ucm): a valid probe, whose tuple is
 * now recorded for accept(), gets the beacon; anything else is rejected
 * without private data (the sender then stays on TCP). A client told
 * "librsock listens here" sends its hello on TCP, so the server must be able
 * to recognise that stream. */
void cm_beacon_request(const struct ucm_event *ev)
{
	struct proto_beacon pb = {.version = PROTO_VERSION, .flags = 0};
	uint8_t buf[PROTO_BEACON_LEN];
	struct proto_probe pr;
	struct beacon *bc;
	uint8_t want[16];
	int ok = 0;

	pthread_mutex_lock(&cm_lock);
	for (bc = cm_beacons; bc; bc = bc->next)
		if ((uintptr_t)bc == ev->uid && bc->pid == rsock_pid())
			break;
	if (bc) {
		sa_addr16((struct sockaddr *)&bc->addr, want);
		ok = proto_probe_decode(ev->pdata, ev->pdata_len, &pr) > 0 &&
		     (sa_is_any((struct sockaddr *)&bc->addr) || !memcmp(want, pr.server_addr, 16)) &&
		     cm_tuple_put(&pr) == 0;
		if (ok)
			pb.data_port = data_port_hint(&pr);
	}
	pthread_mutex_unlock(&cm_lock);
	if (ok) {
		log_debug("beacon: probe from port %u to port %u (data port %u)", pr.client_port,
			  pr.server_port, pb.data_port);
		proto_beacon_encode(&pb, buf, sizeof(buf));
		ucm_reject(cm_ucm, ev->id, buf, sizeof(buf));
	} else {
		log_debug("beacon: connect request without a valid probe (%u bytes)", ev->pdata_len);
		ucm_reject(cm_ucm, ev->id, NULL, 0);
	}
	ucm_destroy(cm_ucm, ev->id);
}

void cm_listen(const void *owner, const struct sockaddr *addr, socklen_t len)
{
	struct beacon *b;
	struct sockaddr_storage ss;
	char iwarp[64];
	int rc;

	if (sa_is_loopback(addr) || len > sizeof(ss))
		return;
	/* A limit on open files that leaves its streams no room above the
	 * application's numbers: no stream could be carried, and the beacon's
	 * descriptors (the library's thread's) would take the application's. */
	if (!ownfd_room()) {
		log_debug("listen: no beacon on port %u: the limit on open files leaves no room "
			  "at %d and above for the library's descriptors", sa_port(addr), OWNFD_BASE);
		return;
	}
	/* An rdma_cm listen on the wildcard address listens on every device,
	 * and an iWARP device's listen takes TCP's port itself (in hardware,
	 * or in the kernel for a software one): the application's own
	 * listener could lose its connections to it. */
	if (cm_iwarp_device("/sys/class/infiniband", iwarp, sizeof(iwarp))) {
		static atomic_flag told = ATOMIC_FLAG_INIT;
		if (!atomic_flag_test_and_set(&told))
			log_info("listen: this host has an iWARP RDMA device (%s), which carries its "
				 "connections on TCP ports: listeners get no beacon and their streams "
				 "stay on TCP", iwarp);
		return;
	}
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, addr, len);
	/* A listener on ::ffff:a.b.c.d (Java binds so) hears IPv4 clients,
	 * whose probes name the AF_INET address: so does its beacon. */
	sa_unmap(&ss);
	b = calloc(1, sizeof(*b));
	if (!b)
		return;
	b->obj.kind = CTX_BEACON;
	b->owner = owner;
	memcpy(&b->addr, &ss, sizeof(ss));
	pthread_mutex_lock(&cm_lock);
	if (cm_start()) /* (first: a host without rdma_cm makes no table) */
		goto fail;
	if (cm_tuples_create())
		goto fail;
	/* The TCP listener's port on the wildcard address, so that probes for
	 * any address reach it (those for another address than the listener's
	 * are refused); if another process holds that, the listener's own
	 * address. Through ucm, no device is opened in this process (ucm.h):
	 * the workers a listen-then-fork server forks open their own. Where
	 * the address has no RDMA device, the bind fails harmlessly (the
	 * streams stay on TCP). */
	sa_wildcard(&ss);
	rc = ucm_listen(cm_ucm, (struct sockaddr *)&ss, sa_len((struct sockaddr *)&ss),
			(uintptr_t)b, &b->kid, 128);
	/* The port is taken: rdma_cm says EADDRNOTAVAIL (cma_check_port) or
	 * EADDRINUSE; a wildcard bind needs no device, so it means nothing
	 * else. When the own address is taken too, the holder is most likely
	 * another listener of this port (SO_REUSEPORT); if not, its streams
	 * are only looked up in the table in vain. */
	if (rc == -EADDRINUSE || rc == -EADDRNOTAVAIL) {
		memcpy(&ss, &b->addr, sizeof(ss));
		rc = ucm_listen(cm_ucm, (struct sockaddr *)&ss, sa_len((struct sockaddr *)&ss),
				(uintptr_t)b, &b->kid, 128);
		b->shared = rc != 0;
	}
	if (b->shared) {
		/* Another listener's beacon (this process's or another's) has
		 * the port: it answers for this listener too, and the streams
		 * it announced may be accepted here (cm_server_probed). */
		log_debug("port %u: another listener's beacon answers for it", sa_port(addr));
	} else if (rc) {
		log_debug("no beacon on port %u (%d): its streams stay on TCP", sa_port(addr), rc);
		goto fail;
	}
	b->pid = rsock_pid();
	b->next = cm_beacons;
	cm_beacons = b;
	pthread_mutex_unlock(&cm_lock);
	log_debug("beacon up on port %u", sa_port(addr));
	return;
fail:
	pthread_mutex_unlock(&cm_lock);
	free(b);
}

void cm_unlisten(const void *owner)
{
	struct beacon **pp, *b = NULL;

	pthread_mutex_lock(&cm_lock);
	for (pp = &cm_beacons; *pp; pp = &(*pp)->next)
		if ((*pp)->owner == owner) {
			b = *pp;
			*pp = b->next;
			break;
		}
	pthread_mutex_unlock(&cm_lock);
	if (b) {
		/* A child closing an inherited listener must not tear down the
		 * parent's beacon: the id is the parent's. */
		if (b->pid == rsock_pid() && !b->shared)
			ucm_destroy(cm_ucm, b->kid);
		free(b);
	}
}

int cm_has_beacon(const void *owner)
{
	struct beacon *b;

	pthread_mutex_lock(&cm_lock);
	for (b = cm_beacons; b; b = b->next)
		if (b->owner == owner)
			break;
	pthread_mutex_unlock(&cm_lock);
	return b != NULL;
}

/* The per-process data listener on the local address `local`. Caller holds cm_lock. */
struct listener *cm_listener_for(const struct sockaddr *local)
{
	struct listener *l;
	struct sockaddr_storage ss;

	for (l = cm_listeners; l; l = l->next) {
		uint8_t a[16], b[16];
		if (l->pid != rsock_pid())
			continue;
		sa_addr16((struct sockaddr *)&l->addr, a);
		sa_addr16(local, b);
		if (l->addr.ss_family == local->sa_family && !memcmp(a, b, 16))
			return l;
	}
	if (cm_start() || !(l = calloc(1, sizeof(*l))))
		return NULL;
	l->obj.kind = CTX_LISTENER;
	memcpy(&ss, local, sa_len(local));
	sa_set_port((struct sockaddr *)&ss, 0);
	if (rdma_create_id(cm_ch, &l->id, &l->obj, RDMA_PS_TCP)) {
		free(l);
		return NULL;
	}
	if (rdma_bind_addr(l->id, (struct sockaddr *)&ss) || rdma_listen(l->id, 1024) ||
	    !cm_dev_mine(l->id->verbs)) {
		rdma_destroy_id(l->id);
		free(l);
		return NULL;
	}
	memcpy(&l->addr, &ss, sizeof(ss));
	sa_set_port((struct sockaddr *)&l->addr, ntohs(rdma_get_src_port(l->id)));
	l->pid = rsock_pid();
	l->next = cm_listeners;
	cm_listeners = l;
	return l;
}

void cm_listener_put(struct listener *l)
{
	int last;

	pthread_mutex_lock(&cm_lock);
	last = !--l->users && l->dead;
	pthread_mutex_unlock(&cm_lock);
	if (last)
		cm_listener_free(l);
}

void cm_listener_free(struct listener *l)
{
	rdma_destroy_id(l->id);
	free(l);
	cm_dev_sync();
}
