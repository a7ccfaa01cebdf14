/* conn.c - see conn.h. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <netinet/in.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "negotiate/cm.h"
#include "core/conn.h"
#include "core/fdtab.h"
#include "base/ownfd.h"
#include "path/handover.h"
#include "base/proc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/real.h"
#include "base/statpub.h"
#include "base/stats.h"
#include "path/path.h"

static void later_drop(struct conn *c);

static struct conn_hooks conn_hooks;

void conn_hooks_set(const struct conn_hooks *h)
{
	conn_hooks = *h;
}

/* Freed conns are kept for the next conn_new, never given back to malloc:
 * fdtab_get() takes a reference on a conn it found without a lock, and the
 * memory it looks at may have been freed meanwhile; it stays a conn whose
 * count is 0 (conn_tryref fails) or a conn of another stream (the lookup sees
 * that the descriptor's slot changed). The pool holds at most as many conns
 * as were ever open at once (about 160 bytes each). */
static struct conn *conn_pool;
static pthread_mutex_t conn_pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* Under ASan a pooled conn is poisoned but for its count (a lookup may try
 * to raise it) and its link: a use of a freed conn is still reported. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POOL_POISON(c, on)                                                                  \
	((on) ? ASAN_POISON_MEMORY_REGION((char *)(c) + sizeof((c)->refs),                  \
					  offsetof(struct conn, pool_next) - sizeof((c)->refs)) \
	      : ASAN_UNPOISON_MEMORY_REGION((char *)(c) + sizeof((c)->refs),                \
					    offsetof(struct conn, pool_next) - sizeof((c)->refs)))
#else
#define POOL_POISON(c, on) ((void)(c))
#endif

struct conn *conn_new(int domain)
{
	struct conn *c;

	pthread_mutex_lock(&conn_pool_lock);
	if ((c = conn_pool))
		conn_pool = c->pool_next;
	pthread_mutex_unlock(&conn_pool_lock);
	if (c) {
		POOL_POISON(c, 0);
		/* Everything but the count, which a lookup may be trying to
		 * raise (it stays 0 until the store below). */
		memset((char *)c + sizeof(c->refs), 0, sizeof(*c) - sizeof(c->refs));
	} else if (!(c = calloc(1, sizeof(*c)))) {
		return NULL;
	}
	c->domain = domain;
	pthread_mutex_init(&c->lock, NULL);
	atomic_store_explicit(&c->refs, 1, memory_order_release);
	return c;
}

struct conn *conn_ref(struct conn *c)
{
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
	return c;
}

int conn_tryref(struct conn *c)
{
	unsigned r = atomic_load_explicit(&c->refs, memory_order_relaxed);

	do {
		if (!r)
			return 0;
	} while (!atomic_compare_exchange_weak_explicit(&c->refs, &r, r + 1, memory_order_acquire,
						       memory_order_relaxed));
	return 1;
}

void conn_unref(struct conn *c)
{
	int saved;

	if (!c || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
		return;
	saved = errno;
	if (c->client) /* a client's hello never answered here: the end of its
			* TCP stream ends the server's wait */
		cm_client_abandon(c->client);
	if (c->beacon) {
		cm_unlisten(c);
		cm_shm_unlisten(c);
	}
	if (c->pub) { /* the slot goes first: the path writes to it no more */
		if (c->stream)
			path_publish(c->stream, NULL);
		statpub_release(c->pub);
		atomic_store(&c->pub, NULL);
	}
	if (c->stream)
		path_close(c->stream, 0);
	if (c->instance && conn_hooks.instance_free)
		conn_hooks.instance_free(c->instance);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_lock(&conn_pool_lock);
	c->pool_next = conn_pool;
	conn_pool = c;
	POOL_POISON(c, 1);
	pthread_mutex_unlock(&conn_pool_lock);
	errno = saved;
}

void conn_settle(struct conn *c, int fd, int how)
{
	const int rdma_ok = how & CONN_SETTLE_RDMA;
	struct path_stream *s = NULL;
	enum rsock_fallback_reason why;
	int rc, decided = 0, pub_why = -1;

	/* The settling thread's duplicate goes before the wait: else a server
	 * whose threads each wait for a hello that never comes (a client that
	 * stayed on TCP after its probe) holds one more descriptor per stream
	 * for the handshake bound, and its accept() fails with EMFILE where
	 * kernel TCP's does not. The thread serving the entry unlinked it
	 * already and closes its duplicate when done. */
	later_drop(c);
	pthread_mutex_lock(&c->lock);
	if (atomic_load(&c->hello_due)) {
		struct cm_client *st = c->client;
		int stale = 0;
		if (st) {
			c->client = NULL;
			/* A non-blocking socket waits for the answer only a
			 * little, the library thread's wait too (the
			 * application's call may be waiting for its lock): an
			 * event loop must not stop for a server that accepts
			 * late (doc/design.md, "Choosing a path"). */
			int nb = !(how & CONN_SETTLE_FULL) && atomic_load(&c->nonblock);
			rc = cm_client_await(st, fd, rdma_ok, nb, &s, &stale, &why);
		} else {
			struct cm_bufs b = {atomic_load(&c->rcvbuf), atomic_load(&c->sndbuf)};
			rc = cm_server_handshake(fd, rdma_ok ? &b : NULL, &s, &stale, &why);
		}
		if (rc == 0) {
			c->stream = s;
			atomic_store(&c->path, CONN_PATH_RDMA);
			/* After the path: a setsockopt that saw the stream not yet on
			 * RDMA (shim/socket.c) was made before this reads them. Set
			 * before, or inherited from the listener as the kernel does. */
			path_sockopts_changed(s);
			if (conn_hooks.stream_converted)
				conn_hooks.stream_converted();
		} else {
			atomic_store(&c->stale, stale);
			atomic_store(&c->path, CONN_PATH_TCP);
			stats_fallback(why);
		}
		stats_stream(s ? s->ops->stats_path : STATS_TCP);
		atomic_store(&c->hello_due, 0);
		decided = 1;
		pub_why = rc ? (int)why : -1;
	}
	pthread_mutex_unlock(&c->lock);
	if (decided)
		conn_publish(c, fd, NULL, 0, 0, pub_why);
}

void conn_fd_gone(struct conn *c)
{
	if (c && atomic_fetch_sub_explicit(&c->nfds, 1, memory_order_acq_rel) == 1) {
		struct statpub_slot *p = atomic_load_explicit(&c->pub, memory_order_relaxed);
		if (p)
			statpub_state(p, STATPUB_ST_CLOSED);
		if (!c->instance && conn_hooks.stream_closed)
			conn_hooks.stream_closed(c);
		later_drop(c);
	}
}

/* The data path's cost of rsock-stat: a load of the slot's pointer and, when
 * set, one relaxed add to the stream's own slot (doc/design.md,
 * "Observability"). */
static inline void conn_account(struct conn *c, int tx, long long r)
{
	int on = atomic_load_explicit(&c->path, memory_order_relaxed) == CONN_PATH_RDMA;
	int path = on ? c->stream->ops->stats_path : STATS_TCP;
	struct statpub_slot *p = atomic_load_explicit(&c->pub, memory_order_relaxed);

	if (p)
		statpub_bytes(p, path, tx, (uint64_t)r);
	stats_add_bytes(path, tx, (uint64_t)r); /* last: a tail call */
}

void conn_account_tx(struct conn *c, long long r)
{
	if (r <= 0)
		return;
	conn_account(c, 1, r);
}

void conn_account_rx(struct conn *c, long long r)
{
	if (r <= 0)
		return;
	conn_account(c, 0, r);
}

/* The slot of c, claimed now if it has none (the segment made at the
 * process's first), or NULL. */
static struct statpub_slot *conn_pub_slot(struct conn *c, int fd, const struct sockaddr *peer,
					  socklen_t plen)
{
	struct statpub_slot *p = atomic_load(&c->pub), *prev = NULL;
	struct sockaddr_storage l, r;
	socklen_t ll = sizeof(l), rl = sizeof(r);

	if (p)
		return p;
	if (!statpub_live()) {
		struct rsock_stats now;
		stats_snapshot(&now, fdtab_count());
		if (statpub_open(&now))
			return NULL;
	}
	memset(&l, 0, sizeof(l));
	memset(&r, 0, sizeof(r));
	if (!rsock_real.getsockname || rsock_real.getsockname(fd, (struct sockaddr *)&l, &ll))
		l.ss_family = 0;
	if (peer && plen >= sizeof(sa_family_t))
		memcpy(&r, peer, plen < sizeof(r) ? plen : sizeof(r));
	else if (!rsock_real.getpeername || rsock_real.getpeername(fd, (struct sockaddr *)&r, &rl))
		r.ss_family = 0;
	p = statpub_claim(fd,
			  atomic_load(&c->role) == CONN_ROLE_ACCEPTED ? STATPUB_ROLE_ACCEPTED
								      : STATPUB_ROLE_CLIENT,
			  (struct sockaddr *)&l, (struct sockaddr *)&r);
	if (p && !atomic_compare_exchange_strong(&c->pub, &prev, p)) {
		statpub_release(p); /* another thread published it meanwhile */
		p = prev;
	}
	return p;
}

void conn_publish(struct conn *c, int fd, const struct sockaddr *peer, socklen_t plen, int st,
		  int why)
{
	struct statpub_slot *p = conn_pub_slot(c, fd, peer, plen);
	int path = atomic_load(&c->path);

	if (!p)
		return;
	/* A path stream says which path it is (statpub's numbers are
	 * conn_path's, and one more for the same-host path). */
	uint32_t sp = path == CONN_PATH_RDMA && c->stream &&
			      c->stream->ops->stats_path == STATS_SHM
		      ? STATPUB_PATH_SHM
		      : (uint32_t)path;
	atomic_store_explicit(&p->path, sp, memory_order_relaxed);
	if (path != CONN_PATH_TCP)
		atomic_store_explicit(&p->fallback, -1, memory_order_relaxed);
	else if (why >= 0)
		atomic_store_explicit(&p->fallback, why, memory_order_relaxed);
	if (st)
		statpub_state(p, (enum statpub_state)st);
	if (path == CONN_PATH_RDMA && c->stream)
		path_publish(c->stream, p);
}

void conn_publish_shut(struct conn *c, int how)
{
	struct statpub_slot *p = atomic_load_explicit(&c->pub, memory_order_relaxed);
	uint32_t st, shut;

	if (!p)
		return;
	st = atomic_load_explicit(&p->state, memory_order_relaxed);
	shut = st == STATPUB_ST_SHUT_RD ? 1 : st == STATPUB_ST_SHUT_WR ? 2 : st == STATPUB_ST_SHUT_RDWR ? 3 : 0;
	shut |= how == SHUT_RD ? 1 : how == SHUT_WR ? 2 : 3;
	statpub_state(p, shut == 1 ? STATPUB_ST_SHUT_RD : shut == 2 ? STATPUB_ST_SHUT_WR
								  : STATPUB_ST_SHUT_RDWR);
}

int conn_eligible(int domain, int type, int protocol)
{
	int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);

	return (domain == AF_INET || domain == AF_INET6) && base == SOCK_STREAM &&
	       (protocol == 0 || protocol == IPPROTO_TCP);
}

/* ---- streams nobody uses (doc/design.md, "Choosing a path") ------------
 * An accepted stream answers its client's hello at its first use, in the
 * process that uses it (fork-after-accept servers). A server that leaves
 * the stream alone until the client does something else first (qperf waits
 * for a word on its control connection, which the client sends once its
 * connect() returned) held the client in connect() for the whole handshake
 * bound, after which the stream stayed on TCP. So each such stream is also
 * put on a list that a thread of the process serves: when it is still
 * unused after RSOCK_SETTLE_MS, no fork happened since it was accepted (a
 * child may be the user), and the application still holds it, the thread
 * answers the hello itself. A connected stream, whose connect() returned
 * once its hello was sent, goes on the same list: unused after
 * RSOCK_SETTLE_MS, the thread awaits the answer. The thread works on a
 * duplicate of its own, so that a descriptor number the application closed
 * and reused is never touched. */

struct later {
	struct later *next, **pprev;
	struct conn *c;    /* a reference, dropped as soon as the entry is */
	int fd;            /* our duplicate */
	int64_t due_ms;
	unsigned forks;    /* ho_forks when it was accepted */
	int client;        /* a connected stream awaiting its hello's answer */
};

static pthread_mutex_t later_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held by the thread while it settles a stream (librdmacm, libibverbs and
 * the allocator may then hold locks of their own): a fork waits for it, as
 * for the library thread's run lock (service.h), so that no child
 * inherits such a lock held. */
static pthread_mutex_t later_run = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t later_cond;
static sem_t later_up;
static struct later *later_head, **later_tail = &later_head;
static pid_t later_pid; /* the process whose thread serves the list */

/* Caller holds later_lock. */
static void later_unlink(struct later *l)
{
	*l->pprev = l->next;
	if (l->next)
		l->next->pprev = l->pprev;
	else
		later_tail = l->pprev;
	l->c->later = NULL;
}

/* The stream settled, or the application let go of it: its entry (with
 * its reference and duplicate) goes now, not when it falls due, so that a
 * short connection is torn down at its close (its rings back in the cache
 * for the next one) and its end is not held open by our duplicate. */
static void later_drop(struct conn *c)
{
	struct later *l;

	if (!atomic_load_explicit(&c->later_on, memory_order_acquire))
		return;
	pthread_mutex_lock(&later_lock);
	if ((l = c->later))
		later_unlink(l);
	atomic_store(&c->later_on, 0);
	pthread_mutex_unlock(&later_lock);
	if (l) {
		ownfd_close(l->fd);
		conn_unref(l->c); /* not the last: the caller holds one */
		free(l);
	}
}

/* prefork: a connected stream settled by the fork's prepare handler, still
 * in the only process that has it (fork() counted the fork already). */
static void later_serve(struct later *l, int prefork)
{
	if (atomic_load(&l->c->hello_due) && atomic_load(&l->c->nfds) > 0 &&
	    (prefork || l->forks == atomic_load(&ho_forks))) {
		if (l->client)
			log_debug("connect: stream (fd %d here) unused for %u ms: the answer to its hello "
				  "is awaited now", l->fd, cm_settings.settle_ms);
		else
			log_debug("accept: stream (fd %d here) unused for %u ms: its hello is answered now",
				  l->fd, cm_settings.settle_ms);
		conn_settle(l->c, l->fd, CONN_SETTLE_RDMA);
	}
	ownfd_close(l->fd);
	conn_unref(l->c);
	free(l);
}

static void *later_main(void *arg)
{
	(void)arg;
	rsock_guard_enter(); /* this thread's libc calls are the library's own */
	sem_post(&later_up); /* past its start-up code: see rsock_thread_start */
	pthread_mutex_lock(&later_lock);
	for (;;) {
		struct later *l = later_head;
		if (!l) {
			pthread_cond_wait(&later_cond, &later_lock);
			continue;
		}
		if (l->due_ms > clock_now_ms()) {
			struct timespec ts = clock_ns_ts(l->due_ms * 1000000);
			pthread_cond_timedwait(&later_cond, &later_lock, &ts);
			continue;
		}
		/* later_run before the entry leaves the list: a fork's
		 * prepare handler, which holds it, then either finds the
		 * entry there or comes after it was served. Taken out of
		 * order before, the entry could be off the list and not yet
		 * served at the fork: the handler missed it, the thread then
		 * skipped it (a fork since), and parent and child both awaited
		 * the one answer. */
		pthread_mutex_unlock(&later_lock);
		pthread_mutex_lock(&later_run);
		pthread_mutex_lock(&later_lock);
		l = later_head;
		if (!l || l->due_ms > clock_now_ms()) {
			pthread_mutex_unlock(&later_run);
			continue;
		}
		later_unlink(l);
		pthread_mutex_unlock(&later_lock);
		later_serve(l, 0);
		pthread_mutex_unlock(&later_run);
		pthread_mutex_lock(&later_lock);
	}
	return NULL;
}

/* Caller holds later_lock. 0 or -errno. */
static int later_start(void)
{
	pthread_condattr_t ca;
	int rc;

	if (later_pid == rsock_pid())
		return 0;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&later_cond, &ca);
	pthread_condattr_destroy(&ca);
	if ((rc = rsock_thread_start(later_main, &later_up)))
		return rc;
	later_pid = rsock_pid();
	return 0;
}

int conn_settle_later(struct conn *c, int fd, int client)
{
	struct later *l;

	int rc;

	if (!cm_settings.settle_ms)
		return -EOPNOTSUPP;
	if (!(l = calloc(1, sizeof(*l))))
		return -ENOMEM;
	/* Never one of the application's numbers: a server accepting a burst
	 * at its limit on open files would get EMFILE sooner. Without a
	 * number above them the stream settles at its first use. */
	if ((l->fd = ownfd_dup_high(fd)) < 0) {
		rc = -errno;
		free(l);
		return rc;
	}
	l->c = conn_ref(c);
	l->client = client;
	l->forks = atomic_load(&ho_forks);
	l->due_ms = clock_now_ms() + cm_settings.settle_ms;
	pthread_mutex_lock(&later_lock);
	if ((rc = later_start())) {
		pthread_mutex_unlock(&later_lock);
		ownfd_close(l->fd);
		conn_unref(l->c);
		free(l);
		return rc;
	}
	/* Every entry waits the same RSOCK_SETTLE_MS on the monotonic clock:
	 * appended, the list stays in due order. */
	l->pprev = later_tail;
	*later_tail = l;
	later_tail = &l->next;
	c->later = l;
	atomic_store_explicit(&c->later_on, 1, memory_order_release);
	if (later_head == l)
		pthread_cond_signal(&later_cond);
	pthread_mutex_unlock(&later_lock);
	return 0;
}

void conn_fork_settle_clients(void)
{
	/* A connected stream whose hello's answer is still awaited settles
	 * before a fork, here, as it did inside connect(): parent and child
	 * must not both await that one answer (the second one to use the
	 * stream waited out the handshake, then sent its cancel, and its
	 * bytes, on TCP to a server reading RDMA: a Perl client that forks
	 * a writer after connect()). later_run stays held, across the fork,
	 * so that the thread serves no entry meanwhile (conn_fork_lock). */
	pthread_mutex_lock(&later_run);
	for (;;) {
		struct later *l;
		pthread_mutex_lock(&later_lock);
		for (l = later_head; l && !l->client; l = l->next)
			;
		if (l)
			later_unlink(l);
		pthread_mutex_unlock(&later_lock);
		if (!l)
			return;
		later_serve(l, 1);
	}
}

void conn_pool_fork_lock(void)
{
	pthread_mutex_lock(&conn_pool_lock);
}

void conn_pool_fork_unlock(void)
{
	pthread_mutex_unlock(&conn_pool_lock);
}

void conn_fork_lock(void)
{
	/* later_run: held since conn_fork_settle_clients */
	pthread_mutex_lock(&later_lock);
}

void conn_fork_unlock(void)
{
	pthread_mutex_unlock(&later_lock);
	pthread_mutex_unlock(&later_run);
}

void conn_fork_child(void)
{
	/* The list is the parent's, served by its thread: the child closes
	 * its copies of the duplicates (else it would keep those connections
	 * open) and forgets the entries (their references stay: the child's
	 * streams are the child's to settle at their first use). */
	struct later *l = later_head, *n;

	later_head = NULL;
	later_tail = &later_head;
	later_pid = 0;
	pthread_mutex_init(&conn_pool_lock, NULL);
	pthread_mutex_init(&later_lock, NULL);
	pthread_mutex_init(&later_run, NULL);
	for (; l; l = n) {
		n = l->next;
		l->c->later = NULL;
		atomic_store(&l->c->later_on, 0);
		ownfd_close(l->fd);
		free(l);
	}
}
