/* post.c - posting work requests (RDMA WRITE WITH IMMEDIATE, receives,
 * fences) and taking their completions: tp_progress() applies what the
 * peer's messages say and releases the send ring (doc/design.md, "Wire
 * protocol"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "base/fault.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"
#include "path/rdma/internal.h"

/* A signalled work request was just posted: what its completion will say
 * is done (tp_progress), and when it was posted (its stall, stall.c). */
static inline void sig_note(struct tp *t)
{
	unsigned slot = (t->sig_head + t->sig_count) % TP_SQ_DEPTH;

	t->sig[slot].seq = t->sq_seq;
	t->sig[slot].tx_tail = t->tx.tail;
	t->sig[slot].peer_tail = t->peer.tail;
	t->sig[slot].ms = clock_coarse_ms();
	t->sig_count++;
	t->sq_posted = 0;
	if (RSOCK_UNLIKELY(!atomic_load_explicit(&tp_stall_asked, memory_order_relaxed)))
		tp_stall_arm();
}

/* Post n (at most TP_RQ_BATCH) receives, zero-length (a WRITE WITH IMMEDIATE
 * only consumes one), as one chain: one call, one lock of the provider's
 * queue. */
int tp_post_recv_chain(struct tp *t, unsigned n)
{
	struct ibv_recv_wr wr[TP_RQ_BATCH], *bad;
	int rc;

	if (!n)
		return 0;
	for (unsigned i = 0; i < n; i++)
		wr[i] = (struct ibv_recv_wr){.wr_id = TP_WRID_RECV, .next = i + 1 < n ? &wr[i + 1] : NULL};
	if ((rc = fault_at(FAULT_POST_RECV) ?: ibv_post_recv(t->qp, wr, &bad)))
		return -rc;
	t->rq_out += n;
	return 0;
}

int tp_post_write(struct tp *t, struct ibv_sge *sge, uint32_t remote_off, uint32_t imm,
		      int pw)
{
	/* The stream's own work request (zeroed with the stream): only the
	 * fields that matter are written, no 128-byte clear per message. */
	struct ibv_send_wr *wr = &t->wr, *bad;
	int signal = ++t->sq_posted >= TP_SIGNAL_EVERY || !sge || (pw & PW_SIGNAL) ||
		     ring_free(&t->tx) < t->tx.size / 2;
	int rc;

	wr->opcode = pw & PW_NOIMM ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
	wr->imm_data = htonl(imm);
	wr->sg_list = sge;
	wr->num_sge = sge ? 1 : 0;
	wr->wr.rdma.remote_addr = t->peer_addr + remote_off;
	wr->wr.rdma.rkey = t->peer_rkey;
	wr->send_flags = (signal ? IBV_SEND_SIGNALED : 0) | (pw & PW_INLINE ? IBV_SEND_INLINE : 0);
	rc = fault_at(FAULT_POST_SEND) ?: ibv_post_send(t->qp, wr, &bad);
	if (rc)
		return -rc;
	t->sq_busy++;
	t->sq_seq++;
	if (signal)
		sig_note(t);
	return 0;
}

/* A signalled zero-byte RDMA WRITE (no immediate, no receive consumed at the
 * peer): its completion says that every earlier work request is complete. */
int tp_post_fence(struct tp *t)
{
	struct ibv_send_wr wr, *bad;
	int rc;

	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = t->peer_addr;
	wr.wr.rdma.rkey = t->peer_rkey;
	wr.send_flags = IBV_SEND_SIGNALED;
	if ((rc = fault_at(FAULT_POST_SEND) ?: ibv_post_send(t->qp, &wr, &bad)))
		return -rc;
	t->sq_busy++;
	t->sq_seq++;
	sig_note(t);
	return 0;
}

/* Whether a broken path can fail over: the stream is up and this
 * process's, the peer speaks version 3, and its control connection is
 * there to carry the stream (doc/design.md, "Errors"). */
static int failover_possible(struct tp *t)
{
	return t->up && t->peer_version >= PROTO_VERSION_FAILOVER && t->owner == rsock_pid() &&
	       !tp_switched(t) && !t->peer_gone && !t->rd_shut &&
	       !atomic_load_explicit(&tp_creds_stale, memory_order_relaxed);
}

/* The RDMA path failed under the stream (a completion error, a protocol
 * violation by the peer, the device refusing a post or a poll). A path or
 * device failure (kind TP_FAIL_PATH, and a flush before the peer's FIN)
 * where failover_possible() only notes path_down: the next tp_progress
 * moves the stream to TCP, nothing lost (tp_failover_due). Otherwise the
 * stream is broken, as a TCP connection is by a reset. The application
 * sees err, after the bytes that arrived before, as over TCP: -ECONNRESET,
 * or -ETIMEDOUT when the peer stopped answering (the transport's retries
 * ran out, where TCP's give up too), or -EPIPE after the peer's FIN. And
 * the peer is told at once, by a reset of the control connection
 * (connect() with AF_UNSPEC, which keeps the application's descriptor): a
 * peer left waiting would otherwise hang, or take the end of the stream
 * for a clean one when this process closes it (doc/design.md, "Errors").
 * Not for flushed work requests (the QP went to its error state, after an
 * error seen first or because the peer disconnected, as it does once a
 * hand-over is done), nor during a hand-over (the control connection is
 * about to carry the stream). Caller holds t->lock. */
void tp_fail(struct tp *t, int err, const char *why, enum tp_fail_kind kind)
{
	if (t->err || t->path_down)
		return;
	if (kind != TP_FAIL_PROTO && !(kind == TP_FAIL_FLUSH && t->eof) && !t->fo_frozen &&
	    failover_possible(t)) {
		log_debug("fd %d: %s: the RDMA path is broken, the stream moves to TCP", t->tcp_fd, why);
		t->path_down = err;
		atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
		tp_waitq_wake(t);
		return;
	}
	t->err = err;
	atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
	if (kind != TP_FAIL_FLUSH && err != -EPIPE && t->up && !t->peer_gone && !t->eof &&
	    !tp_switched(t) && !t->switching && t->owner == rsock_pid()) {
		struct sockaddr sa = {.sa_family = AF_UNSPEC};
		log_warn_rl("fd %d: %s: the stream is reset, its peer told (%s for the application)",
			    t->tcp_fd, why, strerrorname_np(-err));
		rsock_real.connect(t->tcp_fd, &sa, sizeof(sa));
	} else {
		log_debug("fd %d: %s (%s for the application)", t->tcp_fd, why, strerrorname_np(-err));
	}
	tp_waitq_wake(t);
}

void tp_post_refused(struct tp *t, int rc, const char *why)
{
	if (rc != -EACCES && !tp_switched(t) && !t->peer_gone)
		tp_fail(t, -ECONNRESET, why, TP_FAIL_PATH);
}

static void handle_recv(struct tp *t, uint32_t imm)
{
	enum proto_imm_type type;
	uint32_t v;

	if (t->fo_frozen)
		return; /* failing over: the count of bytes received is final */
	if (proto_imm_decode(imm, &type, &v)) {
		tp_fail(t, -ECONNRESET, "a message the protocol does not know", TP_FAIL_PROTO);
		return;
	}
	switch (type) {
	case PROTO_IMM_DATA:
		if (tp_rx_msg_arrived(t, v))
			tp_fail(t, -ECONNRESET, "the peer wrote beyond its credit", TP_FAIL_PROTO);
		break;
	case PROTO_IMM_CREDIT:
		if (tp_credit_take(t, v))
			tp_fail(t, -ECONNRESET, "the peer credited bytes never sent", TP_FAIL_PROTO);
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

/* RSOCK_FAULT's wc site (base/fault.h): after the chosen successful
 * completion the QP fails with the error status, as a device's own error
 * takes it. The completions polled with it stay as they are (a receive
 * that completed is a message that landed, and its sender knows it: a
 * failover counts it), an error completion of one of this side's writes
 * follows them, and the QP goes to its error state, which flushes the work
 * requests still queued. wc has room for that one more; returns the new
 * count. */
static RSOCK_COLD int wc_fault(struct tp *t, struct ibv_wc *wc, int n)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	int st = 0;

	for (int i = 0; i < n && !st; i++)
		if (wc[i].status == IBV_WC_SUCCESS)
			st = fault_hit(FAULT_WC);
	if (!st)
		return n;
	wc[n] = (struct ibv_wc){.status = (enum ibv_wc_status)st, .opcode = IBV_WC_RDMA_WRITE};
	if (t->qp)
		ibv_modify_qp(t->qp, &a, IBV_QP_STATE);
	return n + 1;
}

/* Process every completion available. Returns how many there were. Caller
 * holds t->lock. */
int tp_progress(struct tp *t)
{
	struct ibv_wc wc[TP_WC_BATCH + 1]; /* (+1: wc_fault's) */
	int n, total = 0;

	if (!t->cq)
		return 0;
	/* A short batch drained the queue: no second call to learn that (a
	 * completion arriving meanwhile is the next tp_progress()'s). */
	for (int more = 1; more && (n = fault_at(FAULT_POLL_CQ) ? -1 : ibv_poll_cq(t->cq, TP_WC_BATCH, wc)) > 0;) {
		more = n == TP_WC_BATCH;
		if (RSOCK_UNLIKELY(fault_armed))
			n = wc_fault(t, wc, n);
		total += n;
		atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id == TP_WRID_RECV && t->rq_out)
				t->rq_out--; /* completed or flushed: a failover counts them */
			if (wc[i].status != IBV_WC_SUCCESS) {
				enum ibv_wc_status st = wc[i].status;
				/* The peer's device refused our write (its
				 * keys or ranges): its protocol's business, no
				 * path's (doc/design.md, "Errors"). An invalid
				 * request is the transport's: a packet of ours
				 * malformed on the way, as soft-RoCE answers a
				 * write it had to retransmit under load, and
				 * the peer's QP went to its error state. */
				enum tp_fail_kind k = st == IBV_WC_WR_FLUSH_ERR ? TP_FAIL_FLUSH
						      : st == IBV_WC_REM_ACCESS_ERR ? TP_FAIL_PROTO
										  : TP_FAIL_PATH;
				tp_fail(t,
					t->eof || t->peer_gone			? -EPIPE
					: st == IBV_WC_RETRY_EXC_ERR || st == IBV_WC_RNR_RETRY_EXC_ERR ? -ETIMEDOUT
												 : -ECONNRESET,
					ibv_wc_status_str(st), k);
				continue;
			}
			if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				handle_recv(t, ntohl(wc[i].imm_data));
				/* Each message used a receive: posted again in
				 * chains, TP_RQ_BATCH at a time (the peer never
				 * has more than TP_MAX_DATA_MSGS data messages
				 * and a few control ones outstanding); not once
				 * the path is down. */
				if (++t->rq_owed >= TP_RQ_BATCH && !t->path_down && !t->fo_frozen) {
					if (tp_post_recv_chain(t, t->rq_owed))
						tp_fail(t, -ECONNRESET, "posting receives failed", TP_FAIL_PATH);
					else
						t->rq_owed = 0;
				}
			} else if (wc[i].opcode == IBV_WC_RDMA_WRITE && t->sig_count) {
				/* Signalled WRs complete in order, and every WR
				 * posted before one is complete when it is: at
				 * the peer too (RC), so its count covers them. */
				t->sq_busy = (unsigned)(t->sq_seq - t->sig[t->sig_head].seq);
				t->tx.head = t->sig[t->sig_head].tx_tail;
				t->tx_landed = t->sig[t->sig_head].peer_tail;
				t->sig_head = (t->sig_head + 1) % TP_SQ_DEPTH;
				t->sig_count--;
			}
		}
	}
	if (n < 0)
		tp_fail(t, -ECONNRESET, "polling the completion queue failed", TP_FAIL_PATH);
	if (total || n < 0)
		tp_waitq_wake(t);
	if (RSOCK_UNLIKELY(t->path_down))
		tp_failover_due(t);
	return total;
}
