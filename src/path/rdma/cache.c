/* cache.c - released ring sets, kept for the next stream: a closed
 * stream's protection domain, registered rings and (emptied) CQ, taken by
 * the next stream of the same sizes on the same device. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <stdlib.h>
#include <sys/mman.h>

#include "base/ownfd.h"
#include "base/proc.h"
#include "base/stats.h"
#include "path/rdma/internal.h"

/* ---- released ring sets, kept for the next stream ---------------------------
 *
 * Faulting in and registering half a megabyte is a large part of a
 * connection's set-up (about 2 ms a side in the soft-RoCE guest); a server
 * of short connections pays it twice per request. A stream closed by its
 * owner, whose QP is destroyed, therefore leaves its protection domain, ring
 * memory and MRs here (at most RSOCK_RING_CACHE sets, still counted as
 * registered), and the next stream of the same sizes on the same device
 * takes them: the PD holds no QP any more, so nothing can write into the
 * ring until the new stream's QP exists, and the new peer learns the key.
 * Its completion channel and CQ come along, emptied (another half
 * millisecond of each side's set-up in the guest). The QP cannot: the peer's
 * connection manager keeps a closed connection's QP number in time-wait,
 * and refuses a new connection from it as stale.
 * The cache belongs to the process that first filled it: a forked child
 * neither takes from it nor adds to it (the verbs objects are the parent's),
 * and never takes its lock. */
struct tp_set {
	struct tp_set *next;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	void *mem;
	size_t mem_len;
	uint32_t rx_size;
	struct ibv_mr *rx_mr, *tx_mr;
	struct ibv_comp_channel *cc; /* with cq, or both NULL */
	struct ibv_cq *cq;
};
pthread_mutex_t tp_set_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tp_set *set_cache;
static unsigned set_count;
static _Atomic pid_t set_pid; /* the process the cache belongs to, 0: none yet */
/* Contexts whose device is being removed (tp_dev_gone): no set is kept for
 * them. A context made later at the same address (the device added again)
 * merely goes without the cache once the list has turned over. */
#define SET_GONE_MAX 8
static struct ibv_context *set_gone[SET_GONE_MAX];
static unsigned set_gone_next;

static int set_mine(void)
{
	return atomic_load_explicit(&set_pid, memory_order_acquire) == rsock_pid();
}

/* Take a cached set for ctx and these sizes into t. 1 if one was found. */
int tp_set_take(struct tp *t, struct ibv_context *ctx, uint32_t rx_size, size_t mem_len)
{
	struct tp_set *s = NULL;

	if (!set_mine())
		return 0;
	pthread_mutex_lock(&tp_set_lock);
	for (struct tp_set **pp = &set_cache; *pp; pp = &(*pp)->next)
		if ((*pp)->ctx == ctx && (*pp)->rx_size == rx_size && (*pp)->mem_len == mem_len) {
			s = *pp;
			*pp = s->next;
			set_count--;
			break;
		}
	pthread_mutex_unlock(&tp_set_lock);
	if (!s)
		return 0;
	t->pd = s->pd;
	t->mem = s->mem;
	t->rx_mr = s->rx_mr;
	t->tx_mr = s->tx_mr;
	t->cc = s->cc;
	if ((t->cq = s->cq))
		t->cq->cq_context = t;
	free(s);
	return 1;
}

/* Whether t's CQ can serve another stream: its QP is gone, so nothing adds
 * to it; take out what completed before and the event that may have been
 * raised (a CQ destroyed with an event not acknowledged would hang). Not
 * when an epoll instance of another process may still hold the completion
 * channel's registration (item_unhook leaves those): a channel closed
 * drops out of every epoll set, a channel kept would not. */
static int cq_empty(struct tp *t)
{
	struct ibv_wc wc[16];
	struct ibv_cq *cq;
	void *ctx;
	int n, i = 0;

	if (t->qp || !t->cq || !t->cc || atomic_load_explicit(&t->hooked_shared, memory_order_relaxed))
		return 0;
	while ((n = ibv_poll_cq(t->cq, 16, wc)) > 0)
		if (++i > (TP_SQ_DEPTH + TP_RQ_DEPTH) / 16 + 1)
			return 0;
	if (n < 0)
		return 0;
	while (ibv_get_cq_event(t->cc, &cq, &ctx) == 0) /* the channel is non-blocking */
		ibv_ack_cq_events(cq, 1);
	return 1;
}

/* Destroy t's CQ and completion channel, if it has them. */
void tp_cq_free(struct tp *t)
{
	if (t->cq)
		ibv_destroy_cq(t->cq);
	if (t->cc) {
		ownfd_forget(t->cc->fd);
		ibv_destroy_comp_channel(t->cc);
	}
	t->cq = NULL;
	t->cc = NULL;
}

/* Keep t's PD, memory and MRs (its QP is destroyed), with its CQ and
 * completion channel when they can serve again. 1 if kept: they are the
 * cache's now (t->cc and t->cq NULL when taken too). */
int tp_set_keep(struct tp *t)
{
	struct tp_set *s;
	pid_t none = 0, me = rsock_pid();
	int with_cq;

	/* A failed-over stream's device may be the one that went away. */
	if (!tp_settings.ring_cache || !t->pd || !t->rx_mr || !t->tx_mr || t->qp || t->failed_over)
		return 0;
	atomic_compare_exchange_strong(&set_pid, &none, me);
	if (!set_mine() || !(s = calloc(1, sizeof(*s))))
		return 0;
	s->ctx = t->pd->context;
	s->pd = t->pd;
	s->mem = t->mem;
	s->mem_len = t->mem_len;
	s->rx_size = t->rx.size;
	s->rx_mr = t->rx_mr;
	s->tx_mr = t->tx_mr;
	if ((with_cq = cq_empty(t))) {
		s->cc = t->cc;
		s->cq = t->cq;
	}
	pthread_mutex_lock(&tp_set_lock);
	int keep = set_count < tp_settings.ring_cache;
	for (unsigned i = 0; i < SET_GONE_MAX; i++)
		keep &= set_gone[i] != s->ctx; /* its device is going */
	if (keep) {
		s->next = set_cache;
		set_cache = s;
		set_count++;
		s = NULL;
	}
	pthread_mutex_unlock(&tp_set_lock);
	if (s) {
		free(s);
		return 0;
	}
	if (with_cq) {
		t->cc = NULL;
		t->cq = NULL;
	}
	return 1;
}

void tp_dev_gone(struct ibv_context *ctx)
{
	struct tp_set *gone = NULL, *s;

	pthread_mutex_lock(&tp_set_lock);
	unsigned i = 0;
	while (i < SET_GONE_MAX && set_gone[i] != ctx)
		i++;
	if (i == SET_GONE_MAX) /* (each id of the device brings its event) */
		set_gone[set_gone_next++ % SET_GONE_MAX] = ctx;
	for (struct tp_set **pp = &set_cache; set_mine() && *pp;) {
		s = *pp;
		if (s->ctx != ctx) {
			pp = &s->next;
			continue;
		}
		*pp = s->next;
		set_count--;
		s->next = gone;
		gone = s;
	}
	pthread_mutex_unlock(&tp_set_lock);
	while ((s = gone)) {
		gone = s->next;
		if (s->cq)
			ibv_destroy_cq(s->cq);
		if (s->cc) {
			ownfd_forget(s->cc->fd);
			ibv_destroy_comp_channel(s->cc);
		}
		ibv_dereg_mr(s->rx_mr);
		ibv_dereg_mr(s->tx_mr);
		ibv_dealloc_pd(s->pd);
		munmap(s->mem, s->mem_len);
		stats_registered(-(int64_t)s->mem_len);
		free(s);
	}
}
