/* transport.c - see transport.h and doc/design.md section 9. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "negotiate/cm.h"
#include "event/event.h"
#include "base/ownfd.h"
#include "path/handover.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/stats.h"
#include "path/rdma/transport.h"

#define TP_CTL_RESERVE 2 /* send-queue slots kept for credits and FIN */
#define TP_MIN_STAGE (16u * 1024) /* smallest staged piece of a larger send */
#define TP_SWITCH_MS 10000 /* the most a hand-over waits for the peer */
#define TP_LINGER_MS 2000  /* the most close() waits for what it posted */
#define TP_SPILL_MAX (8u << 20) /* the most a stream keeps read beyond its ring */
#define TP_SPILL_AFTER_MS 20    /* a blocked send's wait before it spills */

_Atomic int tp_creds_stale;

static int arm(struct tp *t);
static int creds_lost(struct tp *t);
static int reap_one(void);

static void mem_free(struct tp *t)
{
	if (t->mem)
		munmap(t->mem, t->mem_len);
	if (t->spill.buf)
		munmap(t->spill.buf, t->spill.size);
}

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
static pthread_mutex_t set_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tp_set *set_cache;
static unsigned set_count;
static _Atomic pid_t set_pid; /* the process the cache belongs to, 0: none yet */

static int set_mine(void)
{
	return atomic_load_explicit(&set_pid, memory_order_acquire) == rsock_pid();
}

/* Take a cached set for ctx and these sizes into t. 1 if one was found. */
static int set_take(struct tp *t, struct ibv_context *ctx, uint32_t rx_size, size_t mem_len)
{
	struct tp_set *s = NULL;

	if (!set_mine())
		return 0;
	pthread_mutex_lock(&set_lock);
	for (struct tp_set **pp = &set_cache; *pp; pp = &(*pp)->next)
		if ((*pp)->ctx == ctx && (*pp)->rx_size == rx_size && (*pp)->mem_len == mem_len) {
			s = *pp;
			*pp = s->next;
			set_count--;
			break;
		}
	pthread_mutex_unlock(&set_lock);
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
static void cq_free(struct tp *t)
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
static int set_keep(struct tp *t)
{
	struct tp_set *s;
	pid_t none = 0, me = rsock_pid();
	int with_cq;

	if (!tp_settings.ring_cache || !t->pd || !t->rx_mr || !t->tx_mr || t->qp)
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
	pthread_mutex_lock(&set_lock);
	if (set_count < tp_settings.ring_cache) {
		s->next = set_cache;
		set_cache = s;
		set_count++;
		s = NULL;
	}
	pthread_mutex_unlock(&set_lock);
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

int tp_new(struct ibv_context *ctx, uint32_t rx_size, uint32_t tx_size, int tcp_fd,
	   struct tp **out)
{
	struct tp *t = calloc(1, sizeof(*t));
	int rc = -ENOMEM;

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	t->owner = rsock_pid();
	atomic_init(&t->ctl_dirty, 1);
	/* A new stream's first waits are for the answer to its first request
	 * (or for that request): its first wait spins up to RSOCK_POLL_MAX_US
	 * (doc/design.md section 9). */
	tp_adapt_init(&t->wait);
	atomic_init(&t->rcvlowat, 1);
	/* Our own reference to the kernel socket: the application may close
	 * any of its descriptors, the control connection stays ours. */
	t->tcp_fd = ownfd_dup(tcp_fd);
	if (t->tcp_fd < 0) {
		rc = -errno;
		goto fail;
	}
	t->mem_len = (size_t)rx_size + tx_size;
	/* A closed stream the cm thread has not torn down yet holds rings
	 * the cache would have: tear one down here rather than register new
	 * ones (about twice the work). */
	if (set_take(t, ctx, rx_size, t->mem_len) ||
	    (reap_one() && set_take(t, ctx, rx_size, t->mem_len))) {
		if (ring_init(&t->rx, t->mem, rx_size) ||
		    ring_init(&t->tx, (uint8_t *)t->mem + rx_size, tx_size)) {
			rc = -EINVAL; /* (they were valid when cached) */
			stats_registered(-(int64_t)t->mem_len);
			goto fail;
		}
		log_debug("fd %d: rings rx %u tx %u bytes reused%s", tcp_fd, rx_size, tx_size,
			  t->cq ? ", with their CQ" : "");
		*out = t;
		return 0;
	}
	/* Fresh anonymous pages: zero without a memset, which would fault every
	 * page in from user space (2 to 3 ms of a soft-RoCE guest's 20 ms
	 * connection set-up); ibv_reg_mr() pins them from the kernel instead. */
	t->mem = mmap(NULL, t->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t->mem == MAP_FAILED) {
		t->mem = NULL;
		goto fail;
	}
	if (ring_init(&t->rx, t->mem, rx_size) ||
	    ring_init(&t->tx, (uint8_t *)t->mem + rx_size, tx_size)) {
		rc = -EINVAL;
		goto fail;
	}
	/* The stream's own protection domain: a key is honoured only for a QP
	 * of the same PD, so no other stream's peer can reach this ring even
	 * if it learnt or guessed the key. */
	if (!(t->pd = ibv_alloc_pd(ctx))) {
		rc = errno ? -errno : -ENOMEM;
		goto fail;
	}
	/* Remote access on the receive ring only: the peer can write nothing else. */
	t->rx_mr = ibv_reg_mr(t->pd, t->rx.buf, rx_size,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!t->rx_mr) {
		rc = errno ? -errno : -ENOMEM;
		goto fail;
	}
	t->tx_mr = ibv_reg_mr(t->pd, t->tx.buf, tx_size, 0);
	if (!t->tx_mr) {
		rc = errno ? -errno : -ENOMEM;
		goto fail;
	}
	stats_registered((int64_t)t->mem_len);
	log_debug("fd %d: rings rx %u tx %u bytes registered", tcp_fd, rx_size, tx_size);
	*out = t;
	return 0;
fail:
	cq_free(t); /* (from the cache) */
	if (t->tx_mr)
		ibv_dereg_mr(t->tx_mr);
	if (t->rx_mr)
		ibv_dereg_mr(t->rx_mr);
	if (t->pd)
		ibv_dealloc_pd(t->pd);
	ownfd_close(t->tcp_fd);
	mem_free(t);
	pthread_mutex_destroy(&t->lock);
	free(t);
	return rc;
}

int tp_set_peer(struct tp *t, uint64_t addr, uint32_t rkey, uint32_t size, uint32_t max_inline,
		uint16_t version)
{
	if (ring_remote_init(&t->peer, size))
		return -EPROTO;
	t->peer_version = version;
	t->peer_addr = addr;
	t->peer_rkey = rkey;
	(void)max_inline; /* the inline limit that matters is our own QP's */
	return 0;
}

void tp_sockopts_changed(struct tp *t)
{
	static const int opt[2] = {SO_RCVTIMEO, SO_SNDTIMEO};
	int v = 1;
	socklen_t l = sizeof(v);

	if (rsock_real.getsockopt(t->tcp_fd, SOL_SOCKET, SO_RCVLOWAT, &v, &l) == 0)
		atomic_store_explicit(&t->rcvlowat, v > 1 ? v : 1, memory_order_relaxed);
	for (int i = 0; i < 2; i++) {
		struct timeval tv;
		int64_t ns = 0;
		l = sizeof(tv);
		if (rsock_real.getsockopt(t->tcp_fd, SOL_SOCKET, opt[i], &tv, &l) == 0 &&
		    l == sizeof(tv) && (tv.tv_sec > 0 || tv.tv_usec > 0))
			ns = (int64_t)tv.tv_sec * 1000000000 + (int64_t)tv.tv_usec * 1000;
		atomic_store_explicit(&t->timeo_ns[i], ns, memory_order_relaxed);
	}
}

void tp_up(struct tp *t)
{
	t->up = 1;
	t->fork_gen = atomic_load(&ho_forks);
	t->rec = ho_register(t);
}

/* Post n (at most TP_RQ_BATCH) receives, zero-length (a WRITE WITH IMMEDIATE
 * only consumes one), as one chain: one call, one lock of the provider's
 * queue. */
static int post_recv_chain(struct tp *t, unsigned n)
{
	struct ibv_recv_wr wr[TP_RQ_BATCH], *bad;

	if (!n)
		return 0;
	for (unsigned i = 0; i < n; i++)
		wr[i] = (struct ibv_recv_wr){.next = i + 1 < n ? &wr[i + 1] : NULL};
	return -ibv_post_recv(t->qp, wr, &bad);
}

int tp_create_cq(struct tp *t)
{
	struct ibv_context *ctx = t->pd->context;
	int rc = 0;

	pthread_mutex_lock(&t->lock);
	if (!t->cc) {
		if ((t->cc = ibv_create_comp_channel(ctx))) {
			fcntl(t->cc->fd, F_SETFL, fcntl(t->cc->fd, F_GETFL) | O_NONBLOCK);
			t->cc->fd = ownfd_move(t->cc->fd);
		} else
			rc = errno ? -errno : -ENOMEM;
	}
	if (t->cc && !t->cq &&
	    !(t->cq = ibv_create_cq(ctx, TP_SQ_DEPTH + TP_RQ_DEPTH, t, t->cc, 0)))
		rc = errno ? -errno : -ENOMEM;
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* Create t's QP (on id with rdma_create_qp, which moves it to INIT; or, id
 * NULL, with ibv_create_qp on the stream's PD, left in RESET), the largest
 * inline size the device takes. Under t->lock. 0 or -errno. */
static int qp_new(struct tp *t, struct rdma_cm_id *id)
{
	static const uint32_t inline_try[] = {TP_INLINE_MAX, 128, 64, 0};
	struct ibv_qp_init_attr attr;
	struct ibv_qp *qp = NULL;
	int rc = -ENOMEM;

	for (size_t i = 0; i < RSOCK_ARRAY_SIZE(inline_try); i++) {
		memset(&attr, 0, sizeof(attr));
		attr.qp_type = IBV_QPT_RC;
		attr.send_cq = attr.recv_cq = t->cq;
		attr.cap.max_send_wr = TP_SQ_DEPTH;
		attr.cap.max_recv_wr = TP_RQ_DEPTH;
		attr.cap.max_send_sge = 1;
		attr.cap.max_recv_sge = 1;
		attr.cap.max_inline_data = inline_try[i];
		if (id ? rdma_create_qp(id, t->pd, &attr) == 0 : (qp = ibv_create_qp(t->pd, &attr)) != NULL) {
			rc = 0;
			break;
		}
		rc = errno ? -errno : -ENOMEM;
	}
	if (rc)
		return rc;
	t->qp = id ? id->qp : qp;
	t->own_qp = !id;
	t->max_inline = tp_inline_limit(attr.cap.max_inline_data);
	return 0;
}

static void qp_destroy(struct tp *t)
{
	if (!t->qp)
		return;
	if (t->own_qp)
		ibv_destroy_qp(t->qp);
	else
		rdma_destroy_qp(t->id);
	t->qp = NULL;
	t->own_qp = 0;
}

static int post_recvs(struct tp *t)
{
	int rc;

	for (int i = 0; i < TP_RQ_DEPTH; i += TP_RQ_BATCH)
		if ((rc = post_recv_chain(t, TP_RQ_DEPTH - i < TP_RQ_BATCH ? TP_RQ_DEPTH - i : TP_RQ_BATCH)))
			return rc;
	return 0;
}

int tp_prepare_qp(struct tp *t, uint8_t port_num)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = port_num,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	struct ibv_port_attr pa;
	int rc;

	if ((rc = tp_create_cq(t)))
		return rc;
	pthread_mutex_lock(&t->lock);
	if (t->qp) { /* the request came first: the cm thread made it on its id */
		pthread_mutex_unlock(&t->lock);
		return 0;
	}
	if ((rc = qp_new(t, NULL)) == 0) {
		if (ibv_modify_qp(t->qp, &a,
				  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			rc = errno ? -errno : -EINVAL;
		else
			rc = post_recvs(t);
		if (rc)
			qp_destroy(t);
	}
	t->qp_ib = ibv_query_port(t->pd->context, port_num, &pa) == 0 &&
		   pa.link_layer == IBV_LINK_LAYER_INFINIBAND;
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* The passive side's own QP, made ahead by tp_prepare_qp, takes the
 * connection request on id: INIT again with the request's attributes, RTR,
 * RTS (what rdma_accept does to a QP made on the id). Under t->lock. */
static int qp_attach(struct tp *t, struct rdma_cm_id *id)
{
	struct ibv_qp_attr a;
	int mask;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	if (rdma_init_qp_attr(id, &a, &mask) || ibv_modify_qp(t->qp, &a, mask))
		return errno ? -errno : -EINVAL;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (rdma_init_qp_attr(id, &a, &mask))
		return errno ? -errno : -EINVAL;
	if (t->qp_ib) /* librdmacm's work-around: the RoCE-only bits 21-24 */
		mask &= ~0xe00000;
	a.max_dest_rd_atomic = 0; /* no RDMA READ in this protocol */
	if (ibv_modify_qp(t->qp, &a, mask))
		return errno ? -errno : -EINVAL;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	if (rdma_init_qp_attr(id, &a, &mask))
		return errno ? -errno : -EINVAL;
	a.max_rd_atomic = 0;
	if (ibv_modify_qp(t->qp, &a, mask))
		return errno ? -errno : -EINVAL;
	t->id = id;
	return 0;
}

int tp_create_qp(struct tp *t, struct rdma_cm_id *id)
{
	int rc;

	if (id->verbs != t->pd->context)
		return -EINVAL;
	if ((rc = tp_create_cq(t)))
		return rc;
	pthread_mutex_lock(&t->lock);
	if (t->qp) {
		if (t->own_qp && !t->id)
			rc = qp_attach(t, id);
		else
			rc = t->id == id ? 0 : -EINVAL;
		pthread_mutex_unlock(&t->lock);
		return rc;
	}
	if ((rc = qp_new(t, id)) == 0) {
		t->id = id;
		if ((rc = post_recvs(t))) {
			qp_destroy(t); /* a later call starts anew */
			t->id = NULL;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

uint32_t tp_own_qp_num(const struct tp *t)
{
	return t->own_qp && t->qp ? t->qp->qp_num : 0;
}

void tp_conn_param(struct rdma_conn_param *p, const void *priv, uint8_t priv_len)
{
	memset(p, 0, sizeof(*p));
	p->private_data = priv;
	p->private_data_len = priv_len;
	p->responder_resources = 0; /* no RDMA READ in this protocol */
	p->initiator_depth = 0;
	p->retry_count = 7;
	p->rnr_retry_count = 7; /* never the flow control: credits are (section 9) */
}

/* Post one RDMA WRITE WITH IMMEDIATE. sge may be NULL (zero bytes). */
#define PW_INLINE 1 /* post_write: the data goes in the WR */
#define PW_SIGNAL 2 /* post_write: signalled whatever the count */

static int post_write(struct tp *t, struct ibv_sge *sge, uint32_t remote_off, uint32_t imm,
		      int pw)
{
	struct ibv_send_wr wr, *bad;
	int inl = pw & PW_INLINE;
	int signal = ++t->sq_posted >= TP_SIGNAL_EVERY || !sge || (pw & PW_SIGNAL) ||
		     ring_free(&t->tx) < t->tx.size / 2;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.imm_data = htonl(imm);
	wr.sg_list = sge;
	wr.num_sge = sge ? 1 : 0;
	wr.wr.rdma.remote_addr = t->peer_addr + remote_off;
	wr.wr.rdma.rkey = t->peer_rkey;
	if (signal)
		wr.send_flags |= IBV_SEND_SIGNALED;
	if (inl)
		wr.send_flags |= IBV_SEND_INLINE;
	rc = ibv_post_send(t->qp, &wr, &bad);
	if (rc)
		return -rc;
	t->sq_busy++;
	t->sq_seq++;
	if (signal) {
		unsigned slot = (t->sig_head + t->sig_count) % TP_SQ_DEPTH;
		t->sig[slot].seq = t->sq_seq;
		t->sig[slot].tx_tail = t->tx.tail;
		t->sig_count++;
		t->sq_posted = 0;
	}
	return 0;
}

static void waitq_ring(struct tp *t);

/* The RDMA path failed under the stream (a completion error, a protocol
 * violation by the peer, the device refusing a post or a poll): the stream
 * is broken, as a TCP connection is by a reset. The application sees err,
 * after the bytes that arrived before, as over TCP: -ECONNRESET, or
 * -ETIMEDOUT when the peer stopped answering (the transport's retries ran
 * out, where TCP's give up too), or -EPIPE after the peer's FIN. And the
 * peer is told at once, by a reset of the control connection (connect()
 * with AF_UNSPEC, which keeps the application's descriptor): a peer left
 * waiting would otherwise hang, or take the end of the stream for a clean
 * one when this process closes it (doc/design.md section 5). Not for
 * reset == 0 (flushed work requests: the QP went to its error state, after
 * an error seen first or because the peer disconnected, as it does once a
 * hand-over is done), nor during a hand-over (the control connection is
 * about to carry the stream). Caller holds t->lock. */
static void tp_fail(struct tp *t, int err, const char *why, int reset)
{
	if (t->err)
		return;
	t->err = err;
	atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
	if (reset && err != -EPIPE && t->up && !t->peer_gone && !t->eof && !tp_switched(t) &&
	    !t->switching && t->owner == rsock_pid()) {
		struct sockaddr sa = {.sa_family = AF_UNSPEC};
		log_warn_rl("fd %d: %s: the stream is reset, its peer told (%s for the application)",
			    t->tcp_fd, why, strerrorname_np(-err));
		rsock_real.connect(t->tcp_fd, &sa, sizeof(sa));
	} else {
		log_debug("fd %d: %s (%s for the application)", t->tcp_fd, why, strerrorname_np(-err));
	}
	waitq_ring(t);
}

static void handle_recv(struct tp *t, uint32_t imm)
{
	enum proto_imm_type type;
	uint32_t v;

	if (proto_imm_decode(imm, &type, &v)) {
		tp_fail(t, -ECONNRESET, "a message the protocol does not know", 1);
		return;
	}
	switch (type) {
	case PROTO_IMM_DATA:
		/* More data messages outstanding than the sender may have is a
		 * protocol violation, like a write beyond the credit. */
		if (t->rx_msg_count >= TP_MAX_DATA_MSGS || ring_produce(&t->rx, v)) {
			tp_fail(t, -ECONNRESET, "the peer wrote beyond its credit", 1);
			break;
		}
		t->rx_msg_end[(t->rx_msg_head + t->rx_msg_count++) % RSOCK_ARRAY_SIZE(t->rx_msg_end)] =
			t->rx.tail;
		break;
	case PROTO_IMM_CREDIT:
		if (ring_remote_ack(&t->peer, v)) {
			tp_fail(t, -ECONNRESET, "the peer credited bytes never sent", 1);
			break;
		}
		while (t->msg_count && t->msg_end[t->msg_head] <= t->peer.acked) {
			t->msg_head = (t->msg_head + 1) % RSOCK_ARRAY_SIZE(t->msg_end);
			t->msg_count--;
		}
		break;
	case PROTO_IMM_FIN:
		log_debug("fd %d: FIN received", t->tcp_fd);
		t->eof = 1;
		break;
	case PROTO_IMM_RESET:
		t->err = -ECONNRESET;
		break;
	}
}

/* ---- sleepers' bells ---------------------------------------------------------- */

static pthread_key_t bell_key;
static pthread_once_t bell_once = PTHREAD_ONCE_INIT;
static __thread int my_bell = -1;

static void bell_exit(void *unused)
{
	(void)unused;
	ownfd_close(my_bell);
	my_bell = -1;
}

static void bell_key_make(void)
{
	pthread_key_create(&bell_key, bell_exit);
}

int tp_thread_bell(void)
{
	if (my_bell < 0) {
		pthread_once(&bell_once, bell_key_make);
		if ((my_bell = ownfd_move(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))) >= 0)
			pthread_setspecific(bell_key, (void *)1);
	}
	return my_bell;
}

void tp_bell_fork_child(void)
{
	ownfd_close(my_bell);
	my_bell = -1;
}

/* Wake the other sleepers: something changed. Caller holds t->lock. */
static void waitq_ring(struct tp *t)
{
	for (struct tp_waiter *w = t->waitq; w; w = w->next)
		if (!w->rung && w->fd != my_bell) {
			uint64_t one = 1;
			w->rung = 1;
			if (rsock_real.write(w->fd, &one, sizeof(one)) < 0) {
				/* a full counter is readable too */
			}
		}
}

static void waitq_add(struct tp *t, struct tp_waiter *w)
{
	w->fd = tp_thread_bell();
	w->rung = 0;
	if (w->fd >= 0) {
		w->next = t->waitq;
		t->waitq = w;
	}
}

static void waitq_del(struct tp *t, struct tp_waiter *w)
{
	if (w->fd < 0)
		return;
	for (struct tp_waiter **p = &t->waitq; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	if (w->rung) {
		uint64_t v;
		if (rsock_real.read(w->fd, &v, sizeof(v)) < 0) {
			/* already drained by another stream's wake-up */
		}
	}
	w->fd = -1;
}

/* Process every completion available. Returns how many there were. Caller
 * holds t->lock. */
static int progress(struct tp *t)
{
	struct ibv_wc wc[16];
	int n, total = 0;

	if (!t->cq)
		return 0;
	/* A short batch drained the queue: no second call to learn that (a
	 * completion arriving meanwhile is the next progress()'s). */
	for (int more = 1; more && (n = ibv_poll_cq(t->cq, (int)RSOCK_ARRAY_SIZE(wc), wc)) > 0;) {
		more = n == (int)RSOCK_ARRAY_SIZE(wc);
		total += n;
		atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				enum ibv_wc_status st = wc[i].status;
				tp_fail(t,
					t->eof || t->peer_gone			? -EPIPE
					: st == IBV_WC_RETRY_EXC_ERR || st == IBV_WC_RNR_RETRY_EXC_ERR ? -ETIMEDOUT
												 : -ECONNRESET,
					ibv_wc_status_str(st), st != IBV_WC_WR_FLUSH_ERR);
				continue;
			}
			if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				handle_recv(t, ntohl(wc[i].imm_data));
				/* Each message used a receive: posted again in
				 * chains, TP_RQ_BATCH at a time (the peer never
				 * has more than TP_MAX_DATA_MSGS data messages
				 * and a few control ones outstanding). */
				if (++t->rq_owed >= TP_RQ_BATCH) {
					if (post_recv_chain(t, t->rq_owed))
						tp_fail(t, -ECONNRESET, "posting receives failed", 1);
					t->rq_owed = 0;
				}
			} else if (wc[i].opcode == IBV_WC_RDMA_WRITE && t->sig_count) {
				/* Signalled WRs complete in order, and every WR
				 * posted before one is complete when it is. */
				t->sq_busy = (unsigned)(t->sq_seq - t->sig[t->sig_head].seq);
				t->tx.head = t->sig[t->sig_head].tx_tail;
				t->sig_head = (t->sig_head + 1) % TP_SQ_DEPTH;
				t->sig_count--;
			}
		}
	}
	if (n < 0)
		tp_fail(t, -ECONNRESET, "polling the completion queue failed", 1);
	if (total || n < 0)
		waitq_ring(t);
	return total;
}

static int switch_locked(struct tp *t, int have_total, uint64_t peer_total);

/* Whether the control connection says the peer is gone, or moves the stream
 * to TCP (its SWITCH). Caller holds the lock. */
static void check_control(struct tp *t)
{
	char b[64];
	ssize_t r;

	if (tp_switched(t))
		return; /* the kernel socket carries application data now */
	r = rsock_real.recv(t->tcp_fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	if (r == 0 && t->rd_shut) {
		/* Our own shutdown(SHUT_RD) ends the kernel socket's input too:
		 * this end says nothing about the peer. */
	} else if (r == 0) {
		if (!t->peer_gone) {
			log_debug("fd %d: the control connection was closed by the peer", t->tcp_fd);
			atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
		}
		t->peer_gone = 1;
		waitq_ring(t);
	} else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		if (!t->err)
			t->err = -errno;
		if (!t->peer_gone)
			atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
		t->peer_gone = 1;
		waitq_ring(t);
	} else if (r > 0) {
		struct proto_switch m;
		int d = proto_switch_decode(b, (size_t)r, &m);

		if (d > 0) {
			/* Exactly the message: application data follows it. */
			rsock_real.recv(t->tcp_fd, b, (size_t)d, MSG_DONTWAIT);
			log_debug("fd %d: the peer moves the stream to TCP", t->tcp_fd);
			switch_locked(t, 1, m.rdma_bytes);
			waitq_ring(t);
			return;
		}
		if (d == -EAGAIN)
			return; /* the rest of a SWITCH is on its way */
		/* Nothing else is expected on the control connection of an RDMA
		 * stream; discard stray bytes so they cannot spin us. */
		log_warn_rl("fd %d: %zd unexpected bytes on the control connection", t->tcp_fd, r);
		rsock_real.recv(t->tcp_fd, b, (size_t)r, MSG_DONTWAIT);
	}
}

/* Whether an empty non-blocking read should look at the control connection
 * (a syscall): when a waiter saw it readable, and at least every 10 ms for
 * applications that never wait. Caller holds the lock. */
static int control_due(struct tp *t)
{
	struct timespec ts;
	int64_t now;

	if (atomic_exchange_explicit(&t->ctl_dirty, 0, memory_order_relaxed))
		return 1;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	if (now - t->ctl_last_ms < 10)
		return 0;
	t->ctl_last_ms = now;
	return 1;
}

/* Sleep until a completion or a control-connection event, lock released
 * meanwhile. Caller holds t->lock; returns with it held. */
static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The deadline a blocking call on t keeps: the socket's SO_RCVTIMEO or
 * SO_SNDTIMEO (opt), which the application set on its descriptor, the same
 * kernel socket as t->tcp_fd; as read when the stream came up and after
 * each setsockopt of them (tp_sockopts_changed), so that a wait costs no
 * system call for it. 0: none (wait for ever). */
static int64_t timeo_deadline(struct tp *t, int opt)
{
	int64_t ns = atomic_load_explicit(&t->timeo_ns[opt == SO_RCVTIMEO ? 0 : 1], memory_order_relaxed);

	return ns ? mono_ns() + ns : 0;
}

/* Whether a blocking call with this deadline (0: none) has run out of time. */
static int timed_out(int64_t deadline)
{
	return deadline && mono_ns() >= deadline;
}

/* A signal handler ran while a blocking read or write slept (in poll(),
 * which the kernel never restarts). TCP's are restarted after a handler
 * installed with SA_RESTART unless the socket has a time-out, and fail with
 * EINTR otherwise. Which signal it was is not known here: the call fails
 * with EINTR when the socket has a time-out or some caught signal's handler
 * lacks SA_RESTART, and waits on when every handler restarts. qperf ends a
 * test with SIGALRM (no SA_RESTART) and waited in recv() for ever. Looked up
 * only after an interruption. */
static int intr_fails(int64_t deadline)
{
	struct sigaction sa;

	if (deadline)
		return 1;
	for (int s = 1; s < NSIG; s++) {
		/* The faults are raised by the faulting thread itself, never
		 * in a sleep: their handlers (a sanitizer's, a crash
		 * reporter's) say nothing about this interruption. */
		if (s == SIGKILL || s == SIGSTOP || s == SIGSEGV || s == SIGBUS || s == SIGFPE ||
		    s == SIGILL || s == SIGTRAP || s == SIGSYS || s == SIGABRT)
			continue;
		if (sigaction(s, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL &&
		    sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART))
			return 1;
	}
	return 0;
}

/* deadline: CLOCK_MONOTONIC nanoseconds after which the caller gives up (0:
 * none); the wait returns by then. Returns -EINTR when a signal handler
 * interrupted the sleep, 1 when the wait took completions off the queue
 * itself (its spin, or its look after arming: the caller need not poll
 * again before it looks at the stream), else 0. */
static int wait_event(struct tp *t, int64_t deadline, int sink)
{
	struct pollfd p[3];
	struct tp_waiter w;
	int rc, ms = -1, intr, prc;
	int64_t start = mono_ns();
	int64_t budget = tp_spin_budget_ns(&t->wait);

	if (sink && budget > (int64_t)tp_settings.poll_us * 1000)
		budget = (int64_t)tp_settings.poll_us * 1000;

	/* Without a deadline the sleep has no time-out, as poll()'s in
	 * event.c: everything a blocked call waits for wakes it (doc/design.md
	 * section 9, "Waiting"). */
	if (deadline) {
		if (start >= deadline)
			return 0;
		if (budget > deadline - start)
			budget = deadline - start;
		ms = (int)((deadline - start + 999999) / 1000000);
	}

	/* Bounded busy-poll first (adaptive, RSOCK_POLL_US .. RSOCK_POLL_MAX_US):
	 * a completion that arrives within it costs no sleep and no wake-up.
	 * An idle stream spins only RSOCK_POLL_US. */
	if (budget) {
		/* The clock is read every 16th poll (see epoll.c's spin()), and
		 * not again when the event comes: the wait is noted as lasting
		 * until the last reading (at most 15 polls short). A reading
		 * is a system call where the clock source has no vDSO (the
		 * soft-RoCE guest's HPET: about 1.2 us), and one after the
		 * event would delay every message by that much. A spin that
		 * has lasted TP_YIELD_AFTER_NS yields the CPU at each reading:
		 * the thread that makes the event may be waiting for it. */
		int64_t spun = 0;
		for (unsigned i = 1;; i++) {
			if (progress(t)) {
				tp_wait_note(&t->wait, spun, TP_WAIT_SPUN);
				return 1;
			}
			if (!(i & 15)) {
				if ((spun = mono_ns() - start) >= budget)
					break;
				tp_spin_yield(spun);
			}
		}
	}
	atomic_fetch_add(&t->sleepers, 1); /* before arm(): see tp_wait_fd */
	if ((rc = arm(t))) {
		atomic_fetch_sub(&t->sleepers, 1);
		if (rc != -EACCES || !creds_lost(t))
			tp_fail(t, -ECONNRESET, "arming the completion queue failed", 1);
		return 0;
	}
	/* A completion that arrived before the arming raises no event: look
	 * once more now that the CQ is armed, and do not sleep if there was
	 * one (the caller re-evaluates its condition). */
	if (progress(t)) {
		atomic_fetch_sub(&t->sleepers, 1);
		tp_wait_note(&t->wait, mono_ns() - start, TP_WAIT_SPUN);
		return 1;
	}
	p[0].fd = t->cc->fd;
	p[0].events = POLLIN;
	p[1].fd = t->tcp_fd;
	p[1].events = POLLIN | POLLRDHUP;
	waitq_add(t, &w);
	p[2].fd = w.fd; /* -1: ignored */
	p[2].events = POLLIN;
	pthread_mutex_unlock(&t->lock);
	prc = rsock_real.poll(p, 3, ms);
	intr = prc < 0 && errno == EINTR;
	atomic_fetch_sub(&t->sleepers, 1);
	pthread_mutex_lock(&t->lock);
	waitq_del(t, &w);
	tp_wait_note(&t->wait, mono_ns() - start, prc == 0 ? TP_WAIT_TIMEOUT : TP_WAIT_SLEPT);
	tp_wait_done(t);
	if (!intr && p[1].revents)
		check_control(t);
	return intr ? -EINTR : 0;
}

void tp_wait_done(struct tp *t)
{
	/* An epoll instance watching this stream may have been sleeping on
	 * the event just consumed: make it look again. */
	if (tp_consume(t) && atomic_load_explicit(&t->watchers, memory_order_relaxed))
		event_kick();
}

int tp_consume(struct tp *t)
{
	struct ibv_cq *cq;
	void *ctx;

	if (t->owner != rsock_pid() || !t->cc)
		return 0; /* the channel is the parent's */
	if (ibv_get_cq_event(t->cc, &cq, &ctx))
		return 0;
	ibv_ack_cq_events(cq, 1);
	stats_cq_event();
	atomic_store(&t->armed, 0);
	/* Another thread may be asleep on the channel, relying on the arming
	 * this event used up (tp_wait_fd): arm again for it. */
	if (atomic_load(&t->sleepers) > 0 && ibv_req_notify_cq(t->cq, 0) == 0) {
		atomic_store(&t->armed, 1);
		stats_cq_arm();
	}
	return 1;
}

/* Request a completion event unless one is already requested. */
static int arm(struct tp *t)
{
	int rc;

	if (atomic_load(&t->armed))
		return 0;
	if ((rc = ibv_req_notify_cq(t->cq, 0)))
		return rc > 0 ? -rc : errno ? -errno : -EIO;
	stats_cq_arm();
	atomic_store_explicit(&t->armed, 1, memory_order_relaxed);
	return 0;
}

/* Count the received data messages now fully read. */
static void rx_msgs_read(struct tp *t)
{
	const unsigned cap = RSOCK_ARRAY_SIZE(t->rx_msg_end);

	while (t->rx_msg_read < t->rx_msg_count &&
	       t->rx_msg_end[(t->rx_msg_head + t->rx_msg_read) % cap] <= t->rx.head)
		t->rx_msg_read++;
}

/* Return consumed bytes to the peer. Caller holds the lock. The credit
 * covers everything read (up to rx.head), so it frees at the sender exactly
 * the messages fully read, never the ones merely received. */
static void send_credit(struct tp *t)
{
	if (!t->rx_unacked || t->err || t->sq_busy >= TP_SQ_DEPTH)
		return;
	rx_msgs_read(t);
	if (post_write(t, NULL, 0, proto_imm_encode(PROTO_IMM_CREDIT, (uint32_t)t->rx_unacked), 0) == 0) {
		t->rx_unacked = 0;
		t->rx_msg_head = (t->rx_msg_head + t->rx_msg_read) % RSOCK_ARRAY_SIZE(t->rx_msg_end);
		t->rx_msg_count -= t->rx_msg_read;
		t->rx_msg_read = 0;
	}
}

/* After a read: credit once a quarter of the ring or half the sender's
 * message allowance has been read (doc/design.md section 9). */
static void maybe_credit(struct tp *t)
{
	rx_msgs_read(t);
	if (t->rx_unacked >= t->rx.size / 4 || t->rx_msg_read >= TP_MAX_DATA_MSGS / 2)
		send_credit(t);
}

/* Unread bytes: the spill's, then the ring's. */
static uint64_t unread(const struct tp *t)
{
	return ring_used(&t->spill) + ring_used(&t->rx);
}

/* Room left in the spill (it is mapped at its first use). */
static uint64_t spill_room(const struct tp *t)
{
	return t->spill.buf ? ring_free(&t->spill) : TP_SPILL_MAX;
}

/* A blocking send that waited TP_SPILL_AFTER_MS for room while our own ring
 * holds unread bytes: the peer may be blocked the same way, each waiting for
 * the other to read (an echo server, and a client that writes its whole
 * request before it reads). Kernel TCP's buffers, megabytes, absorb that;
 * the rings alone would deadlock both. So the unread bytes move into the
 * spill (unregistered memory, at most TP_SPILL_MAX, read before the ring)
 * and the peer gets their credit. Returns the bytes moved. Caller holds the
 * lock. */
static uint64_t spill(struct tp *t)
{
	uint64_t n = ring_used(&t->rx), room = spill_room(t);
	struct ring_span sp[2];

	if (n > room)
		n = room;
	if (!n)
		return 0;
	if (!t->spill.buf) {
		void *m = mmap(NULL, TP_SPILL_MAX, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED || ring_init(&t->spill, m, TP_SPILL_MAX)) {
			if (m != MAP_FAILED)
				munmap(m, TP_SPILL_MAX);
			return 0;
		}
	}
	struct iovec v[2];
	uint64_t left = n;
	ring_unread_iov(&t->rx, v);
	for (int i = 0; i < 2 && left; i++) {
		uint32_t l = v[i].iov_len < left ? (uint32_t)v[i].iov_len : (uint32_t)left;
		ring_write(&t->spill, v[i].iov_base, l, sp);
		left -= l;
	}
	ring_consume(&t->rx, (size_t)n);
	t->rx_unacked += n;
	send_credit(t);
	log_debug("fd %d: %llu unread bytes kept beyond the ring (%llu in all)",
		  t->tcp_fd, (unsigned long long)n, (unsigned long long)ring_used(&t->spill));
	return n;
}

/* Copy len bytes starting at byte `skip` of iov into dst. */
static void iov_gather(const struct iovec *iov, int iovcnt, size_t skip, void *dst, size_t len)
{
	uint8_t *d = dst;

	for (int i = 0; i < iovcnt && len; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		size_t n = iov[i].iov_len - skip;
		if (n > len)
			n = len;
		ring_copy(d, (const uint8_t *)iov[i].iov_base + skip, n);
		d += n;
		len -= n;
		skip = 0;
	}
}

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
	size_t s = 0;

	for (int i = 0; i < iovcnt; i++)
		s += iov[i].iov_len;
	return s;
}

/* Bytes that may be sent now as one message. Caller holds the lock. */
static uint32_t send_room(struct tp *t, size_t want, int zc)
{
	uint64_t room = ring_remote_space(&t->peer);
	uint32_t mask = t->peer.size - 1;
	uint32_t contig = t->peer.size - (uint32_t)(t->peer.tail & mask);

	if (t->msg_count >= TP_MAX_DATA_MSGS || t->sq_busy + TP_CTL_RESERVE >= TP_SQ_DEPTH)
		return 0;
	if (room > contig)
		room = contig;
	if (!zc) {
		if (room > TP_MAX_CHUNK)
			room = TP_MAX_CHUNK;
	} else {
		/* Nothing staged to pipeline: larger messages, fewer work
		 * requests, doorbells and the receiver's wake-ups; half the
		 * ring at most, so that one is read while the next arrives. */
		uint32_t cap = t->peer.size / 2 < TP_MAX_ZC_CHUNK ? t->peer.size / 2 : TP_MAX_ZC_CHUNK;
		if (room > cap)
			room = cap;
	}
	if (room > want)
		room = want;
	if (room > t->max_inline && !zc) {
		/* A staged message: it needs contiguous room in the send ring.
		 * Less than TP_MIN_STAGE there (or than the message) is not
		 * worth a work request: skip the ring's end if the start has
		 * room, else wait for completions (one is signalled whenever
		 * the ring is more than half full). Trickling small pieces
		 * would spend the message and receive budget on nothing. */
		uint32_t tmask = t->tx.size - 1;
		uint64_t tfree = ring_free(&t->tx);
		uint32_t tcontig = t->tx.size - (uint32_t)(t->tx.tail & tmask);
		uint32_t need = room < TP_MIN_STAGE ? (uint32_t)room : TP_MIN_STAGE;
		if (tcontig < need && tfree >= (uint64_t)tcontig + need) {
			t->tx.tail += tcontig; /* released with the next signalled completion */
			tfree -= tcontig;
			tcontig = t->tx.size;
		}
		if (tfree < tcontig)
			tcontig = (uint32_t)tfree;
		if (tcontig < need)
			return 0;
		if (room > tcontig)
			room = tcontig;
	}
	return (uint32_t)room;
}

/* ---- the hand-over to TCP (doc/design.md section 6) ----------------------- */

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A signalled zero-byte RDMA WRITE (no immediate, no receive consumed at the
 * peer): its completion says that every earlier work request is complete. */
static int post_fence(struct tp *t)
{
	struct ibv_send_wr wr, *bad;
	unsigned slot;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = t->peer_addr;
	wr.wr.rdma.rkey = t->peer_rkey;
	wr.send_flags = IBV_SEND_SIGNALED;
	if ((rc = ibv_post_send(t->qp, &wr, &bad)))
		return -rc;
	t->sq_busy++;
	t->sq_seq++;
	slot = (t->sig_head + t->sig_count) % TP_SQ_DEPTH;
	t->sig[slot].seq = t->sq_seq;
	t->sig[slot].tx_tail = t->tx.tail;
	t->sig_count++;
	t->sq_posted = 0;
	return 0;
}

/* Until everything posted on t has completed (a signalled fence asked for
 * when nothing signalled is outstanding), or an error, or deadline
 * (CLOCK_MONOTONIC ms). 0, -ETIMEDOUT, or post_fence's -errno. Caller holds
 * the lock. */
static int await_posted(struct tp *t, int64_t deadline)
{
	int rc = 0;

	while (t->sq_busy && !t->err && !rc) {
		if (progress(t))
			continue;
		if (!t->sig_count && t->sq_busy < TP_SQ_DEPTH && (rc = post_fence(t)))
			break;
		if (mono_ms() > deadline)
			rc = -ETIMEDOUT;
		else
			rsock_real.poll(NULL, 0, 1);
	}
	return rc;
}

/* Read the peer's SWITCH from the control connection, exactly its bytes
 * (application data follows it), absorbing RDMA completions meanwhile.
 * 0 and *total; -EPIPE or -ECONNRESET when the peer closed its socket
 * instead; -EPROTO, -ETIMEDOUT. Caller holds the lock. */
static int read_switch(struct tp *t, uint64_t *total, int64_t deadline)
{
	uint8_t b[PROTO_MSG_MAX_LEN];
	size_t got = 0, need = PROTO_SWITCH_LEN;

	for (;;) {
		struct proto_switch m;
		struct pollfd p = {.fd = t->tcp_fd, .events = POLLIN};
		ssize_t r = rsock_real.recv(t->tcp_fd, b + got, need - got, MSG_DONTWAIT);

		if (r > 0) {
			int d;
			got += (size_t)r;
			d = proto_switch_decode(b, got, &m);
			if (d > 0) {
				*total = m.rdma_bytes;
				return 0;
			}
			if (d != -EAGAIN)
				return -EPROTO;
			if (got >= 8) /* the length is known: read up to it */
				need = (size_t)b[6] | (size_t)b[7] << 8;
			if (need > sizeof(b) || need < got)
				return -EPROTO;
			continue;
		}
		if (r == 0)
			return -EPIPE;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return errno == ECONNRESET ? -ECONNRESET : -EPIPE;
		progress(t);
		if (mono_ms() > deadline)
			return -ETIMEDOUT;
		rsock_real.poll(&p, 1, 2);
	}
}

/* The switch itself, in the owning process, lock held. have_total: the peer
 * spoke first (its SWITCH said peer_total). Afterwards the unread ring bytes
 * are the prefix and the kernel socket carries the rest, both ways. On
 * failure the kernel socket is shut down both ways (the application sees
 * EOF and EPIPE, never bytes out of order) and -errno returned. */
static int switch_within(struct tp *t, int have_total, uint64_t peer_total, int64_t deadline);
static int switch_steps(struct tp *t, int have_total, uint64_t peer_total, int64_t deadline);

static int switch_locked(struct tp *t, int have_total, uint64_t peer_total)
{
	return switch_within(t, have_total, peer_total, mono_ms() + TP_SWITCH_MS);
}

/* switch_locked, bounded by deadline (CLOCK_MONOTONIC ms). */
static int switch_within(struct tp *t, int have_total, uint64_t peer_total, int64_t deadline)
{
	int rc;

	t->switching = 1;
	rc = switch_steps(t, have_total, peer_total, deadline);
	t->switching = 0;
	return rc;
}

static int switch_steps(struct tp *t, int have_total, uint64_t peer_total, int64_t deadline)
{
	int rc = 0;

	if (tp_switched(t))
		return 0;
	progress(t);
	if (!t->err && !t->peer_gone) {
		struct proto_switch m = {.version = PROTO_VERSION, .flags = 0};
		uint8_t b[PROTO_SWITCH_LEN];
		size_t off = 0;

		/* 1. Everything we posted has landed in the peer's ring. */
		rc = await_posted(t, deadline);
		/* The device refuses this process (creds_lost): what it posted
		 * is in the send queue, and the peer waits for every byte up
		 * to our total (its step 4). */
		if (rc == -EACCES)
			rc = 0;
		if (t->err && !rc)
			rc = t->err;
		/* 2. Say where our RDMA bytes end; TCP carries what follows. */
		m.rdma_bytes = t->peer.tail;
		proto_switch_encode(&m, b, sizeof(b));
		while (!rc && off < sizeof(b)) {
			ssize_t w = rsock_real.send(t->tcp_fd, b + off, sizeof(b) - off, MSG_NOSIGNAL);
			if (w > 0)
				off += (size_t)w;
			else if (errno != EINTR && errno != EAGAIN)
				rc = -errno;
			else
				rsock_real.poll(NULL, 0, 1);
		}
		if (!rc && t->fin_sent)
			rsock_real.shutdown(t->tcp_fd, SHUT_WR); /* our FIN, now TCP's */
		/* 3. Hear where the peer's end. */
		if (!rc && !have_total) {
			rc = read_switch(t, &peer_total, deadline);
			if (rc == -EPIPE || rc == -ECONNRESET) {
				/* The peer's socket is closed: everything it wrote
				 * completed before (its close waits for that). */
				t->peer_gone = 1;
				progress(t);
				peer_total = t->rx.tail;
				rc = 0;
			}
		}
		/* 4. Everything the peer posted is in our ring. */
		while (!rc && t->rx.tail < peer_total && !t->err) {
			if (progress(t))
				continue;
			if (mono_ms() > deadline)
				rc = -ETIMEDOUT;
			else
				rsock_real.poll(NULL, 0, 1);
		}
		if (!rc && t->rx.tail != peer_total)
			rc = -EPROTO; /* more arrived than the peer says it sent */
	}
	if (!rc && unread(t)) {
		/* the spill's bytes, then the ring's, each possibly wrapped */
		struct iovec v[4];
		ring_unread_iov(&t->spill, v);
		ring_unread_iov(&t->rx, v + 2);
		rc = ho_pre_new(v, 4, &t->pre);
		if (!rc) {
			ring_consume(&t->spill, (size_t)ring_used(&t->spill));
			ring_consume(&t->rx, (size_t)ring_used(&t->rx));
		}
	}
	if (rc) {
		log_warn("fd %d: the stream could not be moved to TCP (%s): it is shut down",
			 t->tcp_fd, strerror(-rc));
		rsock_real.shutdown(t->tcp_fd, SHUT_RDWR);
	} else {
		log_debug("fd %d: moved to TCP, %zu unread bytes first", t->tcp_fd,
			  ho_pre_left(t->pre));
		stats_handover();
	}
	atomic_store_explicit(&t->sw, 1, memory_order_release);
	atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
	waitq_ring(t); /* the owner's other threads asleep on it read TCP now */
	if (atomic_load_explicit(&t->watchers, memory_order_relaxed))
		event_kick();
	return rc;
}

/* The kernel refused a verbs command of this process with EACCES: the
 * process changed its credentials since it opened the device (see
 * tp_creds_stale). The stream moves to TCP, as for a hand-over; the peer's
 * RDMA writes still land and are read (polling the completion queue and
 * posting receives are no commands on soft-RoCE either). Returns 1 when the
 * stream is switched now, 0 when it cannot be (the caller fails it). Caller
 * holds the lock. */
static int creds_lost(struct tp *t)
{
	atomic_store_explicit(&tp_creds_stale, 1, memory_order_relaxed);
	if (tp_switched(t))
		return 1;
	if (!t->up || t->peer_version < PROTO_VERSION_SWITCH)
		return 0;
	log_debug("fd %d: the RDMA device refuses this process since it changed its credentials "
		  "(setuid, setgid...): the stream moves to TCP", t->tcp_fd);
	switch_locked(t, 0, 0);
	return 1;
}

/* A process other than the owner uses the stream (a forked child): it gets
 * the stream moved to TCP by the owner, then reads the prefix the owner left
 * and the kernel socket. Returns 0 once switched, -EIO when that cannot be
 * done. */
static pthread_mutex_t sw_child_lock = PTHREAD_MUTEX_INITIALIZER;

static int sw_ask(struct tp *t)
{
	struct ho_pre *pre = NULL;
	int rc = 0;

	pthread_mutex_lock(&sw_child_lock);
	if (!tp_switched(t)) {
		rc = ho_request(t->rec, &pre);
		if (rc == 0 && !tp_switched(t)) {
			t->pre = pre;
			pre = NULL;
			atomic_store_explicit(&t->sw, 1, memory_order_release);
		} else if (rc == 0 && ho_vfork_keep(t, pre)) {
			/* A vfork child: t is the owner's, whose thread switched
			 * it; pre goes to the new image beside the duplicate. */
			pre = NULL;
		}
		ho_pre_free(pre);
	}
	pthread_mutex_unlock(&sw_child_lock);
	if (rc)
		log_warn_rl("an RDMA stream of process %d could not be moved to TCP for this "
			    "process: EIO", (int)t->owner);
	return rc ? -EIO : 0;
}

static int sw_enter(struct tp *t)
{
	if (tp_switched(t) || t->owner == rsock_pid())
		return 0;
	return sw_ask(t);
}

int tp_handover_shared(struct tp *t)
{
	return tp_switched(t) ? 0 : sw_ask(t);
}

int tp_handover(struct tp *t)
{
	int rc;

	if (tp_switched(t))
		return 0;
	if (t->owner != rsock_pid())
		return sw_enter(t);
	if (!t->up)
		return -ENOTCONN;
	if (t->peer_version < PROTO_VERSION_SWITCH)
		return -EPROTONOSUPPORT;
	pthread_mutex_lock(&t->lock);
	rc = switch_locked(t, 0, 0);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

struct ho_pre *tp_prefix(struct tp *t)
{
	return tp_switched(t) ? t->pre : NULL;
}

int tp_control_watch(struct tp *t)
{
	int more;

	pthread_mutex_lock(&t->lock);
	check_control(t);
	more = !tp_switched(t) && !t->peer_gone && !t->err && !t->rd_shut;
	pthread_mutex_unlock(&t->lock);
	return more;
}

int tp_kernel_only(struct tp *t)
{
	return tp_switched(t) && !ho_pre_left(t->pre);
}

size_t tp_prefix_left(struct tp *t)
{
	return ho_pre_left(tp_prefix(t));
}

int tp_prefix_fd(struct tp *t)
{
	return ho_pre_left(tp_prefix(t)) ? ho_pre_fd(t->pre) : -1;
}

int tp_adopt(int fd, struct ho_pre *pre, struct tp **out)
{
	struct tp *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	t->owner = rsock_pid();
	t->tcp_fd = ownfd_dup(fd);
	if (t->tcp_fd < 0) {
		int rc = -errno;
		pthread_mutex_destroy(&t->lock);
		free(t);
		return rc;
	}
	t->pre = pre;
	t->peer_version = PROTO_VERSION;
	atomic_init(&t->sw, 1);
	*out = t;
	return 0;
}

/* iov from byte skip on, into tmp (at most 64 pieces). Returns the count. */
static int iov_from(const struct iovec *iov, int iovcnt, size_t skip, struct iovec tmp[64])
{
	int n = 0;

	for (int i = 0; i < iovcnt && n < 64; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		tmp[n].iov_base = (uint8_t *)iov[i].iov_base + skip;
		tmp[n++].iov_len = iov[i].iov_len - skip;
		skip = 0;
	}
	return n;
}

/* Receive on a switched stream, into iov from byte skip: the prefix first,
 * then the kernel socket (flags as the application gave them). */
static ssize_t sw_recv(struct tp *t, const struct iovec *iov, int iovcnt, size_t skip, int flags)
{
	size_t want = iov_total(iov, iovcnt) - skip, n = 0;
	struct iovec tmp[64];
	struct msghdr m;
	ssize_t r;

	if (ho_pre_left(t->pre)) {
		n = ho_pre_read(t->pre, iov, iovcnt, skip, want, flags);
		if (n && (n == want || !(flags & MSG_WAITALL) || (flags & MSG_PEEK)))
			return (ssize_t)n;
	}
	memset(&m, 0, sizeof(m));
	m.msg_iov = tmp;
	m.msg_iovlen = (size_t)iov_from(iov, iovcnt, skip + n, tmp);
	r = rsock_real.recvmsg(t->tcp_fd, &m, flags);
	if (r < 0)
		return n ? (ssize_t)n : -errno;
	return (ssize_t)n + r;
}

/* Send the rest of iov (from byte skip) on the kernel socket after a switch
 * in the middle of a send. Returns the bytes sent (>= 0). */
static size_t sw_send_rest(struct tp *t, const struct iovec *iov, int iovcnt, size_t skip, int flags)
{
	struct iovec tmp[64];
	struct msghdr m;
	ssize_t r;

	memset(&m, 0, sizeof(m));
	m.msg_iov = tmp;
	m.msg_iovlen = (size_t)iov_from(iov, iovcnt, skip, tmp);
	r = rsock_real.sendmsg(t->tcp_fd, &m, flags | MSG_NOSIGNAL);
	return r > 0 ? (size_t)r : 0;
}

static short sw_ready(struct tp *t, uint64_t *seq)
{
	struct pollfd p = {.fd = t->tcp_fd, /* POLLPRI: urgent data came after the switch */
			   .events = POLLIN | POLLOUT | POLLRDHUP | POLLRDNORM | POLLWRNORM | POLLPRI};
	short ev;

	rsock_real.poll(&p, 1, 0);
	ev = p.revents;
	if (ho_pre_left(t->pre))
		ev |= POLLIN | POLLRDNORM;
	/* Each kernel event a waiter saw is an edge for edge-triggered epoll. */
	if (atomic_exchange_explicit(&t->ctl_dirty, 0, memory_order_relaxed))
		atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
	if (seq)
		*seq = atomic_load_explicit(&t->evseq, memory_order_relaxed);
	return ev;
}

/* ---- sends without the copy (doc/design.md section 9) ---------------------- */

/* A span of the application's buffer registered for one blocking send:
 * bytes [off, end) of the call's iov, at base. */
struct zc_span {
	struct ibv_mr *mr;
	const uint8_t *base;
	size_t off, end;
	uint64_t seq; /* sq_seq of its last WR (signalled), 0 until posted */
};

#define ZC_MAX_SPAN (16u << 20) /* at most this much pinned at once */

/* Whether this process may register application memory: only where the
 * kernel keeps pinned pages across fork (rdma-core's IBV_FORK_UNNEEDED);
 * elsewhere rdma-core's fork support would mark the application's pages
 * MADV_DONTFORK. */
static int zc_allowed(void)
{
	static _Atomic int v = -1;
	int a = atomic_load_explicit(&v, memory_order_relaxed);

	if (a < 0) {
		a = ibv_is_fork_initialized() == IBV_FORK_UNNEEDED;
		atomic_store_explicit(&v, a, memory_order_relaxed);
		if (!a)
			log_debug("sends copy always: this kernel does not keep pinned pages across fork");
	}
	return a;
}

/* Register the rest of the iov element at byte `done` of the call, when it
 * is at least RSOCK_ZCOPY_KB long, leaving the call's last TP_MAX_CHUNK
 * bytes to the copy: while they are copied and posted the span's writes
 * complete, which the call waits for before it returns (zc_end). */
static void zc_begin(struct tp *t, struct zc_span *zc, const struct iovec *iov, int iovcnt,
		     size_t done, size_t want)
{
	size_t skip = done, len, min = (size_t)tp_settings.zcopy_kb * 1024;

	zc->off = done; /* looked at: not again at this offset */
	if (!min || t->zc_off || want - done <= TP_MAX_CHUNK || !zc_allowed())
		return;
	for (int i = 0; i < iovcnt; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		len = iov[i].iov_len - skip;
		if (len > want - done - TP_MAX_CHUNK)
			len = want - done - TP_MAX_CHUNK;
		if (len > ZC_MAX_SPAN)
			len = ZC_MAX_SPAN;
		if (len < min)
			return;
		zc->base = (const uint8_t *)iov[i].iov_base + skip;
		/* local read only: the peer gets no access to it */
		zc->mr = ibv_reg_mr(t->pd, (void *)zc->base, len, 0);
		if (!zc->mr) {
			/* RLIMIT_MEMLOCK, memory the kernel will not pin: the
			 * stream copies from now on */
			log_debug("fd %d: sends copy: registering %zu bytes of the application's "
				  "buffer failed (errno %d)", t->tcp_fd, len, errno);
			t->zc_off = 1;
			return;
		}
		zc->end = done + len;
		zc->seq = 0;
		return;
	}
}

/* The span's writes are complete (or the stream is dead): unregister it.
 * Caller holds the lock. */
static void zc_end(struct tp *t, struct zc_span *zc)
{
	if (!zc->mr)
		return;
	/* Every WR before a completed signalled one is complete too; a span
	 * cut short (error, hand-over) waits for what it posted. */
	if (!zc->seq)
		zc->seq = t->sq_seq;
	while (t->sq_seq - t->sq_busy < zc->seq && !t->err) {
		if (progress(t))
			continue;
		/* nothing signalled covers the span's end: ask for it */
		if ((!t->sig_count || t->sig[(t->sig_head + t->sig_count - 1) % TP_SQ_DEPTH].seq < zc->seq) &&
		    t->sq_busy < TP_SQ_DEPTH && post_fence(t) == 0)
			continue;
		wait_event(t, 0, 0);
	}
	if (ibv_dereg_mr(zc->mr))
		log_debug("fd %d: deregistering a send span failed", t->tcp_fd);
	zc->mr = NULL;
}

/* A data message ending at the peer's tail is posted: its end is recorded
 * until the peer's credit covers it (the message allowance, section 9).
 * Caller holds the lock. */
static inline void data_msg_posted(struct tp *t)
{
	t->msg_end[(t->msg_head + t->msg_count) % RSOCK_ARRAY_SIZE(t->msg_end)] = t->peer.tail;
	t->msg_count++;
}

/* The common small send: one buffer that fits in a work request (inline),
 * room for all of it now, nothing wrong with the stream. What tp_send's loop
 * does for it, without the loop (a 64 B write() is on the round trip's path
 * at both ends: 1,005 -> 779 instructions on soft-RoCE, 194 of them the
 * provider's). Returns 1 when sent, 0 when the loop must do it (nothing done
 * then). Caller holds the lock. */
static int send_small(struct tp *t, const void *buf, uint32_t n)
{
	/* Inline: the provider copies the bytes into the work request
	 * while it posts, so they go from the caller's buffer. */
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = n, .lkey = 0};
	struct ring_span rs[2];
	uint32_t room = send_room(t, n, 0);

	/* Completions are looked at only when the room seems short: what
	 * they could say otherwise (the peer's end, an error) is news that
	 * reaches a TCP sender after its write just as well. */
	if (room != n) {
		progress(t);
		room = send_room(t, n, 0);
	}
	if (RSOCK_UNLIKELY(t->eof || t->err || t->peer_gone || t->fin_sent || tp_switched(t)) ||
	    room != n)
		return 0;
	if (RSOCK_UNLIKELY(ring_remote_reserve(&t->peer, n, rs))) /* send_room saw the room */
		return 0;
	if (RSOCK_UNLIKELY(post_write(t, &sge, rs[0].off, proto_imm_encode(PROTO_IMM_DATA, n),
				      PW_INLINE))) {
		t->peer.tail -= n; /* the loop posts again, and handles the error */
		return 0;
	}
	data_msg_posted(t);
	log_trace("fd %d: data message of %u bytes, inline", t->tcp_fd, n);
	return 1;
}

ssize_t tp_send(struct tp *t, const struct iovec *iov, int iovcnt, int flags, int nonblock)
{
	size_t want = iov_total(iov, iovcnt), done = 0;
	ssize_t r = 0;
	int64_t deadline = 0;
	int deadline_set = 0;
	int64_t spill_at = 0;
	struct zc_span zc = {.off = SIZE_MAX};

	if (RSOCK_UNLIKELY(t->owner != rsock_pid() || tp_switched(t)))
		return sw_enter(t) ? -EIO : -ESHUTDOWN; /* the kernel socket sends */
	nonblock |= !!(flags & MSG_DONTWAIT);
	pthread_mutex_lock(&t->lock);
	if (tp_switched(t)) {
		r = -ESHUTDOWN;
		goto out;
	}
	if (t->fin_sent) {
		r = -EPIPE;
		goto out;
	}
	t->sink_waits = 0; /* it sends: its reads wait for answers */
	if (iovcnt == 1 && want && want <= t->max_inline && !(flags & MSG_OOB) &&
	    send_small(t, iov->iov_base, (uint32_t)want)) {
		pthread_mutex_unlock(&t->lock);
		return (ssize_t)want;
	}
	while (done < want) {
		uint32_t n;
		struct ring_span rs[2] = {{0, 0}, {0, 0}}; /* the reservation below fills it */

		progress(t);
		/* The peer closed its side: once its control connection is gone
		 * too, the kernel socket answers (TCP's EPIPE/RST dance). */
		if (t->eof && !t->peer_gone)
			check_control(t);
		if (tp_switched(t)) { /* the peer moved the stream to TCP meanwhile */
			if (done)
				done += sw_send_rest(t, iov, iovcnt, done, flags);
			else
				r = -ESHUTDOWN;
			break;
		}
		if (t->peer_gone) {
			r = -ESHUTDOWN; /* let the kernel socket answer */
			break;
		}
		if (t->err) {
			r = t->err == -EPIPE ? -ESHUTDOWN : t->err;
			break;
		}
		/* A long span of one buffer goes out without the copy
		 * (doc/design.md section 9): registered for this call. */
		if (zc.mr && done >= zc.end && want - done > TP_MAX_CHUNK)
			zc_end(t, &zc); /* the next element, or the next span */
		if (!zc.mr && zc.off != done && !nonblock)
			zc_begin(t, &zc, iov, iovcnt, done, want);
		int from_zc = zc.mr && done < zc.end;
		n = send_room(t, from_zc ? zc.end - done : want - done, from_zc);
		if (!n) {
			int64_t wait_until;
			if (nonblock)
				break;
			/* SO_SNDTIMEO: what was sent, else EAGAIN, as TCP */
			if (!deadline_set) {
				deadline = timeo_deadline(t, SO_SNDTIMEO);
				deadline_set = 1;
				spill_at = mono_ns() + TP_SPILL_AFTER_MS * 1000000LL;
			}
			if (timed_out(deadline))
				break;
			/* Our unread bytes go aside once we have waited a while
			 * (spill(): both ends may be waiting for the other). */
			wait_until = deadline;
			if (spill_at && ring_used(&t->rx) && spill_room(t)) {
				if (mono_ns() >= spill_at) {
					if (spill(t))
						continue;
					spill_at = 0; /* no memory for it: wait as before */
				} else if (!wait_until || spill_at < wait_until) {
					wait_until = spill_at;
				}
			}
			if (spill_at && t->rx_unacked && mono_ns() >= spill_at)
				send_credit(t); /* a spill's credit the send queue had no room for */
			if (wait_event(t, wait_until, 0) == -EINTR && intr_fails(deadline)) {
				r = -EINTR; /* what was sent, else EINTR, as TCP */
				break;
			}
			continue;
		}
		ring_remote_reserve(&t->peer, n, rs); /* send_room allowed n, contiguous */
		if (from_zc) {
			struct ibv_sge sge = {.addr = (uintptr_t)zc.base + (done - zc.off), .length = n,
					      .lkey = zc.mr->lkey};
			r = post_write(t, &sge, rs[0].off, proto_imm_encode(PROTO_IMM_DATA, n),
				       done + n == zc.end ? PW_SIGNAL : 0);
			if (r == 0) {
				stats_zcopy(n);
				if (done + n == zc.end)
					zc.seq = t->sq_seq;
			}
		} else if (n <= t->max_inline) {
			uint8_t buf[TP_INLINE_MAX];
			struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = n, .lkey = 0};
			iov_gather(iov, iovcnt, done, buf, n);
			r = post_write(t, &sge, rs[0].off, proto_imm_encode(PROTO_IMM_DATA, n), PW_INLINE);
		} else {
			uint8_t *dst = t->tx.buf + (t->tx.tail & (t->tx.size - 1));
			struct ibv_sge sge = {.addr = (uintptr_t)dst, .length = n, .lkey = t->tx_mr->lkey};
			iov_gather(iov, iovcnt, done, dst, n);
			t->tx.tail += n; /* == ring_write without the copy: contiguous by send_room */
			r = post_write(t, &sge, rs[0].off, proto_imm_encode(PROTO_IMM_DATA, n), 0);
		}
		if (r == -EACCES) {
			/* Not posted: take the reservation back, and let TCP
			 * carry these bytes once the stream has moved. */
			t->peer.tail -= n;
			if (n > t->max_inline && !from_zc)
				t->tx.tail -= n;
			if (creds_lost(t)) {
				if (done)
					done += sw_send_rest(t, iov, iovcnt, done, flags);
				else
					r = -ESHUTDOWN;
				break;
			}
		}
		if (r == -ESHUTDOWN) {
			t->err = (int)r;
			break;
		}
		if (r) {
			tp_fail(t, -ECONNRESET, "posting a send failed", 1);
			r = -ECONNRESET;
			break;
		}
		data_msg_posted(t);
		/* (The tests read message sizes from these lines.) */
		log_trace("fd %d: data message of %u bytes%s", t->tcp_fd, n,
			  from_zc ? ", sent without the copy" : n <= t->max_inline ? ", inline" : "");
		done += n;
	}
	zc_end(t, &zc);
out:
	pthread_mutex_unlock(&t->lock);
	if (done)
		return (ssize_t)done;
	if (r)
		return r;
	return want ? -EAGAIN : 0;
}

/* Copy from the receive ring into iov starting at byte `skip` of iov. */
static size_t ring_to_iov(const struct ring *r, const struct iovec *iov, int iovcnt, size_t skip,
			  size_t max)
{
	struct iovec tmp[64];
	int n = 0;

	for (int i = 0; i < iovcnt && n < (int)RSOCK_ARRAY_SIZE(tmp); i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		tmp[n].iov_base = (uint8_t *)iov[i].iov_base + skip;
		tmp[n].iov_len = iov[i].iov_len - skip;
		skip = 0;
		n++;
	}
	return ring_peek_iov(r, tmp, n, max);
}

/* Copy unread bytes (the spill's, then the ring's) into iov from byte `skip`
 * of iov, at most max; returns the count. */
static size_t unread_to_iov(struct tp *t, const struct iovec *iov, int iovcnt, size_t skip, size_t max)
{
	size_t k = 0;

	if (iovcnt == 1 && !ring_used(&t->spill) && skip <= iov->iov_len) {
		/* one buffer (read, recv): no vector to build */
		size_t room = iov->iov_len - skip;
		return ring_peek(&t->rx, (uint8_t *)iov->iov_base + skip, room < max ? room : max);
	}
	if (ring_used(&t->spill))
		k = ring_to_iov(&t->spill, iov, iovcnt, skip, max);
	if (k < max && k == ring_used(&t->spill))
		k += ring_to_iov(&t->rx, iov, iovcnt, skip + k, max - k);
	return k;
}

/* Consume n unread bytes, the spill's first; the ring's are owed to the peer. */
static void unread_consume(struct tp *t, size_t n)
{
	size_t s = (size_t)ring_used(&t->spill);

	if (s) {
		s = n < s ? n : s;
		ring_consume(&t->spill, s);
		n -= s;
	}
	if (n) {
		ring_consume(&t->rx, n);
		t->rx_unacked += n;
	}
}

/* Whether the stream's end (or an error) has come: nothing more to wait for. */
static int rx_ended(const struct tp *t)
{
	return t->eof || t->peer_gone || t->err || t->rd_shut;
}

/* SO_RCVLOWAT above 1: fewer unread bytes than that do not make the stream
 * readable, and a blocking read waits for that many (as TCP). The unread
 * bytes in the ring then go to the spill, and the peer gets their credit:
 * else a sender held back by the ring or the message allowance could never
 * send what makes up the rest, where TCP's receive buffer would take it.
 * Caller holds the lock. */
static void lowat_wait_prep(struct tp *t)
{
	if (ring_used(&t->rx))
		spill(t);
}

ssize_t tp_recv(struct tp *t, const struct iovec *iov, int iovcnt, int flags, int nonblock)
{
	size_t want = iov_total(iov, iovcnt), done = 0, target;
	ssize_t r = 0;
	int64_t deadline = 0;
	int deadline_set = 0, polled = 0;

	if (!want)
		return 0;
	if (RSOCK_UNLIKELY(flags & MSG_OOB)) {
		/* Urgent data travels only on the kernel socket (a sender moves
		 * the stream to TCP first), out of band: it answers, the urgent
		 * byte or EINVAL when there is none, whatever the stream's
		 * in-band bytes are doing. */
		struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
		ssize_t n = rsock_real.recvmsg(t->tcp_fd, &m, flags);
		return n < 0 ? -errno : n;
	}
	if (RSOCK_UNLIKELY(t->owner != rsock_pid() || tp_switched(t)))
		return sw_enter(t) ? -EIO : sw_recv(t, iov, iovcnt, 0, flags);
	nonblock |= !!(flags & MSG_DONTWAIT);
	/* as tcp_recvmsg: MSG_WAITALL wants all, else SO_RCVLOWAT (at least 1) */
	target = flags & MSG_WAITALL ? want
				     : (size_t)atomic_load_explicit(&t->rcvlowat, memory_order_relaxed);
	if (target > want)
		target = want;
	pthread_mutex_lock(&t->lock);
	for (;;) {
		/* Not again right after a wait that took the completions: the
		 * event that ended a spin is read at once (a poll of the queue
		 * is about a hundred instructions of the provider's). */
		if (!polled)
			progress(t);
		polled = 0;
		if (tp_switched(t)) {
			/* Moved to TCP meanwhile: the rest comes from there. */
			pthread_mutex_unlock(&t->lock);
			if (done && (!(flags & MSG_WAITALL) || (flags & MSG_PEEK)))
				return (ssize_t)done;
			r = sw_recv(t, iov, iovcnt, done, flags);
			return r < 0 ? (done ? (ssize_t)done : r) : (ssize_t)done + r;
		}
		/* A peek copies from the first unread byte each time: it waits
		 * until the target is there (or nothing more can come). */
		if (unread(t) && (!(flags & MSG_PEEK) || unread(t) >= target || nonblock || rx_ended(t))) {
			/* MSG_TRUNC: TCP discards (or, with MSG_PEEK, counts)
			 * without touching the buffer, which may be NULL */
			size_t n = flags & MSG_TRUNC ? (unread(t) < want - done ? (size_t)unread(t) : want - done)
						     : unread_to_iov(t, iov, iovcnt, done, want - done);
			if (flags & MSG_PEEK) {
				done += n;
				break;
			}
			unread_consume(t, n);
			done += n;
			maybe_credit(t);
			if (done >= target)
				break;
			continue;
		}
		if (t->err && t->err != -EPIPE) {
			r = t->err;
			break;
		}
		if (rx_ended(t))
			break; /* end of stream (or of our reading) */
		/* No credit here: the thresholds of maybe_credit() leave the
		 * sender at least 3/4 of the ring and half the messages whenever
		 * we have read everything (doc/design.md section 9), and a credit
		 * per empty read would wake the peer for nothing. */
		if (nonblock) {
			if (control_due(t)) {
				check_control(t);
				if (t->peer_gone || t->err || tp_switched(t))
					continue;
			}
			r = -EAGAIN;
			break;
		}
		/* SO_RCVTIMEO: what MSG_WAITALL got, else EAGAIN, as TCP */
		if (!deadline_set) {
			deadline = timeo_deadline(t, SO_RCVTIMEO);
			deadline_set = 1;
		}
		if (timed_out(deadline)) {
			if (unread(t)) { /* a peek short of SO_RCVLOWAT: what is there, as TCP */
				nonblock = 1;
				continue;
			}
			r = -EAGAIN;
			break;
		}
		if (unread(t))
			lowat_wait_prep(t);
		int sink = tp_sink_note(&t->sink_waits, t->rx.head - t->sink_mark);
		t->sink_mark = t->rx.head;
		int w = wait_event(t, deadline, sink);
		polled = w == 1;
		if (w == -EINTR && intr_fails(deadline)) {
			if (unread(t)) { /* a peek short of SO_RCVLOWAT */
				nonblock = 1;
				continue;
			}
			r = -EINTR; /* what MSG_WAITALL got, else EINTR, as TCP */
			break;
		}
	}
	pthread_mutex_unlock(&t->lock);
	if (done)
		return (ssize_t)done;
	return r;
}

/* Writable as kernel TCP counts it (sk_stream_is_writeable: a third of
 * the send buffer free): a third of the peer's ring and of the message
 * allowance, and a message's room now. With any room at all counting, an
 * application that writes 8 KiB on a blocking socket after poll() said
 * POLLOUT blocked with 4 KiB of room, where TCP never blocks it; relays
 * whose ends all did that (socat on both sides of haproxy) stopped for good,
 * each blocked in a write to a peer blocked in its own (streamcheck scenario
 * 16). A reader that has read everything leaves the sender 3/4 of the ring
 * and half the messages (maybe_credit), so this never waits on a reader
 * that is done. Caller holds the lock. */
static int writable_locked(struct tp *t)
{
	return ring_remote_space(&t->peer) >= t->peer.size / 3 &&
	       t->msg_count + TP_MAX_DATA_MSGS / 3 <= TP_MAX_DATA_MSGS && send_room(t, 1, 0);
}

/* Readiness of t; caller holds the lock. */
static short ready_locked(struct tp *t)
{
	short ev = 0;
	uint64_t u = unread(t);

	if (u && u < (uint64_t)atomic_load_explicit(&t->rcvlowat, memory_order_relaxed)) {
		lowat_wait_prep(t); /* SO_RCVLOWAT: not readable yet (tp_recv) */
		u = 0;
	}
	if (u || rx_ended(t))
		ev |= POLLIN | POLLRDNORM;
	if (t->eof || t->peer_gone || t->rd_shut)
		ev |= POLLRDHUP;
	if (t->err && t->err != -EPIPE)
		ev |= POLLERR | POLLHUP | POLLRDHUP; /* a reset shuts both directions */
	else if ((t->eof || t->peer_gone) && t->fin_sent)
		ev |= POLLHUP;
	if (t->fin_sent || t->peer_gone || t->err || writable_locked(t))
		ev |= POLLOUT | POLLWRNORM;
	return ev;
}

short tp_poll_events(struct tp *t)
{
	return tp_ready(t, 0, NULL);
}

short tp_ready(struct tp *t, int do_arm, uint64_t *seq)
{
	short ev;

	if (RSOCK_UNLIKELY(t->owner != rsock_pid() || tp_switched(t))) {
		if (sw_enter(t)) {
			if (seq)
				*seq = 0;
			return POLLERR | POLLHUP;
		}
		return sw_ready(t, seq);
	}
	pthread_mutex_lock(&t->lock);
	progress(t);
	/* The control connection is looked at (a syscall) only when a waiter
	 * saw it readable: nothing but FIN, RST or SWITCH ever comes on it. */
	if (atomic_exchange_explicit(&t->ctl_dirty, 0, memory_order_relaxed))
		check_control(t);
	if (tp_switched(t)) {
		pthread_mutex_unlock(&t->lock);
		return sw_ready(t, seq);
	}
	ev = ready_locked(t);
	if (do_arm && !atomic_load_explicit(&t->armed, memory_order_relaxed)) {
		/* Arm, then look again: a completion that came before the
		 * arming raised no event. */
		int rc = arm(t);
		if (rc == -EACCES && creds_lost(t)) {
			pthread_mutex_unlock(&t->lock);
			return sw_ready(t, seq);
		}
		if (rc)
			tp_fail(t, -ECONNRESET, "arming the completion queue failed", 1);
		if (progress(t))
			ev = ready_locked(t);
	}
	if (seq)
		*seq = atomic_load_explicit(&t->evseq, memory_order_relaxed);
	pthread_mutex_unlock(&t->lock);
	return ev;
}

int tp_armed(struct tp *t)
{
	return t->owner != rsock_pid() || tp_switched(t) || atomic_load(&t->armed);
}

int tp_wait_fd(struct tp *t, struct tp_waiter *w)
{
	int fd;

	w->fd = -1;
	w->on = 0;
	if (t->owner != rsock_pid() || tp_switched(t))
		return -1;
	pthread_mutex_lock(&t->lock);
	/* Counted before arm() looks at `armed` (both sequentially
	 * consistent): a thread consuming the event that `armed` stands
	 * for either sees this sleeper and re-arms, or has cleared `armed`
	 * before the look, and arm() arms. On the wait queue before the
	 * caller's look (under this lock): any progress after the look
	 * rings this thread's bell. */
	atomic_fetch_add(&t->sleepers, 1);
	fd = tp_switched(t) || arm(t) ? -1 : t->cc->fd;
	if (fd < 0) {
		atomic_fetch_sub(&t->sleepers, 1);
	} else {
		w->on = 1;
		waitq_add(t, w); /* without a bell (no eventfd) still counted */
	}
	pthread_mutex_unlock(&t->lock);
	return fd;
}

void tp_wait_end(struct tp *t, struct tp_waiter *w)
{
	if (!w->on)
		return;
	pthread_mutex_lock(&t->lock);
	waitq_del(t, w);
	pthread_mutex_unlock(&t->lock);
	w->on = 0;
	atomic_fetch_sub(&t->sleepers, 1);
}

int tp_spin(struct tp *t)
{
	int n;

	if (t->owner != rsock_pid() || tp_switched(t) || pthread_mutex_trylock(&t->lock))
		return 0;
	n = progress(t);
	pthread_mutex_unlock(&t->lock);
	return n > 0;
}

int tp_event_fd(struct tp *t)
{
	return t->owner == rsock_pid() && t->cc && !tp_switched(t) ? t->cc->fd : -1;
}

int tp_readable_bytes(struct tp *t)
{
	uint64_t n;

	if (t->owner != rsock_pid() || tp_switched(t)) {
		int k = 0;
		if (sw_enter(t))
			return 0;
		rsock_real.ioctl(t->tcp_fd, FIONREAD, &k);
		n = ho_pre_left(t->pre) + (uint64_t)(k > 0 ? k : 0);
		return n > INT32_MAX ? INT32_MAX : (int)n;
	}
	pthread_mutex_lock(&t->lock);
	progress(t);
	n = unread(t);
	pthread_mutex_unlock(&t->lock);
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

/* Post a control immediate (FIN/RESET), waiting for send-queue room. */
static int post_ctl(struct tp *t, enum proto_imm_type type)
{
	for (int i = 0; i < 100 && t->sq_busy >= TP_SQ_DEPTH && !t->err; i++) {
		progress(t);
		if (t->sq_busy >= TP_SQ_DEPTH)
			wait_event(t, 0, 0);
	}
	if (t->err)
		return t->err;
	return post_write(t, NULL, 0, proto_imm_encode(type, 0), 0);
}

int tp_shutdown_rd(struct tp *t, int fd)
{
	if (t->owner != rsock_pid() || tp_switched(t))
		return sw_enter(t) ? -EIO : rsock_real.shutdown(fd, SHUT_RD) ? -errno : 0;
	pthread_mutex_lock(&t->lock);
	t->rd_shut = 1;
	pthread_mutex_unlock(&t->lock);
	/* The kernel socket's input ends too: that wakes every thread blocked
	 * on this stream (they sleep on it), as TCP's shutdown wakes readers. */
	return rsock_real.shutdown(fd, SHUT_RD) ? -errno : 0;
}

int tp_shutdown_wr(struct tp *t)
{
	int rc = 0;

	if (t->owner != rsock_pid() || tp_switched(t))
		return sw_enter(t) ? -EIO : rsock_real.shutdown(t->tcp_fd, SHUT_WR) ? -errno : 0;
	pthread_mutex_lock(&t->lock);
	if (tp_switched(t)) {
		pthread_mutex_unlock(&t->lock);
		return rsock_real.shutdown(t->tcp_fd, SHUT_WR) ? -errno : 0;
	}
	if (!t->fin_sent) {
		progress(t);
		send_credit(t);
		rc = post_ctl(t, PROTO_IMM_FIN);
		if (rc == 0)
			t->fin_sent = 1;
	}
	pthread_mutex_unlock(&t->lock);
	return rc == -EPIPE ? 0 : rc;
}

/* ---- closed streams, torn down by the cm thread -------------------------- */

static pthread_mutex_t reap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tp *reap_list;
static void teardown(struct tp *t, const char *when);
static struct tp *reap_pop(int *more);

/* Tear down one stream tp_close left to the cm thread, here: 1 if there
 * was one. */
static int reap_one(void)
{
	struct tp *t = tp_settings.ring_cache ? reap_pop(NULL) : NULL;

	if (!t)
		return 0;
	teardown(t, "for a new stream's rings");
	return 1;
}

/* Leave t to the cm thread, if this process has one: 1 if taken. */
static int reap_defer(struct tp *t)
{
	int first;

	if (!cm_reap_ready())
		return 0;
	pthread_mutex_lock(&reap_lock);
	first = !reap_list; /* else the thread has been told and not yet emptied it */
	t->reap_next = reap_list;
	reap_list = t;
	pthread_mutex_unlock(&reap_lock);
	if (first)
		cm_reap_ring();
	return 1;
}

/* One stream off the list, or NULL; *more (if given): whether others wait. */
static struct tp *reap_pop(int *more)
{
	struct tp *t;

	pthread_mutex_lock(&reap_lock);
	if ((t = reap_list))
		reap_list = t->reap_next;
	if (more)
		*more = reap_list != NULL;
	pthread_mutex_unlock(&reap_lock);
	return t;
}

int tp_reap(void)
{
	int more;
	struct tp *t = reap_pop(&more);

	if (t)
		teardown(t, "by the cm thread");
	return more;
}

/* Drop a copy of a stream whose verbs objects are another process's (a
 * forked child's inheritance): our descriptors and memory only. */
static void copy_drop(struct tp *t)
{
	if (tp_switched(t))
		ho_pre_free(t->pre);
	ownfd_close(t->tcp_fd);
	mem_free(t);
	free(t);
}

void tp_reap_fork_child(void)
{
	struct tp *t = reap_list;

	reap_list = NULL;
	while (t) {
		struct tp *next = t->reap_next;
		copy_drop(t);
		t = next;
	}
}

/* forked: a child forked since t came up may hold the socket. Then the
 * stream moves to TCP for it (by deadline, CLOCK_MONOTONIC ms), and what
 * was not read stays for it in the prefix, left open (*pfd; -1 if none).
 * Returns 1 when so: the caller publishes it (ho_publish) once it has
 * released the lock (the hand-over lock comes before the stream's).
 * Caller holds t->lock. */
static int switch_for_children(struct tp *t, int forked, int64_t deadline, int *pfd)
{
	*pfd = -1;
	if (!forked || !t->up || tp_switched(t) || t->err || t->peer_gone ||
	    t->peer_version < PROTO_VERSION_SWITCH || switch_within(t, 0, 0, deadline))
		return 0;
	if ((*pfd = tp_prefix_fd(t)) >= 0)
		t->pre = NULL; /* an orphan now, left open: doc/design.md section 6 */
	return 1;
}

void tp_close(struct tp *t, int abort)
{
	int forked, published, pfd = -1;

	if (t->owner != rsock_pid()) {
		/* An inherited copy in a forked child: the verbs objects belong
		 * to the parent (the device file is shared), so touching them
		 * here would tear the parent's stream down. Drop our copy only. */
		copy_drop(t);
		return;
	}
	/* A child forked since the stream came up may still hold the socket:
	 * closing here must not end the stream for it (TCP's reference
	 * semantics), so the stream moves to TCP instead of sending FIN, and
	 * what was not read stays for the child (the prefix is kept open). */
	forked = t->fork_gen != atomic_load(&ho_forks);
	pthread_mutex_lock(&t->lock);
	published = switch_for_children(t, forked, mono_ms() + TP_SWITCH_MS, &pfd);
	pthread_mutex_unlock(&t->lock);
	if (published)
		ho_publish(t, pfd);
	ho_unregister(t, forked);
	pthread_mutex_lock(&t->lock);
	if (tp_switched(t)) {
		/* Like TCP closing with unread data (unless another process may
		 * hold the socket): the peer sees a reset. */
		abort = !forked && ho_pre_left(t->pre);
	} else if (atomic_load_explicit(&tp_creds_stale, memory_order_relaxed) && t->up &&
		   !t->err && !t->peer_gone) {
		/* The device refuses this process (creds_lost): FIN and RESET
		 * cannot be posted. Closing the control connection says it (the
		 * peer reads what landed, then EOF); what was posted gets a
		 * moment to go out first. */
		for (int i = 0; i < 100 && t->sig_count && !t->err; i++) {
			progress(t);
			rsock_real.poll(NULL, 0, 1);
		}
	} else if (t->up && !t->err && !t->peer_gone) {
		struct linger lg = {0, 0};
		socklen_t ll = sizeof(lg);
		progress(t);
		abort |= unread(t) > 0;
		/* SO_LINGER {1, 0}: the application asked for a reset. */
		if (rsock_real.getsockopt(t->tcp_fd, SOL_SOCKET, SO_LINGER, &lg, &ll) == 0 &&
		    lg.l_onoff && !lg.l_linger)
			abort = 1;
		if (abort) {
			post_ctl(t, PROTO_IMM_RESET);
		} else if (!t->fin_sent) {
			send_credit(t);
			if (post_ctl(t, PROTO_IMM_FIN) == 0)
				t->fin_sent = 1;
		}
		/* Let what was posted reach the peer (bounded, like a short linger). */
		int64_t until = mono_ns() + TP_LINGER_MS * 1000000LL;
		for (;;) {
			progress(t);
			if (!t->sq_busy || t->err || t->peer_gone || timed_out(until))
				break;
			wait_event(t, until, 0);
		}
	}
	t->close_abort = abort;
	pthread_mutex_unlock(&t->lock);
	/* What the peer must see (data, FIN or RESET) has reached it; the
	 * rest is local work, left to the cm thread as TCP leaves a closed
	 * socket to the kernel. */
	if (t->up && reap_defer(t))
		return;
	teardown(t, "at close");
}

/* The end of tp_close: the verbs objects, the rings (to the cache), the
 * control connection. Caller holds nothing; t is nobody else's. */
static void teardown(struct tp *t, const char *when)
{
	int abort = t->close_abort;

	log_debug("fd %d: %s stream torn down %s", t->tcp_fd, t->up ? "closed" : "unused", when);
	if (t->id)
		rdma_disconnect(t->id);
	qp_destroy(t);
	if (t->id)
		rdma_destroy_id(t->id);
	cm_channel_free(t->ch);
	if (set_keep(t)) {
		t->mem = NULL; /* the cache's now, still registered */
	} else {
		if (t->rx_mr)
			ibv_dereg_mr(t->rx_mr);
		if (t->tx_mr)
			ibv_dereg_mr(t->tx_mr);
		if (t->pd)
			ibv_dealloc_pd(t->pd);
		stats_registered(-(int64_t)t->mem_len);
	}
	cq_free(t); /* not kept (set_keep takes both or neither) */
	ho_pre_free(t->pre);
	if (abort && (t->up || tp_switched(t))) {
		/* Like TCP closing with unread data: the peer sees a reset. */
		struct linger lg = {.l_onoff = 1, .l_linger = 0};
		rsock_real.setsockopt(t->tcp_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	ownfd_close(t->tcp_fd);
	mem_free(t);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* At exit (init.c's destructor: exit(), or a return from main): what this
 * process posted on t, a stream it never closed, reaches the peer before
 * the kernel destroys the QP with the process. A device executes a post
 * after the call returned, and a QP destroyed with work queued drops it,
 * where kernel TCP keeps a dead process's sent bytes and delivers them.
 * (Soft-RoCE does a post's work inside the call, so nothing is ever left
 * there.) No FIN: the kernel's closing of the control connection tells the
 * end, as for a process killed. A stream another thread is in, or whose
 * owner is another process (a forked child; the pid is the kernel's, for a
 * vfork child that calls exit()), is passed over. */
void tp_exit_drain(struct tp *t, pid_t self, int64_t until_ns)
{
	unsigned busy;
	int pfd;

	if (t->owner != self || pthread_mutex_trylock(&t->lock))
		return;
	/* A child forked since the stream came up may hold the socket and go
	 * on using it (a client that forks and exits, as `( ... ) & exit` in
	 * a shell does): as close() does, the stream moves to TCP for it
	 * (within what is left of the exit's bound). Bytes unread here are
	 * out of the child's reach once this process is gone (it gets EIO,
	 * as it did before for every such stream); with none it goes on. */
	if (until_ns - mono_ns() > 50 * 1000000LL &&
	    switch_for_children(t, t->fork_gen != atomic_load(&ho_forks), until_ns / 1000000, &pfd)) {
		pthread_mutex_unlock(&t->lock);
		ho_publish(t, pfd);
		log_debug("fd %d: at exit, moved to TCP for a child that may hold it", t->tcp_fd);
		return;
	}
	busy = t->sq_busy;
	if (t->up && t->qp && !tp_switched(t) && !t->peer_gone)
		await_posted(t, until_ns / 1000000);
	if (busy)
		log_debug("fd %d: at exit, %u posted writes awaited: %u left", t->tcp_fd, busy,
			  t->sq_busy);
	pthread_mutex_unlock(&t->lock);
}

int64_t tp_now_ns(void)
{
	return mono_ns();
}

void tp_fork_lock(void)
{
	pthread_mutex_lock(&set_lock);
	pthread_mutex_lock(&reap_lock);
}

void tp_fork_unlock(void)
{
	pthread_mutex_unlock(&reap_lock);
	pthread_mutex_unlock(&set_lock);
}
