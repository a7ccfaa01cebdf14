/* Unit tests of the fd table and conn reference counting. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "conn.h"
#include "fdtab.h"

static void test_insert_get_take(void **state)
{
	struct conn *c = conn_new(AF_INET);
	struct conn *g;

	assert_non_null(c);
	assert_false(fdtab_maybe_tracked(5));
	assert_int_equal(fdtab_insert(5, c), 0);
	assert_true(fdtab_maybe_tracked(5));
	assert_false(fdtab_maybe_tracked(4));
	assert_false(fdtab_maybe_tracked(69));
	assert_int_equal(atomic_load(&c->refs), 2);
	g = fdtab_get(5);
	assert_ptr_equal(g, c);
	assert_int_equal(atomic_load(&c->refs), 3);
	conn_unref(g);
	assert_null(fdtab_get(6));
	assert_int_equal(fdtab_count(), 1);
	g = fdtab_take(5);
	assert_ptr_equal(g, c);
	assert_false(fdtab_maybe_tracked(5));
	assert_null(fdtab_take(5));
	assert_int_equal(fdtab_count(), 0);
	conn_unref(g);
	assert_int_equal(atomic_load(&c->refs), 1);
	conn_unref(c);
}

static void test_out_of_range(void **state)
{
	struct conn *c = conn_new(AF_INET6);

	assert_int_equal(fdtab_insert(-1, c), -EBADF);
	assert_int_equal(fdtab_insert(FDTAB_MAX_FD, c), -EBADF);
	assert_false(fdtab_maybe_tracked(-1));
	assert_false(fdtab_maybe_tracked(FDTAB_MAX_FD));
	assert_false(fdtab_maybe_tracked(0x7fffffff));
	assert_int_equal(fdtab_insert(FDTAB_MAX_FD - 1, c), 0);
	assert_true(fdtab_maybe_tracked(FDTAB_MAX_FD - 1));
	conn_unref(fdtab_take(FDTAB_MAX_FD - 1));
	assert_int_equal(atomic_load(&c->refs), 1);
	conn_unref(c);
}

static void test_shared_by_dups_and_replace(void **state)
{
	struct conn *a = conn_new(AF_INET), *b = conn_new(AF_INET);

	assert_int_equal(fdtab_insert(10, a), 0);
	assert_int_equal(fdtab_insert(11, a), 0); /* dup */
	assert_int_equal(atomic_load(&a->refs), 3);
	assert_int_equal(fdtab_insert(11, b), 0); /* number reused behind our back */
	assert_int_equal(atomic_load(&a->refs), 2);
	assert_int_equal(atomic_load(&b->refs), 2);
	fdtab_remove_range(0, 100);
	assert_int_equal(fdtab_count(), 0);
	assert_int_equal(atomic_load(&a->refs), 1);
	assert_int_equal(atomic_load(&b->refs), 1);
	conn_unref(a);
	conn_unref(b);
}

static void test_range(void **state)
{
	struct conn *c = conn_new(AF_INET);

	for (int fd = 100; fd < 200; fd++)
		assert_int_equal(fdtab_insert(fd, c), 0);
	fdtab_remove_range(150, 159);
	assert_int_equal(fdtab_count(), 90);
	assert_true(fdtab_maybe_tracked(149));
	assert_false(fdtab_maybe_tracked(150));
	assert_false(fdtab_maybe_tracked(159));
	assert_true(fdtab_maybe_tracked(160));
	fdtab_remove_range(0, ~0u);
	assert_int_equal(fdtab_count(), 0);
	assert_int_equal(atomic_load(&c->refs), 1);
	conn_unref(c);
}

static void test_reserve(void **state)
{
	struct conn *c = conn_new(AF_INET);

	assert_int_equal(fdtab_reserve(900), 0);
	assert_true(fdtab_maybe_tracked(900));
	assert_null(fdtab_get(900));
	fdtab_unreserve(900);
	assert_false(fdtab_maybe_tracked(900));
	/* unreserve never clears a real entry */
	assert_int_equal(fdtab_insert(901, c), 0);
	fdtab_unreserve(901);
	assert_true(fdtab_maybe_tracked(901));
	conn_unref(fdtab_take(901));
	conn_unref(c);
}

static void test_eligible(void **state)
{
	assert_true(conn_eligible(AF_INET, SOCK_STREAM, 0));
	assert_true(conn_eligible(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
	assert_false(conn_eligible(AF_INET, SOCK_DGRAM, 0));
	assert_false(conn_eligible(AF_UNIX, SOCK_STREAM, 0));
	assert_false(conn_eligible(AF_INET, SOCK_STREAM, IPPROTO_SCTP));
}

static void *hammer(void *arg)
{
	int base = (int)(long)arg;
	struct conn *c = conn_new(AF_INET);

	for (int i = 0; i < 20000; i++) {
		int fd = base + (i % 64);
		fdtab_insert(fd, c);
		conn_unref(fdtab_get(fd));
		conn_unref(fdtab_get(base + ((i + 7) % 64)));
		conn_unref(fdtab_take(fd));
	}
	conn_unref(c);
	return NULL;
}

static void test_threads(void **state)
{
	pthread_t t[4];

	for (long i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, hammer, (void *)(1000 + i * 32));
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(fdtab_count(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_insert_get_take),
		cmocka_unit_test(test_out_of_range),
		cmocka_unit_test(test_shared_by_dups_and_replace),
		cmocka_unit_test(test_range),
		cmocka_unit_test(test_reserve),
		cmocka_unit_test(test_eligible),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
