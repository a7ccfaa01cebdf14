/* setup.c - a stream's set-up: its rings and protection domain (tp_new,
 * from the ring cache when it can), CQ and QP, the peer's ring, the
 * connection parameters; and the hooks into the layers above. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "base/fault.h"
#include "base/log.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/stats.h"
#include "path/handover.h"
#include "path/rdma/internal.h"

struct tp_hooks tp_hook;

void tp_hooks_set(const struct tp_hooks *h)
{
	tp_hook = *h;
}

void tp_mem_free(struct tp *t)
{
	if (t->mem)
		munmap(t->mem, t->mem_len);
	if (t->spill.buf)
		munmap(t->spill.buf, t->spill.size);
}

void tp_regs_free(struct tp *t)
{
	if (t->rx_mr)
		ibv_dereg_mr(t->rx_mr);
	if (t->tx_mr)
		ibv_dereg_mr(t->tx_mr);
	if (t->pd)
		ibv_dealloc_pd(t->pd);
}

int tp_new(struct ibv_context *ctx, uint32_t rx_size, uint32_t tx_size, int tcp_fd,
	   struct tp **out)
{
	struct tp *t = calloc(1, sizeof(*t));
	int rc = -ENOMEM;

	if (!t)
		return -ENOMEM;
	t->s.ops = &tp_path_ops;
	mtx_init(&t->lock);
	t->owner = rsock_pid();
	atomic_init(&t->ctl_dirty, 1);
	/* A new stream's first waits are for the answer to its first request
	 * (or for that request): its first wait spins up to RSOCK_POLL_MAX_US
	 * (doc/design.md, "Wire protocol"). */
	path_adapt_init(&t->wait);
	atomic_init(&t->rcvlowat, 1);
	atomic_init(&t->linger_s, -1);
	/* Our own reference to the kernel socket: the application may close
	 * any of its descriptors, the control connection stays ours. Never
	 * one of the application's numbers ("Descriptors, fork, exec"), nor
	 * the process's own descriptors the stream needs (ho_prepare). */
	t->tcp_fd = -1;
	if (!ownfd_room()) {
		rc = -EMFILE;
		goto fail;
	}
	ho_prepare();
	t->tcp_fd = ownfd_dup_high(tcp_fd);
	if (t->tcp_fd < 0) {
		rc = -errno;
		goto fail;
	}
	t->mem_len = (size_t)rx_size + TP_MARK_PAD + tx_size;
	/* A closed stream the library's thread has not torn down yet holds rings
	 * the cache would have: tear one down here rather than register new
	 * ones (about twice the work). */
	if (tp_set_take(t, ctx, rx_size, t->mem_len) ||
	    (tp_reap_one() && tp_set_take(t, ctx, rx_size, t->mem_len))) {
		if (ring_init(&t->rx, t->mem, rx_size) ||
		    ring_init(&t->tx, (uint8_t *)t->mem + rx_size + TP_MARK_PAD, tx_size)) {
			rc = -EINVAL; /* (they were valid when cached) */
			stats_registered(-(int64_t)t->mem_len);
			goto fail;
		}
		t->mark_in = (uint8_t *)t->mem + rx_size;
		memset((void *)t->mark_in, 0, 8); /* (the last peer's mark) */
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
	    ring_init(&t->tx, (uint8_t *)t->mem + rx_size + TP_MARK_PAD, tx_size)) {
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
	/* Remote access on the receive ring and the word after it (the peer's
	 * read mark, mark.c) only: the peer can write nothing else. */
	t->mark_in = t->rx.buf + rx_size;
	t->rx_mr = (rc = fault_at(FAULT_REG_MR)) ? NULL : ibv_reg_mr(t->pd, t->rx.buf, rx_size + 8,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!t->rx_mr) {
		rc = rc ? -rc : errno ? -errno : -ENOMEM;
		goto fail;
	}
	t->tx_mr = (rc = fault_at(FAULT_REG_MR)) ? NULL : ibv_reg_mr(t->pd, t->tx.buf, tx_size, 0);
	if (!t->tx_mr) {
		rc = rc ? -rc : errno ? -errno : -ENOMEM;
		goto fail;
	}
	stats_registered((int64_t)t->mem_len);
	log_debug("fd %d: rings rx %u tx %u bytes registered", tcp_fd, rx_size, tx_size);
	*out = t;
	return 0;
fail:
	tp_cq_free(t); /* (from the cache) */
	tp_regs_free(t);
	ownfd_close(t->tcp_fd);
	tp_mem_free(t);
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
	struct linger lg = {0, 0};

	if (rsock_real.getsockopt(t->tcp_fd, SOL_SOCKET, SO_RCVLOWAT, &v, &l) == 0)
		atomic_store_explicit(&t->rcvlowat, v > 1 ? v : 1, memory_order_relaxed);
	l = sizeof(lg);
	if (rsock_real.getsockopt(t->tcp_fd, SOL_SOCKET, SO_LINGER, &lg, &l))
		lg.l_onoff = 0;
	atomic_store_explicit(&t->linger_s, lg.l_onoff ? lg.l_linger : -1, memory_order_relaxed);
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
	mtx_lock(&t->lock);
	t->up = 1;
	tp_send_mark(t); /* the first: "marks come" (mark.c) */
	mtx_unlock(&t->lock);
	t->fork_gen = atomic_load(&ho_forks);
	t->rec = ho_register(&t->s);
}

int tp_create_cq(struct tp *t)
{
	struct ibv_context *ctx = t->pd->context;
	int rc = 0;

	mtx_lock(&t->lock);
	if (!t->cc) {
		if ((t->cc = ibv_create_comp_channel(ctx))) {
			fcntl(t->cc->fd, F_SETFL, fcntl(t->cc->fd, F_GETFL) | O_NONBLOCK);
			t->cc->fd = ownfd_move(t->cc->fd);
			if (t->cc->fd < OWNFD_BASE)
				rc = -EMFILE; /* it would hold one of the application's numbers */
		} else
			rc = errno ? -errno : -ENOMEM;
	}
	if (!rc && t->cc && !t->cq) {
		/* (RSOCK_FAULT's cq_small: a CQ too small for what may be
		 * outstanding, which overruns) */
		int n = fault_at(FAULT_CQ_SMALL);
		if (!(t->cq = ibv_create_cq(ctx, n ?: TP_SQ_DEPTH + TP_RQ_DEPTH, t, t->cc, 0)))
			rc = errno ? -errno : -ENOMEM;
	}
	mtx_unlock(&t->lock);
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

	if ((rc = fault_at(FAULT_CREATE_QP)))
		return -rc;
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

void tp_qp_destroy(struct tp *t)
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
		if ((rc = tp_post_recv_chain(t, TP_RQ_DEPTH - i < TP_RQ_BATCH ? TP_RQ_DEPTH - i : TP_RQ_BATCH)))
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
	mtx_lock(&t->lock);
	if (t->qp) { /* the request came first: the library's thread made it on its id */
		mtx_unlock(&t->lock);
		return 0;
	}
	if ((rc = qp_new(t, NULL)) == 0) {
		if (ibv_modify_qp(t->qp, &a,
				  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			rc = errno ? -errno : -EINVAL;
		else
			rc = post_recvs(t);
		if (rc)
			tp_qp_destroy(t);
	}
	t->qp_ib = ibv_query_port(t->pd->context, port_num, &pa) == 0 &&
		   pa.link_layer == IBV_LINK_LAYER_INFINIBAND;
	mtx_unlock(&t->lock);
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
	/* Bounded detection (doc/design.md, "Errors"), whatever the CM's
	 * packet lifetime says. */
	a.timeout = TP_ACK_TIMEOUT;
	a.retry_cnt = TP_RETRY_COUNT;
	mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT;
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
	mtx_lock(&t->lock);
	if (t->qp) {
		if (t->own_qp && !t->id)
			rc = qp_attach(t, id);
		else
			rc = t->id == id ? 0 : -EINVAL;
		mtx_unlock(&t->lock);
		return rc;
	}
	/* The QP made on the id goes to RTS in rdma_accept, with the id's ACK
	 * time-out: bounded detection (doc/design.md, "Errors"). */
	uint8_t ack = TP_ACK_TIMEOUT;
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, sizeof(ack)))
		log_debug("the ACK time-out could not be set (errno %d)", errno);
	if ((rc = qp_new(t, id)) == 0) {
		t->id = id;
		if ((rc = post_recvs(t))) {
			tp_qp_destroy(t); /* a later call starts anew */
			t->id = NULL;
		}
	}
	mtx_unlock(&t->lock);
	return rc;
}

void tp_release_id(struct tp *t, struct rdma_cm_id *id)
{
	mtx_lock(&t->lock);
	if (t->id == id) {
		if (!t->own_qp)
			tp_qp_destroy(t);
		t->id = NULL;
	}
	mtx_unlock(&t->lock);
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
	p->retry_count = TP_RETRY_COUNT;
	p->rnr_retry_count = 7; /* never the flow control: credits are (doc/design.md, "Wire protocol") */
}
