/* cm.c - see cm.h and doc/design.md section 8.
 *
 * Locks: cm_lock protects the device list, the listeners, the beacons and the
 * pending server streams; it is taken before a tp's lock, never after, and is
 * never held while sleeping except in pthread_cond_timedwait on cm_cond. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received */
#include <rdma/rdma_cma.h>
#include <sys/ioctl.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>

#include "negotiate/cm.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "path/handover.h"
#include "base/log.h"
#include "base/proto.h"
#include "base/real.h"
#include "base/stats.h"
#include "path/rdma/transport.h"
#include "negotiate/ucm.h"

#define CM_CANCEL_LEN 8
#define CM_CANCEL_TYPE 5

static pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held by the cm thread whenever it is not asleep in poll(), and by
 * fork_prepare across a fork: no child is forked while the thread is in
 * malloc, librdmacm or libibverbs, whose internal locks the child would
 * inherit held (doc/design.md section 10). */
static pthread_mutex_t cm_run = PTHREAD_MUTEX_INITIALIZER;
static sem_t cm_up; /* posted by a new cm thread as it enters cm_main */
static pthread_cond_t cm_cond = PTHREAD_COND_INITIALIZER;

/* ---- time ---------------------------------------------------------------- */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int left_ms(int64_t deadline)
{
	int64_t l = deadline - now_ms();

	return l < 0 ? 0 : (int)l;
}

/* ---- addresses --------------------------------------------------------------- */

static uint16_t sa_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
}

static void sa_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

/* Address bytes in the probe's layout (IPv4 in the first 4 of 16). */
static void sa_addr16(const struct sockaddr *sa, uint8_t out[16])
{
	memset(out, 0, 16);
	if (sa->sa_family == AF_INET)
		memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	else
		memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

static int sa_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	return IN6_IS_ADDR_LOOPBACK(a) ||
	       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* The wildcard address (INADDR_ANY / in6addr_any). */
/* The wildcard address of ss's family, port unchanged. */
static void sa_wildcard(struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_addr.s_addr = htonl(INADDR_ANY);
	else if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_addr = in6addr_any;
}

static int sa_is_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static socklen_t sa_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* An IPv4-mapped IPv6 address (an AF_INET6 socket talking IPv4: a dual-stack
 * [::] listener's IPv4 clients, a client dialling ::ffff:a.b.c.d) becomes
 * the AF_INET address it stands for, port kept: rdma_cm binds, resolves and
 * listens on IPv4 addresses, not on their mapped form, and the probe and the
 * tuple table speak AF_INET for IPv4 whatever the socket's family. */
static void sa_unmap(struct sockaddr_storage *ss)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	struct sockaddr_in v4;

	if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
		return;
	memset(&v4, 0, sizeof(v4));
	v4.sin_family = AF_INET;
	v4.sin_port = s6->sin6_port;
	memcpy(&v4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, &v4, sizeof(v4));
}

/* *out = sa, unmapped (sa_unmap); returns out as a sockaddr. */
static struct sockaddr *sa_copy_unmapped(struct sockaddr_storage *out, const struct sockaddr *sa)
{
	memcpy(out, sa, sa_len(sa));
	sa_unmap(out);
	return (struct sockaddr *)out;
}

/* The other way, for a socket of family `family`: an AF_INET address given
 * to an AF_INET6 socket becomes ::ffff:a.b.c.d. */
static void sa_map_for(int family, struct sockaddr_storage *ss)
{
	struct sockaddr_in v4;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	if (family != AF_INET6 || ss->ss_family != AF_INET)
		return;
	memcpy(&v4, ss, sizeof(v4));
	memset(ss, 0, sizeof(*ss));
	s6->sin6_family = AF_INET6;
	s6->sin6_port = v4.sin_port;
	s6->sin6_addr.s6_addr[10] = 0xff;
	s6->sin6_addr.s6_addr[11] = 0xff;
	memcpy(&s6->sin6_addr.s6_addr[12], &v4.sin_addr, 4);
}

/* The source address the kernel would use to reach peer (no packet sent). */
static int route_source(const struct sockaddr *peer, struct sockaddr_storage *src)
{
	socklen_t l = sizeof(*src);
	int s = rsock_real.socket(peer->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int rc = 0;

	if (s < 0)
		return -errno;
	if (rsock_real.connect(s, peer, sa_len(peer)) || rsock_real.getsockname(s, (struct sockaddr *)src, &l))
		rc = -errno;
	rsock_real.close(s);
	return rc;
}

/* ---- rdma_cm helpers ------------------------------------------------------------ */

static struct rdma_event_channel *new_channel(void)
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
static int wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int64_t deadline,
		      struct rdma_cm_event **ev)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};

	*ev = NULL;
	for (;;) {
		if (rdma_get_cm_event(ch, ev) == 0)
			break;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		int r = rsock_real.poll(&p, 1, left_ms(deadline));
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

static void ack(struct rdma_cm_event *ev)
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
enum { RESOLVE_NEW = 0, RESOLVE_ADDR, RESOLVE_ROUTE };
#define RESOLVE_FIRST_MS 25

static int resolve_from(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct sockaddr *src,
			struct sockaddr *dst, int64_t deadline, int asked)
{
	struct rdma_cm_event *ev;
	int rc = 0, step = RESOLVE_FIRST_MS;

	for (; asked < RESOLVE_ROUTE; asked = RESOLVE_NEW) {
		int t = left_ms(deadline);
		if (t > step)
			t = step;
		if (asked == RESOLVE_NEW && rdma_resolve_addr(id, src, dst, t ?: 1))
			return -errno;
		rc = wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, &ev);
		ack(ev);
		if (rc != -ETIMEDOUT || !ev || left_ms(deadline) == 0)
			break;
		/* ADDR_ERROR with ETIMEDOUT: the id is bound again, try anew
		 * (the source is bound already). */
		src = NULL;
		step *= 2;
	}
	if (rc)
		return rc;
	if (asked < RESOLVE_ROUTE && rdma_resolve_route(id, left_ms(deadline) ?: 1))
		return -errno;
	rc = wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, &ev);
	ack(ev);
	return rc;
}

static int resolve(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct sockaddr *src,
		   struct sockaddr *dst, int64_t deadline)
{
	return resolve_from(ch, id, src, dst, deadline, RESOLVE_NEW);
}

/* ---- devices ------------------------------------------------------------------ */

/* Every verbs context this process has seen, with the process that opened
 * it. A context is usable only by that process: the kernel refuses the
 * commands of any other (a forked child gets EACCES, "changed security
 * contexts after opening file descriptor"), and librdmacm keeps the contexts
 * it opened for the life of the process, children included. A child of a
 * process that used a device therefore keeps its new streams on that device
 * on TCP (RSOCK_FB_NOT_IMPLEMENTED), and never touches the parent's objects. */
struct cm_dev {
	struct ibv_context *ctx;
	pid_t pid;          /* the process that first saw ctx */
	struct cm_dev *next;
};
static struct cm_dev *cm_devs;

/* The record of ctx, created (owned by this process) if there is none.
 * Caller holds cm_lock. NULL when out of memory. */
static struct cm_dev *dev_find(struct ibv_context *ctx)
{
	struct cm_dev *d;

	for (d = cm_devs; d; d = d->next)
		if (d->ctx == ctx)
			return d;
	if ((d = calloc(1, sizeof(*d)))) {
		d->ctx = ctx;
		d->pid = rsock_pid();
		d->next = cm_devs;
		cm_devs = d;
		/* rdma-core opened the device for librdmacm: its descriptors
		 * are ours, wherever they are (fdtab.h). */
		ownfd_mark(ctx->cmd_fd);
		ownfd_mark(ctx->async_fd);
	}
	return d;
}

/* The record of ctx when this process may use it (it opened it, as far as
 * the library can tell), else NULL. Records ctx as this process's when first
 * seen. Caller holds cm_lock. */
static struct cm_dev *dev_mine(struct ibv_context *ctx)
{
	struct cm_dev *d = ctx ? dev_find(ctx) : NULL;

	return d && d->pid == rsock_pid() ? d : NULL;
}

/* dev_mine() for a caller that does not hold cm_lock: 1 or 0. */
static int dev_usable(struct ibv_context *ctx)
{
	int ok;

	pthread_mutex_lock(&cm_lock);
	ok = dev_mine(ctx) != NULL;
	pthread_mutex_unlock(&cm_lock);
	return ok;
}

/* ---- negative cache ------------------------------------------------------------- */

#define NEG_SLOTS 64
static struct {
	uint8_t addr[16];
	uint16_t family, port;
	int64_t until;
} neg[NEG_SLOTS];
static unsigned neg_next;

static int neg_lookup(const struct sockaddr *peer)
{
	uint8_t a[16];
	int64_t now = now_ms();
	int hit = 0;

	sa_addr16(peer, a);
	pthread_mutex_lock(&cm_lock);
	for (int i = 0; i < NEG_SLOTS && !hit; i++)
		hit = neg[i].until > now && neg[i].family == peer->sa_family &&
		      neg[i].port == sa_port(peer) && !memcmp(neg[i].addr, a, 16);
	pthread_mutex_unlock(&cm_lock);
	return hit;
}

static void neg_insert(const struct sockaddr *peer)
{
	unsigned i;

	pthread_mutex_lock(&cm_lock);
	i = neg_next++ % NEG_SLOTS;
	sa_addr16(peer, neg[i].addr);
	neg[i].family = peer->sa_family;
	neg[i].port = sa_port(peer);
	neg[i].until = now_ms() + (int64_t)cm_settings.neg_cache_s * 1000;
	pthread_mutex_unlock(&cm_lock);
}

/* ---- the shared tuple table (beacon -> accepting process) ----------------------- */

#define TUPLE_SLOTS 1024
#define TUPLE_TTL_MS 10000
#define TUPLE_LAYOUT 2 /* in the shared object's name: a new layout, a new object */
enum { TUPLE_FREE = 0, TUPLE_BUSY, TUPLE_READY };
struct cm_tuple {
	_Atomic uint32_t state;
	uint16_t family, cport, sport, pad;
	uint8_t caddr[16];
	uint8_t saddr[16]; /* the server address the probe named */
	int64_t stamp;     /* CLOCK_MONOTONIC, the same in every process */
};
/* MAP_SHARED: children forked after listen() see it, and so do the other
 * processes of this user in this network namespace (a named object):
 * listeners of one port in several processes (SO_REUSEPORT) each get
 * streams whose probe another process's beacon answered. */
static struct cm_tuple *tuples;

/* The network namespace's inode number (0 if unknown): ports are per
 * namespace, the shared memory directory need not be. */
static unsigned long long netns_id(void)
{
	char b[64], *p;
	ssize_t n = readlink("/proc/self/ns/net", b, sizeof(b) - 1);

	if (n <= 0)
		return 0;
	b[n] = 0;
	p = strchr(b, '[');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* The named table of this user and namespace, created if need be; NULL
 * when there is none to be had (no /dev/shm, a chroot, a sandbox) or the
 * object found is not one this process should trust. */
static struct cm_tuple *tuples_named(size_t len)
{
	char name[96];
	struct stat st;
	void *p;
	int fd;

	snprintf(name, sizeof(name), "/librsock-tuples.%d.%u.%llu", TUPLE_LAYOUT,
		 (unsigned)geteuid(), netns_id());
	fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || st.st_uid != geteuid() || (st.st_mode & 077) ||
	    (st.st_size != 0 && st.st_size != (off_t)len) ||
	    (st.st_size == 0 && ftruncate(fd, (off_t)len))) {
		rsock_real.close(fd);
		return NULL;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	rsock_real.close(fd);
	return p == MAP_FAILED ? NULL : p;
}

static void tuples_create(void)
{
	size_t len = TUPLE_SLOTS * sizeof(struct cm_tuple);
	void *p;

	if (tuples)
		return;
	if ((p = tuples_named(len))) {
		tuples = p;
		return;
	}
	log_debug("tuple table: a private one (no shared object of this user to be had: "
		  "listeners of a port in other processes cannot see its probes)");
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED)
		tuples = p;
}

/* Record a probe's tuple. 0, or -ENOSPC when the table is full (the stream
 * then stays on TCP). */
static int tuple_put(const struct proto_probe *pr)
{
	int64_t now = now_ms();

	for (unsigned i = 0; tuples && i < TUPLE_SLOTS; i++) {
		struct cm_tuple *t = &tuples[i];
		uint32_t st = atomic_load(&t->state);
		if (st == TUPLE_READY && now - t->stamp > TUPLE_TTL_MS)
			atomic_compare_exchange_strong(&t->state, &st, TUPLE_FREE), st = TUPLE_FREE;
		if (st != TUPLE_FREE || !atomic_compare_exchange_strong(&t->state, &st, TUPLE_BUSY))
			continue;
		t->family = pr->family;
		t->cport = pr->client_port;
		t->sport = pr->server_port;
		memcpy(t->caddr, pr->client_addr, 16);
		memcpy(t->saddr, pr->server_addr, 16);
		t->stamp = now;
		atomic_store(&t->state, TUPLE_READY);
		return 0;
	}
	return -ENOSPC;
}

/* Take the entry for a stream accepted from peer on local. */
static int tuple_take(const struct sockaddr *peer, const struct sockaddr *local)
{
	uint8_t a[16], l[16];
	struct sockaddr_storage ss, ls;
	int64_t now = now_ms();

	if (!tuples)
		return 0;
	peer = sa_copy_unmapped(&ss, peer); /* probes carry IPv4 as AF_INET */
	sa_addr16(peer, a);
	sa_addr16(sa_copy_unmapped(&ls, local), l);
	for (unsigned i = 0; i < TUPLE_SLOTS; i++) {
		struct cm_tuple *t = &tuples[i];
		uint32_t st = TUPLE_READY;
		if (atomic_load(&t->state) != TUPLE_READY || t->family != peer->sa_family ||
		    t->cport != sa_port(peer) || t->sport != sa_port(local) ||
		    memcmp(t->caddr, a, 16) || memcmp(t->saddr, l, 16) ||
		    now - t->stamp > TUPLE_TTL_MS)
			continue;
		if (atomic_compare_exchange_strong(&t->state, &st, TUPLE_FREE))
			return 1;
	}
	return 0;
}

/* ---- the cm thread, beacons, data listeners, pending server streams ----------- */

enum { CTX_BEACON = 1, CTX_LISTENER, CTX_PENDING };
struct cm_obj {
	int kind;
};

struct beacon {
	struct cm_obj obj;
	const void *owner;
	uint32_t kid;       /* the kernel's id of the listening ucm id */
	struct sockaddr_storage addr; /* the TCP listener's address */
	pid_t pid;          /* the process whose cm thread serves it */
	int shared;         /* no id of its own: another listener of the port
			     * (SO_REUSEPORT) has the beacon, which answers for
			     * this one too, through the shared tuple table */
	struct beacon *next;
};

struct listener {
	struct cm_obj obj;
	struct rdma_cm_id *id;
	pid_t pid;          /* listeners of a parent are not ours after fork */
	struct sockaddr_storage addr; /* local address, port = the rdma_cm port */
	struct listener *next;
};

enum { PEND_WAIT = 0, PEND_ACCEPTING, PEND_UP, PEND_FAILED };
struct pending {
	struct cm_obj obj;
	uint64_t token;
	struct tp *tp;
	struct ibv_context *ctx;
	int state;
	struct pending *next;
};

static struct rdma_event_channel *cm_ch;
static int cm_ucm = -1; /* the beacons' connection-manager file (ucm.h) */
static int cm_thread_pid; /* the process the thread runs in */
static int cm_reap_fd = -1; /* eventfd: closed streams wait for the thread (tp_reap) */
static _Atomic pid_t cm_reap_pid; /* the process whose thread watches cm_reap_fd */
static struct beacon *beacons;
static struct listener *listeners;
static struct pending *pendings;

static void on_connect_request(struct rdma_cm_event *ev)
{
	struct cm_obj *o = ev->listen_id ? ev->listen_id->context : NULL;
	const void *pd = ev->param.conn.private_data;
	uint8_t pdlen = ev->param.conn.private_data_len;

	if (o && o->kind == CTX_LISTENER && pd && pdlen >= 8) {
		uint64_t token;
		struct pending *p;
		memcpy(&token, pd, 8);
		token = le64toh(token); /* little-endian on the wire (design.md section 9) */
		pthread_mutex_lock(&cm_lock);
		for (p = pendings; p; p = p->next)
			if (p->token == token && p->state == PEND_WAIT)
				break;
		if (p && p->ctx == ev->id->verbs && tp_create_qp(p->tp, ev->id) == 0) {
			struct rdma_conn_param cp;
			tp_conn_param(&cp, NULL, 0);
			cp.qp_num = tp_own_qp_num(p->tp); /* 0: the QP is the id's */
			log_debug("accept: request for a pending stream, %s QP", cp.qp_num ? "its own" : "the id's");
			ev->id->context = p;
			if (rdma_accept(ev->id, &cp) == 0) {
				p->state = PEND_ACCEPTING;
				pthread_mutex_unlock(&cm_lock);
				return;
			}
			p->state = PEND_FAILED;
			pthread_cond_broadcast(&cm_cond);
		}
		pthread_mutex_unlock(&cm_lock);
	}
	rdma_reject(ev->id, NULL, 0);
	ev->id->context = NULL;
}

/* The port of this process's data listener on the probe's server address,
 * or 0: the beacon's hint (proto.h), so that the client can resolve its
 * data connection while the hello makes its round trip. Only a hint: in a
 * listen-then-fork server another process accepts (the master has no
 * listener, so gives none). Caller holds cm_lock. */
static uint16_t data_port_hint(const struct proto_probe *pr)
{
	for (struct listener *l = listeners; l; l = l->next) {
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
static void on_beacon_request(const struct ucm_event *ev)
{
	struct proto_beacon pb = {.version = PROTO_VERSION, .flags = 0};
	uint8_t buf[PROTO_BEACON_LEN];
	struct proto_probe pr;
	struct beacon *bc;
	uint8_t want[16];
	int ok = 0;

	pthread_mutex_lock(&cm_lock);
	for (bc = beacons; bc; bc = bc->next)
		if ((uintptr_t)bc == ev->uid && bc->pid == rsock_pid())
			break;
	if (bc) {
		sa_addr16((struct sockaddr *)&bc->addr, want);
		ok = proto_probe_decode(ev->pdata, ev->pdata_len, &pr) > 0 &&
		     (sa_is_any((struct sockaddr *)&bc->addr) || !memcmp(want, pr.server_addr, 16)) &&
		     tuple_put(&pr) == 0;
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

static void on_event(struct rdma_cm_event *ev)
{
	struct rdma_cm_id *doomed = NULL;
	struct cm_obj *o;

	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		on_connect_request(ev);
		if (!ev->id->context)
			doomed = ev->id;
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		/* The waiting accept() clears the context under cm_lock before
		 * its pending object goes away. */
		pthread_mutex_lock(&cm_lock);
		o = ev->id->context;
		if (o && o->kind == CTX_PENDING) {
			((struct pending *)o)->state =
				ev->event == RDMA_CM_EVENT_ESTABLISHED ? PEND_UP : PEND_FAILED;
			pthread_cond_broadcast(&cm_cond);
		}
		pthread_mutex_unlock(&cm_lock);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		/* Liveness comes from the TCP control connection, except for
		 * a stream still being accepted. A DREQ follows only an
		 * established connection; the kernel's CM handles the
		 * client's RTU and its DREQ on a workqueue that need not keep
		 * their order, and a DREQ that overtakes the RTU ends the
		 * wait for ESTABLISHED here for good (the RTU is dropped).
		 * The client was connected, may have written and closed: its
		 * bytes are in our ring, so the stream is up. Before, accept()
		 * waited out its deadline and left the stream on TCP, those
		 * bytes lost (streamcheck scenario 14 in one CI run of ~20). */
		pthread_mutex_lock(&cm_lock);
		o = ev->id->context;
		if (o && o->kind == CTX_PENDING && ((struct pending *)o)->state == PEND_ACCEPTING) {
			log_debug("accept: the client disconnected before its RTU arrived: connected");
			((struct pending *)o)->state = PEND_UP;
			pthread_cond_broadcast(&cm_cond);
		}
		pthread_mutex_unlock(&cm_lock);
		break;
	default:
		/* TIMEWAIT_EXIT ...: nothing to do here. */
		break;
	}
	rdma_ack_cm_event(ev);
	if (doomed)
		rdma_destroy_id(doomed);
}

/* The kernel refused the cm thread a command with EACCES: this process
 * changed its credentials since it opened the file (tp_creds_stale). The
 * thread stops watching it (it would be readable for ever). Returns -1. */
static int creds_stale(const char *what)
{
	atomic_store_explicit(&tp_creds_stale, 1, memory_order_relaxed);
	log_debug("cm: the %s refuses this process since it changed its credentials "
		  "(setuid, setgid...): new streams stay on TCP", what);
	return -1;
}

static void *cm_main(void *arg)
{
	struct pollfd p[4] = {{.fd = cm_ch->fd, .events = POLLIN},
			      {.fd = cm_ucm, .events = POLLIN},
			      {.fd = -1, .events = POLLIN},
			      {.fd = cm_reap_fd, .events = POLLIN}};
	struct rdma_cm_event *ev;
	struct ucm_event uev;

	(void)arg;
	rsock_guard_enter(); /* this thread's libc calls are the library's own */
	/* Past the thread's start-up code (the C library's, and a sanitizer
	 * runtime's, which frees and allocates under its allocator's locks):
	 * cm_start may return, and from here a fork parks this thread (cm_run). */
	sem_post(&cm_up);
	pthread_mutex_lock(&cm_run);
	for (;;) {
		int rc, more;

		while (p[0].fd >= 0 && rdma_get_cm_event(cm_ch, &ev) == 0)
			on_event(ev);
		if (p[0].fd >= 0 && errno == EACCES)
			p[0].fd = creds_stale("rdma_cm channel");
		while (p[1].fd >= 0 && (rc = ucm_get_event(p[1].fd, &uev)) == 1)
			if (uev.event == UCM_EVENT_CONNECT_REQUEST)
				on_beacon_request(&uev);
		if (p[1].fd >= 0 && rc == -EACCES) {
			/* Closing the file ends the beacons in the kernel: a
			 * client's probe is refused at once (a plain peer, to
			 * it) instead of waiting for an answer that cannot come. */
			pthread_mutex_lock(&cm_lock);
			ownfd_close(cm_ucm);
			cm_ucm = -1;
			pthread_mutex_unlock(&cm_lock);
			p[1].fd = creds_stale("beacons' connection manager");
		}
		/* Another process asks for one of our streams (handover.h). */
		if (p[2].revents)
			ho_serve();
		p[2].fd = ho_bell_fd();
		/* Streams closed by the application (tp_close), one per
		 * turn: connection events and probes come first. */
		if (p[3].revents) {
			uint64_t v;
			(void)!rsock_real.read(cm_reap_fd, &v, sizeof(v));
		}
		more = tp_reap();
		pthread_mutex_unlock(&cm_run);
		rsock_real.poll(p, 4, more ? 0 : -1);
		pthread_mutex_lock(&cm_run);
	}
	return NULL;
}

/* The process-wide channel and its thread, started on first use (again in a
 * child after fork, where the parent's thread does not exist). Caller holds cm_lock. */
static int cm_start(void)
{
	int rc;

	if (cm_ch && cm_thread_pid == rsock_pid())
		return 0;
	/* In a forked child the inherited channel is the parent's (its thread
	 * reads it): this process gets a channel and a thread of its own. */
	if (!(cm_ch = new_channel()))
		return errno ? -errno : -ENODEV;
	if ((cm_ucm = ucm_open()) < 0)
		return cm_ucm;
	cm_ucm = ownfd_move(cm_ucm);
	/* (without it, tp_close tears its streams down itself; in a forked
	 * child the inherited one is the parent's thread's) */
	if (cm_reap_fd >= 0)
		ownfd_close(cm_reap_fd);
	cm_reap_fd = ownfd_move(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	/* Return only once the thread runs cm_main: a fork before that (nginx
	 * forks its workers right after listen()) would not park it either. */
	if ((rc = rsock_thread_start(cm_main, &cm_up)))
		return rc;
	cm_thread_pid = rsock_pid();
	if (cm_reap_fd >= 0)
		atomic_store(&cm_reap_pid, cm_thread_pid);
	return 0;
}

int cm_service_start(void)
{
	int rc;

	pthread_mutex_lock(&cm_lock);
	rc = cm_start();
	pthread_mutex_unlock(&cm_lock);
	return rc;
}

int cm_iwarp_device(const char *class_dir, char *name, size_t len)
{
	DIR *d = opendir(class_dir);
	struct dirent *e;
	int found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char path[PATH_MAX], buf[32];
		ssize_t n;
		int fd;

		if (e->d_name[0] == '.' ||
		    snprintf(path, sizeof(path), "%s/%s/node_type", class_dir, e->d_name) >=
			    (int)sizeof(path) ||
		    (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		if (strtol(buf, NULL, 10) == IBV_NODE_RNIC) {
			snprintf(name, len, "%s", e->d_name);
			found = 1;
		}
	}
	closedir(d);
	return found;
}

void cm_listen(const void *owner, const struct sockaddr *addr, socklen_t len)
{
	struct beacon *b;
	struct sockaddr_storage ss;
	char iwarp[64];
	int rc;

	if (sa_is_loopback(addr) || len > sizeof(ss))
		return;
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
	tuples_create();
	if (!tuples)
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
	b->next = beacons;
	beacons = b;
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
	for (pp = &beacons; *pp; pp = &(*pp)->next)
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

static int has_beacon(const void *owner)
{
	struct beacon *b;

	pthread_mutex_lock(&cm_lock);
	for (b = beacons; b; b = b->next)
		if (b->owner == owner)
			break;
	pthread_mutex_unlock(&cm_lock);
	return b != NULL;
}

/* The per-process data listener on the local address `local`. Caller holds cm_lock. */
static struct listener *listener_for(const struct sockaddr *local)
{
	struct listener *l;
	struct sockaddr_storage ss;

	for (l = listeners; l; l = l->next) {
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
	    !dev_mine(l->id->verbs)) {
		rdma_destroy_id(l->id);
		free(l);
		return NULL;
	}
	memcpy(&l->addr, &ss, sizeof(ss));
	sa_set_port((struct sockaddr *)&l->addr, ntohs(rdma_get_src_port(l->id)));
	l->pid = rsock_pid();
	l->next = listeners;
	listeners = l;
	return l;
}

/* ---- hello I/O on the control connection ------------------------------------ */

/* Write all of buf to fd, waiting for room up to deadline. */
static int ctl_write(int fd, const void *buf, size_t len, int64_t deadline)
{
	const uint8_t *p = buf;
	struct pollfd pf = {.fd = fd, .events = POLLOUT};

	while (len) {
		ssize_t w = rsock_real.send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			p += w;
			len -= (size_t)w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (!rsock_real.poll(&pf, 1, left_ms(deadline)))
			return -ETIMEDOUT;
	}
	return 0;
}

/* Wait until at least `want` bytes can be peeked, then peek them. Returns the
 * bytes peeked (== want), 0 at EOF, or -errno (-ETIMEDOUT). */
static ssize_t ctl_peek(int fd, void *buf, size_t want, int64_t deadline)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};

	for (;;) {
		ssize_t r = rsock_real.recv(fd, buf, want, MSG_PEEK | MSG_DONTWAIT);
		if (r == (ssize_t)want || r == 0)
			return r;
		if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (left_ms(deadline) == 0)
			return -ETIMEDOUT;
		/* Partial message: sleep a little rather than spin on POLLIN. */
		if (r > 0)
			usleep(200);
		else if (!rsock_real.poll(&pf, 1, left_ms(deadline)))
			return -ETIMEDOUT;
	}
}

static void ctl_consume(int fd, size_t n)
{
	uint8_t b[64];

	while (n) {
		ssize_t r = rsock_real.recv(fd, b, n < sizeof(b) ? n : sizeof(b), MSG_DONTWAIT);
		if (r <= 0)
			break;
		n -= (size_t)r;
	}
}

static int cancel_encode(uint8_t *b)
{
	memset(b, 0, CM_CANCEL_LEN);
	b[0] = PROTO_MAGIC & 0xff;
	b[1] = (PROTO_MAGIC >> 8) & 0xff;
	b[2] = (PROTO_MAGIC >> 16) & 0xff;
	b[3] = PROTO_MAGIC >> 24;
	b[4] = CM_CANCEL_TYPE;
	b[6] = CM_CANCEL_LEN;
	return CM_CANCEL_LEN;
}

static int is_cancel(const uint8_t *b)
{
	uint8_t c[CM_CANCEL_LEN];

	cancel_encode(c);
	return !memcmp(b, c, CM_CANCEL_LEN);
}

int cm_drop_stale_ack(int fd)
{
	uint8_t b[PROTO_HELLO_ACK_LEN];
	struct proto_hello_ack a;
	ssize_t r = rsock_real.recv(fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);

	if (r < 0)
		return -errno;
	if (r == 0)
		return 0;
	int d = proto_hello_ack_decode(b, (size_t)r, &a);
	if (d == -EAGAIN)
		return -EAGAIN;
	if (d < 0)
		return 0;
	ctl_consume(fd, (size_t)d);
	return 1;
}

/* ---- client ----------------------------------------------------------------- */

struct cm_client {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id; /* bound to the local address; becomes the data id */
	struct sockaddr_storage local, peer; /* local: the tuple the probe announced */
	struct sockaddr_storage src; /* the data id's bind address (port 0) */
	int64_t probed_ms;     /* when the beacon answered */
	struct tp *tp;
	uint64_t token;
	int fd; /* the application's socket */
	uint16_t hint; /* the beacon's data port hint, 0 if none */
	int pre; /* what was asked ahead for the data id towards hint: RESOLVE_NEW
		  * (nothing), _ADDR, _ROUTE, or -1 spoiled (a fresh id is needed) */
	int64_t deadline; /* of the handshake: the hello's sending + handshake_ms */
	int qp_why; /* our QP could not be made (a fallback reason), else 0 */
};

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
	rc = resolve(c->ch, *id, (struct sockaddr *)&src, (struct sockaddr *)&c->peer, deadline);
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
		qpn = (uint32_t)now_ms() * 2654435761u;
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
	int rc = wait_event(c->ch, RDMA_CM_EVENT_ESTABLISHED, deadline, &ev);

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
	ack(ev);
	return rc;
}

/* The stream's rings and CQ: 0, or a fallback reason. Made while the
 * probe's request makes its round trip (probe()); the QP follows while the
 * hello makes its own (client_qp). Both are wasted only on the first
 * connect to a plain peer, which the negative cache then remembers. */
static int client_prepare(struct cm_client *c, const struct cm_bufs *bufs)
{
	if (!c->tp) {
		if (tp_new(c->id->verbs, ring_size_for(bufs->rcvbuf, cm_settings.ring_kb * 1024),
			   ring_size_for(bufs->sndbuf, cm_settings.ring_kb * 1024), c->fd, &c->tp))
			return RSOCK_FB_RESOURCES;
		c->tp->ch = c->ch;
	}
	return tp_create_cq(c->tp) ? RSOCK_FB_RESOURCES : 0;
}

/* The stream's QP: its own (tp_prepare_qp, INIT on the bound data id's
 * device port), not the id's: the data id may be replaced before it
 * connects (a wrong hint, cm_client_await), and the QP does not have to
 * follow. 0 or a fallback reason. */
static int client_qp(struct cm_client *c)
{
	return tp_prepare_qp(c->tp, c->id->port_num) ? RSOCK_FB_RESOURCES : 0;
}

/* Ask the peer's beacon whether librsock serves the port (doc/design.md
 * section 8). Returns 1, 0 (a plain peer), or -errno (-EAGAIN: the peer's
 * CM kept refusing for want of resources; not the peer's nature). While
 * the first request makes its round trip, the stream's rings and CQ are
 * made ready (client_prepare). */
static int probe(struct cm_client *c, uint16_t cport, const struct cm_bufs *bufs)
{
	int64_t deadline = now_ms() + cm_settings.probe_ms;
	int rc = -EAGAIN;

	for (int i = 0; i < 4 && rc == -EAGAIN && left_ms(deadline) > 0; i++) {
		struct rdma_cm_id *id = NULL;
		if ((rc = probe_send(c, cport, deadline, &id)) == 0) {
			if (i == 0)
				client_prepare(c, bufs); /* failures are seen again after */
			rc = probe_wait(c, deadline);
		}
		if (id)
			rdma_destroy_id(id);
	}
	return rc;
}

static void client_free(struct cm_client *c)
{
	int tp_owns_id;

	if (!c)
		return;
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

/* With the beacon's hint, start resolving the data id's address at once:
 * TCP's handshake and the hello's round trip hide it (pre_route and
 * data_resolve go on from there). The neighbour entry is fresh (the probe
 * just resolved the same address), so a short time-out does; an error is
 * dealt with by data_resolve. */
static void pre_resolve(struct cm_client *c)
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
static void pre_route(struct cm_client *c)
{
	struct rdma_cm_event *ev;

	if (c->pre != RESOLVE_ADDR || rdma_get_cm_event(c->ch, &ev))
		return; /* not yet: data_resolve waits for it */
	if (ev->event == RDMA_CM_EVENT_ADDR_RESOLVED)
		c->pre = rdma_resolve_route(c->id, cm_settings.handshake_ms) ? -1 : RESOLVE_ROUTE;
	else /* ADDR_ERROR: the id is bound again */
		c->pre = ev->event == RDMA_CM_EVENT_ADDR_ERROR ? RESOLVE_NEW : -1;
	ack(ev);
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
 * going on from what pre_resolve and pre_route began if the hint was
 * right. 0 or -errno. */
static int data_resolve(struct cm_client *c, struct sockaddr *dst, int64_t deadline)
{
	int rc;

	if (c->pre < 0 || (c->pre && sa_port(dst) != c->hint)) {
		log_debug("data connection: resolved again (hint %u, port %u)", c->hint, sa_port(dst));
		if ((rc = data_id_renew(c)))
			return rc;
	}
	return resolve_from(c->ch, c->id, NULL, dst, deadline, c->pre);
}

void cm_client_abandon(struct cm_client *c)
{
	client_free(c);
}

int cm_client_begin(int fd, const struct sockaddr *addr, socklen_t len, const struct cm_bufs *bufs,
		    struct cm_client **state,
		    enum rsock_fallback_reason *why)
{
	struct cm_client *c;
	struct sockaddr_storage peer, bound;
	socklen_t bl = sizeof(bound);
	int rc;

	*state = NULL;
	*why = RSOCK_FB_NO_DEVICE;
	if ((addr->sa_family != AF_INET && addr->sa_family != AF_INET6) || len < sa_len(addr) ||
	    sa_is_loopback(addr))
		return 0;
	addr = sa_copy_unmapped(&peer, addr); /* AF_INET for IPv4, whatever the socket */
	if (neg_lookup(addr)) {
		*why = RSOCK_FB_PEER;
		return 0;
	}
	if (atomic_load_explicit(&tp_creds_stale, memory_order_relaxed)) {
		log_debug("connect: fd %d stays on TCP: this process changed its credentials "
			  "since it opened the RDMA device", fd);
		return 0;
	}
	if (!(c = calloc(1, sizeof(*c))))
		return (*why = RSOCK_FB_RESOURCES, 0);
	memcpy(&c->peer, &peer, sizeof(peer));
	if (route_source(addr, &c->local))
		goto plain;
	/* The local check: does the route's source address have an RDMA device? */
	if (!(c->ch = new_channel()) || rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP)) {
		c->id = NULL;
		goto plain;
	}
	sa_set_port((struct sockaddr *)&c->local, 0);
	if (rdma_bind_addr(c->id, (struct sockaddr *)&c->local) || !c->id->verbs)
		goto plain;
	/* The probe is an rdma_cm connect, which on an iWARP device is a TCP
	 * connection to the peer's port: a plain listener there would accept
	 * it. Only InfiniBand and RoCE devices (their own CM) take part. */
	if (c->id->verbs->device->transport_type != IBV_TRANSPORT_IB) {
		log_debug("connect: the route's device %s is not InfiniBand or RoCE: TCP",
			  ibv_get_device_name(c->id->verbs->device));
		goto plain;
	}
	if (!dev_usable(c->id->verbs)) {
		log_debug("connect: the RDMA device was opened by a parent process: TCP");
		*why = RSOCK_FB_NOT_IMPLEMENTED;
		goto plain;
	}
	/* Learn our port before the SYN: bind the TCP socket (if unbound). */
	if (rsock_real.getsockname(fd, (struct sockaddr *)&bound, &bl))
		goto plain;
	if (sa_port((struct sockaddr *)&bound) == 0) {
		/* Unbound, or bound with IP_BIND_ADDRESS_NO_PORT (curl does
		 * that): the port must be known before the SYN, so allocate it
		 * now, at the address the application chose if it chose one. */
		int off = 0;
		struct sockaddr_storage at;
		memcpy(&at, sa_is_any((struct sockaddr *)&bound) ? &c->local : &bound, sizeof(at));
		sa_map_for(bound.ss_family, &at); /* c->local is AF_INET for IPv4 */
		rsock_real.setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &off, sizeof(off));
		if (rsock_real.bind(fd, (struct sockaddr *)&at, sa_len((struct sockaddr *)&at)))
			goto plain;
		bl = sizeof(bound);
		if (rsock_real.getsockname(fd, (struct sockaddr *)&bound, &bl) ||
		    sa_port((struct sockaddr *)&bound) == 0)
			goto plain;
	}
	memcpy(&c->src, &c->local, sizeof(c->src));
	memcpy(&c->local, &bound, sizeof(bound));
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
	c->fd = fd;
	rc = probe(c, sa_port((struct sockaddr *)&bound), bufs);
	if (rc != 1) {
		log_debug("probe of port %u: %s (%d)", sa_port(addr), rc == 0 ? "plain peer" : "failed", rc);
		if (rc == 0 || rc == -ETIMEDOUT)
			neg_insert(addr);
		*why = rc == 0 || rc == -ETIMEDOUT ? RSOCK_FB_PEER
		       : rc == -EAGAIN		    ? RSOCK_FB_RESOURCES
						    : RSOCK_FB_NO_DEVICE;
		client_free(c);
		return 0;
	}
	if (client_prepare(c, bufs)) {
		*why = RSOCK_FB_RESOURCES;
		client_free(c);
		return 0;
	}
	getrandom(&c->token, sizeof(c->token), 0);
	c->probed_ms = now_ms();
	pre_resolve(c);
	*state = c;
	return 1;
plain:
	client_free(c);
	return 0;
}

/* Whether the connected stream has the tuple the probe announced (its
 * local address and port), soon enough that the server still holds it
 * (TUPLE_TTL_MS, with a margin). */
static int connected_as_probed(const struct cm_client *c, int fd)
{
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	uint8_t a[16], b[16];

	if (now_ms() - c->probed_ms > TUPLE_TTL_MS / 2) {
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
 * later (doc/design.md section 8). 0, or a fallback reason (state freed). */
int cm_client_hello(struct cm_client *c, int fd)
{
	struct proto_hello h = {.version = PROTO_VERSION};
	uint8_t buf[PROTO_HELLO_LEN];
	int rc;

	c->deadline = now_ms() + cm_settings.handshake_ms;
	/* The hello goes only where the beacon recorded this very tuple:
	 * otherwise the server's accept() takes the stream for a plain
	 * client, and the hello would reach its application as data. */
	if (!connected_as_probed(c, fd))
		goto fail;
	h.token = c->token;
	h.ring_addr = (uintptr_t)c->tp->rx.buf;
	h.ring_rkey = c->tp->rx_mr->rkey;
	h.ring_size = c->tp->rx.size;
	h.max_inline = 0;
	proto_hello_encode(&h, buf, sizeof(buf));
	if ((rc = ctl_write(fd, buf, PROTO_HELLO_LEN, c->deadline))) {
		log_debug("hello: not sent (%d)", rc);
		goto fail;
	}
	log_debug("hello: sent on fd %d, %d ms left", fd, left_ms(c->deadline));
	pre_route(c);
	c->qp_why = client_qp(c); /* while the hello makes its round trip */
	return 0;
fail:
	client_free(c);
	return RSOCK_FB_PROTOCOL;
}

int cm_client_await(struct cm_client *c, int fd, int rdma_ok, int nb, struct tp **out,
		    int *stale_ack)
{
	struct proto_hello_ack a;
	uint8_t buf[PROTO_HELLO_ACK_LEN];
	uint8_t cancel[CM_CANCEL_LEN];
	int64_t deadline = c->deadline;
	struct sockaddr_storage dst;
	struct rdma_conn_param cp;
	struct rdma_cm_event *ev = NULL;
	int why = RSOCK_FB_PROTOCOL;
	ssize_t r;
	int rc;

	*out = NULL;
	*stale_ack = 0;
	/* Only the answer's wait is shortened for a non-blocking socket: once
	 * it came, the server waits for our connection, which is quick. */
	int64_t answer_by = deadline;
	unsigned nb_ms = cm_settings.nonblock_ms == CM_NONBLOCK_DEFAULT ? cm_settings.handshake_ms / 2
									 : cm_settings.nonblock_ms;
	if (nb && now_ms() + nb_ms < answer_by)
		answer_by = now_ms() + nb_ms;
	r = ctl_peek(fd, buf, PROTO_HELLO_ACK_LEN, answer_by);
	log_debug("hello: answer %zd, %d ms left", r, left_ms(deadline));
	if (r == -ETIMEDOUT) {
		if (answer_by != deadline)
			log_info("connect: fd %d: no answer to the hello within %u ms (RSOCK_NONBLOCK_MS) "
				 "on a non-blocking socket (a server that accepts late?): TCP",
				 fd, nb_ms);
		*stale_ack = 1; /* the answer may still come: drop it then */
		why = RSOCK_FB_PEER;
		goto fail;
	}
	if (r <= 0 || (rc = proto_hello_ack_decode(buf, (size_t)r, &a)) <= 0) {
		/* Not an answer: a librsock server that saw our hello only after
		 * writing application bytes; those bytes stay for the application. */
		why = RSOCK_FB_PROTOCOL;
		goto fail_nocancel;
	}
	ctl_consume(fd, (size_t)rc);
	if (a.status) {
		why = a.status < RSOCK_FB_MAX ? a.status : RSOCK_FB_PROTOCOL;
		goto fail_nocancel;
	}
	if (!rdma_ok) {
		why = RSOCK_FB_NOT_IMPLEMENTED; /* declined: the stream goes to exec or stdio */
		goto fail;
	}
	if (c->qp_why) {
		why = c->qp_why; /* the server waits for our connection or a cancel */
		goto fail;
	}
	why = RSOCK_FB_PROTOCOL;
	if (a.token != c->token ||
	    tp_set_peer(c->tp, a.ring_addr, a.ring_rkey, a.ring_size, a.max_inline, a.version))
		goto fail;
	memcpy(&dst, &c->peer, sizeof(dst));
	sa_set_port((struct sockaddr *)&dst, a.rdma_port);
	why = RSOCK_FB_NO_DEVICE;
	if ((rc = data_resolve(c, (struct sockaddr *)&dst, deadline))) {
		log_debug("data connection: resolve failed (%d)", rc);
		goto fail;
	}
	uint64_t wire_token = htole64(c->token); /* little-endian on the wire */
	tp_conn_param(&cp, &wire_token, sizeof(wire_token));
	cp.qp_num = tp_own_qp_num(c->tp);
	why = RSOCK_FB_PEER;
	if (rdma_connect(c->id, &cp))
		goto fail;
	/* The QP is not the id's: the reply comes as CONNECT_RESPONSE, and we
	 * move the QP to RTR and RTS (tp_create_qp) and send the RTU. */
	rc = wait_event(c->ch, RDMA_CM_EVENT_CONNECT_RESPONSE, deadline, &ev);
	ack(ev);
	if (rc == 0 && ((rc = tp_create_qp(c->tp, c->id)) || (rc = rdma_establish(c->id) ? -errno : 0)))
		why = RSOCK_FB_RESOURCES;
	if (rc) {
		log_debug("data connection: not established (%d)", rc);
		goto fail;
	}
	tp_up(c->tp);
	/* The id's later events (a disconnect) go to the process's channel,
	 * which the cm thread acknowledges: one descriptor less per stream. */
	pthread_mutex_lock(&cm_lock);
	c->id->context = NULL;
	if (cm_ch && cm_thread_pid == rsock_pid() && rdma_migrate_id(c->id, cm_ch) == 0) {
		cm_channel_free(c->tp->ch);
		c->tp->ch = NULL;
	}
	pthread_mutex_unlock(&cm_lock);
	*out = c->tp;
	free(c);
	log_debug("connect: fd %d carried by RDMA", fd);
	return 0;
fail:
	/* Tell the server we stay on TCP; whatever follows is application data. */
	ctl_write(fd, cancel, (size_t)cancel_encode(cancel), now_ms() + 1000);
fail_nocancel:
	client_free(c);
	return why;
}

/* ---- server ---------------------------------------------------------------- */

static int send_nak(int fd, int status, int64_t deadline)
{
	struct proto_hello_ack a = {.version = PROTO_VERSION, .status = (uint16_t)status};
	uint8_t buf[PROTO_HELLO_ACK_LEN];

	proto_hello_ack_encode(&a, buf, sizeof(buf));
	return ctl_write(fd, buf, sizeof(buf), deadline);
}

int cm_server_probed(const void *owner, int fd)
{
	struct sockaddr_storage peer, local;
	socklen_t pl = sizeof(peer), ll = sizeof(local);

	/* (A listener whose port's beacon is another listener's counts: with
	 * SO_REUSEPORT one beacon answers for all of them, in this process or
	 * another of this user, and the kernel hands a stream to any.) */
	if (!has_beacon(owner)) {
		log_debug("accept: fd %d: its listener has no beacon: TCP", fd);
		return RSOCK_FB_NO_DEVICE;
	}
	if (rsock_real.getpeername(fd, (struct sockaddr *)&peer, &pl) ||
	    rsock_real.getsockname(fd, (struct sockaddr *)&local, &ll))
		return RSOCK_FB_PROTOCOL;
	if (!tuple_take((struct sockaddr *)&peer, (struct sockaddr *)&local)) {
		log_debug("accept: fd %d from port %u was not probed: a plain client", fd,
			  sa_port((struct sockaddr *)&peer));
		return RSOCK_FB_PEER; /* a plain client: TCP from the first byte */
	}
	return 0;
}

int cm_server_accept(const void *owner, int fd, const struct cm_bufs *bufs, struct tp **out)
{
	int why = cm_server_probed(owner, fd);

	*out = NULL;
	return why ? why : cm_server_handshake(fd, bufs, out);
}

/* Whether another process took this stream's hello already: the hello is
 * its first bytes, so bytes received and no longer queued were read by
 * someone, and this process has not (it would have settled the stream).
 * vsftpd forks two processes per login before either uses the stream:
 * without this check the second would wait for a hello the first had
 * answered until the handshake bound, 4 s per login. Read before the
 * queue, so that bytes arriving in between make it err towards waiting. */
/* tcpi_state values after the peer's FIN (the kernel's tcp_states.h;
 * <linux/tcp.h>, needed for tcpi_bytes_received, does not name them). */
enum { TCPS_CLOSE_WAIT = 8, TCPS_LAST_ACK = 9, TCPS_CLOSING = 11 };

static int hello_taken(int fd)
{
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	int inq = 0;
	uint64_t got;

	if (rsock_real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) ||
	    tl < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received) ||
	    rsock_real.ioctl(fd, FIONREAD, &inq) || inq < 0)
		return 0;
	/* The peer's FIN takes a sequence number, which bytes_received
	 * counts: a client that wrote and closed before the accept looked
	 * like a taken hello, and its hello and cancel reached the
	 * application as data (test/rdma/lateaccept.py). */
	got = ti.tcpi_bytes_received;
	if (got && (ti.tcpi_state == TCPS_CLOSE_WAIT || ti.tcpi_state == TCPS_LAST_ACK ||
		    ti.tcpi_state == TCPS_CLOSING))
		got--;
	return got > (uint64_t)inq;
}

/* Consume the client's cancel when it is next on the stream: 1 if it was.
 * A client that gave up on its hello's answer sends it, then application
 * data. */
static int drop_cancel(int fd)
{
	uint8_t c[CM_CANCEL_LEN];
	ssize_t r = rsock_real.recv(fd, c, sizeof(c), MSG_PEEK | MSG_DONTWAIT);

	if (r != CM_CANCEL_LEN || !is_cancel(c))
		return 0;
	ctl_consume(fd, CM_CANCEL_LEN);
	return 1;
}

int cm_server_handshake(int fd, const struct cm_bufs *bufs, struct tp **out)
{
	struct sockaddr_storage local;
	socklen_t ll = sizeof(local);
	uint8_t buf[PROTO_HELLO_LEN];
	struct proto_hello h;
	struct proto_hello_ack a = {.version = PROTO_VERSION};
	struct pending p = {.obj.kind = CTX_PENDING, .state = PEND_WAIT};
	struct listener *l;
	int64_t deadline;
	struct timespec ts;
	ssize_t r;
	int why, rc = 0;

	*out = NULL;
	if (rsock_real.getsockname(fd, (struct sockaddr *)&local, &ll))
		return RSOCK_FB_PROTOCOL;
	sa_unmap(&local); /* an IPv4 client of a dual-stack listener: IPv4 data listener */

	/* A librsock client: its hello is the first thing on the stream. */
	if (hello_taken(fd)) {
		log_debug("accept: fd %d: another process answered the hello already: TCP here", fd);
		return RSOCK_FB_PEER;
	}
	deadline = now_ms() + 2 * cm_settings.handshake_ms;
	log_debug("accept: waiting for the hello on fd %d", fd);
	r = ctl_peek(fd, buf, PROTO_HELLO_LEN, deadline);
	if (r <= 0 || (rc = proto_hello_decode(buf, (size_t)r, &h)) <= 0) {
		log_debug("accept: no usable hello (%zd bytes, decode %d)", r, r > 0 ? rc : 0);
		return RSOCK_FB_PROTOCOL; /* leave the bytes to the application */
	}
	ctl_consume(fd, (size_t)rc);
	if (drop_cancel(fd)) {
		/* The client gave up waiting for the answer (a server that
		 * accepts late): what follows is application data. */
		log_debug("accept: fd %d: the client gave up on its hello already: TCP", fd);
		return RSOCK_FB_PEER;
	}
	if (!bufs) {
		why = RSOCK_FB_NOT_IMPLEMENTED; /* declined: the stream goes to exec */
		goto nak;
	}
	if (atomic_load_explicit(&tp_creds_stale, memory_order_relaxed)) {
		log_debug("accept: fd %d stays on TCP: this process changed its credentials "
			  "since it opened the RDMA device", fd);
		why = RSOCK_FB_NO_DEVICE;
		goto nak;
	}

	pthread_mutex_lock(&cm_lock);
	l = listener_for((struct sockaddr *)&local);
	pthread_mutex_unlock(&cm_lock);
	why = RSOCK_FB_NO_DEVICE;
	if (!l)
		goto nak;
	why = RSOCK_FB_RESOURCES;
	if (!dev_usable(l->id->verbs) ||
	    tp_new(l->id->verbs, ring_size_for(bufs->rcvbuf, cm_settings.ring_kb * 1024),
		   ring_size_for(bufs->sndbuf, cm_settings.ring_kb * 1024), fd, &p.tp))
		goto nak;
	why = RSOCK_FB_PROTOCOL;
	if (tp_set_peer(p.tp, h.ring_addr, h.ring_rkey, h.ring_size, h.max_inline, h.version))
		goto nak;
	p.token = h.token;
	p.ctx = l->id->verbs;
	pthread_mutex_lock(&cm_lock);
	p.next = pendings;
	pendings = &p;
	pthread_mutex_unlock(&cm_lock);

	a.token = h.token;
	a.rdma_port = sa_port((struct sockaddr *)&l->addr);
	a.ring_addr = (uintptr_t)p.tp->rx.buf;
	a.ring_rkey = p.tp->rx_mr->rkey;
	a.ring_size = p.tp->rx.size;
	proto_hello_ack_encode(&a, buf, sizeof(buf));
	why = RSOCK_FB_PEER;
	if (ctl_write(fd, buf, PROTO_HELLO_ACK_LEN, deadline))
		goto unlist;
	/* CQ and QP now, while the client resolves and connects, rather than
	 * in the cm thread when its request comes: the thread then only moves
	 * the QP on and accepts (if the request comes first, the thread makes
	 * the QP on its id as before). */
	if (l->id->port_num)
		tp_prepare_qp(p.tp, l->id->port_num);
	else
		tp_create_cq(p.tp);

	/* Wait for the data connection, or the client's cancel, or its end. */
	for (;;) {
		uint8_t c[CM_CANCEL_LEN];
		pthread_mutex_lock(&cm_lock);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 2000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		if (p.state != PEND_UP)
			pthread_cond_timedwait(&cm_cond, &cm_lock, &ts);
		int st = p.state;
		pthread_mutex_unlock(&cm_lock);
		if (st == PEND_UP)
			break;
		/* A connection that failed here failed at the client too,
		 * whose cancel follows (bounded by the deadline): leaving
		 * before it came would hand it to the application. */
		r = rsock_real.recv(fd, c, sizeof(c), MSG_PEEK | MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
			/* The client ended its side. Once we accepted its
			 * request it may have been connected, have written
			 * and closed before the cm thread saw ESTABLISHED
			 * here: what it sent is in our ring, so the outcome
			 * of the connection decides (bounded by the deadline). */
			if (st != PEND_ACCEPTING || left_ms(deadline) == 0)
				goto unlist;
			continue;
		}
		if (r == CM_CANCEL_LEN && is_cancel(c)) {
			ctl_consume(fd, CM_CANCEL_LEN);
			goto unlist;
		}
		if (left_ms(deadline) == 0)
			goto unlist;
	}
	pthread_mutex_lock(&cm_lock);
	for (struct pending **pp = &pendings; *pp; pp = &(*pp)->next)
		if (*pp == &p) {
			*pp = p.next;
			break;
		}
	p.tp->id->context = NULL;
	pthread_mutex_unlock(&cm_lock);
	tp_up(p.tp);
	*out = p.tp;
	log_debug("accept: fd %d carried by RDMA", fd);
	return 0;
unlist:
	drop_cancel(fd); /* one that came with the end (a failed answer) */
	log_debug("accept: fd %d stays on TCP (reason %d)", fd, why);
	pthread_mutex_lock(&cm_lock);
	for (struct pending **pp = &pendings; *pp; pp = &(*pp)->next)
		if (*pp == &p) {
			*pp = p.next;
			break;
		}
	if (p.tp->id)
		p.tp->id->context = NULL;
	pthread_mutex_unlock(&cm_lock);
	tp_close(p.tp, 1);
	return why;
nak:
	if (p.tp)
		tp_close(p.tp, 1);
	send_nak(fd, why, deadline);
	return why;
}

int cm_reap_ready(void)
{
	return atomic_load_explicit(&cm_reap_pid, memory_order_acquire) == rsock_pid();
}

void cm_reap_ring(void)
{
	uint64_t one = 1;

	(void)!rsock_real.write(cm_reap_fd, &one, sizeof(one));
}

void cm_fork_quiesce(void)
{
	pthread_mutex_lock(&cm_run);
}

void cm_fork_resume(void)
{
	pthread_mutex_unlock(&cm_run);
}

void cm_fork_lock(void)
{
	pthread_mutex_lock(&cm_lock);
}

void cm_fork_unlock(void)
{
	pthread_mutex_unlock(&cm_lock);
}
