/* Unit tests of rdma-core's loading at the first need (base/rdmacore.h):
 * nothing of rdma-core in the process before the first call, librdmacm and
 * libibverbs after it, each function bound to the object rdma-core's own
 * name resolves to, the application's own use of rdma-core untouched. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "base/rdmacore.h"

static int in_process(const char *soname)
{
	void *h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);

	if (h)
		dlclose(h);
	return h != NULL;
}

/* The first rdma-core call loads both libraries, once. */
static void test_loaded_at_first_call(void **state)
{
	(void)state;
	assert_false(rdmacore_loaded());
	assert_false(in_process("librdmacm.so.1"));
	assert_false(in_process("libibverbs.so.1"));
	/* the answer depends on the host (no device: NULL); the load does not */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (ch)
		rdma_destroy_event_channel(ch);
	assert_true(rdmacore_loaded());
	assert_true(in_process("librdmacm.so.1"));
	assert_true(in_process("libibverbs.so.1"));
	assert_int_equal(rdmacore_load(), 0);
}

/* A wrapper reaches the function its version names in the object the
 * process has: ibv_wc_status_str's text is libibverbs' own. */
static void test_bound_to_rdma_core(void **state)
{
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	const char *(*real)(enum ibv_wc_status);

	(void)state;
	assert_int_equal(rdmacore_load(), 0);
	assert_non_null(h);
	*(void **)&real = dlvsym(h, "ibv_wc_status_str", "IBVERBS_1.1");
	assert_non_null(real);
	assert_ptr_equal(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), real(IBV_WC_RETRY_EXC_ERR));
	assert_ptr_not_equal((void *)real, (void *)&ibv_wc_status_str); /* ours is the stand-in */
	dlclose(h);
}

/* errno is left alone by the loading itself. */
static void test_errno_kept(void **state)
{
	(void)state;
	errno = 4321;
	assert_int_equal(rdmacore_load(), 0);
	assert_int_equal(errno, 4321);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loaded_at_first_call),
		cmocka_unit_test(test_bound_to_rdma_core),
		cmocka_unit_test(test_errno_kept),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
