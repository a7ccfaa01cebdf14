/* Unit tests of the streams' lock (base/mtx.h): exclusion under contention,
 * trylock, sleepers woken, errno left alone. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/mtx.h"

#define THREADS 4
#define ROUNDS 200000

static struct mtx lock = MTX_INIT;
static uint64_t counter; /* plain: only the lock protects it */

static void *adder(void *arg)
{
	(void)arg;
	for (int i = 0; i < ROUNDS; i++) {
		mtx_lock(&lock);
		counter++;
		if (i % 4096 == 0)
			usleep(10); /* held while others queue: they sleep */
		mtx_unlock(&lock);
	}
	return NULL;
}

static void test_exclusion(void **state)
{
	pthread_t t[THREADS];

	(void)state;
	counter = 0;
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, adder, NULL), 0);
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	assert_int_equal(counter, (uint64_t)THREADS * ROUNDS);
	assert_int_equal(atomic_load(&lock.v), 0);
}

static void test_trylock(void **state)
{
	struct mtx m;

	(void)state;
	mtx_init(&m);
	assert_int_equal(mtx_trylock(&m), 0);
	assert_int_equal(mtx_trylock(&m), -EBUSY);
	mtx_unlock(&m);
	assert_int_equal(mtx_trylock(&m), 0);
	mtx_unlock(&m);
	assert_int_equal(atomic_load(&m.v), 0);
}

static struct mtx gate = MTX_INIT;
static volatile int through;

static void *sleeper(void *arg)
{
	(void)arg;
	errno = 1234;
	mtx_lock(&gate); /* held by the test: sleeps in the kernel */
	through = errno == 1234;
	mtx_unlock(&gate);
	return NULL;
}

static void test_sleeper_woken_errno_kept(void **state)
{
	pthread_t t;

	(void)state;
	mtx_lock(&gate);
	assert_int_equal(pthread_create(&t, NULL, sleeper, NULL), 0);
	while (atomic_load(&gate.v) != 2) /* the sleeper marked it */
		usleep(100);
	errno = 4321;
	mtx_unlock(&gate); /* wakes it */
	assert_int_equal(errno, 4321);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(through);
	assert_int_equal(atomic_load(&gate.v), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exclusion),
		cmocka_unit_test(test_trylock),
		cmocka_unit_test(test_sleeper_woken_errno_kept),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
