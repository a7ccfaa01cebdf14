/* fdtab.h - descriptor -> conn table.
 *
 * A uthash table (fd -> conn, one conn reference per entry) under a rwlock,
 * fronted by a lock-free bitmap so that calls on descriptors the library does
 * not track cost a few instructions: fdtab_maybe_tracked() is all the fast
 * path of every shim runs. Descriptors >= FDTAB_MAX_FD are never tracked
 * (their streams stay on kernel TCP). The library's own descriptors (below)
 * have a bitmap of their own, fdtab_maybe_own(): only the calls that close or
 * replace a descriptor look at it, so that the data calls rdma-core makes on
 * them (the doorbell write() of a soft-RoCE post, a completion channel's
 * read()) cost no lookup. */
#ifndef RSOCK_FDTAB_H
#define RSOCK_FDTAB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/compiler.h"
#include "core/conn.h"

#define FDTAB_PAGE_SHIFT 15 /* 32768 descriptors, 4 KiB of bits a page */
#define FDTAB_PAGES 64
#define FDTAB_MAX_FD (FDTAB_PAGES << FDTAB_PAGE_SHIFT)

typedef _Atomic(_Atomic uint64_t *) fdtab_bitmap[FDTAB_PAGES];
extern fdtab_bitmap fdtab_pages RSOCK_HIDDEN;     /* streams and epoll instances */
extern fdtab_bitmap fdtab_own_pages RSOCK_HIDDEN; /* the library's own descriptors */

static inline int fdtab_bit(fdtab_bitmap map, int fd)
{
	unsigned u = (unsigned)fd;
	_Atomic uint64_t *page;

	if (RSOCK_UNLIKELY(u >= FDTAB_MAX_FD))
		return 0;
	page = atomic_load_explicit(&map[u >> FDTAB_PAGE_SHIFT], memory_order_relaxed);
	if (RSOCK_LIKELY(!page))
		return 0;
	return (int)((atomic_load_explicit(&page[(u >> 6) & 511], memory_order_relaxed) >> (u & 63)) & 1);
}

/* True when fd may be in the table (exact unless a concurrent insert or
 * remove is under way for the same fd). Lock-free. */
static inline int fdtab_maybe_tracked(int fd)
{
	return fdtab_bit(fdtab_pages, fd);
}

/* True when fd may be one of the library's own (the mark is checked by
 * fdtab_is_own). Lock-free. */
static inline int fdtab_maybe_own(int fd)
{
	return fdtab_bit(fdtab_own_pages, fd);
}

void fdtab_init(void);

/* Map fd to c, taking a reference on c. An existing mapping of fd is replaced
 * and its reference dropped (the kernel reused the number behind our back).
 * Returns 0, -EBADF when fd is out of the trackable range, -ENOMEM. */
int fdtab_insert(int fd, struct conn *c);

/* The conn of fd with a new reference (caller calls conn_unref), or NULL.
 * Takes no lock. */
struct conn *fdtab_get(int fd);

/* Remove fd and hand the table's reference to the caller (NULL if absent). */
struct conn *fdtab_take(int fd);

/* Remove every fd in [lo, hi], dropping the table's references. */
void fdtab_remove_range(unsigned lo, unsigned hi);

/* ---- the library's own descriptors ----------------------------------------
 * Event channels, completion channels, our duplicates of sockets and epoll
 * instances, eventfds, pipes, the verbs devices' descriptors, the log file.
 * The application never opened them, so to it they are not open: close()
 * fails with EBADF, close_range() and closefrom() pass over them, and a
 * dup2() onto one is refused (shim/fd.c). Each is recorded with its file's
 * identity (device, inode): a mark whose number now names another file (a
 * descriptor the library closed without fdtab_disown) is dropped when next
 * looked at, so a stale mark can never make the application's own
 * descriptor unclosable. */

/* The lowest number fdtab_own_move() moves a descriptor to. */
#define FDTAB_OWN_BASE 512

/* Record fd as the library's own. Returns 0 or -errno. */
int fdtab_own(int fd);

/* Move fd to a number >= FDTAB_OWN_BASE (close-on-exec; the original is
 * closed) and record it as the library's own. Returns the number to use:
 * fd itself when it cannot move (then recorded where it is), -1 when fd < 0. */
int fdtab_own_move(int fd);

/* A close-on-exec duplicate of fd, recorded as the library's own: at a
 * number >= FDTAB_OWN_BASE when the limit on open files allows, else the
 * lowest free one. Returns it, or -1 with errno set. */
int fdtab_own_dup(int fd);

/* The library is about to close fd (or rdma-core is about to close it for
 * us): forget the mark. */
void fdtab_disown(int fd);

/* Forget the mark of fd and close it. */
void fdtab_close_own(int fd);

/* fd is one of the library's own (the mark checked against the file). */
int fdtab_is_own(int fd);

/* The library's own descriptors in [lo, hi], ascending, in *out (free it).
 * Returns how many, or -ENOMEM. */
int fdtab_own_list(unsigned lo, unsigned hi, int **out);

/* Call fn for every descriptor in the table (a snapshot; fn runs without
 * the table's lock, with a reference on c that fn must not drop). */
void fdtab_each(void (*fn)(int fd, struct conn *c, void *arg), void *arg);

/* Number of descriptors in the table. */
size_t fdtab_count(void);

/* Around fork(): hold the write lock so the child never inherits it held. */
void fdtab_fork_prepare(void);
void fdtab_fork_parent(void);
void fdtab_fork_child(void);

#endif
