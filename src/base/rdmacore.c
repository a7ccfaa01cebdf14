/* rdmacore.c - see rdmacore.h. A process whose streams all stay on TCP
 * never maps librdmacm, libibverbs, libnl-3 and libnl-route-3 nor runs
 * their constructors: loading them with the library cost each preloaded
 * process four more objects to map and relocate and libnl-route's dozens
 * of registrations, about as much as the rest of the library's start.
 *
 * Each function below stands in for rdma-core's of the same name (the
 * headers' declarations, so the compiler checks every signature; hidden,
 * so the application's own calls into rdma-core reach rdma-core itself).
 * Loading with dlopen finds the objects the application may have loaded
 * already: there is one librdmacm and one libibverbs in the process,
 * whoever loaded them. Like rdma-core's functions these set errno: when
 * rdma-core cannot be loaded they fail with ENODEV, as where no device is. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "base/compiler.h"
#include "base/log.h"
#include "base/rdmacore.h"

#define RC_LIBIBVERBS "libibverbs.so.1"
#define RC_LIBRDMACM "librdmacm.so.1"

/* X(name, library, symbol version, return type, value on failure,
 *   parameters, arguments). The versions are those a link against
 * rdma-core records (`nm -D`), the oldest that has the function's
 * present form. */
#define RC_FUNCS(X)                                                                             \
	X(ibv_alloc_pd, RC_IBV, "IBVERBS_1.1", struct ibv_pd *, NULL, (struct ibv_context * c), \
	  (c))                                                                                  \
	X(ibv_create_comp_channel, RC_IBV, "IBVERBS_1.0", struct ibv_comp_channel *, NULL,       \
	  (struct ibv_context * c), (c))                                                        \
	X(ibv_create_cq, RC_IBV, "IBVERBS_1.1", struct ibv_cq *, NULL,                           \
	  (struct ibv_context * c, int cqe, void *ctx, struct ibv_comp_channel *ch, int vec),     \
	  (c, cqe, ctx, ch, vec))                                                               \
	X(ibv_create_qp, RC_IBV, "IBVERBS_1.1", struct ibv_qp *, NULL,                           \
	  (struct ibv_pd * pd, struct ibv_qp_init_attr *a), (pd, a))                            \
	X(ibv_dealloc_pd, RC_IBV, "IBVERBS_1.1", int, ENODEV, (struct ibv_pd * pd), (pd))        \
	X(ibv_dereg_mr, RC_IBV, "IBVERBS_1.1", int, ENODEV, (struct ibv_mr * mr), (mr))          \
	X(ibv_destroy_comp_channel, RC_IBV, "IBVERBS_1.0", int, ENODEV,                          \
	  (struct ibv_comp_channel * ch), (ch))                                                 \
	X(ibv_destroy_cq, RC_IBV, "IBVERBS_1.1", int, ENODEV, (struct ibv_cq * cq), (cq))        \
	X(ibv_destroy_qp, RC_IBV, "IBVERBS_1.1", int, ENODEV, (struct ibv_qp * qp), (qp))        \
	X(ibv_event_type_str, RC_IBV, "IBVERBS_1.1", const char *, "unknown",                    \
	  (enum ibv_event_type ev), (ev))                                                       \
	X(ibv_get_async_event, RC_IBV, "IBVERBS_1.1", int, -1,                                   \
	  (struct ibv_context * c, struct ibv_async_event *ev), (c, ev))                        \
	X(ibv_get_cq_event, RC_IBV, "IBVERBS_1.1", int, -1,                                      \
	  (struct ibv_comp_channel * ch, struct ibv_cq **cq, void **ctx), (ch, cq, ctx))        \
	X(ibv_get_device_name, RC_IBV, "IBVERBS_1.1", const char *, NULL,                        \
	  (struct ibv_device * d), (d))                                                         \
	X(ibv_is_fork_initialized, RC_IBV, "IBVERBS_1.13", enum ibv_fork_status,                 \
	  IBV_FORK_DISABLED, (void), ())                                                        \
	X(ibv_modify_qp, RC_IBV, "IBVERBS_1.1", int, ENODEV,                                     \
	  (struct ibv_qp * qp, struct ibv_qp_attr *a, int mask), (qp, a, mask))                 \
	X(ibv_query_port, RC_IBV, "IBVERBS_1.1", int, ENODEV,                                    \
	  (struct ibv_context * c, uint8_t port, struct _compat_ibv_port_attr *a), (c, port, a)) \
	X(ibv_reg_mr, RC_IBV, "IBVERBS_1.1", struct ibv_mr *, NULL,                              \
	  (struct ibv_pd * pd, void *addr, size_t len, int access), (pd, addr, len, access))    \
	X(ibv_wc_status_str, RC_IBV, "IBVERBS_1.1", const char *, "unknown",                     \
	  (enum ibv_wc_status st), (st))                                                        \
	X(rdma_accept, RC_CM, "RDMACM_1.0", int, -1,                                             \
	  (struct rdma_cm_id * id, struct rdma_conn_param *p), (id, p))                         \
	X(rdma_ack_cm_event, RC_CM, "RDMACM_1.0", int, -1, (struct rdma_cm_event * e), (e))     \
	X(rdma_bind_addr, RC_CM, "RDMACM_1.0", int, -1,                                          \
	  (struct rdma_cm_id * id, struct sockaddr *a), (id, a))                                \
	X(rdma_connect, RC_CM, "RDMACM_1.0", int, -1,                                            \
	  (struct rdma_cm_id * id, struct rdma_conn_param *p), (id, p))                         \
	X(rdma_create_event_channel, RC_CM, "RDMACM_1.0", struct rdma_event_channel *, NULL,    \
	  (void), ())                                                                           \
	X(rdma_create_id, RC_CM, "RDMACM_1.0", int, -1,                                          \
	  (struct rdma_event_channel * ch, struct rdma_cm_id **id, void *ctx,                   \
	   enum rdma_port_space ps),                                                            \
	  (ch, id, ctx, ps))                                                                    \
	X(rdma_create_qp, RC_CM, "RDMACM_1.0", int, -1,                                          \
	  (struct rdma_cm_id * id, struct ibv_pd *pd, struct ibv_qp_init_attr *a), (id, pd, a)) \
	X(rdma_destroy_id, RC_CM, "RDMACM_1.0", int, -1, (struct rdma_cm_id * id), (id))         \
	X(rdma_disconnect, RC_CM, "RDMACM_1.0", int, -1, (struct rdma_cm_id * id), (id))         \
	X(rdma_establish, RC_CM, "RDMACM_1.2", int, -1, (struct rdma_cm_id * id), (id))          \
	X(rdma_get_cm_event, RC_CM, "RDMACM_1.0", int, -1,                                       \
	  (struct rdma_event_channel * ch, struct rdma_cm_event **e), (ch, e))                  \
	X(rdma_get_devices, RC_CM, "RDMACM_1.0", struct ibv_context **, NULL, (int *n), (n))    \
	X(rdma_get_src_port, RC_CM, "RDMACM_1.0", __be16, 0, (struct rdma_cm_id * id), (id))     \
	X(rdma_init_qp_attr, RC_CM, "RDMACM_1.2", int, -1,                                       \
	  (struct rdma_cm_id * id, struct ibv_qp_attr *a, int *mask), (id, a, mask))            \
	X(rdma_listen, RC_CM, "RDMACM_1.0", int, -1, (struct rdma_cm_id * id, int backlog),      \
	  (id, backlog))                                                                        \
	X(rdma_migrate_id, RC_CM, "RDMACM_1.0", int, -1,                                         \
	  (struct rdma_cm_id * id, struct rdma_event_channel *ch), (id, ch))                    \
	X(rdma_reject, RC_CM, "RDMACM_1.0", int, -1,                                             \
	  (struct rdma_cm_id * id, const void *data, uint8_t len), (id, data, len))             \
	X(rdma_resolve_addr, RC_CM, "RDMACM_1.0", int, -1,                                       \
	  (struct rdma_cm_id * id, struct sockaddr *src, struct sockaddr *dst, int ms),         \
	  (id, src, dst, ms))                                                                   \
	X(rdma_resolve_route, RC_CM, "RDMACM_1.0", int, -1, (struct rdma_cm_id * id, int ms),   \
	  (id, ms))                                                                             \
	X(rdma_set_option, RC_CM, "RDMACM_1.0", int, -1,                                         \
	  (struct rdma_cm_id * id, int level, int name, void *val, size_t len),                 \
	  (id, level, name, val, len))

/* The same for the functions that return nothing: X(name, library,
 * version, parameters, arguments). */
#define RC_VOIDS(X)                                                                             \
	X(ibv_ack_async_event, RC_IBV, "IBVERBS_1.1", (struct ibv_async_event * ev), (ev))        \
	X(ibv_ack_cq_events, RC_IBV, "IBVERBS_1.1", (struct ibv_cq * cq, unsigned int n), (cq, n)) \
	X(rdma_destroy_event_channel, RC_CM, "RDMACM_1.0", (struct rdma_event_channel * ch), (ch)) \
	X(rdma_destroy_qp, RC_CM, "RDMACM_1.0", (struct rdma_cm_id * id), (id))                   \
	X(rdma_free_devices, RC_CM, "RDMACM_1.0", (struct ibv_context * *l), (l))

enum { RC_IBV, RC_CM };

#define RC_IDX(name, lib, ver, ...) RC_##name,
enum rc_index { RC_FUNCS(RC_IDX) RC_VOIDS(RC_IDX) RC_N };
#undef RC_IDX

static const struct {
	const char *name, *version;
	int lib;
} rc_syms[RC_N] = {
#define RC_SYM(name, lib, ver, ...) [RC_##name] = {#name, ver, lib},
	RC_FUNCS(RC_SYM) RC_VOIDS(RC_SYM)
#undef RC_SYM
};

static _Atomic(void *) rc_fn[RC_N];
static _Atomic int rc_state; /* 0 not loaded (yet), 1 loaded, -1 a function missing */

/* The verbs provider of each RDMA device of this host, loaded before
 * libibverbs first looks for devices. libibverbs matches the devices
 * against the providers already registered (a provider registers itself
 * from its constructor) and loads every provider installed (seventeen in
 * Debian's ibverbs-providers) only when a device is left unmatched:
 * mapping, relocating and running each of them is most of a process's
 * first RDMA connection under an emulated CPU. Which provider serves a
 * device is guessed from its name (rxe0, mlx5_0, bnxt_re1: the name less
 * its number) or, for a renamed one (rocep1s0f0), from its PCI driver's
 * (mlx5_core); a wrong or missing guess costs nothing but the full load
 * libibverbs then does, as it would have. The providers live in the
 * directory "libibverbs" beside libibverbs itself. */
struct rc_tried {
	char name[8][33];
	int n;
};

/* Load the provider called name (len bytes) unless it is loaded already:
 * 1 when it is. */
static int rc_provider(const char *dir, const char *name, size_t len, struct rc_tried *t)
{
	char pat[PATH_MAX], pname[33];
	glob_t g;
	int ok = 0;

	if (!len || len >= sizeof(pname))
		return 0;
	memcpy(pname, name, len);
	pname[len] = 0;
	if (strspn(pname, "abcdefghijklmnopqrstuvwxyz0123456789_") != len)
		return 0; /* (a name, not a pattern) */
	for (int i = 0; i < t->n; i++) /* (rxe0 and rxe1: one provider) */
		if (!strcmp(t->name[i], pname))
			return 1;
	if ((size_t)snprintf(pat, sizeof(pat), "%s/lib%s-rdmav*.so", dir, pname) >= sizeof(pat) ||
	    glob(pat, GLOB_NOSORT, NULL, &g))
		return 0;
	/* (one match: a provider exists for a single ABI) */
	if (g.gl_pathc == 1 && dlopen(g.gl_pathv[0], RTLD_NOW | RTLD_LOCAL)) {
		log_debug("rdma-core: provider %s loaded ahead", pname);
		if (t->n < 8)
			memcpy(t->name[t->n++], pname, len + 1);
		ok = 1;
	}
	globfree(&g);
	return ok;
}

static void rc_providers(void *ibv)
{
	char dir[PATH_MAX], link[PATH_MAX], drv[PATH_MAX];
	void *sym = dlsym(ibv, "ibv_get_device_list");
	const char *slash;
	struct dirent *e;
	struct rc_tried tried = {.n = 0};
	Dl_info di;
	DIR *d;

	if (!sym || !dladdr(sym, &di) || !di.dli_fname || !(slash = strrchr(di.dli_fname, '/')) ||
	    (size_t)snprintf(dir, sizeof(dir), "%.*s/libibverbs", (int)(slash - di.dli_fname),
			     di.dli_fname) >= sizeof(dir))
		return;
	if (!(d = opendir("/sys/class/infiniband")))
		return;
	while ((e = readdir(d))) {
		const char *n = e->d_name;
		size_t len = strlen(n);
		ssize_t r;

		if (n[0] == '.')
			continue;
		while (len && n[len - 1] >= '0' && n[len - 1] <= '9')
			len--;
		while (len && n[len - 1] == '_')
			len--;
		if (rc_provider(dir, n, len, &tried)) /* rxe0, mlx5_0, efa_0 */
			continue;
		if ((size_t)snprintf(link, sizeof(link), "/sys/class/infiniband/%s/device/driver", n) >=
			    sizeof(link) ||
		    (r = readlink(link, drv, sizeof(drv) - 1)) <= 0)
			continue;
		drv[r] = 0;
		const char *b = strrchr(drv, '/');
		b = b ? b + 1 : drv;
		len = strlen(b);
		if (len > 5 && !strcmp(b + len - 5, "_core")) /* mlx5_core, mlx4_core */
			len -= 5;
		rc_provider(dir, b, len, &tried);
	}
	closedir(d);
}

int rdmacore_load(void)
{
	static const char *const libs[] = {[RC_IBV] = RC_LIBIBVERBS, [RC_CM] = RC_LIBRDMACM};
	int st = atomic_load_explicit(&rc_state, memory_order_acquire), saved = errno;
	void *h[2];

	if (st)
		return st > 0 ? 0 : -ENODEV;
	/* librdmacm first: it loads libibverbs, its dependency */
	h[RC_CM] = dlopen(libs[RC_CM], RTLD_NOW | RTLD_LOCAL);
	h[RC_IBV] = h[RC_CM] ? dlopen(libs[RC_IBV], RTLD_NOW | RTLD_LOCAL) : NULL;
	if (!h[RC_CM] || !h[RC_IBV]) {
		/* not installed, or no descriptor to open it with (EMFILE):
		 * no RDMA now, and the next need tries again */
		log_warn_rl("rdma-core: %s: no RDMA for now", dlerror());
		errno = saved;
		return -ENODEV;
	}
	rc_providers(h[RC_IBV]);
	st = 1;
	for (int i = 0; i < RC_N && st > 0; i++) {
		void *p = dlvsym(h[rc_syms[i].lib], rc_syms[i].name, rc_syms[i].version);
		if (!p) {
			log_warn("rdma-core: %s@%s not found: no RDMA in this process", rc_syms[i].name,
				 rc_syms[i].version);
			st = -1;
		}
		atomic_store_explicit(&rc_fn[i], p, memory_order_relaxed);
	}
	atomic_store_explicit(&rc_state, st, memory_order_release);
	errno = saved;
	return st > 0 ? 0 : -ENODEV;
}

int rdmacore_loaded(void)
{
	return atomic_load_explicit(&rc_state, memory_order_acquire) > 0;
}

/* Function i, loaded on the first call; NULL when rdma-core is missing. */
static void *rc_get(enum rc_index i)
{
	if (RSOCK_UNLIKELY(atomic_load_explicit(&rc_state, memory_order_acquire) <= 0) &&
	    rdmacore_load())
		return NULL;
	return atomic_load_explicit(&rc_fn[i], memory_order_relaxed);
}

/* The names in parentheses: verbs.h makes some of them function-like
 * macros (ibv_reg_mr, ibv_query_port) around inline helpers. */
#define RC_DEF(name, lib, ver, ret, fail, params, args)         \
	ret(name) params                                        \
	{                                                       \
		void *rc_f = rc_get(RC_##name);                 \
		if (!rc_f) {                                    \
			errno = ENODEV;                         \
			return fail;                            \
		}                                               \
		return ((__typeof__(&(name)))rc_f) args;        \
	}
RC_FUNCS(RC_DEF)
#undef RC_DEF

#define RC_DEFV(name, lib, ver, params, args)                   \
	void(name) params                                       \
	{                                                       \
		void *rc_f = rc_get(RC_##name);                 \
		if (rc_f)                                       \
			((__typeof__(&(name)))rc_f) args;       \
	}
RC_VOIDS(RC_DEFV)
#undef RC_DEFV
