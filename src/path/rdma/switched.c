/* switched.c - a stream moved to TCP: the hand-over asked for (by the
 * owner or another process), the unread prefix, and receiving, sending and
 * readiness on the kernel socket (doc/design.md, "Descriptors, fork, exec"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/real.h"
#include "path/handover.h"
#include "path/rdma/internal.h"

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
		} else if (rc == 0 && ho_vfork_keep(&t->s, pre)) {
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

int tp_sw_enter(struct tp *t)
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
		return tp_sw_enter(t);
	if (!t->up)
		return -ENOTCONN;
	if (t->peer_version < PROTO_VERSION_SWITCH)
		return -EPROTONOSUPPORT;
	mtx_lock(&t->lock);
	rc = tp_switch_locked(t, NULL);
	mtx_unlock(&t->lock);
	return rc;
}

struct ho_pre *tp_prefix(struct tp *t)
{
	return tp_switched(t) ? t->pre : NULL;
}

int tp_control_watch(struct tp *t)
{
	int more;

	mtx_lock(&t->lock);
	tp_check_control(t);
	more = !tp_switched(t) && !t->peer_gone && !t->err && !t->rd_shut;
	mtx_unlock(&t->lock);
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
	t->s.ops = &tp_path_ops;
	mtx_init(&t->lock);
	t->owner = rsock_pid();
	t->tcp_fd = ownfd_dup(fd);
	if (t->tcp_fd < 0) {
		int rc = -errno;
		free(t);
		return rc;
	}
	t->pre = pre;
	t->peer_version = PROTO_VERSION;
	atomic_init(&t->sw, 1);
	*out = t;
	return 0;
}

/* Receive on a switched stream, into iov from byte skip: the prefix first,
 * then the kernel socket (flags as the application gave them). */
ssize_t tp_sw_recv(struct tp *t, const struct iovec *iov, int iovcnt, size_t skip, int flags)
{
	size_t want = tp_iov_total(iov, iovcnt) - skip, n = 0;
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
	m.msg_iovlen = (size_t)tp_iov_from(iov, iovcnt, skip + n, tmp);
	r = rsock_real.recvmsg(t->tcp_fd, &m, flags);
	if (r < 0)
		return n ? (ssize_t)n : -errno;
	return (ssize_t)n + r;
}

/* Send the rest of iov (from byte skip) on the kernel socket after a switch
 * in the middle of a send. Returns the bytes sent (>= 0). */
size_t tp_sw_send_rest(struct tp *t, const struct iovec *iov, int iovcnt, size_t skip, int flags)
{
	struct iovec tmp[64];
	struct msghdr m;
	ssize_t r;

	memset(&m, 0, sizeof(m));
	m.msg_iov = tmp;
	m.msg_iovlen = (size_t)tp_iov_from(iov, iovcnt, skip, tmp);
	r = rsock_real.sendmsg(t->tcp_fd, &m, flags | MSG_NOSIGNAL);
	return r > 0 ? (size_t)r : 0;
}

short tp_sw_ready(struct tp *t, uint64_t *seq)
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
