/* statpub.c - see statpub.h. The segment's file is made with open(2) under
 * /dev/shm (what shm_open does), by the library's own system calls: close
 * and read are the library's wrappers in a preloaded process. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/statpub.h"
#include "rsock/rsock.h"

static struct statpub_header *_Atomic sp_hdr;
static pthread_mutex_t sp_lock = PTHREAD_MUTEX_INITIALIZER;
static int sp_failed;          /* this process could not make its segment: no retry */
static uint32_t *sp_free;      /* slots given back, reused first (under sp_lock) */
static uint32_t sp_nfree, sp_freecap;

#define SP_LEN ((size_t)STATPUB_HDR_SIZE + (size_t)STATPUB_SLOTS * sizeof(struct statpub_slot))

static inline struct statpub_slot *sp_slot(struct statpub_header *h, uint32_t i)
{
	return (struct statpub_slot *)((char *)h + STATPUB_HDR_SIZE) + i;
}

static pid_t sp_getpid(void)
{
	return (pid_t)syscall(SYS_getpid);
}

/* buf: at least 64 bytes */
static void sp_name(char *buf, size_t len, pid_t pid)
{
	static const char pre[] = STATPUB_DIR "/" STATPUB_PREFIX;

	(void)len;
	memcpy(buf, pre, sizeof(pre) - 1);
	*log_dec(buf + sizeof(pre) - 1, (unsigned)pid) = 0;
}

/* The file of pid's segment, made anew (an older one of that name, a
 * reused pid's or the image's before an exec, is replaced), sized.
 * A descriptor, or -errno. */
static int sp_make_file(pid_t pid)
{
	char name[64];
	int fd, rc;

	sp_name(name, sizeof(name), pid);
	fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST && unlink(name) == 0)
		fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)SP_LEN)) {
		rc = -errno;
		unlink(name);
		syscall(SYS_close, fd);
		return rc;
	}
	return fd;
}

/* Who the segment belongs to; magic last, so that a reader sees it only
 * on a complete header. */
static void sp_identity(struct statpub_header *h, pid_t pid)
{
	char comm[17] = "";

	h->version = STATPUB_VERSION;
	h->header_size = STATPUB_HDR_SIZE;
	h->slot_size = sizeof(struct statpub_slot);
	h->nslots = STATPUB_SLOTS;
	h->pid = pid;
	h->uid = (uint32_t)getuid();
	/* (a clock, not /proc/self/stat's start time: no file read on the
	 * first stream's path) */
	h->made = (uint64_t)clock_boot_ns();
	prctl(PR_GET_NAME, comm, 0, 0, 0);
	memcpy(h->comm, comm, sizeof(h->comm) - 1);
	h->comm[sizeof(h->comm) - 1] = 0;
	atomic_thread_fence(memory_order_release);
	h->magic = STATPUB_MAGIC;
}

/* Segments whose process is gone (killed, or ended by _exit) are removed
 * once a process has made its own, by the library's thread (statpub_turn),
 * off the first stream's path, so that they do not pile up between runs of
 * rsock-stat (which removes them too); only the user's own can be
 * (/dev/shm is sticky). */
static _Atomic int sp_sweep_due;

static void sp_sweep(void)
{
	DIR *d = opendir(STATPUB_DIR);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		const char *n = e->d_name;
		char *end, name[300];
		long pid;
		if (strncmp(n, STATPUB_PREFIX, sizeof(STATPUB_PREFIX) - 1))
			continue;
		pid = strtol(n + sizeof(STATPUB_PREFIX) - 1, &end, 10);
		if (*end || pid <= 0 || pid > 0x7fffffff || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(name, sizeof(name), STATPUB_DIR "/%s", n);
		unlink(name);
	}
	closedir(d);
}

int statpub_turn(void)
{
	if (atomic_load_explicit(&sp_sweep_due, memory_order_relaxed) &&
	    atomic_exchange(&sp_sweep_due, 0)) {
		int saved = errno;
		sp_sweep();
		errno = saved;
	}
	return 0;
}

int statpub_live(void)
{
	return atomic_load_explicit(&sp_hdr, memory_order_acquire) != NULL;
}

int statpub_open(const struct rsock_stats *now)
{
	struct statpub_header *h;
	pid_t pid = sp_getpid();
	int fd, rc = 0;

	pthread_mutex_lock(&sp_lock);
	if (atomic_load(&sp_hdr) || sp_failed)
		goto out;
	if ((fd = sp_make_file(pid)) < 0) {
		rc = fd;
		goto fail;
	}
	h = mmap(NULL, SP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	syscall(SYS_close, fd);
	if (h == MAP_FAILED) {
		char name[64];
		rc = -errno;
		sp_name(name, sizeof(name), pid);
		unlink(name);
		goto fail;
	}
	atomic_store_explicit(&h->counters[STATPUB_C_STREAMS_TCP], (int64_t)now->streams_tcp, memory_order_relaxed);
	atomic_store_explicit(&h->counters[STATPUB_C_STREAMS_RDMA], (int64_t)now->streams_rdma, memory_order_relaxed);
	atomic_store_explicit(&h->counters[STATPUB_C_STREAMS_SHM], (int64_t)now->streams_shm, memory_order_relaxed);
	atomic_store_explicit(&h->counters[STATPUB_C_REGISTERED], (int64_t)now->registered_bytes, memory_order_relaxed);
	atomic_store_explicit(&h->counters[STATPUB_C_TRACKED_FDS], (int64_t)now->tracked_fds, memory_order_relaxed);
	atomic_store_explicit(&h->counters[STATPUB_C_HANDOVERS], (int64_t)now->handovers, memory_order_relaxed);
	atomic_store_explicit(&h->counters[STATPUB_C_CQ_EVENTS], (int64_t)now->cq_events, memory_order_relaxed);
	atomic_store_explicit(&h->counters[STATPUB_C_CQ_ARMS], (int64_t)now->cq_arms, memory_order_relaxed);
	atomic_store_explicit(&h->counters[STATPUB_C_ZCOPY], (int64_t)now->zcopy_bytes, memory_order_relaxed);
	atomic_store_explicit(&h->counters[STATPUB_C_FAILOVERS], (int64_t)now->failovers, memory_order_relaxed);
	for (int i = 0; i < RSOCK_FB_MAX; i++)
		atomic_store_explicit(&h->counters[STATPUB_C_FALLBACK + i], (int64_t)now->fallbacks[i],
				      memory_order_relaxed);
	/* The bytes of streams that were never published (none, but those
	 * before the table filled) count as gone. */
	atomic_store_explicit(&h->closed_bytes[0][1], now->tx_bytes_tcp, memory_order_relaxed);
	atomic_store_explicit(&h->closed_bytes[0][0], now->rx_bytes_tcp, memory_order_relaxed);
	atomic_store_explicit(&h->closed_bytes[1][1], now->tx_bytes_rdma, memory_order_relaxed);
	atomic_store_explicit(&h->closed_bytes[1][0], now->rx_bytes_rdma, memory_order_relaxed);
	atomic_store_explicit(&h->closed_bytes[2][1], now->tx_bytes_shm, memory_order_relaxed);
	atomic_store_explicit(&h->closed_bytes[2][0], now->rx_bytes_shm, memory_order_relaxed);
	sp_identity(h, pid);
	atomic_store_explicit(&sp_hdr, h, memory_order_release);
	atomic_store_explicit(&sp_sweep_due, 1, memory_order_relaxed);
	log_debug("statpub: streams published in " STATPUB_DIR "/" STATPUB_PREFIX "%d", (int)pid);
	goto out;
fail:
	sp_failed = 1;
	log_debug("statpub: no segment for rsock-stat (errno %d); streams are not published", -rc);
out:
	pthread_mutex_unlock(&sp_lock);
	return rc;
}

static void sp_addr(struct sockaddr_in6 *dst, const struct sockaddr *sa)
{
	memset(dst, 0, sizeof(*dst));
	if (sa && sa->sa_family == AF_INET)
		memcpy(dst, sa, sizeof(struct sockaddr_in));
	else if (sa && sa->sa_family == AF_INET6)
		memcpy(dst, sa, sizeof(struct sockaddr_in6));
}

struct statpub_slot *statpub_claim(int fd, enum statpub_role role, const struct sockaddr *local,
				   const struct sockaddr *peer)
{
	struct statpub_header *h = atomic_load_explicit(&sp_hdr, memory_order_acquire);
	struct statpub_slot *p;
	uint32_t i;

	if (!h)
		return NULL;
	pthread_mutex_lock(&sp_lock);
	if (sp_nfree) {
		i = sp_free[--sp_nfree];
	} else if ((i = atomic_load_explicit(&h->slots_hi, memory_order_relaxed)) < STATPUB_SLOTS) {
		atomic_store_explicit(&h->slots_hi, i + 1, memory_order_release);
	} else {
		atomic_fetch_add_explicit(&h->unpublished, 1, memory_order_relaxed);
		pthread_mutex_unlock(&sp_lock);
		return NULL;
	}
	p = sp_slot(h, i);
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_relaxed); /* odd: being written */
	atomic_thread_fence(memory_order_release);
	p->fd = fd;
	p->role = (uint8_t)role;
	atomic_store_explicit(&p->path, STATPUB_PATH_UNDECIDED, memory_order_relaxed);
	atomic_store_explicit(&p->state, STATPUB_ST_ESTABLISHED, memory_order_relaxed);
	atomic_store_explicit(&p->fallback, -1, memory_order_relaxed);
	sp_addr(&p->local, local);
	sp_addr(&p->peer, peer);
	p->since = (int64_t)time(NULL);
	for (int r = 0; r < STATPUB_BYTE_PATHS; r++)
		for (int t = 0; t < 2; t++)
			atomic_store_explicit(&p->bytes[r][t], 0, memory_order_relaxed);
	memset(p->device, 0, sizeof(p->device));
	atomic_store_explicit(&p->qpn, 0, memory_order_relaxed);
	atomic_store_explicit(&p->rx_ring, 0, memory_order_relaxed);
	atomic_store_explicit(&p->tx_ring, 0, memory_order_relaxed);
	atomic_store_explicit(&p->peer_ring, 0, memory_order_relaxed);
	statpub_credits(p, 0, 0);
	atomic_store_explicit(&p->used, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release); /* even: complete */
	pthread_mutex_unlock(&sp_lock);
	return p;
}

void statpub_release(struct statpub_slot *p)
{
	struct statpub_header *h = atomic_load_explicit(&sp_hdr, memory_order_acquire);
	uint32_t i;

	if (!p || !h)
		return;
	i = (uint32_t)(p - sp_slot(h, 0));
	if (i >= STATPUB_SLOTS)
		return;
	pthread_mutex_lock(&sp_lock);
	if (sp_nfree == sp_freecap) {
		uint32_t cap = sp_freecap ? 2 * sp_freecap : 256;
		uint32_t *n = realloc(sp_free, cap * sizeof(*n));
		if (!n) { /* the slot is lost to the table, not to the counts */
			pthread_mutex_unlock(&sp_lock);
			atomic_store_explicit(&p->used, 0, memory_order_relaxed);
			return;
		}
		sp_free = n;
		sp_freecap = cap;
	}
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	for (int r = 0; r < STATPUB_BYTE_PATHS; r++)
		for (int t = 0; t < 2; t++)
			atomic_fetch_add_explicit(&h->closed_bytes[r][t],
						  atomic_exchange_explicit(&p->bytes[r][t], 0, memory_order_relaxed),
						  memory_order_relaxed);
	atomic_store_explicit(&p->used, 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	sp_free[sp_nfree++] = i;
	pthread_mutex_unlock(&sp_lock);
}

void statpub_count(enum statpub_counter i, int64_t delta)
{
	struct statpub_header *h = atomic_load_explicit(&sp_hdr, memory_order_relaxed);

	if (h && (unsigned)i < STATPUB_C_MAX)
		atomic_fetch_add_explicit(&h->counters[i], delta, memory_order_relaxed);
}

void statpub_set(enum statpub_counter i, int64_t v)
{
	struct statpub_header *h = atomic_load_explicit(&sp_hdr, memory_order_relaxed);

	if (h && (unsigned)i < STATPUB_C_MAX)
		atomic_store_explicit(&h->counters[i], v, memory_order_relaxed);
}

void statpub_rdma(struct statpub_slot *p, const char *device, uint32_t qpn, uint32_t rx_ring,
		  uint32_t tx_ring, uint32_t peer_ring)
{
	if (!p)
		return;
	if (device) {
		char d[sizeof(p->device)] = "";
		strncpy(d, device, sizeof(d) - 1);
		memcpy(p->device, d, sizeof(d));
	}
	atomic_store_explicit(&p->qpn, qpn, memory_order_relaxed);
	atomic_store_explicit(&p->rx_ring, rx_ring, memory_order_relaxed);
	atomic_store_explicit(&p->tx_ring, tx_ring, memory_order_relaxed);
	atomic_store_explicit(&p->peer_ring, peer_ring, memory_order_relaxed);
}

/* The slots in use when a fork began, noted in private memory while sp_lock
 * holds every claim and release still: the segment is shared with the
 * parent, which may release its slots (its close of a stream the child
 * keeps) before the child's handler reads them there. */
static uint64_t sp_fork_live[STATPUB_SLOTS / 64];
static uint32_t sp_fork_hi;

/* The segment mapped at h moves to a new file of this process (its
 * identity and what its slots hold), mapped at the same address, so that
 * the slots the streams point at stay theirs. 0 or -errno. */
static int sp_move(struct statpub_header *h)
{
	pid_t pid = sp_getpid();
	uint32_t hi = sp_fork_hi;
	struct statpub_header *n;
	int fd = sp_make_file(pid);

	if (fd < 0)
		return fd;
	n = mmap(NULL, SP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (n == MAP_FAILED)
		goto fail;
	memcpy(n, h, STATPUB_HDR_SIZE);
	n->magic = 0;
	for (uint32_t i = 0; i < hi; i++)
		if ((sp_fork_live[i / 64] >> (i % 64)) & 1) {
			memcpy(sp_slot(n, i), sp_slot(h, i), sizeof(struct statpub_slot));
			atomic_store(&sp_slot(n, i)->used, 1); /* the parent may have let it go */
		}
	sp_identity(n, pid);
	munmap(n, SP_LEN);
	if (mmap(h, SP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
		goto fail;
	syscall(SYS_close, fd);
	return 0;
fail:;
	int rc = -errno;
	char name[64];
	sp_name(name, sizeof(name), pid);
	unlink(name);
	syscall(SYS_close, fd);
	return rc;
}

void statpub_unlink(void)
{
	struct statpub_header *h = atomic_load(&sp_hdr);
	char name[64];

	int saved = errno;

	if (!h || h->pid != sp_getpid())
		return;
	sp_name(name, sizeof(name), h->pid);
	unlink(name);
	errno = saved;
}

void statpub_exec_failed(void)
{
	struct statpub_header *h = atomic_load(&sp_hdr);
	int rc;

	int saved = errno;

	if (!h || h->pid != sp_getpid())
		return;
	pthread_mutex_lock(&sp_lock);
	if ((rc = sp_move(h)))
		log_debug("statpub: segment not made again after a failed exec (errno %d)", -rc);
	pthread_mutex_unlock(&sp_lock);
	errno = saved;
}

void statpub_fork_lock(void)
{
	struct statpub_header *h;

	pthread_mutex_lock(&sp_lock);
	h = atomic_load(&sp_hdr);
	sp_fork_hi = h ? atomic_load(&h->slots_hi) : 0;
	if (sp_fork_hi > STATPUB_SLOTS)
		sp_fork_hi = STATPUB_SLOTS;
	memset(sp_fork_live, 0, (sp_fork_hi + 63) / 64 * sizeof(uint64_t));
	for (uint32_t i = 0; i < sp_fork_hi; i++)
		if (atomic_load(&sp_slot(h, i)->used))
			sp_fork_live[i / 64] |= 1ull << (i % 64);
}

void statpub_fork_unlock(void)
{
	pthread_mutex_unlock(&sp_lock);
}

void statpub_fork_child(void)
{
	struct statpub_header *h = atomic_load(&sp_hdr);
	uint32_t live = 0, hi;
	int rc, saved = errno;

	pthread_mutex_init(&sp_lock, NULL);
	sp_failed = 0;
	if (!h)
		return;
	hi = sp_fork_hi;
	for (uint32_t i = 0; i < hi; i++)
		live += (sp_fork_live[i / 64] >> (i % 64)) & 1;
	if (!live) { /* nothing inherited: a segment at the child's first stream */
		atomic_store(&sp_hdr, NULL);
		munmap(h, SP_LEN);
		sp_nfree = 0;
		return;
	}
	rc = sp_move(h);
	errno = saved;
	if (rc == 0)
		return;
	/* Never the parent's: memory nobody reads under the inherited slots. */
	log_debug("statpub: no segment for the fork child (errno %d); its streams are not published", -rc);
	sp_failed = 1;
	atomic_store(&sp_hdr, NULL);
	mmap(h, SP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}
