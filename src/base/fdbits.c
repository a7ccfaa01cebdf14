/* fdbits.c - see fdbits.h. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <stdlib.h>

#include "base/fdbits.h"

int fdbits_set(fdbits_map map, unsigned fd, int on)
{
	_Atomic uint64_t *page = atomic_load(&map[fd >> FDBITS_PAGE_SHIFT]);
	uint64_t mask = 1ull << (fd & 63);

	if (!page) {
		if (!on)
			return 0;
		page = calloc(512, sizeof(*page));
		if (!page)
			return -ENOMEM;
		atomic_store(&map[fd >> FDBITS_PAGE_SHIFT], page);
	}
	if (on)
		atomic_fetch_or(&page[(fd >> 6) & 511], mask);
	else
		atomic_fetch_and(&page[(fd >> 6) & 511], ~mask);
	return 0;
}
