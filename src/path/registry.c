/* registry.c - see registry.h and doc/design.md, "Descriptors, fork, exec". */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "base/real.h"
#include "path/path.h"
#include "path/registry.h"
#include "service/service.h"

#define HO_WAIT_MS 15000         /* a child waits this long for its owner */

_Atomic unsigned ho_forks;

void ho_fork_count(void)
{
	atomic_fetch_add(&ho_forks, 1);
}

#define HO_PAGE_RECS (4096 / sizeof(struct ho_rec))

struct ho_slot {
	struct ho_rec *rec;
	struct path_stream *stream; /* NULL: free (unless retired) */
	int retired;   /* a child may still look at the record: never reused */
};

static pthread_mutex_t ho_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ho_slot *slots;    /* this process's records */
static size_t n_slots, cap_slots;
static pid_t slots_pid;          /* the process the slots belong to */
static int req_r = -1, req_w = -1; /* the request pipe's ends */
static uint64_t req_ino;
/* What the library's thread watches for the hand-over (service_watch):
 * the request pipe, and the control connection of every registered stream
 * (one-shot, re-armed after each look), so that a peer's SWITCH is answered
 * even while the application does not touch the stream. */
static int ho_ep = -1;
static pid_t ho_ep_watched; /* the process whose thread watches ho_ep */
#define HO_EV_REQ UINT64_MAX

static struct ho_hooks hooks;

void ho_hooks_set(const struct ho_hooks *h)
{
	hooks = *h;
}

static int futex(_Atomic uint32_t *w, int op, uint32_t v, const struct timespec *ts)
{
	return (int)syscall(SYS_futex, (uint32_t *)w, op, v, ts, NULL, 0);
}

/* A fresh page of records (MAP_SHARED so that children see their state).
 * Caller holds ho_lock. */
static int grow(void)
{
	struct ho_slot *ns = realloc(slots, (cap_slots + HO_PAGE_RECS) * sizeof(*ns));
	struct ho_rec *page;

	if (!ns)
		return -ENOMEM;
	slots = ns;
	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return -errno;
	for (size_t i = 0; i < HO_PAGE_RECS; i++) {
		slots[cap_slots + i].rec = &page[i];
		slots[cap_slots + i].stream = NULL;
		slots[cap_slots + i].retired = 0;
	}
	cap_slots += HO_PAGE_RECS;
	return 0;
}

/* This process's registry (a forked child starts afresh: the records are
 * the parent's, whose pages stay mapped for its streams' copies) and
 * request pipe. Caller holds ho_lock. */
static void ho_mine(void)
{
	if (slots_pid != rsock_pid()) {
		slots = NULL;
		n_slots = cap_slots = 0;
		slots_pid = rsock_pid();
		req_r = req_w = ho_ep = -1;
	}
	if (req_r < 0) {
		int p[2];
		struct stat st;
		struct epoll_event ev = {.events = EPOLLIN, .data.u64 = HO_EV_REQ};
		if (pipe2(p, O_CLOEXEC | O_NONBLOCK))
			return;
		p[0] = ownfd_move(p[0]);
		p[1] = ownfd_move(p[1]);
		ho_ep = ownfd_move(rsock_real.epoll_create1(EPOLL_CLOEXEC));
		if (ho_ep < 0 || fstat(p[0], &st) || rsock_real.epoll_ctl(ho_ep, EPOLL_CTL_ADD, p[0], &ev)) {
			ownfd_close(p[0]);
			ownfd_close(p[1]);
			ownfd_close(ho_ep);
			ho_ep = -1;
			return;
		}
		req_r = p[0];
		req_w = p[1];
		req_ino = (uint64_t)st.st_ino;
		ho_ep_watched = 0; /* a new set: ho_watch() adds it */
	}
}

/* (Re-)arm the one-shot watch of slot i's control connection. */
static void watch(size_t i, int op)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.u64 = i};

	rsock_real.epoll_ctl(ho_ep, op, path_control_fd(slots[i].stream), &ev);
}

static void ho_serve(void);

/* The library's thread in this process (by the hook: negotiation's start,
 * which watches its own descriptors first). 0 or -errno. */
static int ho_start(void)
{
	return hooks.start ? hooks.start() : service_start();
}

/* The thread's callback: the request pipe or a control connection is
 * readable. */
static int ho_ready(int fd, short revents, void *arg)
{
	(void)fd, (void)arg;
	if (revents)
		ho_serve();
	return 0;
}

/* Have this process's thread watch ho_ep (once per process). 0 or
 * -errno. */
static int ho_watch(void)
{
	int rc = 0;

	pthread_mutex_lock(&ho_lock);
	if (ho_ep >= 0 && ho_ep_watched != rsock_pid() &&
	    (rc = service_watch(ho_ep, POLLIN, ho_ready, NULL)) == 0)
		ho_ep_watched = rsock_pid();
	pthread_mutex_unlock(&ho_lock);
	return rc;
}

void ho_prepare(void)
{
	int ok;

	pthread_mutex_lock(&ho_lock);
	ho_mine();
	ok = req_r >= 0;
	pthread_mutex_unlock(&ho_lock);
	if (ok && ho_start() == 0)
		ho_watch();
}

struct ho_rec *ho_register(struct path_stream *s)
{
	struct ho_rec *r = NULL;

	pthread_mutex_lock(&ho_lock);
	ho_mine();
	if (req_r >= 0) {
		size_t i;
		for (i = 0; i < cap_slots && (slots[i].stream || slots[i].retired); i++)
			;
		if (i < cap_slots || grow() == 0) {
			slots[i].stream = s;
			r = slots[i].rec;
			atomic_store(&r->state, HO_IDLE);
			r->pre_fd = -1;
			r->req_fd = req_w;
			r->req_ino = req_ino;
			r->owner = rsock_pid();
			n_slots++;
			watch(i, EPOLL_CTL_ADD);
		}
	}
	pthread_mutex_unlock(&ho_lock);
	/* The library's thread listens to the request pipe. */
	if (r && (ho_start() || ho_watch())) {
		ho_unregister(s, 0);
		ho_unwatch(path_control_fd(s));
		r = NULL;
	}
	if (!r)
		log_debug("no hand-over record: this stream cannot move to another process");
	return r;
}

/* The slot of stream s in this process's records, or NULL (not registered,
 * or the records are a parent's). Caller holds ho_lock. */
static struct ho_slot *slot_of(const struct path_stream *s)
{
	if (slots_pid != rsock_pid())
		return NULL;
	for (size_t i = 0; i < cap_slots; i++)
		if (slots[i].stream == s)
			return &slots[i];
	return NULL;
}

void ho_unregister(struct path_stream *s, int forked)
{
	struct ho_slot *sl;

	pthread_mutex_lock(&ho_lock);
	sl = slot_of(s);
	if (sl) {
		struct ho_rec *r = sl->rec;
		uint32_t st = atomic_load(&r->state);
		sl->stream = NULL;
		sl->retired = forked;
		n_slots--;
		/* A child still waiting learns the stream is gone; one that comes
		 * later finds the switch done (its prefix stays open, ho_orphan)
		 * or the owner gone. */
		if (st == HO_ASKED) {
			atomic_store(&r->state, HO_FAILED);
			futex(&r->state, FUTEX_WAKE, INT_MAX, NULL);
		}
		if (st != HO_DONE)
			r->owner = 0;
	}
	pthread_mutex_unlock(&ho_lock);
}

void ho_unwatch(int fd)
{
	pthread_mutex_lock(&ho_lock);
	if (ho_ep >= 0 && slots_pid == rsock_pid())
		rsock_real.epoll_ctl(ho_ep, EPOLL_CTL_DEL, fd, NULL);
	pthread_mutex_unlock(&ho_lock);
}

void ho_publish(struct path_stream *s, int fd)
{
	struct ho_slot *sl;

	pthread_mutex_lock(&ho_lock);
	sl = slot_of(s);
	if (sl) {
		sl->rec->pre_fd = fd;
		atomic_store(&sl->rec->state, HO_DONE);
		futex(&sl->rec->state, FUTEX_WAKE, INT_MAX, NULL);
	}
	pthread_mutex_unlock(&ho_lock);
}

/* Switch every registered stream another process asked for. Caller holds
 * ho_lock. */
static void serve_requests(void)
{
	char b[64];

	while (rsock_real.read(req_r, b, sizeof(b)) > 0)
		;
	for (size_t i = 0; i < cap_slots; i++) {
		struct ho_rec *r = slots[i].rec;
		struct path_stream *s = slots[i].stream;
		if (!s || atomic_load(&r->state) != HO_ASKED)
			continue;
		/* Lock order: ho_lock, then the stream's lock (inside). */
		int rc = path_handover(s);
		r->pre_fd = rc == 0 ? path_prefix_fd(s) : -1;
		log_debug("another process asked for a stream: %s",
			  rc == 0 ? "moved to TCP" : "could not move it");
		atomic_store(&r->state, rc == 0 ? HO_DONE : HO_FAILED);
		futex(&r->state, FUTEX_WAKE, INT_MAX, NULL);
	}
}

static void ho_serve(void)
{
	struct epoll_event ev[16];
	int n;

	pthread_mutex_lock(&ho_lock);
	n = ho_ep < 0 || slots_pid != rsock_pid() ? 0 : rsock_real.epoll_wait(ho_ep, ev, 16, 0);
	for (int k = 0; k < n; k++) {
		uint64_t i = ev[k].data.u64;
		if (i == HO_EV_REQ)
			serve_requests();
		else if (i < cap_slots && slots[i].stream && path_control_watch(slots[i].stream))
			watch(i, EPOLL_CTL_MOD);
	}
	pthread_mutex_unlock(&ho_lock);
}

/* Open descriptor fd of process pid (through /proc: the kernel allows it for
 * our own processes). */
static int open_of(pid_t pid, int fd, int flags)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	return open(path, flags | O_CLOEXEC);
}

int ho_request(struct ho_rec *rec, struct ho_pre **pre)
{
	int64_t start;
	uint32_t st = HO_IDLE;
	pid_t owner;

	*pre = NULL;
	if (!rec)
		return -EIO;
	if (atomic_load(&rec->state) == HO_DONE && rec->pre_fd < 0)
		return 0; /* switched with nothing unread: the owner is not needed */
	if (!(owner = rec->owner) || kill(owner, 0))
		return -EIO;
	if (atomic_compare_exchange_strong(&rec->state, &st, HO_ASKED) || st == HO_ASKED) {
		struct stat bs;
		int b = rec->req_fd, own = 0;
		/* Our inherited copy of the request pipe if we still have it, else the
		 * owner's, opened again through /proc. */
		if (fstat(b, &bs) || !S_ISFIFO(bs.st_mode) || (uint64_t)bs.st_ino != rec->req_ino) {
			b = open_of(owner, rec->req_fd, O_WRONLY | O_NONBLOCK);
			own = 1;
		}
		if (b < 0 || (rsock_real.write(b, "!", 1) != 1 && errno != EAGAIN)) {
			if (b >= 0 && own)
				rsock_real.close(b);
			return -EIO;
		}
		if (own)
			rsock_real.close(b);
	}
	start = clock_now_ms();
	while ((st = atomic_load(&rec->state)) == HO_ASKED) {
		struct timespec ts = {0, 100 * 1000 * 1000};
		futex(&rec->state, FUTEX_WAIT, HO_ASKED, &ts);
		if (clock_now_ms() - start > HO_WAIT_MS)
			return -EIO;
		if (kill(owner, 0) && errno == ESRCH)
			return -EIO;
	}
	if (st != HO_DONE)
		return -EIO;
	if (rec->pre_fd >= 0) {
		int fd = open_of(owner, rec->pre_fd, O_RDWR);
		if (fd < 0 || ho_pre_open(fd, pre)) {
			log_warn("a stream moved to TCP but its unread bytes could not be reached");
			if (fd >= 0)
				rsock_real.close(fd);
			return -EIO;
		}
	}
	return 0;
}

int ho_each(int (*fn)(struct path_stream *s, void *arg), void *arg)
{
	int rc = 0;

	pthread_mutex_lock(&ho_lock);
	for (size_t i = 0; !rc && slots_pid == rsock_pid() && i < cap_slots; i++)
		if (slots[i].stream)
			rc = fn(slots[i].stream, arg);
	pthread_mutex_unlock(&ho_lock);
	return rc;
}

void ho_fork_lock(void)
{
	pthread_mutex_lock(&ho_lock);
}

void ho_fork_unlock(void)
{
	pthread_mutex_unlock(&ho_lock);
}
