/* real.c - resolution of the real libc entry points. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#include "base/real.h"

struct rsock_real rsock_real;

struct real_slot {
	const char *name;
	size_t offset;
	int required;
};

static const struct real_slot real_slots[] = {
#define RSOCK_REAL_SLOT(ret, name, args, req) {#name, offsetof(struct rsock_real, name), req},
	RSOCK_REAL_FUNCS(RSOCK_REAL_SLOT)
#undef RSOCK_REAL_SLOT
};

/* The address range of the object that holds this code (its PT_LOAD
 * segments), found once with dl_iterate_phdr. dladdr() per resolved name
 * cost about 80,000 instructions each (glibc scans the symbol table): 6
 * million at every start of every preloaded process, 50 times what
 * /bin/true runs itself. */
struct self_span {
	uintptr_t at, lo, hi;
};

static int self_span_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct self_span *s = data;
	uintptr_t lo = UINTPTR_MAX, hi = 0;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		if (a < lo)
			lo = a;
		if (a + ph->p_memsz > hi)
			hi = a + ph->p_memsz;
	}
	if (s->at < lo || s->at >= hi)
		return 0;
	s->lo = lo;
	s->hi = hi;
	return 1;
}

/* True when p lies in the object that holds this code: RTLD_NEXT resolving a
 * name back to our own wrapper would make the shim call itself forever. */
static int real_is_self(const void *p, const struct self_span *s)
{
	return s->hi && (uintptr_t)p >= s->lo && (uintptr_t)p < s->hi;
}

int real_resolve(void)
{
	struct self_span self = {.at = (uintptr_t)&real_resolve};
	int rc = 0;

	dl_iterate_phdr(self_span_cb, &self);
	for (size_t i = 0; i < RSOCK_ARRAY_SIZE(real_slots); i++) {
		void *p = dlsym(RTLD_NEXT, real_slots[i].name);
		if (p && real_is_self(p, &self))
			p = NULL;
		*(void **)((char *)&rsock_real + real_slots[i].offset) = p;
		if (!p && real_slots[i].required)
			rc = -ENOSYS;
	}
	return rc;
}
