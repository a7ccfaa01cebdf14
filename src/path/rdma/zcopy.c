/* zcopy.c - sends without the copy (doc/design.md, "Wire protocol"): a long
 * span of the application's buffer registered for one blocking send. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>

#include "base/log.h"
#include "path/rdma/internal.h"

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
void tp_zc_begin(struct tp *t, struct zc_span *zc, const struct iovec *iov, int iovcnt,
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
void tp_zc_end(struct tp *t, struct zc_span *zc)
{
	if (!zc->mr)
		return;
	/* Every WR before a completed signalled one is complete too; a span
	 * cut short (error, hand-over) waits for what it posted. */
	if (!zc->seq)
		zc->seq = t->sq_seq;
	/* A failover (run by tp_progress, here or in another thread while
	 * this one sleeps) sends the span's bytes again from the buffer this
	 * call still holds; then the span is done. */
	while (t->sq_seq - t->sq_busy < zc->seq && !t->err && !tp_switched(t)) {
		if (tp_progress(t))
			continue;
		/* nothing signalled covers the span's end: ask for it */
		if ((!t->sig_count || t->sig[(t->sig_head + t->sig_count - 1) % TP_SQ_DEPTH].seq < zc->seq) &&
		    t->sq_busy < TP_SQ_DEPTH && tp_post_fence(t) == 0)
			continue;
		tp_wait_event(t, 0, 0);
	}
	if (ibv_dereg_mr(zc->mr))
		log_debug("fd %d: deregistering a send span failed", t->tcp_fd);
	zc->mr = NULL;
}
