/* shim/socket.c - socket creation, naming, connection set-up and options. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <netinet/in.h>
#include <poll.h>
#include <string.h>

#include "shim/shim.h"


#include "negotiate/cm.h"
#include "base/config.h"
#include "event/epoll.h"
#include "base/log.h"
#include "base/statpub.h"
#include "base/stats.h"
#include "path/path.h"

struct conn *shim_track_new(int fd, int domain, enum conn_role role, enum conn_path path,
			    int nonblock)
{
	struct conn *c = conn_new(domain);
	int rc = c ? fdtab_insert(fd, c) : -ENOMEM;

	if (c) {
		atomic_store(&c->role, role);
		atomic_store(&c->path, path);
		atomic_store(&c->nonblock, nonblock);
	}
	if (rc) {
		log_warn_rl("fd %d cannot be tracked (errno %d): it stays on kernel TCP", fd, -rc);
		stats_fallback(RSOCK_FB_RESOURCES);
		conn_unref(c);
		return NULL;
	}
	return c; /* the caller drops this reference */
}

SHIM_SLOW_FN(int, socket_slow, (int domain, int type, int protocol), (domain, type, protocol))
{
	int fd;

	if (!shim_active())
		return REAL_CALL(socket, domain, type, protocol);
	fd = rsock_real.socket(domain, type, protocol);
	if (fd >= 0 && conn_eligible(domain, type, protocol))
		conn_unref(shim_track_new(fd, domain, CONN_ROLE_NONE, CONN_PATH_UNDECIDED,
					  !!(type & SOCK_NONBLOCK)));
	return fd;
}

RSOCK_EXPORT int socket(int domain, int type, int protocol)
{
	return socket_slow(domain, type, protocol);
}

RSOCK_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
	/* AF_UNIX only in practice: nothing to carry over RDMA. */
	return SHIM_KEPT((shim_active(), REAL_CALL(socketpair, domain, type, protocol, sv)));
}

RSOCK_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	SHIM_PASS_FD(bind, fd, fd, addr, len);
}

/* Apply the operator rules to a stream and count the decision. Until the RDMA
 * transport is built every stream is carried by kernel TCP. */
static void decide_path(struct conn *c, enum rules_role role, const struct sockaddr *sa,
			socklen_t len)
{
	enum rules_transport t = config_decide(&rsock_config, role, sa, len);

	atomic_store(&c->rules, t);
	log_debug("%s stream: rules say %s", role == RULES_ROLE_CLIENT ? "client" : "server",
		  t == RULES_TCP ? "tcp" : t == RULES_SHM ? "shm" : "rdma");
}

/* Start the beacon of a listening socket fd bound to ss (port known), and
 * make it discoverable on this host when the rules allow the same-host
 * path. */
static void listen_beacon(struct conn *c, int fd, const struct sockaddr_storage *ss, socklen_t len)
{
	decide_path(c, RULES_ROLE_SERVER, (const struct sockaddr *)ss, len);
	if (atomic_load(&c->rules) != RULES_TCP) {
		if (atomic_load(&c->rules) == RULES_SHM)
			cm_shm_listen(c, fd, (const struct sockaddr *)ss);
		cm_listen(c, (const struct sockaddr *)ss, len);
		c->beacon = 1;
	}
}

SHIM_SLOW_FN(int, listen_slow, (int fd, int backlog), (fd, backlog))
{
	struct conn *c = shim_conn(fd);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int r, saved, early = 0;

	/* The beacon goes up before the TCP listener, so that a client which
	 * connects as soon as listen() returns always finds it. */
	if (c && atomic_load(&c->role) != CONN_ROLE_LISTENER &&
	    rsock_real.getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
	    (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) &&
	    ((struct sockaddr_in *)&ss)->sin_port != 0) {
		saved = errno;
		listen_beacon(c, fd, &ss, len);
		early = 1;
		errno = saved;
	}
	r = REAL_CALL(listen, fd, backlog);
	saved = errno;
	if (c && r != 0 && early && c->beacon && atomic_load(&c->role) != CONN_ROLE_LISTENER) {
		cm_unlisten(c);
		cm_shm_unlisten(c);
		c->beacon = 0;
	}
	if (c && r == 0 && atomic_load(&c->role) != CONN_ROLE_LISTENER) {
		atomic_store(&c->role, CONN_ROLE_LISTENER);
		len = sizeof(ss);
		if (!early && rsock_real.getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
			listen_beacon(c, fd, &ss, len); /* the port was chosen by listen() */
	}
	conn_unref(c);
	errno = saved;
	return r;
}

RSOCK_EXPORT int listen(int fd, int backlog)
{
	return listen_slow(fd, backlog);
}

static int accept_common(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags, int is4)
{
	struct conn *c = shim_conn(fd);
	int nfd;

again:
	nfd = is4 ? REAL_CALL(accept4, fd, addr, len, flags) : REAL_CALL(accept, fd, addr, len);
	if (c && nfd >= 0) {
		enum rsock_fallback_reason why = RSOCK_FB_RULES;
		int saved = errno, refused = 0;
		struct path_stream *s = NULL;
		struct conn *n;
		if (atomic_load(&c->rules) != RULES_TCP) {
			/* An accepted socket has its listener's buffer sizes. */
			struct cm_bufs b = {atomic_load(&c->rcvbuf), atomic_load(&c->sndbuf)};
			if (rsock_config.mode == RSOCK_MODE_RDMA) {
				refused = cm_server_accept(c, nfd, &b, &s, &why) < 0;
			} else if (cm_server_probed(c, nfd, &why) == 0) {
				/* A librsock client: the handshake waits for the
				 * first use of the stream, in whichever process
				 * that is (fork-after-accept servers). */
				n = shim_track_new(nfd, c->domain, CONN_ROLE_ACCEPTED,
						   CONN_PATH_UNDECIDED, is4 && (flags & SOCK_NONBLOCK));
				if (n) {
					atomic_store(&n->rcvbuf, b.rcvbuf);
					atomic_store(&n->sndbuf, b.sndbuf);
					atomic_store(&n->hello_due, 1);
					conn_publish(n, nfd, NULL, 0, STATPUB_ST_ESTABLISHED, -1);
					if (cm_server_shm_hello(nfd))
						conn_settle(n, nfd, CONN_SETTLE_RDMA);
					else
						conn_settle_later(n, nfd, 0);
				}
				conn_unref(n);
				errno = saved;
				conn_unref(c);
				return nfd;
			}
		}
		if (refused) {
			/* No silent fallback: refuse this stream with a reset. */
			struct linger lg = {.l_onoff = 1, .l_linger = 0};
			log_warn_rl("RSOCK_MODE=rdma: accepted stream refused (fallback reason %d)", why);
			rsock_real.setsockopt(nfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			rsock_real.close(nfd);
			stats_fallback(why);
			if (!atomic_load(&c->nonblock))
				goto again;
			errno = ECONNABORTED;
			conn_unref(c);
			return -1;
		}
		n = shim_track_new(nfd, c->domain, CONN_ROLE_ACCEPTED,
				   s ? CONN_PATH_RDMA : CONN_PATH_TCP,
				   is4 && (flags & SOCK_NONBLOCK));
		if (n && s) {
			n->stream = s;
			atomic_store(&n->path, CONN_PATH_RDMA);
		} else if (s) {
			path_close(s, 1);
			s = NULL;
			why = RSOCK_FB_RESOURCES;
		}
		if (n)
			conn_publish(n, nfd, NULL, 0, STATPUB_ST_ESTABLISHED, s ? -1 : (int)why);
		conn_unref(n);
		stats_stream(s ? s->ops->stats_path : STATS_TCP);
		if (!s)
			stats_fallback(why);
		errno = saved;
	}
	conn_unref(c);
	return nfd;
}

RSOCK_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	return SHIM_KEPT(accept_common(fd, addr, len, 0, 0));
}

RSOCK_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
{
	return SHIM_KEPT(accept_common(fd, addr, len, flags, 1));
}

/* Wait (bounded by the handshake time) for a non-blocking connect to
 * complete. Returns 1 when the connection is up, 0 otherwise (refused,
 * unreachable, too slow): the error, if any, stays for SO_ERROR. */
static int wait_connected(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int r;

	do
		r = rsock_real.poll(&p, 1, (int)cm_settings.handshake_ms);
	while (r < 0 && errno == EINTR);
	return r == 1 && p.revents == POLLOUT;
}

static int connect_tracked(struct conn *c, int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	enum rsock_fallback_reason why = RSOCK_FB_RULES;
	struct cm_client *st = NULL;
	int r, saved, up, rdma_only = rsock_config.mode == RSOCK_MODE_RDMA;

	if (atomic_load(&c->role) != CONN_ROLE_NONE || !SA(addr) || len < sizeof(sa_family_t) ||
	    SA(addr)->sa_family == AF_UNSPEC)
		return REAL_CALL(connect, fd, addr, len);
	decide_path(c, RULES_ROLE_CLIENT, SA(addr), len);
	struct cm_bufs bufs = {atomic_load(&c->rcvbuf), atomic_load(&c->sndbuf)};
	if (atomic_load(&c->rules) != RULES_TCP &&
	    cm_client_begin(fd, SA(addr), len, &bufs, atomic_load(&c->rules) == RULES_SHM, &st, &why) < 0)
		st = NULL;
	if (!st && rdma_only) {
		log_warn_rl("RSOCK_MODE=rdma: no RDMA path to the peer (fallback reason %d)", why);
		stats_fallback(why);
		errno = ECONNREFUSED;
		return -1;
	}
	r = REAL_CALL(connect, fd, addr, len);
	saved = errno;
	if (r != 0 && saved != EINPROGRESS) {
		cm_client_abandon(st);
		errno = saved;
		return r;
	}
	atomic_store(&c->role, CONN_ROLE_CLIENT);
	up = r == 0;
	/* The peer runs librsock: the hello must follow the connection at
	 * once, whatever the application does next (it may wait for the
	 * server to speak first), so a non-blocking connect waits here for
	 * the connection, bounded, and sends the hello before returning
	 * EINPROGRESS. A connection that is not up in time stays on TCP and
	 * never sends a hello (a late one would reach the server's
	 * application as data). */
	if (st && r != 0 && !(up = wait_connected(fd))) {
		log_debug("connect: not established within %u ms: the stream stays on TCP",
			  cm_settings.handshake_ms);
		cm_client_abandon(st);
		st = NULL;
		why = RSOCK_FB_PEER;
	}
	if (st) {
		/* The hello goes now; its answer and the RDMA connection are
		 * awaited at the stream's first use, or by the library's
		 * thread if the stream is still unused after RSOCK_SETTLE_MS,
		 * not here: a client that opens several streams before it uses
		 * any (iperf 2's -P) to a server that accepts the next one only
		 * once the first one spoke waited the whole handshake bound in
		 * connect(), then stayed on TCP. */
		if (cm_client_hello(st, fd, &why) < 0) {
			st = NULL;
		} else {
			pthread_mutex_lock(&c->lock);
			c->client = st;
			atomic_store(&c->hello_due, 1);
			pthread_mutex_unlock(&c->lock);
			/* Here, as before: with RSOCK_MODE=rdma (connect()
			 * fails unless the stream is RDMA), when no thread can
			 * take it, or when an epoll instance holds the stream
			 * already (added before connect()): one sleeping on its
			 * kernel socket would not see it turn into RDMA. */
			if (rdma_only || ep_stream_watched(c) || conn_settle_later(c, fd, 1))
				conn_settle(c, fd, CONN_SETTLE_RDMA | (rdma_only ? CONN_SETTLE_FULL : 0));
		}
	}
	if (!st) {
		atomic_store(&c->path, CONN_PATH_TCP);
		stats_stream(STATS_TCP);
		stats_fallback(why);
	}
	if (rdma_only && atomic_load(&c->path) != CONN_PATH_RDMA) {
		rsock_real.shutdown(fd, SHUT_RDWR);
		saved = ECONNREFUSED;
		r = -1;
	}
	if (r == 0 || saved == EINPROGRESS)
		conn_publish(c, fd, SA(addr), len, up ? STATPUB_ST_ESTABLISHED : STATPUB_ST_CONNECTING,
			     atomic_load(&c->path) == CONN_PATH_TCP ? (int)why : -1);
	errno = saved;
	return r;
}

SHIM_SLOW_FN(int, connect_slow, (int fd, __CONST_SOCKADDR_ARG addr, socklen_t len), (fd, addr, len))
{
	struct conn *c = shim_conn(fd);
	int r;

	if (!c)
		return REAL_CALL(connect, fd, addr, len);
	r = connect_tracked(c, fd, addr, len);
	conn_unref(c);
	return r;
}

RSOCK_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	return connect_slow(fd, addr, len);
}

SHIM_SLOW_FN(int, shutdown_slow, (int fd, int how), (fd, how))
{
	struct conn *c = shim_conn(fd);
	int r;

	conn_settle_maybe(c, fd);
	if (!c || atomic_load(&c->path) != CONN_PATH_RDMA) {
		r = REAL_CALL(shutdown, fd, how);
		if (c && r == 0)
			conn_publish_shut(c, how);
		conn_unref(c);
		return r;
	}
	/* The kernel validates fd and how; the TCP control connection itself is
	 * left open (its end tells the peer the stream is gone). */
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
		conn_unref(c);
		return (int)shim_ret(-EINVAL);
	}
	r = 0;
	if (how != SHUT_WR)
		r = path_shutdown_rd(c->stream, fd);
	if (how != SHUT_RD && r == 0)
		r = path_shutdown_wr(c->stream);
	if (r == 0)
		conn_publish_shut(c, how);
	conn_unref(c);
	return (int)shim_ret(r);
}

RSOCK_EXPORT int shutdown(int fd, int how)
{
	if (shim_fast(fd))
		return rsock_real.shutdown(fd, how);
	return shutdown_slow(fd, how);
}

/* SO_ERROR of an RDMA stream: its error not yet told (a reset, a dead
 * peer's), which TCP's socket would hold, when the kernel socket (the
 * control connection) holds none; told once, as TCP's. */
SHIM_SLOW_FN(int, getsockopt_slow, (int fd, int level, int name, void *val, socklen_t *len),
	     (fd, level, name, val, len))
{
	int r, kv = 0, e;
	struct conn *c;

	shim_active_quiet(); /* (initialisation first: rsock_real) */
	r = REAL_CALL(getsockopt, fd, level, name, val, len);
	if (r || level != SOL_SOCKET || name != SO_ERROR || *len > sizeof(int))
		return r;
	memcpy(&kv, val, *len);
	if (kv || !(c = shim_conn(fd)))
		return r;
	if (atomic_load(&c->path) == CONN_PATH_RDMA && (e = path_sock_error(c->stream)))
		memcpy(val, &e, *len);
	conn_unref(c);
	return r;
}

RSOCK_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	if (shim_fast(fd))
		return rsock_real.getsockopt(fd, level, name, val, len);
	return getsockopt_slow(fd, level, name, val, len);
}

/* The SOL_SOCKET options an RDMA stream keeps a copy of (path.h:
 * sockopts_changed). */
static int sockopt_kept(int name)
{
	switch (name) {
	case SO_RCVLOWAT:
	case SO_LINGER:
	case SO_RCVTIMEO_OLD:
	case SO_SNDTIMEO_OLD:
#ifdef SO_RCVTIMEO_NEW
	case SO_RCVTIMEO_NEW:
	case SO_SNDTIMEO_NEW:
#endif
		return 1;
	default:
		return 0;
	}
}

SHIM_SLOW_FN(int, setsockopt_slow, (int fd, int level, int name, const void *val, socklen_t len), (fd, level, name, val, len))
{
	struct conn *c = shim_conn(fd);
	int r = REAL_CALL(setsockopt, fd, level, name, val, len);

	/* The size asked for (the kernel doubles it): an RDMA stream set up
	 * later gets rings of about that size. */
	if (c && r == 0 && level == SOL_SOCKET && val && len >= (socklen_t)sizeof(int) &&
	    (name == SO_RCVBUF || name == SO_RCVBUFFORCE || name == SO_SNDBUF || name == SO_SNDBUFFORCE)) {
		int v = *(const int *)val;
		uint32_t u = v > 0 ? (uint32_t)v : 1;
		if (name == SO_RCVBUF || name == SO_RCVBUFFORCE)
			atomic_store(&c->rcvbuf, u);
		else
			atomic_store(&c->sndbuf, u);
	}
	/* An RDMA stream keeps these as the kernel holds them (it caps and
	 * rounds them): read back. */
	if (c && r == 0 && level == SOL_SOCKET && sockopt_kept(name) &&
	    atomic_load(&c->path) == CONN_PATH_RDMA)
		path_sockopts_changed(c->stream);
	conn_unref(c);
	return r;
}

RSOCK_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	if (shim_fast(fd))
		return rsock_real.setsockopt(fd, level, name, val, len);
	return setsockopt_slow(fd, level, name, val, len);
}

RSOCK_EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	SHIM_PASS_FD(getsockname, fd, fd, addr, len);
}

RSOCK_EXPORT int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	SHIM_PASS_FD(getpeername, fd, fd, addr, len);
}
