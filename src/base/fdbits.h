/* fdbits.h - a bitmap over descriptor numbers that is read without a lock:
 * pages of 32,768 bits allocated at the first descriptor of their range.
 * The fd table's "may be tracked" and ownfd's "may be the library's own"
 * marks. Readers take no lock; writers (fdbits_set) hold their table's. */
#ifndef RSOCK_FDBITS_H
#define RSOCK_FDBITS_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/compiler.h"

#define FDBITS_PAGE_SHIFT 15 /* 32768 descriptors, 4 KiB of bits a page */
#define FDBITS_PAGES 64
#define FDBITS_MAX_FD (FDBITS_PAGES << FDBITS_PAGE_SHIFT)

typedef _Atomic(_Atomic uint64_t *) fdbits_map[FDBITS_PAGES];
extern fdbits_map fdtab_pages RSOCK_HIDDEN;     /* streams and epoll instances */
extern fdbits_map ownfd_pages RSOCK_HIDDEN; /* the library's own descriptors */

static inline int fdbits_test(fdbits_map map, int fd)
{
	unsigned u = (unsigned)fd;
	_Atomic uint64_t *page;

	if (RSOCK_UNLIKELY(u >= FDBITS_MAX_FD))
		return 0;
	page = atomic_load_explicit(&map[u >> FDBITS_PAGE_SHIFT], memory_order_relaxed);
	if (RSOCK_LIKELY(!page))
		return 0;
	return (int)((atomic_load_explicit(&page[(u >> 6) & 511], memory_order_relaxed) >> (u & 63)) & 1);
}

/* Set or clear fd's bit. Caller holds the owning table's write lock. 0, or
 * -ENOMEM when fd's page could not be allocated (setting only). */
int fdbits_set(fdbits_map map, unsigned fd, int on);

#endif
