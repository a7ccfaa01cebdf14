/* real.c - resolution of the real libc entry points. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

#include "real.h"

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

/* True when p lies in the object that holds this code: RTLD_NEXT resolving a
 * name back to our own wrapper would make the shim call itself forever. */
static int real_is_self(const void *p, const void *self_base)
{
	Dl_info info;

	return self_base && dladdr(p, &info) && info.dli_fbase == self_base;
}

int real_resolve(void)
{
	Dl_info me;
	const void *self_base = NULL;
	int rc = 0;

	if (dladdr((void *)&real_resolve, &me))
		self_base = me.dli_fbase;
	for (size_t i = 0; i < RSOCK_ARRAY_SIZE(real_slots); i++) {
		void *p = dlsym(RTLD_NEXT, real_slots[i].name);
		if (p && real_is_self(p, self_base))
			p = NULL;
		*(void **)((char *)&rsock_real + real_slots[i].offset) = p;
		if (!p && real_slots[i].required)
			rc = -ENOSYS;
	}
	return rc;
}
