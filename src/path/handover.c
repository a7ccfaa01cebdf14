/* handover.c - see handover.h and doc/design.md section 6. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "negotiate/cm.h"
#include "core/conn.h"
#include "core/fdtab.h"
#include "base/ownfd.h"
#include "path/handover.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/stats.h"
#include "path/rdma/transport.h"

#define HO_MAGIC 0x5250534b52ull /* "RKSPR" */
#define HO_WAIT_MS 15000         /* a child waits this long for its owner */

_Atomic unsigned ho_forks;

/* ---- the prefix -------------------------------------------------------------- */

struct ho_shm {
	uint64_t magic;
	_Atomic uint64_t head; /* bytes consumed, by any process */
	uint64_t len;
	uint8_t data[];
};

struct ho_pre {
	int fd;
	size_t map_len;
	struct ho_shm *shm;
};

static int pre_map(int fd, size_t map_len, struct ho_pre **out)
{
	struct ho_pre *p = calloc(1, sizeof(*p));
	void *m;

	if (!p)
		return -ENOMEM;
	m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		int rc = -errno;
		free(p);
		return rc;
	}
	p->fd = fd;
	p->map_len = map_len;
	p->shm = m;
	ownfd_mark(fd);
	*out = p;
	return 0;
}

int ho_pre_new(const struct iovec *v, int n, struct ho_pre **out)
{
	size_t len = 0, map_len, at = 0;

	for (int i = 0; i < n; i++)
		len += v[i].iov_len;
	map_len = sizeof(struct ho_shm) + len;
	int fd = memfd_create("rsock-prefix", MFD_CLOEXEC);
	int rc;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)map_len) || (rc = pre_map(fd, map_len, out))) {
		rc = errno ? -errno : -ENOMEM;
		ownfd_close(fd);
		return rc;
	}
	for (int i = 0; i < n; i++) {
		if (v[i].iov_len)
			memcpy((*out)->shm->data + at, v[i].iov_base, v[i].iov_len);
		at += v[i].iov_len;
	}
	(*out)->shm->len = len;
	atomic_store(&(*out)->shm->head, 0);
	(*out)->shm->magic = HO_MAGIC;
	return 0;
}

int ho_pre_open(int memfd, struct ho_pre **out)
{
	struct stat st;
	struct ho_pre *p;
	int rc;

	if (fstat(memfd, &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size < sizeof(struct ho_shm))
		return -EPROTO;
	if ((rc = pre_map(memfd, (size_t)st.st_size, &p)))
		return rc;
	if (p->shm->magic != HO_MAGIC || p->shm->len > (size_t)st.st_size - sizeof(struct ho_shm) ||
	    atomic_load(&p->shm->head) > p->shm->len) {
		ownfd_forget(memfd);
		munmap(p->shm, p->map_len);
		free(p);
		return -EPROTO;
	}
	fcntl(memfd, F_SETFD, FD_CLOEXEC);
	*out = p;
	return 0;
}

size_t ho_pre_left(const struct ho_pre *p)
{
	return p ? (size_t)(p->shm->len - atomic_load_explicit(&p->shm->head, memory_order_acquire)) : 0;
}

size_t ho_pre_read(struct ho_pre *p, const struct iovec *iov, int iovcnt, size_t skip, size_t max,
		   int flags)
{
	uint64_t h = atomic_load_explicit(&p->shm->head, memory_order_acquire);
	int peek = !!(flags & MSG_PEEK);

	for (;;) {
		size_t n = p->shm->len - h, done = 0, sk = skip;
		if (n > max)
			n = max;
		if (flags & MSG_TRUNC)
			done = n;
		for (int i = 0; i < iovcnt && done < n; i++) {
			size_t l;
			if (sk >= iov[i].iov_len) {
				sk -= iov[i].iov_len;
				continue;
			}
			l = iov[i].iov_len - sk;
			if (l > n - done)
				l = n - done;
			memcpy((uint8_t *)iov[i].iov_base + sk, p->shm->data + h + done, l);
			done += l;
			sk = 0;
		}
		/* The bytes never change: copy first, then claim them; whoever
		 * loses the race copies again from the new head. */
		if (peek || !done ||
		    atomic_compare_exchange_weak_explicit(&p->shm->head, &h, h + done,
							  memory_order_acq_rel, memory_order_acquire))
			return done;
	}
}

int ho_pre_fd(const struct ho_pre *p)
{
	return p ? p->fd : -1;
}

void ho_pre_free(struct ho_pre *p)
{
	if (!p)
		return;
	munmap(p->shm, p->map_len);
	ownfd_close(p->fd);
	free(p);
}

/* A prefix a previous vfork child kept: its descriptor was that child's
 * (gone with its exec), the number means something else here. */
static void pre_forget(struct ho_pre *p)
{
	if (!p)
		return;
	munmap(p->shm, p->map_len);
	free(p);
}

/* ---- shared records, registry, bell ------------------------------------------ */

#define HO_PAGE_RECS (4096 / sizeof(struct ho_rec))

struct ho_slot {
	struct ho_rec *rec;
	struct tp *tp; /* NULL: free (unless retired) */
	int retired;   /* a child may still look at the record: never reused */
};

static pthread_mutex_t ho_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ho_slot *slots;    /* this process's records */
static size_t n_slots, cap_slots;
static pid_t slots_pid;          /* the process the slots belong to */
static int bell = -1, bell_w = -1; /* the bell pipe's ends */
static uint64_t bell_ino;
/* What the cm thread watches for the hand-over: the bell, and the control
 * connection of every registered stream (one-shot, re-armed after each
 * look), so that a peer's SWITCH is answered even while the application
 * does not touch the stream. */
static int ho_ep = -1;
#define HO_EV_BELL UINT64_MAX

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
		slots[cap_slots + i].tp = NULL;
		slots[cap_slots + i].retired = 0;
	}
	cap_slots += HO_PAGE_RECS;
	return 0;
}

/* This process's registry (a forked child starts afresh: the records are
 * the parent's, whose pages stay mapped for its streams' copies) and bell.
 * Caller holds ho_lock. */
static void ho_mine(void)
{
	if (slots_pid != rsock_pid()) {
		slots = NULL;
		n_slots = cap_slots = 0;
		slots_pid = rsock_pid();
		bell = bell_w = ho_ep = -1;
	}
	if (bell < 0) {
		int p[2];
		struct stat st;
		struct epoll_event ev = {.events = EPOLLIN, .data.u64 = HO_EV_BELL};
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
		bell = p[0];
		bell_w = p[1];
		bell_ino = (uint64_t)st.st_ino;
	}
}

/* (Re-)arm the one-shot watch of slot i's control connection. */
static void watch(size_t i, int op)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.u64 = i};

	rsock_real.epoll_ctl(ho_ep, op, slots[i].tp->tcp_fd, &ev);
}

struct ho_rec *ho_register(struct tp *t)
{
	struct ho_rec *r = NULL;

	pthread_mutex_lock(&ho_lock);
	ho_mine();
	if (bell >= 0) {
		size_t i;
		for (i = 0; i < cap_slots && (slots[i].tp || slots[i].retired); i++)
			;
		if (i < cap_slots || grow() == 0) {
			slots[i].tp = t;
			r = slots[i].rec;
			atomic_store(&r->state, HO_IDLE);
			r->pre_fd = -1;
			r->bell_fd = bell_w;
			r->bell_ino = bell_ino;
			r->owner = rsock_pid();
			n_slots++;
			watch(i, EPOLL_CTL_ADD);
		}
	}
	pthread_mutex_unlock(&ho_lock);
	/* The cm thread listens to the bell (it watches ho_bell_fd()). */
	if (r && cm_service_start()) {
		ho_unregister(t, 0);
		r = NULL;
	}
	if (!r)
		log_debug("no hand-over record: this stream cannot move to another process");
	return r;
}

void ho_unregister(struct tp *t, int forked)
{
	pthread_mutex_lock(&ho_lock);
	if (slots_pid == rsock_pid())
		for (size_t i = 0; i < cap_slots; i++)
			if (slots[i].tp == t) {
				struct ho_rec *r = slots[i].rec;
				uint32_t st = atomic_load(&r->state);
				rsock_real.epoll_ctl(ho_ep, EPOLL_CTL_DEL, t->tcp_fd, NULL);
				slots[i].tp = NULL;
				slots[i].retired = forked;
				n_slots--;
				/* A child still waiting learns the stream is gone;
				 * one that comes later finds the switch done (its
				 * prefix stays open, ho_orphan) or the owner gone. */
				if (st == HO_ASKED) {
					atomic_store(&r->state, HO_FAILED);
					futex(&r->state, FUTEX_WAKE, INT_MAX, NULL);
				}
				if (st != HO_DONE)
					r->owner = 0;
				break;
			}
	pthread_mutex_unlock(&ho_lock);
}

void ho_publish(struct tp *t, int fd)
{
	pthread_mutex_lock(&ho_lock);
	if (slots_pid == rsock_pid())
		for (size_t i = 0; i < cap_slots; i++)
			if (slots[i].tp == t) {
				struct ho_rec *r = slots[i].rec;
				r->pre_fd = fd;
				atomic_store(&r->state, HO_DONE);
				futex(&r->state, FUTEX_WAKE, INT_MAX, NULL);
				break;
			}
	pthread_mutex_unlock(&ho_lock);
}

int ho_bell_fd(void)
{
	int fd;

	pthread_mutex_lock(&ho_lock);
	ho_mine();
	fd = ho_ep;
	pthread_mutex_unlock(&ho_lock);
	return fd;
}

/* Switch every registered stream another process asked for. Caller holds
 * ho_lock. */
static void serve_requests(void)
{
	char b[64];

	while (rsock_real.read(bell, b, sizeof(b)) > 0)
		;
	for (size_t i = 0; i < cap_slots; i++) {
		struct ho_rec *r = slots[i].rec;
		struct tp *t = slots[i].tp;
		if (!t || atomic_load(&r->state) != HO_ASKED)
			continue;
		/* Lock order: ho_lock, then the stream's lock (inside). */
		int rc = tp_handover(t);
		r->pre_fd = rc == 0 ? tp_prefix_fd(t) : -1;
		log_debug("another process asked for a stream: %s",
			  rc == 0 ? "moved to TCP" : "could not move it");
		atomic_store(&r->state, rc == 0 ? HO_DONE : HO_FAILED);
		futex(&r->state, FUTEX_WAKE, INT_MAX, NULL);
	}
}

void ho_serve(void)
{
	struct epoll_event ev[16];
	int n;

	pthread_mutex_lock(&ho_lock);
	n = ho_ep < 0 || slots_pid != rsock_pid() ? 0 : rsock_real.epoll_wait(ho_ep, ev, 16, 0);
	for (int k = 0; k < n; k++) {
		uint64_t i = ev[k].data.u64;
		if (i == HO_EV_BELL)
			serve_requests();
		else if (i < cap_slots && slots[i].tp && tp_control_watch(slots[i].tp))
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
	struct timespec start, now;
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
		int b = rec->bell_fd, own = 0;
		/* Our inherited copy of the bell if we still have it, else the
		 * owner's, opened again through /proc. */
		if (fstat(b, &bs) || !S_ISFIFO(bs.st_mode) || (uint64_t)bs.st_ino != rec->bell_ino) {
			b = open_of(owner, rec->bell_fd, O_WRONLY | O_NONBLOCK);
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
	clock_gettime(CLOCK_MONOTONIC, &start);
	while ((st = atomic_load(&rec->state)) == HO_ASKED) {
		struct timespec ts = {0, 100 * 1000 * 1000};
		futex(&rec->state, FUTEX_WAIT, HO_ASKED, &ts);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >
		    HO_WAIT_MS)
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

/* ---- exec ------------------------------------------------------------------- */

/* The vfork child that last duplicated a stream, the streams' numbers in
 * the parent, their transports and what each new image reads first (only
 * that child reads them: its pid names it; the next such child frees the
 * prefixes, in this same memory). */
#define HO_VFORK_DUPS 16
static struct {
	_Atomic pid_t pid;
	int n;
	struct {
		int fd, newfd;
		struct tp *tp;
		struct ho_pre *pre;
	} d[HO_VFORK_DUPS];
} vdups;

static int vfork_mine(void)
{
	return atomic_load(&vdups.pid) == (pid_t)syscall(SYS_getpid);
}

void ho_vfork_dup(int oldfd, int newfd, struct tp *t)
{
	if (!vfork_mine()) {
		for (int i = 0; i < vdups.n; i++)
			pre_forget(vdups.d[i].pre);
		vdups.n = 0;
		atomic_store(&vdups.pid, (pid_t)syscall(SYS_getpid));
	}
	for (int i = 0; i < vdups.n; i++)
		if (vdups.d[i].fd == oldfd)
			return;
	if (vdups.n == HO_VFORK_DUPS) {
		log_warn_rl("fd %d: a vfork child duplicates more than %d streams: "
			    "this one is not handed to its new image", oldfd, HO_VFORK_DUPS);
		return;
	}
	vdups.d[vdups.n].fd = oldfd;
	vdups.d[vdups.n].newfd = newfd;
	vdups.d[vdups.n].tp = t;
	vdups.d[vdups.n++].pre = NULL;
}

/* The number this vfork child gave fd's stream (fd itself may be closed
 * there already), or -1. */
static int vfork_newfd(int fd)
{
	if (vfork_mine())
		for (int i = 0; i < vdups.n; i++)
			if (vdups.d[i].fd == fd)
				return vdups.d[i].newfd;
	return -1;
}

int ho_vfork_keep(struct tp *t, struct ho_pre *pre)
{
	if (!vfork_mine())
		return 0;
	for (int i = 0; i < vdups.n; i++)
		if (vdups.d[i].tp == t && !vdups.d[i].pre) {
			vdups.d[i].pre = pre;
			return 1;
		}
	return 0;
}

struct ho_pre *ho_vfork_prefix(struct tp *t)
{
	if (!t || !vfork_mine())
		return NULL;
	for (int i = 0; i < vdups.n; i++)
		if (vdups.d[i].tp == t && vdups.d[i].pre)
			return vdups.d[i].pre;
	return NULL;
}

int ho_exec_inherits(int fd)
{
	int fl = rsock_real.fcntl(fd, F_GETFD);

	if (fl >= 0 && !(fl & FD_CLOEXEC))
		return 1;
	if (vfork_mine())
		for (int i = 0; i < vdups.n; i++)
			if (vdups.d[i].fd == fd)
				return 1;
	return 0;
}

struct env_acc {
	char *buf;
	size_t len, cap;
	int *fds;
	size_t nfds, capfds;
};

static void env_one(int fd, struct conn *c, void *arg)
{
	struct env_acc *a = arg;
	struct stat st;
	char item[64];
	int d, n;

	struct ho_pre *pre;

	if (atomic_load(&c->path) != CONN_PATH_RDMA || !c->tp || !tp_switched(c->tp))
		return;
	if (!(pre = ho_vfork_prefix(c->tp)))
		pre = tp_prefix(c->tp);
	if (!ho_pre_left(pre) || !ho_exec_inherits(fd) || (fstat(fd, &st) && fstat(vfork_newfd(fd), &st)))
		return;
	/* A duplicate without close-on-exec: the new image's copy. */
	d = rsock_real.fcntl(ho_pre_fd(pre), F_DUPFD, 0);
	if (d < 0)
		return;
	n = snprintf(item, sizeof(item), "%s%llu:%d", a->len ? "," : "",
		     (unsigned long long)st.st_ino, d);
	if (a->len + (size_t)n + 1 > a->cap || a->nfds == a->capfds) {
		size_t nc = a->cap * 2 + 128, nf = a->capfds * 2 + 8;
		char *nb = realloc(a->buf, nc);
		int *nfd = nb ? realloc(a->fds, nf * sizeof(int)) : NULL;
		if (nb)
			a->buf = nb, a->cap = nc;
		if (nfd)
			a->fds = nfd, a->capfds = nf;
		if (!nb || !nfd) {
			rsock_real.close(d);
			return;
		}
	}
	memcpy(a->buf + a->len, item, (size_t)n + 1);
	a->len += (size_t)n;
	a->fds[a->nfds++] = d;
}

char **ho_exec_env(char *const envp[])
{
	struct env_acc a = {0};
	size_t n = 0, k = 0, pl = strlen(HO_ENV "=");
	char **env;

	fdtab_each(env_one, &a);
	if (!a.len) {
		free(a.buf);
		free(a.fds);
		return (char **)envp;
	}
	while (envp && envp[n])
		n++;
	/* [0] the variable, then envp without an older one, NULL; in slot
	 * n + 2 the descriptors to close should the exec fail (a -1 terminated
	 * list: ho_exec_env_free finds it there). */
	env = malloc((n + 3) * sizeof(char *) + sizeof(int) * (a.nfds + 1) + pl + a.len + 1);
	if (!env) {
		for (size_t i = 0; i < a.nfds; i++)
			rsock_real.close(a.fds[i]);
		free(a.buf);
		free(a.fds);
		return NULL;
	}
	int *fds = (int *)(env + n + 3);
	char *var = (char *)(fds + a.nfds + 1);
	memcpy(var, HO_ENV "=", pl);
	memcpy(var + pl, a.buf, a.len + 1);
	env[k++] = var;
	for (size_t i = 0; i < n; i++)
		if (strncmp(envp[i], HO_ENV "=", pl))
			env[k++] = envp[i];
	env[k] = NULL;
	for (size_t i = 0; i < a.nfds; i++)
		fds[i] = a.fds[i];
	fds[a.nfds] = -1;
	env[n + 2] = (char *)fds; /* k <= n + 1: after the NULL */
	log_debug("exec: handing %zu prefix(es) to the new image", a.nfds);
	free(a.buf);
	free(a.fds);
	return env;
}

void ho_exec_env_free(char **env, char *const envp[])
{
	size_t n = 0;

	if (!env || env == (char **)envp)
		return;
	while (envp && envp[n])
		n++;
	for (int *fds = (int *)env[n + 2]; *fds >= 0; fds++)
		rsock_real.close(*fds);
	free(env);
}

/* Track fd, a socket carrying the stream whose prefix is pre (which the conn
 * then owns through its transport). */
static struct conn *adopt_fd(int fd, struct ho_pre *pre)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct conn *c;
	struct tp *t;

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) ||
	    (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
		return NULL;
	if (!(c = conn_new(ss.ss_family)))
		return NULL;
	if (tp_adopt(fd, pre, &t)) {
		conn_unref(c);
		return NULL;
	}
	c->tp = t;
	atomic_store(&c->role, CONN_ROLE_CLIENT);
	atomic_store(&c->nonblock, !!(rsock_real.fcntl(fd, F_GETFL) & O_NONBLOCK));
	atomic_store(&c->path, CONN_PATH_RDMA);
	tp_sockopts_changed(t); /* as the image before us left them */
	if (fdtab_insert(fd, c)) {
		conn_unref(c);
		return NULL;
	}
	return c; /* the table's reference; ours is the same */
}

void ho_adopt_env(void)
{
	const char *v = getenv(HO_ENV);
	char *copy, *save = NULL;

	if (!v || !*v)
		return;
	copy = strdup(v);
	unsetenv(HO_ENV);
	if (!copy)
		return;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned long long ino;
		int mfd, adopted = 0;
		struct ho_pre *pre;
		struct conn *c = NULL;
		DIR *d;
		struct dirent *e;

		if (sscanf(tok, "%llu:%d", &ino, &mfd) != 2 || mfd < 0)
			continue;
		if (ho_pre_open(mfd, &pre)) {
			log_warn("%s names descriptor %d, which is not a prefix: ignored", HO_ENV, mfd);
			continue;
		}
		/* The sockets with that inode: the exec'ing process may have
		 * moved them (dup2 onto 0 and 1, posix_spawn file actions). */
		if ((d = opendir("/proc/self/fd"))) {
			while ((e = readdir(d))) {
				struct stat st;
				int fd = atoi(e->d_name);
				if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d) ||
				    fstat(fd, &st) || !S_ISSOCK(st.st_mode) || st.st_ino != ino)
					continue;
				if (!c) {
					c = adopt_fd(fd, pre);
					adopted = c != NULL;
				} else if (fdtab_insert(fd, conn_ref(c))) {
					conn_unref(c);
				}
			}
			closedir(d);
		}
		if (!adopted)
			ho_pre_free(pre);
		else
			log_debug("adopted a stream moved to TCP with %zu unread bytes", ho_pre_left(pre));
	}
	free(copy);
}

void ho_fork_lock(void)
{
	pthread_mutex_lock(&ho_lock);
}

void ho_fork_unlock(void)
{
	pthread_mutex_unlock(&ho_lock);
}
