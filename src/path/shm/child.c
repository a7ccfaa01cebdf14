/* child.c - a same-host stream used by a process other than the one that
 * set it up (a forked child): it asks the owner, through the hand-over
 * registry, to move the stream to TCP (switch.c) and then reads the prefix
 * the owner left, then the kernel socket, and writes to the kernel socket
 * (doc/design.md, "The same-host path"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/proc.h"
#include "base/real.h"
#include "path/prefix.h"
#include "path/registry.h"
#include "path/shm/internal.h"

int shm_child_enter(struct shm_stream *st)
{
	struct ho_pre *pre = NULL;
	int rc;

	if (st->child_pid == rsock_pid())
		return st->child_rc;
	/* The first use in this process (a fork copied the parent's state):
	 * the owner answers the request from its library's thread. */
	rc = st->rec ? ho_request(st->rec, &pre) : -EIO;
	st->child_pre = rc ? NULL : pre;
	st->child_rc = rc ? -EIO : 0;
	st->child_pid = rsock_pid();
	return st->child_rc;
}

ssize_t shm_child_recv(struct shm_stream *st, const struct iovec *iov, int iovcnt, int flags,
		       int nonblock)
{
	struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
	size_t total = 0;
	ssize_t r;

	if (shm_child_enter(st))
		return -EIO;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	if (!(flags & MSG_OOB) && st->child_pre && ho_pre_left(st->child_pre) && total)
		return (ssize_t)ho_pre_read(st->child_pre, iov, iovcnt, 0, total, flags);
	r = rsock_real.recvmsg(st->tcp_fd, &m, flags | (nonblock ? MSG_DONTWAIT : 0));
	return r < 0 ? -errno : r;
}

short shm_child_ready(struct shm_stream *st)
{
	struct pollfd p = {.fd = st->tcp_fd,
			   .events = POLLIN | POLLOUT | POLLPRI | POLLRDHUP};

	if (shm_child_enter(st))
		return POLLERR | POLLHUP;
	if (rsock_real.poll(&p, 1, 0) != 1)
		p.revents = 0;
	if (st->child_pre && ho_pre_left(st->child_pre))
		p.revents |= POLLIN | POLLRDNORM;
	return p.revents;
}

int shm_child_readable(struct shm_stream *st)
{
	int k = 0;

	if (shm_child_enter(st))
		return 0;
	rsock_real.ioctl(st->tcp_fd, FIONREAD, &k);
	return (k > 0 ? k : 0) + (int)(st->child_pre ? ho_pre_left(st->child_pre) : 0);
}
