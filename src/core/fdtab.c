/* fdtab.c - see fdtab.h. Lock: fdtab_lock (rwlock) protects the hash and
 * the writes of the slots and bitmaps (their reads take no lock); it is a
 * leaf lock (nothing else is taken while it is held except conn reference
 * counts, which are atomics). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/fdtab.h"
#include "base/statpub.h"

static int fdtab_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (fdtab_oom = 1)
/* Every table here is keyed by a descriptor, a small dense int: a
 * multiplicative hash and one compare, instead of uthash's Jenkins hash and
 * memcmp, which took about 150 instructions a lookup (two per round trip). */
#define HASH_FUNCTION(keyptr, keylen, hashv) \
	((hashv) = (unsigned)*(const int *)(keyptr) * 2654435761u)
#define HASH_KEYCMP(a, b, n) (*(const int *)(a) != *(const int *)(b))
#include <uthash.h>

struct fdtab_entry {
	int fd;
	struct conn *conn;
	UT_hash_handle hh;
};

fdbits_map fdtab_pages;

/* Each tracked descriptor's conn, for fdtab_get without the lock: pages of
 * 4,096 slots (32 KiB), mapped at the first descriptor of their range.
 * Written under the write lock, beside the hash, which stays the table
 * (fdtab_each, fdtab_count, ranges). */
#define SLOT_SHIFT 12
#define SLOT_PAGES (FDBITS_MAX_FD >> SLOT_SHIFT)
typedef _Atomic(struct conn *) fdtab_slot;
static _Atomic(fdtab_slot *) fdtab_slots[SLOT_PAGES];
static struct fdtab_entry *fdtab_head;
static size_t fdtab_n;
static pthread_rwlock_t fdtab_lock = PTHREAD_RWLOCK_INITIALIZER;

void fdtab_init(void)
{
}


/* Caller holds the write lock. Returns 0 or -ENOMEM (never for c NULL). */
static int slot_set(unsigned fd, struct conn *c)
{
	fdtab_slot *page = atomic_load_explicit(&fdtab_slots[fd >> SLOT_SHIFT], memory_order_relaxed);

	if (!page) {
		if (!c)
			return 0;
		/* Mapped, not calloc'ed: calloc clears all 32 KiB, a page fault
		 * each, at a process's first socket(); a mapping faults in
		 * only the page a descriptor's slot is on. Never unmapped. */
		page = mmap(NULL, ((size_t)1 << SLOT_SHIFT) * sizeof(*page), PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (page == MAP_FAILED)
			return -ENOMEM;
		atomic_store_explicit(&fdtab_slots[fd >> SLOT_SHIFT], page, memory_order_release);
	}
	atomic_store_explicit(&page[fd & ((1u << SLOT_SHIFT) - 1)], c, memory_order_release);
	return 0;
}

static int bit_set(unsigned fd, int on)
{
	return fdbits_set(fdtab_pages, fd, on);
}

/* Caller holds the write lock; returns the removed entry's conn reference. */
static struct conn *remove_locked(int fd)
{
	struct fdtab_entry *e;
	struct conn *c;

	HASH_FIND_INT(fdtab_head, &fd, e);
	if (!e)
		return NULL;
	HASH_DEL(fdtab_head, e);
	fdtab_n--;
	statpub_set(STATPUB_C_TRACKED_FDS, (int64_t)fdtab_n);
	bit_set((unsigned)fd, 0);
	slot_set((unsigned)fd, NULL);
	c = e->conn;
	free(e);
	return c;
}

int fdtab_insert(int fd, struct conn *c)
{
	struct fdtab_entry *e;
	struct conn *old;
	int rc = 0;

	if ((unsigned)fd >= FDBITS_MAX_FD)
		return -EBADF;
	e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->fd = fd;
	e->conn = conn_ref(c);
	atomic_fetch_add_explicit(&c->nfds, 1, memory_order_relaxed);

	pthread_rwlock_wrlock(&fdtab_lock);
	old = remove_locked(fd);
	fdtab_oom = 0;
	HASH_ADD_INT(fdtab_head, fd, e);
	if (fdtab_oom) {
		rc = -ENOMEM;
	} else if ((rc = slot_set((unsigned)fd, c)) || (rc = bit_set((unsigned)fd, 1))) {
		slot_set((unsigned)fd, NULL);
		HASH_DEL(fdtab_head, e);
	} else {
		fdtab_n++;
		statpub_set(STATPUB_C_TRACKED_FDS, (int64_t)fdtab_n);
	}
	pthread_rwlock_unlock(&fdtab_lock);

	conn_fd_gone(old);
	conn_unref(old);
	if (rc) {
		conn_fd_gone(e->conn);
		conn_unref(e->conn);
		free(e);
	}
	return rc;
}

/* Every data call looks its descriptor up: no lock (a shared rwlock's
 * counter is one cache line all threads write), one slot read and a
 * reference taken on the conn found, which holds if the slot still names it
 * then. The conn may have been freed meanwhile: conns are never given back
 * to malloc (conn.c), so the count is 0 (conn_tryref fails) or the memory
 * is another stream's conn, no longer (or not yet) in this slot; either way
 * the slot is read again. */
struct conn *fdtab_get(int fd)
{
	unsigned u = (unsigned)fd;
	fdtab_slot *page, *slot;
	struct conn *c;

	if (u >= FDBITS_MAX_FD)
		return NULL;
	page = atomic_load_explicit(&fdtab_slots[u >> SLOT_SHIFT], memory_order_acquire);
	if (!page)
		return NULL;
	slot = &page[u & ((1u << SLOT_SHIFT) - 1)];
	while ((c = atomic_load_explicit(slot, memory_order_acquire))) {
		if (conn_tryref(c)) {
			if (atomic_load_explicit(slot, memory_order_acquire) == c)
				return c;
			conn_unref(c);
		}
	}
	return NULL;
}

struct conn *fdtab_take(int fd)
{
	struct conn *c;

	pthread_rwlock_wrlock(&fdtab_lock);
	c = remove_locked(fd);
	pthread_rwlock_unlock(&fdtab_lock);
	conn_fd_gone(c);
	return c;
}

void fdtab_remove_range(unsigned lo, unsigned hi)
{
	struct fdtab_entry *e, *tmp, *gone = NULL;

	pthread_rwlock_wrlock(&fdtab_lock);
	HASH_ITER(hh, fdtab_head, e, tmp)
	{
		if ((unsigned)e->fd >= lo && (unsigned)e->fd <= hi) {
			HASH_DEL(fdtab_head, e);
			fdtab_n--;
			bit_set((unsigned)e->fd, 0);
			slot_set((unsigned)e->fd, NULL);
			e->hh.next = gone; /* reuse the handle to chain the victims */
			gone = e;
		}
	}
	statpub_set(STATPUB_C_TRACKED_FDS, (int64_t)fdtab_n);
	pthread_rwlock_unlock(&fdtab_lock);
	while (gone) {
		e = gone;
		gone = e->hh.next;
		conn_fd_gone(e->conn);
		conn_unref(e->conn);
		free(e);
	}
}

void fdtab_each(void (*fn)(int fd, struct conn *c, void *arg), void *arg)
{
	struct fdtab_entry *e, *tmp;
	struct {
		int fd;
		struct conn *c;
	} *snap;
	size_t n = 0, cap;

	pthread_rwlock_rdlock(&fdtab_lock);
	cap = fdtab_n;
	snap = cap ? malloc(cap * sizeof(*snap)) : NULL;
	if (snap) {
		HASH_ITER(hh, fdtab_head, e, tmp)
		{
			if (n == cap || !e->conn)
				continue;
			snap[n].fd = e->fd;
			snap[n++].c = conn_ref(e->conn);
		}
	}
	pthread_rwlock_unlock(&fdtab_lock);
	for (size_t i = 0; i < n; i++) {
		fn(snap[i].fd, snap[i].c, arg);
		conn_unref(snap[i].c);
	}
	free(snap);
}

size_t fdtab_count(void)
{
	size_t n;

	pthread_rwlock_rdlock(&fdtab_lock);
	n = fdtab_n;
	pthread_rwlock_unlock(&fdtab_lock);
	return n;
}

void fdtab_fork_prepare(void)
{
	pthread_rwlock_wrlock(&fdtab_lock);
}

void fdtab_fork_parent(void)
{
	pthread_rwlock_unlock(&fdtab_lock);
}

void fdtab_fork_child(void)
{
	/* The child is single-threaded: re-initialise rather than unlock a
	 * lock whose owner thread does not exist there. */
	pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;
	fdtab_lock = fresh;
}
