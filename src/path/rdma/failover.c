/* failover.c - a stream whose RDMA path broke continues on its control
 * connection (doc/design.md, "Descriptors, fork, exec" and "Wire
 * protocol"): the QP frozen so that the count of bytes received is final,
 * the FAILOVER SWITCH, and the bytes the peer lacks written again on TCP
 * from the staging ring or the zero-copy send's buffer. switch.c drives the
 * exchange. Caller holds t->lock throughout. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/real.h"
#include "path/rdma/internal.h"

void tp_fo_freeze(struct tp *t)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	int64_t until = clock_now_ms() + TP_DRAIN_MS;

	if (t->fo_frozen)
		return;
	/* In the error state the QP takes nothing more, and every posted
	 * receive completes (flushed) after those that arrived: once all have
	 * come back, the ring's tail is final. A device that is gone refuses
	 * the change and completes nothing more. */
	if (t->qp && !ibv_modify_qp(t->qp, &a, IBV_QP_STATE)) {
		while (t->rq_out && clock_now_ms() < until)
			if (!tp_progress(t))
				rsock_real.poll(NULL, 0, 1);
		if (t->rq_out)
			log_debug("fd %d: failover: %u receives not flushed after %d ms", t->tcp_fd,
				  t->rq_out, TP_DRAIN_MS);
	} else {
		tp_progress(t);
	}
	t->fo_frozen = 1;
}

/* Write all of v (n pieces) on the control connection by deadline (ms).
 * 0 or -errno. */
static int send_all(struct tp *t, struct iovec *v, int n, int64_t deadline)
{
	while (n > 0) {
		struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)(n < 64 ? n : 64)};
		ssize_t w = rsock_real.sendmsg(t->tcp_fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0) {
			struct pollfd p = {.fd = t->tcp_fd, .events = POLLOUT};
			if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
				return -errno;
			if (clock_now_ms() > deadline)
				return -ETIMEDOUT;
			rsock_real.poll(&p, 1, 10);
			continue;
		}
		while (n > 0 && (size_t)w >= v->iov_len) {
			w -= (ssize_t)v->iov_len;
			v++;
			n--;
		}
		if (n > 0) {
			v->iov_base = (uint8_t *)v->iov_base + w;
			v->iov_len -= (size_t)w;
		}
	}
	return 0;
}

int tp_fo_send_switch(struct tp *t, int fo, int64_t deadline)
{
	/* The peer's version's message (24 bytes to a version-2 peer). */
	struct proto_switch m = {.version = t->peer_version < PROTO_VERSION ? t->peer_version
									    : PROTO_VERSION,
				 .flags = fo ? PROTO_SWITCH_FAILOVER : 0,
				 .rdma_bytes = t->peer.tail,
				 .rx_bytes = t->rx.tail};
	uint8_t b[PROTO_SWITCH3_LEN];
	struct iovec v = {.iov_base = b};
	int n = proto_switch_encode(&m, b, sizeof(b));

	if (n < 0)
		return n;
	v.iov_len = (size_t)n;
	if (fo)
		log_debug("fd %d: failover: %llu bytes received, %llu written", t->tcp_fd,
			  (unsigned long long)t->rx.tail, (unsigned long long)t->peer.tail);
	return send_all(t, &v, 1, deadline);
}

int tp_fo_resend(struct tp *t, uint64_t rx, int64_t deadline)
{
	struct iovec v[TP_MAX_DATA_MSGS + 1];
	int n;

	if (tp_resend_check(t, rx) || (n = tp_resend_iov(t, rx, v)) < 0) {
		log_warn_rl("fd %d: the peer's failover says it received %llu bytes of the %llu "
			    "written (%llu credited, %llu known landed): a protocol error",
			    t->tcp_fd, (unsigned long long)rx, (unsigned long long)t->peer.tail,
			    (unsigned long long)t->peer.acked, (unsigned long long)t->tx_landed);
		return -EPROTO;
	}
	log_debug("fd %d: failover: %llu bytes sent again over TCP", t->tcp_fd,
		  (unsigned long long)(t->peer.tail - rx));
	return send_all(t, v, n, deadline);
}

void tp_fo_broken(struct tp *t, int rc)
{
	struct sockaddr sa = {.sa_family = AF_UNSPEC};

	t->path_down = 0;
	t->err = rc == -ETIMEDOUT ? -ETIMEDOUT : -ECONNRESET;
	atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
	log_warn_rl("fd %d: the failover to TCP failed (%s): the stream is reset (%s for the "
		    "application)", t->tcp_fd, strerrorname_np(-rc), strerrorname_np(-t->err));
	if (!t->peer_gone)
		rsock_real.connect(t->tcp_fd, &sa, sizeof(sa));
	tp_waitq_wake(t);
	if (atomic_load_explicit(&t->watchers, memory_order_relaxed))
		tp_kick();
}
