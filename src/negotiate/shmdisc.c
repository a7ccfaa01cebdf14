/* shmdisc.c - finding the same-host path (doc/design.md, "The same-host
 * path"): the listener's discovery socket and its draining at accept(), the
 * client's look for it and its own set-up socket. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/ownfd.h"
#include "base/proto.h"
#include "base/real.h"
#include "path/shm/ring.h"
#include "path/shm/shm.h"

#include "negotiate/internal.h"

#define SHM_NAMES 3    /* a listener's discovery names at most (specific, any, IPv4 any) */

struct shm_listen {
	const void *owner;
	int fd[SHM_NAMES]; /* discovery sockets, -1 when unused */
	struct shm_listen *next;
};

static struct shm_listen *shm_listens; /* cm_lock */

/* The tokens of this process's clients awaiting their server's set-up
 * (0: a free entry), so that accept() knows a client of its own process
 * (cm_server_shm_hello). A full table leaves a client out: its server in
 * this process sets up at the stream's first use. */
#define SHM_OWN_CLIENTS 64
static uint64_t shm_own_clients[SHM_OWN_CLIENTS]; /* cm_lock */

static void own_client_note(uint64_t token, uint64_t now)
{
	pthread_mutex_lock(&cm_lock);
	for (int i = 0; i < SHM_OWN_CLIENTS; i++)
		if (shm_own_clients[i] == now) {
			shm_own_clients[i] = token;
			break;
		}
	pthread_mutex_unlock(&cm_lock);
}

void cm_shm_client_done(uint64_t token)
{
	if (token)
		own_client_note(0, token);
}

int cm_shm_own_client(uint64_t token)
{
	int found = 0;

	pthread_mutex_lock(&cm_lock);
	for (int i = 0; i < SHM_OWN_CLIENTS && !found; i++)
		found = token && shm_own_clients[i] == token;
	pthread_mutex_unlock(&cm_lock);
	return found;
}

/* The discovery name of family fam, address a (NULL: the wildcard) and port
 * in *un: returns its length. Abstract (a leading 0 byte): it belongs to
 * the network namespace, no file, no permission. */
static socklen_t disc_name(struct sockaddr_un *un, int fam, const uint8_t *a, uint16_t port)
{
	char hex[33];
	int n;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	if (a) {
		int len = fam == AF_INET ? 4 : 16;
		for (int i = 0; i < len; i++)
			snprintf(hex + 2 * i, 3, "%02x", a[i]);
	} else {
		strcpy(hex, "any");
	}
	n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "rsock-shm.1.%d.%s.%u",
		     fam == AF_INET ? 4 : 6, hex, port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int cm_shm_unix_socket(int type)
{
	return ownfd_move(rsock_real.socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

int cm_shm_listen(const void *owner, int fd, const struct sockaddr *addr)
{
	struct sockaddr_storage ss;
	struct shm_listen *l = calloc(1, sizeof(*l));
	uint8_t a[16];
	int n = 0, v6only = 0;

	if (!l)
		return -ENOMEM;
	addr = sa_copy_unmapped(&ss, addr);
	sa_addr16(addr, a);
	uint16_t port = sa_port(addr);
	int any = sa_is_any(addr);
	/* A dual-stack IPv6 wildcard listener takes IPv4 clients too. */
	if (addr->sa_family == AF_INET6 && any) {
		socklen_t vl = sizeof(v6only);
		if (rsock_real.getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &vl))
			v6only = 1;
	}
	for (int i = 0; i < SHM_NAMES; i++)
		l->fd[i] = -1;
	for (int i = 0; i < SHM_NAMES; i++) {
		struct sockaddr_un un;
		socklen_t ul;
		if (i == 0)
			ul = disc_name(&un, addr->sa_family, any ? NULL : a, port);
		else if (i == 1 && addr->sa_family == AF_INET6 && any && !v6only)
			ul = disc_name(&un, AF_INET, NULL, port);
		else
			continue;
		/* A listening stream socket: connections wait in its backlog
		 * (as long as the TCP listener's) for accept() to drain them,
		 * where a datagram socket holds only net.unix.max_dgram_qlen
		 * (10) messages and a burst of clients overflowed it. */
		int dfd = cm_shm_unix_socket(SOCK_STREAM);
		if (dfd < 0)
			continue;
		if (rsock_real.bind(dfd, (struct sockaddr *)&un, ul) ||
		    rsock_real.listen(dfd, SOMAXCONN)) {
			/* Another listener of the port has it (SO_REUSEPORT):
			 * its accept() drains it, not ours. */
			log_debug("shm: discovery name of port %u taken (%d): not ours", port, errno);
			ownfd_close(dfd);
			continue;
		}
		l->fd[n++] = dfd;
	}
	if (!n) {
		free(l);
		return -EADDRINUSE;
	}
	l->owner = owner;
	pthread_mutex_lock(&cm_lock);
	cm_tuples_create();
	l->next = shm_listens;
	shm_listens = l;
	pthread_mutex_unlock(&cm_lock);
	log_debug("shm: listener of port %u discoverable on this host", port);
	return 0;
}

void cm_shm_unlisten(const void *owner)
{
	struct shm_listen *l = NULL;

	pthread_mutex_lock(&cm_lock);
	for (struct shm_listen **p = &shm_listens; *p; p = &(*p)->next)
		if ((*p)->owner == owner) {
			l = *p;
			*p = l->next;
			break;
		}
	pthread_mutex_unlock(&cm_lock);
	if (!l)
		return;
	for (int i = 0; i < SHM_NAMES; i++)
		if (l->fd[i] >= 0)
			ownfd_close(l->fd[i]);
	free(l);
}

int cm_shm_drain(const void *owner)
{
	int found = 0;

	pthread_mutex_lock(&cm_lock);
	for (struct shm_listen *l = shm_listens; l; l = l->next) {
		if (l->owner != owner)
			continue;
		found = 1;
		for (int i = 0; i < SHM_NAMES; i++) {
			uint8_t b[PROTO_PROBE_LEN];
			struct proto_probe pr;
			int cfd;
			/* Each client's connection holds its tuple, sent before
			 * its SYN: here by the time its stream is accepted. */
			while (l->fd[i] >= 0 &&
			       (cfd = rsock_real.accept4(l->fd[i], NULL, NULL,
							 SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
				ssize_t r = rsock_real.recv(cfd, b, sizeof(b), MSG_DONTWAIT);
				if (r < 0 && errno == EAGAIN) {
					/* Connected, not sent yet (this drain is for
					 * another stream): shut our side first, so that
					 * its send either landed (read now) or fails
					 * (EPIPE: it stays on TCP), never lost while
					 * the client goes on to send its hello. */
					rsock_real.shutdown(cfd, SHUT_RD);
					r = rsock_real.recv(cfd, b, sizeof(b), MSG_DONTWAIT);
				}
				if (r > 0 && proto_probe_decode(b, (size_t)r, &pr) > 0)
					cm_tuple_put(&pr);
				rsock_real.close(cfd);
			}
		}
	}
	pthread_mutex_unlock(&cm_lock);
	return found;
}

/* Whether peer is an address of this host: a loopback address, or one the
 * route to which starts from the address itself (the kernel's local
 * routes). */
static int addr_local(const struct sockaddr *peer)
{
	struct sockaddr_storage src;
	uint8_t a[16], b[16];

	if (sa_is_loopback(peer))
		return 1;
	if (sa_route_source(peer, &src))
		return 0;
	sa_addr16(peer, a);
	sa_addr16((struct sockaddr *)&src, b);
	return src.ss_family == peer->sa_family && !memcmp(a, b, 16);
}

/* A connection to the discovery name of a librsock listener for peer
 * (unmapped), or -1 (none: a plain listener, or none at all; or its
 * backlog full). */
static int disc_find(const struct sockaddr *peer)
{
	uint8_t a[16];
	uint16_t port = sa_port(peer);

	sa_addr16(peer, a);
	for (int i = 0; i < 3; i++) {
		struct sockaddr_un un;
		socklen_t ul;
		if (i == 0)
			ul = disc_name(&un, peer->sa_family, a, port);
		else if (i == 1)
			ul = disc_name(&un, peer->sa_family, NULL, port);
		else if (peer->sa_family == AF_INET)
			ul = disc_name(&un, AF_INET6, NULL, port);
		else
			break;
		int fd = cm_shm_unix_socket(SOCK_STREAM);
		if (fd < 0)
			return -1;
		if (rsock_real.connect(fd, (struct sockaddr *)&un, ul) == 0)
			return fd;
		ownfd_close(fd);
	}
	return -1;
}

int cm_shm_client_begin(struct cm_client *c, int fd)
{
	struct sockaddr_un un;
	struct sockaddr *peer = (struct sockaddr *)&c->peer;
	int dfd;

	if (!addr_local(peer) || (dfd = disc_find(peer)) < 0)
		return -EOPNOTSUPP;
	c->shm_lfd = -1;
	getrandom(&c->token, sizeof(c->token), 0);
	getrandom(&c->shm_secret, sizeof(c->shm_secret), 0);
	c->token |= 1;
	c->shm_size = cm_settings.ring_kb * 1024;
	if (!shm_ring_size_ok(c->shm_size))
		c->shm_size = c->shm_size > SHM_RING_MAX ? SHM_RING_MAX : SHM_RING_MIN;
	/* The set-up socket, named by the token the hello carries. */
	memset(&un, 0, sizeof(un));
	un.sun_family = AF_UNIX;
	int n = snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, "rsock-shmc.%016" PRIx64,
			 c->token);
	socklen_t ul = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	if ((c->shm_lfd = cm_shm_unix_socket(SOCK_STREAM)) < 0 ||
	    rsock_real.bind(c->shm_lfd, (struct sockaddr *)&un, ul) ||
	    rsock_real.listen(c->shm_lfd, 1))
		goto fail;
	/* Our port, before the SYN, and the tuple the listener records. */
	struct sockaddr_storage bound;
	socklen_t bl = sizeof(bound);
	if (rsock_real.getsockname(fd, (struct sockaddr *)&bound, &bl))
		goto fail;
	if (sa_port((struct sockaddr *)&bound) == 0) {
		struct sockaddr_storage at;
		int off = 0;
		memcpy(&at, &bound, sizeof(at));
		rsock_real.setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &off, sizeof(off));
		if (rsock_real.bind(fd, (struct sockaddr *)&at, sa_len((struct sockaddr *)&at)))
			goto fail;
		bl = sizeof(bound);
		if (rsock_real.getsockname(fd, (struct sockaddr *)&bound, &bl))
			goto fail;
	}
	sa_unmap(&bound);
	if (sa_is_any((struct sockaddr *)&bound)) {
		/* The kernel picks the source at connect(): a local
		 * destination's route starts from it (or 127.0.0.1, ::1) */
		struct sockaddr_storage src;
		uint16_t port = sa_port((struct sockaddr *)&bound);
		if (sa_route_source(peer, &src))
			goto fail;
		memcpy(&bound, &src, sizeof(src));
		sa_set_port((struct sockaddr *)&bound, port);
	}
	memcpy(&c->local, &bound, sizeof(bound));
	struct proto_probe pr = {.version = PROTO_VERSION, .family = (uint16_t)peer->sa_family};
	uint8_t b[PROTO_PROBE_LEN];
	pr.client_port = sa_port((struct sockaddr *)&c->local);
	pr.server_port = sa_port(peer);
	sa_addr16((struct sockaddr *)&c->local, pr.client_addr);
	sa_addr16(peer, pr.server_addr);
	proto_probe_encode(&pr, b, sizeof(b));
	/* EPIPE: a drain for another stream took our connection before we
	 * sent (cm_shm_drain): our tuple is not there, a new connection waits
	 * for the next drain. */
	for (int tries = 0; rsock_real.send(dfd, b, sizeof(b), MSG_DONTWAIT | MSG_NOSIGNAL) !=
			    (ssize_t)sizeof(b);
	     tries++) {
		if (errno != EPIPE || tries == 3)
			goto fail;
		ownfd_close(dfd);
		if ((dfd = disc_find(peer)) < 0)
			goto fail;
	}
	ownfd_close(dfd);
	c->shm = 1;
	own_client_note(c->token, 0);
	c->probed_ms = clock_now_ms();
	log_debug("connect: fd %d: a librsock listener on this host: the same-host path", fd);
	return 0;
fail:
	log_debug("connect: fd %d: same-host set-up failed (%d): TCP", fd, errno);
	ownfd_close(dfd);
	if (c->shm_lfd >= 0)
		ownfd_close(c->shm_lfd);
	c->shm_lfd = -1;
	return -EOPNOTSUPP;
}

/* The kernel's name of an open descriptor's file is an eventfd's. */
