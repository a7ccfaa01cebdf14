/* conn.c - see conn.h. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>

#include "cm.h"
#include "conn.h"
#include "epoll.h"
#include "stats.h"
#include "transport.h"

struct conn *conn_new(int domain)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	atomic_init(&c->refs, 1);
	c->domain = domain;
	pthread_mutex_init(&c->lock, NULL);
	return c;
}

struct conn *conn_ref(struct conn *c)
{
	atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
	return c;
}

void conn_unref(struct conn *c)
{
	int saved;

	if (!c || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
		return;
	saved = errno;
	if (c->beacon)
		cm_unlisten(c);
	if (c->tp)
		tp_close(c->tp, 0);
	if (c->ep)
		ep_destroy(c->ep);
	pthread_mutex_destroy(&c->lock);
	free(c);
	errno = saved;
}

void conn_settle(struct conn *c, int fd, int rdma_ok)
{
	struct tp *t = NULL;
	int why;

	pthread_mutex_lock(&c->lock);
	if (atomic_load(&c->hello_due)) {
		struct cm_bufs b = {atomic_load(&c->rcvbuf), atomic_load(&c->sndbuf)};
		why = cm_server_handshake(fd, rdma_ok ? &b : NULL, &t);
		if (why == 0) {
			c->tp = t;
			atomic_store(&c->path, CONN_PATH_RDMA);
			ep_stream_converted();
		} else {
			atomic_store(&c->path, CONN_PATH_TCP);
			stats_fallback((enum rsock_fallback_reason)why);
		}
		stats_stream(t != NULL);
		atomic_store(&c->hello_due, 0);
	}
	pthread_mutex_unlock(&c->lock);
}

void conn_fd_gone(struct conn *c)
{
	if (c && atomic_fetch_sub_explicit(&c->nfds, 1, memory_order_acq_rel) == 1 && c->ep_items)
		ep_conn_closed(c);
}

void conn_account_tx(struct conn *c, long long r)
{
	if (r <= 0)
		return;
	atomic_fetch_add_explicit(&c->tx_bytes, (uint64_t)r, memory_order_relaxed);
	stats_add_bytes(atomic_load_explicit(&c->path, memory_order_relaxed) == CONN_PATH_RDMA,
			1, (uint64_t)r);
}

void conn_account_rx(struct conn *c, long long r)
{
	if (r <= 0)
		return;
	atomic_fetch_add_explicit(&c->rx_bytes, (uint64_t)r, memory_order_relaxed);
	stats_add_bytes(atomic_load_explicit(&c->path, memory_order_relaxed) == CONN_PATH_RDMA,
			0, (uint64_t)r);
}

int conn_eligible(int domain, int type, int protocol)
{
	int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);

	return (domain == AF_INET || domain == AF_INET6) && base == SOCK_STREAM &&
	       (protocol == 0 || protocol == IPPROTO_TCP);
}
