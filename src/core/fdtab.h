/* fdtab.h - descriptor -> conn table.
 *
 * A uthash table (fd -> conn, one conn reference per entry) under a rwlock,
 * fronted by a lock-free bitmap so that calls on descriptors the library does
 * not track cost a few instructions: fdtab_maybe_tracked() is all the fast
 * path of every shim runs. Descriptors >= FDBITS_MAX_FD are never tracked
 * (their streams stay on kernel TCP). The library's own descriptors
 * are base/ownfd.h's. */
#ifndef RSOCK_FDTAB_H
#define RSOCK_FDTAB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/compiler.h"
#include "base/fdbits.h"
#include "core/conn.h"

/* True when fd may be in the table (exact unless a concurrent insert or
 * remove is under way for the same fd). Lock-free. */
extern fdbits_map fdtab_pages RSOCK_HIDDEN; /* streams and epoll instances */

static inline int fdtab_maybe_tracked(int fd)
{
	return fdbits_test(fdtab_pages, fd);
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
