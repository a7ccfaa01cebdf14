/* ownfd.c - see ownfd.h. Lock: ownfd_lock (rwlock, a leaf) protects the
 * marks and the writes of their bitmap (its reads take no lock). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/ownfd.h"

static int ownfd_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (ownfd_oom = 1)
/* Keyed by a descriptor: a multiplicative hash and one compare (fdtab.c). */
#define HASH_FUNCTION(keyptr, keylen, hashv) \
	((hashv) = (unsigned)*(const int *)(keyptr) * 2654435761u)
#define HASH_KEYCMP(a, b, n) (*(const int *)(a) != *(const int *)(b))
#include <uthash.h>

fdbits_map ownfd_pages;
static pthread_rwlock_t ownfd_lock = PTHREAD_RWLOCK_INITIALIZER;

static int own_bit_set(unsigned fd, int on)
{
	return fdbits_set(ownfd_pages, fd, on);
}


struct own_entry {
	int fd;
	dev_t dev;
	ino_t ino;
	UT_hash_handle hh;
};

static struct own_entry *own_head; /* under ownfd_lock */

/* Caller holds the write lock. */
static void own_drop_locked(struct own_entry *o)
{
	own_bit_set((unsigned)o->fd, 0);
	HASH_DEL(own_head, o);
	free(o);
}

int ownfd_mark(int fd)
{
	struct own_entry *o, *old;
	struct stat st;
	int rc;

	if ((unsigned)fd >= FDBITS_MAX_FD)
		return -EBADF;
	if (fstat(fd, &st))
		return -errno;
	if (!(o = malloc(sizeof(*o))))
		return -ENOMEM;
	o->fd = fd;
	o->dev = st.st_dev;
	o->ino = st.st_ino;
	pthread_rwlock_wrlock(&ownfd_lock);
	HASH_FIND_INT(own_head, &fd, old);
	if (old) {
		HASH_DEL(own_head, old);
		free(old);
	}
	ownfd_oom = 0;
	HASH_ADD_INT(own_head, fd, o);
	if (ownfd_oom) {
		free(o);
		rc = -ENOMEM;
	} else if ((rc = own_bit_set((unsigned)fd, 1))) {
		HASH_DEL(own_head, o);
		free(o);
	}
	pthread_rwlock_unlock(&ownfd_lock);
	return rc;
}

int ownfd_room(void)
{
	struct rlimit rl;

	return getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= OWNFD_BASE + 2;
}

/* A close-on-exec duplicate of fd at OWNFD_BASE or above, or -1. */
static int dup_high(int fd)
{
	return (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, OWNFD_BASE);
}

int ownfd_dup(int fd)
{
	int d = dup_high(fd);

	if (d < 0)
		d = (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 0);
	if (d >= 0)
		ownfd_mark(d);
	return d;
}

int ownfd_dup_high(int fd)
{
	int d = dup_high(fd);

	if (d < 0) {
		if (errno == EINVAL) /* OWNFD_BASE at or beyond RLIMIT_NOFILE */
			errno = EMFILE;
		return -1;
	}
	ownfd_mark(d);
	return d;
}

int ownfd_move(int fd)
{
	int hi;

	if (fd < 0)
		return -1;
	if (fd < OWNFD_BASE && (hi = dup_high(fd)) >= 0) {
		syscall(SYS_close, fd);
		fd = hi;
	}
	ownfd_mark(fd);
	return fd;
}

void ownfd_forget(int fd)
{
	struct own_entry *o;

	if ((unsigned)fd >= FDBITS_MAX_FD)
		return;
	pthread_rwlock_wrlock(&ownfd_lock);
	HASH_FIND_INT(own_head, &fd, o);
	if (o)
		own_drop_locked(o);
	pthread_rwlock_unlock(&ownfd_lock);
}

void ownfd_close(int fd)
{
	if (fd < 0)
		return;
	ownfd_forget(fd);
	syscall(SYS_close, fd);
}

/* The mark of fd, checked against the file fd names now. Caller holds the
 * write lock; a stale mark is dropped. */
static int own_check_locked(int fd)
{
	struct own_entry *o;
	struct stat st;

	HASH_FIND_INT(own_head, &fd, o);
	if (!o)
		return 0;
	if (fstat(fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino)
		return 1;
	own_drop_locked(o);
	return 0;
}

int ownfd_is(int fd)
{
	struct own_entry *o;
	int r;

	if (!ownfd_maybe(fd))
		return 0;
	/* A shared look first, the exclusive lock only to check (and maybe
	 * drop) a mark. */
	pthread_rwlock_rdlock(&ownfd_lock);
	HASH_FIND_INT(own_head, &fd, o);
	pthread_rwlock_unlock(&ownfd_lock);
	if (!o)
		return 0;
	pthread_rwlock_wrlock(&ownfd_lock);
	r = own_check_locked(fd);
	pthread_rwlock_unlock(&ownfd_lock);
	return r;
}

static int int_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

int ownfd_list(unsigned lo, unsigned hi, int **out)
{
	struct own_entry *o, *tmp;
	size_t n = 0, cap;
	int *v;

	*out = NULL;
	pthread_rwlock_wrlock(&ownfd_lock);
	cap = HASH_COUNT(own_head);
	v = cap ? malloc(cap * sizeof(*v)) : NULL;
	if (cap && !v) {
		pthread_rwlock_unlock(&ownfd_lock);
		return -ENOMEM;
	}
	HASH_ITER(hh, own_head, o, tmp)
	{
		if ((unsigned)o->fd >= lo && (unsigned)o->fd <= hi && own_check_locked(o->fd))
			v[n++] = o->fd;
	}
	pthread_rwlock_unlock(&ownfd_lock);
	if (n)
		qsort(v, n, sizeof(*v), int_cmp);
	*out = v;
	return (int)n;
}

void ownfd_fork_prepare(void)
{
	pthread_rwlock_wrlock(&ownfd_lock);
}

void ownfd_fork_parent(void)
{
	pthread_rwlock_unlock(&ownfd_lock);
}

void ownfd_fork_child(void)
{
	pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;
	ownfd_lock = fresh;
}
