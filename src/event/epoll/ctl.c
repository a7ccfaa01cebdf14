/* epoll/ctl.c - epoll_ctl() for a tracked socket (ep_ctl): the kernel's
 * registration for a stream on kernel TCP, an item of the instance's
 * shadow for a stream on RDMA, both for one not decided yet. See epoll.h
 * and doc/design.md, "Readiness". */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <stdlib.h>

#include "event/epoll/internal.h"
#include "base/real.h"

/* EPOLLEXCLUSIVE rules of the kernel (fs/eventpoll.c). */
#define EP_EXCLUSIVE_OK (EPOLLIN | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | \
			 EPOLLWRBAND | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE)

/* EPOLL_CTL_ADD of stream sc (on fd, whose path is path) to ep (on epfd),
 * it the item of fd already there or NULL. An undecided stream's kernel
 * registration is made already. 0 or -errno. Caller holds ep_glock and
 * ep->lock. */
static int ctl_add(struct ep *ep, int epfd, int fd, struct conn *sc, struct epoll_event *ev,
		   struct ep_item *it, int path)
{
	int rc;

	if (it)
		return -EEXIST;
	if (!ev)
		return -EFAULT;
	if ((ev->events & EPOLLEXCLUSIVE) && (ev->events & ~EP_EXCLUSIVE_OK))
		return -EINVAL;
	if (path == CONN_PATH_RDMA && (rc = ep_arm_kernel(ep, epfd)))
		return rc;
	it = calloc(1, sizeof(*it));
	if (!it)
		return -ENOMEM;
	it->ep = ep;
	it->c = conn_ref(sc);
	it->fd = fd;
	it->self = it;
	it->efd = it->cfd = -1;
	it->events = ev->events;
	it->data = ev->data;
	it->seen = UINT64_MAX;
	it->rdma = path == CONN_PATH_RDMA;
	if (it->rdma && (rc = ep_item_hook(ep, it))) {
		ep_item_unhook(ep, it);
		ep_item_free(it);
		return rc;
	}
	ep_oom = 0;
	HASH_ADD_INT(ep->items, fd, it);
	if (!ep_oom)
		HASH_ADD(hp, ep->tags, self, sizeof(it->self), it);
	if (!ep_oom && ep_item_link(it)) {
		HASH_DELETE(hp, ep->tags, it);
		ep_oom = 1;
	}
	if (ep_oom) {
		HASH_DELETE(hh, ep->items, it);
		if (it->rdma)
			ep_item_unhook(ep, it);
		else
			rsock_real.epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
		ep_item_free(it);
		return -ENOMEM;
	}
	if (it->rdma) {
		ep->n_rdma++;
		ep_item_check(ep, it);
	} else {
		ep->n_watch++;
	}
	return 0;
}

/* EPOLL_CTL_MOD of the item it (or NULL). 0 or -errno. Caller holds
 * ep->lock. */
static int ctl_mod(struct ep *ep, struct ep_item *it, struct epoll_event *ev)
{
	if (!it)
		return -ENOENT;
	if (!ev)
		return -EFAULT;
	if ((ev->events | it->events) & EPOLLEXCLUSIVE)
		return -EINVAL;
	it->events = ev->events;
	it->data = ev->data;
	it->disabled = 0;
	it->seen = UINT64_MAX; /* the kernel re-checks readiness on MOD */
	ep_item_check(ep, it);
	return 0;
}

/* The path a registration of sc follows: a stream moved to TCP with nothing
 * of its RDMA past left to read is registered as the kernel socket it now
 * is, and a later MOD or DEL goes to the kernel too, unless an item made
 * before the move has it (ep_ctl finds the item first). */
static int ctl_path(struct conn *sc)
{
	int path = atomic_load(&sc->path);

	if (path == CONN_PATH_RDMA && sc->stream && path_kernel_only(sc->stream))
		path = CONN_PATH_TCP;
	return path;
}

int ep_ctl(int epfd, int op, int fd, struct conn *sc, struct epoll_event *ev)
{
	struct conn *epc;
	struct ep *ep;
	struct ep_item *it;
	int path, rc = 0;
	int undecided;
	struct ep_item *gone = NULL;

	if (op == EPOLL_CTL_ADD)
		conn_settle_maybe(sc, fd);
	path = ctl_path(sc);
	undecided = path == CONN_PATH_UNDECIDED && atomic_load(&sc->role) != CONN_ROLE_LISTENER;
	if (sc->instance && op == EPOLL_CTL_ADD)
		ep_nested(sc->instance); /* an epoll instance in another */
	if (sc->instance || (path != CONN_PATH_RDMA && !undecided && !ep_stream_watched(sc)))
		return EP_PASS;
	if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL)
		return EP_PASS;
	pthread_mutex_lock(&ep_glock);
	epc = ep_lookup(epfd, path == CONN_PATH_RDMA || undecided);
	if (!epc) {
		pthread_mutex_unlock(&ep_glock);
		return EP_PASS;
	}
	ep = epc->instance;
	pthread_mutex_lock(&ep->lock);
	HASH_FIND_INT(ep->items, &fd, it);
	if (it && it->c != sc) {
		/* The number was reused behind our back: the old one is gone. */
		ep_item_remove(ep, it);
		gone = it;
		it = NULL;
	}
	if (it && !it->rdma) {
		/* A kernel registration kept for conversion. */
		if (rsock_real.epoll_ctl(epfd, op, fd, ev)) {
			rc = -errno;
		} else if (op == EPOLL_CTL_DEL) {
			ep_item_remove(ep, it);
			gone = it;
		}
		goto out;
	}
	if (path != CONN_PATH_RDMA && !it) {
		/* Kernel TCP (or not yet decided): the kernel's registration,
		 * and for an undecided stream an item to convert it later. */
		if (rsock_real.epoll_ctl(epfd, op, fd, ev)) {
			rc = -errno;
			goto out;
		}
		if (op != EPOLL_CTL_ADD || !undecided)
			goto out;
	}
	switch (op) {
	case EPOLL_CTL_ADD:
		rc = ctl_add(ep, epfd, fd, sc, ev, it, path);
		break;
	case EPOLL_CTL_MOD:
		rc = ctl_mod(ep, it, ev);
		break;
	case EPOLL_CTL_DEL:
		if (!it) {
			rc = -ENOENT;
			break;
		}
		ep_item_remove(ep, it);
		gone = it;
		break;
	}
out:
	ep_readyfd_update(ep);
	pthread_mutex_unlock(&ep->lock);
	pthread_mutex_unlock(&ep_glock);
	if (gone)
		ep_item_free(gone);
	conn_unref(epc);
	return rc;
}
