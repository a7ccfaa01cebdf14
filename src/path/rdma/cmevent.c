/* cmevent.c - what an rdma_cm event says of an established stream's path
 * (doc/design.md, "Errors"): its address moved to another port, or its
 * device is being removed. The path is broken and the failover runs at
 * once; a device going away also gets back everything of it the stream
 * holds, which the kernel waits for. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/log.h"
#include "base/ownfd.h"
#include "base/real.h"
#include "base/stats.h"
#include "path/registry.h"
#include "path/rdma/internal.h"

/* Release the verbs objects of t, a stream on TCP now whose device is being
 * removed: soft-RoCE cannot take them from us (no disassociation), so the
 * kernel's removal waits until every file of the device is closed. The
 * completion channel's file is closed by putting a never-readable eventfd
 * at its number (epoll sets and sleeping threads may still name the number,
 * which must not become the application's), t->cc reading from it from now
 * on; threads that read an event from the channel before are waited out
 * (t->consumers) before the CQ they re-arm goes. The rings stay mapped
 * until the stream is freed. 0, or -errno when the stand-in cannot be had
 * (nothing released). Caller holds t->lock. */
static int verbs_release(struct tp *t)
{
	int sfd = -1;

	if (t->cc && (sfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		return -errno;
	if (sfd >= 0 && rsock_real.dup3(sfd, t->cc->fd, O_CLOEXEC) < 0) {
		int rc = -errno;
		rsock_real.close(sfd);
		return rc;
	}
	if (sfd >= 0) {
		rsock_real.close(sfd);
		ownfd_mark(t->cc->fd); /* the mark follows the number's new file */
	}
	while (atomic_load(&t->consumers))
		sched_yield();
	tp_qp_destroy(t); /* (on the id: before it is given up) */
	if (t->cq)
		ibv_destroy_cq(t->cq);
	t->cq = NULL;
	if (t->rx_mr || t->tx_mr)
		stats_registered(-(int64_t)t->mem_len);
	tp_regs_free(t);
	t->rx_mr = t->tx_mr = NULL;
	t->pd = NULL;
	t->released = 1;
	return 0;
}

struct cm_hit {
	struct rdma_cm_id *id;
	enum tp_cm_kind kind;
	struct rdma_cm_id *doomed;
};

/* ho_each's look at one registered stream: the event's, when its id is it. */
static int on_stream(struct path_stream *s, void *arg)
{
	struct cm_hit *h = arg;
	struct tp *t = tp_of(s);
	int rc;

	if (s->ops != &tp_path_ops || t->id != h->id)
		return 0;
	mtx_lock(&t->lock);
	if (!tp_switched(t) && !t->err) {
		tp_fail(t, -ECONNRESET,
			h->kind == TP_CM_DEVICE_REMOVAL ? "rdma_cm: its device is being removed"
							: "rdma_cm: its address moved to another port",
			TP_FAIL_PATH);
		/* The kernel's removal waits for the objects, which go once
		 * the stream is on TCP: this failover is run to its end. */
		if (h->kind == TP_CM_DEVICE_REMOVAL)
			tp_failover_wait(t, clock_now_ms() + TP_SWITCH_MS);
		else
			tp_failover_due(t);
	}
	/* A stream left broken (no failover to be had) keeps them until its
	 * close: its reads may still take what its ring holds. */
	if (h->kind == TP_CM_DEVICE_REMOVAL && tp_switched(t) && !t->released) {
		if ((rc = verbs_release(t)) == 0) {
			h->doomed = t->id;
			t->id = NULL;
			log_debug("fd %d: on TCP, its verbs objects given back to the device being removed",
				  t->tcp_fd);
		} else {
			log_warn_rl("fd %d: the verbs objects of a removed device's stream cannot be "
				    "released (%s): its removal waits for the stream's close",
				    t->tcp_fd, strerrorname_np(-rc));
		}
	}
	mtx_unlock(&t->lock);
	return 1;
}

struct async_hit {
	enum ibv_event_type type;
	const void *obj;
};

/* ho_each's look at one registered stream: the event's, when its CQ or QP
 * is the event's. */
static int on_async(struct path_stream *s, void *arg)
{
	struct async_hit *h = arg;
	struct tp *t = tp_of(s);
	int cq = h->type == IBV_EVENT_CQ_ERR;

	if (s->ops != &tp_path_ops || (cq ? (const void *)t->cq : (const void *)t->qp) != h->obj)
		return 0;
	mtx_lock(&t->lock);
	if (!tp_switched(t) && !t->err) {
		tp_fail(t, -ECONNRESET,
			cq ? "its completion queue overran (IBV_EVENT_CQ_ERR)" : "its QP failed (IBV_EVENT_QP_FATAL)",
			TP_FAIL_PATH);
		tp_failover_due(t);
	}
	mtx_unlock(&t->lock);
	return 1;
}

int tp_async_event(enum ibv_event_type type, const void *obj)
{
	struct async_hit h = {.type = type, .obj = obj};

	return obj ? ho_each(on_async, &h) : 0;
}

int tp_cm_event(struct rdma_cm_id *id, enum tp_cm_kind kind, struct rdma_cm_id **doomed)
{
	struct cm_hit h = {.id = id, .kind = kind};
	int found = id ? ho_each(on_stream, &h) : 0; /* (an adopted stream has none) */

	*doomed = h.doomed;
	return found;
}
