/* ops.c - the RDMA path as a path (path.h): each op is a thin adapter to
 * the tp_* function of the same name (transport.h), which the compiler
 * turns into a jump; the few that are inline atomic accesses on the struct
 * tp stay one atomic access. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <sys/socket.h>

#include "base/proc.h"
#include "base/stats.h"
#include "base/statpub.h"
#include "path/rdma/flow.h"
#include "path/rdma/internal.h"
#include "path/registry.h"
#include "path/rdma/transport.h"

static ssize_t ops_send(struct path_stream *s, const struct iovec *iov, int iovcnt, int flags,
			int nonblock)
{
	return tp_send(tp_of(s), iov, iovcnt, flags, nonblock);
}

static ssize_t ops_recv(struct path_stream *s, const struct iovec *iov, int iovcnt, int flags,
			int nonblock)
{
	return tp_recv(tp_of(s), iov, iovcnt, flags, nonblock);
}

static int ops_readable_bytes(struct path_stream *s)
{
	return tp_readable_bytes(tp_of(s));
}

static short ops_poll_events(struct path_stream *s)
{
	return tp_poll_events(tp_of(s));
}

static short ops_ready(struct path_stream *s, int do_arm, uint64_t *seq)
{
	return tp_ready(tp_of(s), do_arm, seq);
}

static int ops_armed(struct path_stream *s)
{
	return tp_armed(tp_of(s));
}

static int ops_spin(struct path_stream *s)
{
	return tp_spin(tp_of(s));
}

static int ops_consume(struct path_stream *s)
{
	return tp_consume(tp_of(s));
}

static int ops_event_fd(struct path_stream *s)
{
	return tp_event_fd(tp_of(s));
}

static int ops_wait_fd(struct path_stream *s, struct path_waiter *w)
{
	return tp_wait_fd(tp_of(s), w);
}

static void ops_wait_end(struct path_stream *s, struct path_waiter *w)
{
	tp_wait_end(tp_of(s), w);
}

static void ops_wait_done(struct path_stream *s)
{
	tp_wait_done(tp_of(s));
}

static void ops_control_event(struct path_stream *s)
{
	tp_control_event(tp_of(s));
}

static int ops_kernel_only(struct path_stream *s)
{
	return tp_kernel_only(tp_of(s));
}

/* The epoll registrations of the stream (t->watchers: a stream that others
 * watch kicks them when it consumes an event); one made by an instance
 * another process made keeps the completion channel out of the ring cache
 * (t->hooked_shared). */
static int ops_watchers_add(struct path_stream *s, int delta, int shared)
{
	struct tp *t = tp_of(s);
	int n;

	if (!delta)
		return atomic_load_explicit(&t->watchers, memory_order_relaxed);
	n = atomic_fetch_add_explicit(&t->watchers, delta, memory_order_relaxed) + delta;
	if (shared)
		atomic_store_explicit(&t->hooked_shared, 1, memory_order_relaxed);
	return n;
}

static int ops_control_fd(struct path_stream *s)
{
	return tp_of(s)->tcp_fd;
}

static int ops_shutdown_rd(struct path_stream *s, int fd)
{
	return tp_shutdown_rd(tp_of(s), fd);
}

static int ops_shutdown_wr(struct path_stream *s)
{
	return tp_shutdown_wr(tp_of(s));
}

static void ops_close(struct path_stream *s, int abort)
{
	tp_close(tp_of(s), abort);
}

static void ops_sockopts_changed(struct path_stream *s)
{
	tp_sockopts_changed(tp_of(s));
}

static int ops_sock_error(struct path_stream *s)
{
	return tp_sock_error(tp_of(s));
}

static void ops_exit_drain(struct path_stream *s, pid_t self, int64_t until_ns)
{
	tp_exit_drain(tp_of(s), self, until_ns);
}

static int ops_handover(struct path_stream *s)
{
	return tp_handover(tp_of(s));
}

static int ops_handover_shared(struct path_stream *s)
{
	return tp_handover_shared(tp_of(s));
}

static int ops_switched(struct path_stream *s)
{
	return tp_switched(tp_of(s));
}

static struct ho_pre *ops_prefix(struct path_stream *s)
{
	return tp_prefix(tp_of(s));
}

static size_t ops_prefix_left(struct path_stream *s)
{
	return tp_prefix_left(tp_of(s));
}

static int ops_prefix_fd(struct path_stream *s)
{
	return tp_prefix_fd(tp_of(s));
}

static int ops_forked(struct path_stream *s)
{
	struct tp *t = tp_of(s);

	return t->owner == rsock_pid() && t->fork_gen != atomic_load(&ho_forks);
}

static int ops_control_watch(struct path_stream *s)
{
	return tp_control_watch(tp_of(s));
}

static void ops_publish(struct path_stream *s, struct statpub_slot *slot)
{
	struct tp *t = tp_of(s);

	mtx_lock(&t->lock);
	atomic_store_explicit(&t->pub, slot, memory_order_relaxed);
	if (slot) {
		statpub_rdma(slot, t->pd ? ibv_get_device_name(t->pd->context->device) : NULL,
			     t->qp ? t->qp->qp_num : 0, t->rx.size, t->tx.size, t->peer.size);
		tp_pub_credits(t);
	}
	mtx_unlock(&t->lock);
}

const struct path_ops tp_path_ops = {
	.name = "rdma",
	.transport = RSOCK_TRANSPORT_RDMA,
	.stats_path = STATS_RDMA,
	.send = ops_send,
	.recv = ops_recv,
	.readable_bytes = ops_readable_bytes,
	.poll_events = ops_poll_events,
	.ready = ops_ready,
	.armed = ops_armed,
	.spin = ops_spin,
	.consume = ops_consume,
	.event_fd = ops_event_fd,
	.wait_fd = ops_wait_fd,
	.wait_end = ops_wait_end,
	.wait_done = ops_wait_done,
	.control_event = ops_control_event,
	.kernel_only = ops_kernel_only,
	.watchers_add = ops_watchers_add,
	.control_fd = ops_control_fd,
	.shutdown_rd = ops_shutdown_rd,
	.shutdown_wr = ops_shutdown_wr,
	.close = ops_close,
	.sockopts_changed = ops_sockopts_changed,
	.sock_error = ops_sock_error,
	.exit_drain = ops_exit_drain,
	.handover = ops_handover,
	.handover_shared = ops_handover_shared,
	.switched = ops_switched,
	.prefix = ops_prefix,
	.prefix_left = ops_prefix_left,
	.prefix_fd = ops_prefix_fd,
	.forked = ops_forked,
	.control_watch = ops_control_watch,
	.publish = ops_publish,
};
