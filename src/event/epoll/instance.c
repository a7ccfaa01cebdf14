/* epoll/instance.c - the shadows of epoll instances: tracking a new epoll
 * descriptor, finding the shadow of one, its kernel-side helpers (our
 * duplicate of the instance, readyfd, the process's kick descriptor),
 * nesting, destruction, and the global lock around fork. See epoll.h and
 * doc/design.md, "Readiness". */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "event/epoll/internal.h"
#include "event/event.h"
#include "core/fdtab.h"
#include "base/ownfd.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"

__thread int ep_oom;
pthread_mutex_t ep_glock = PTHREAD_MUTEX_INITIALIZER;
_Atomic uint64_t ep_conv_gen;
char ep_kick_tag;

/* The process's kick descriptor: an eventfd in the kernel set of every
 * instance that holds an RDMA stream (edge-triggered), written by
 * event_kick. -1 until the first such instance. */
static _Atomic int ep_kick_fd = -1;

void ep_stream_converted(void)
{
	atomic_fetch_add_explicit(&ep_conv_gen, 1, memory_order_release);
}

void event_kick(void)
{
	int fd = atomic_load_explicit(&ep_kick_fd, memory_order_acquire);
	uint64_t one = 1;

	if (fd >= 0 && rsock_real.write(fd, &one, sizeof(one)) < 0)
		log_debug("epoll: kick: %d", errno);
}

/* The process's kick descriptor (made once), or -errno. */
static int kick_fd(void)
{
	int fd = atomic_load_explicit(&ep_kick_fd, memory_order_acquire), expect = -1;

	if (fd >= 0)
		return fd;
	fd = ownfd_move(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (fd < 0)
		return -errno;
	if (!atomic_compare_exchange_strong(&ep_kick_fd, &expect, fd)) {
		ownfd_close(fd);
		fd = expect;
	}
	return fd;
}

static struct ep *ep_new(void)
{
	struct ep *ep = calloc(1, sizeof(*ep));

	if (!ep)
		return NULL;
	pthread_mutex_init(&ep->lock, NULL);
	ep->owner = rsock_pid();
	ep->kfd = ep->readyfd = -1;
	path_adapt_init(&ep->wait);
	return ep;
}

void ep_track_new(int epfd)
{
	struct conn *c;

	if (epfd < 0 || !(c = conn_new(AF_UNSPEC)))
		return;
	if (!(c->instance = ep_new()) || fdtab_insert(epfd, c))
		log_debug("epoll: fd %d not tracked", epfd);
	conn_unref(c);
}

int ep_arm_kernel(struct ep *ep, int epfd)
{
	struct epoll_event e = {.events = EPOLLIN};
	int kick;

	if (ep->kfd >= 0)
		return 0;
	if ((kick = kick_fd()) < 0)
		return kick;
	ep->kfd = ownfd_dup(epfd);
	if (ep->kfd < 0)
		return -errno;
	ep->readyfd = ownfd_move(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (ep->readyfd < 0)
		goto fail;
	e.data.ptr = &ep->readyfd;
	if (rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_ADD, ep->readyfd, &e))
		goto fail; /* EINVAL: epfd is not an epoll instance */
	e.events = EPOLLIN | EPOLLET;
	e.data.ptr = &ep_kick_tag;
	if (rsock_real.epoll_ctl(ep->kfd, EPOLL_CTL_ADD, kick, &e))
		goto fail;
	return 0;
fail: {
	int rc = -errno;
	ownfd_close(ep->readyfd);
	ownfd_close(ep->kfd);
	ep->kfd = ep->readyfd = -1;
	return rc;
}
}

void ep_readyfd_update(struct ep *ep)
{
	uint64_t v = 1;
	int want = ep->ready != NULL;

	if (ep->readyfd < 0 || want == ep->readyfd_set)
		return;
	if (want)
		(void)!rsock_real.write(ep->readyfd, &v, sizeof(v));
	else
		(void)!rsock_real.read(ep->readyfd, &v, sizeof(v));
	ep->readyfd_set = want;
}

void ep_nested(struct ep *ep)
{
	if (atomic_load_explicit(&ep->nested, memory_order_relaxed))
		return;
	pthread_mutex_lock(&ep->lock);
	atomic_store(&ep->nested, 1);
	ep_idle_arm(ep);
	ep_readyfd_update(ep);
	pthread_mutex_unlock(&ep->lock);
}

struct conn *ep_lookup(int epfd, int create)
{
	struct conn *c = fdtab_maybe_tracked(epfd) ? fdtab_get(epfd) : NULL;
	struct ep *ep;

	if (c && c->instance)
		return c;
	if (c || !create) {
		conn_unref(c); /* a socket: the kernel says EINVAL */
		return NULL;
	}
	ep_track_new(epfd);
	c = fdtab_get(epfd);
	if (c && !c->instance) {
		conn_unref(c);
		c = NULL;
	}
	/* Made before we tracked it: it may have been nested unseen. */
	if (c) {
		ep = c->instance;
		atomic_store(&ep->nested, 1);
	}
	return c;
}

void ep_destroy(void *shadow)
{
	struct ep *ep = shadow;
	struct ep_item *it, *tmp, *gone = NULL;

	pthread_mutex_lock(&ep_glock);
	pthread_mutex_lock(&ep->lock);
	HASH_ITER(hh, ep->items, it, tmp)
	{
		ep_item_remove(ep, it);
		it->next = gone;
		gone = it;
	}
	pthread_mutex_unlock(&ep->lock);
	pthread_mutex_unlock(&ep_glock);
	while ((it = gone)) {
		gone = it->next;
		ep_item_free(it);
	}
	pthread_mutex_lock(&ep->lock);
	ep_dead_forget(ep, ep->dead_n);
	pthread_mutex_unlock(&ep->lock);
	ownfd_close(ep->readyfd);
	ownfd_close(ep->kfd);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}

void ep_fork_lock(void)
{
	pthread_mutex_lock(&ep_glock);
}

void ep_fork_unlock(void)
{
	pthread_mutex_unlock(&ep_glock);
}
