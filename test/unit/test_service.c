/* test_service.c - the library's thread as a generic loop (src/service):
 * watched descriptors and their callbacks (the first turn's revents 0, a
 * callback that stops its watch), per-turn work, the wake and the timed
 * wake, the table's limits, and the run lock that keeps the thread asleep
 * across a fork or an exit's drain. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/real.h"
#include "service/service.h"

static int pa[2], pb[2];
static _Atomic int a_calls, a_ready, a_first_revents = -1, b_calls, turns, ticks_wanted;

static int on_a(int fd, short revents, void *arg)
{
	char c;

	assert_ptr_equal(arg, &pa);
	if (atomic_fetch_add(&a_calls, 1) == 0)
		atomic_store(&a_first_revents, revents);
	if (revents & POLLIN)
		while (read(fd, &c, 1) == 1)
			atomic_fetch_add(&a_ready, 1);
	return 0;
}

static int on_b(int fd, short revents, void *arg)
{
	char c;

	(void)arg;
	if (!(revents & POLLIN))
		return 0;
	while (read(fd, &c, 1) == 1)
		;
	atomic_fetch_add(&b_calls, 1);
	return -EACCES; /* stop watching */
}

static int each_turn(void)
{
	atomic_fetch_add(&turns, 1);
	if (atomic_load(&ticks_wanted) > 0) {
		atomic_fetch_sub(&ticks_wanted, 1);
		service_wake_after(5); /* on the thread: a bound on its sleep */
	}
	return 0;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Per-turn work that waits on time: it runs once its due time (ms) has
 * come, and then, once, asks for its next turn itself 30 ms later. */
static _Atomic int64_t timed_due;
static _Atomic int timed_runs, timed_again;

static int timed_turn(void)
{
	int64_t d = atomic_load(&timed_due);

	if (!d || now_ms() < d)
		return 0;
	atomic_fetch_add(&timed_runs, 1);
	atomic_store(&timed_due, 0);
	if (atomic_exchange(&timed_again, 0)) {
		atomic_store(&timed_due, now_ms() + 30);
		service_wake_after(30); /* (from the thread: no wake of its own) */
	}
	return 0;
}

/* Wait (bounded) until *v reaches want. */
static int wait_for(_Atomic int *v, int want)
{
	for (int i = 0; i < 2000; i++) {
		if (atomic_load(v) >= want)
			return 1;
		usleep(1000);
	}
	return 0;
}

static void nonblocking_pipe(int p[2])
{
	assert_int_equal(pipe(p), 0);
	assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
}

static void start(void **state)
{
	(void)state;
	assert_int_equal(real_resolve(), 0); /* the thread calls libc through rsock_real */
	nonblocking_pipe(pa);
	nonblocking_pipe(pb);
	assert_int_equal(service_watch(pa[0], POLLIN, on_a, &pa), 0); /* before the start */
	assert_int_equal(service_watch(pa[0], POLLIN, on_a, &pa), -EEXIST);
	assert_int_equal(service_each_turn(each_turn), 0);
	assert_int_equal(service_each_turn(timed_turn), 0);
	assert_int_equal(service_running(), 0);
	assert_int_equal(service_start(), 0);
	assert_int_equal(service_start(), 0); /* one thread per process */
	assert_int_equal(service_running(), 1);
	assert_true(wait_for(&a_calls, 1));
	assert_int_equal(atomic_load(&a_first_revents), 0); /* the first turn */
}

static void watch_runs_callback(void **state)
{
	(void)state;
	assert_int_equal(write(pa[1], "x", 1), 1);
	assert_true(wait_for(&a_ready, 1));
}

static void callback_stops_watch(void **state)
{
	(void)state;
	assert_int_equal(service_watch(pb[0], POLLIN, on_b, NULL), 0);
	assert_int_equal(write(pb[1], "x", 1), 1);
	assert_true(wait_for(&b_calls, 1));
	assert_int_equal(write(pb[1], "y", 1), 1);
	usleep(50000);
	assert_int_equal(atomic_load(&b_calls), 1); /* not watched any more */
	/* (registered again, it is seen again) */
	assert_int_equal(service_watch(pb[0], POLLIN, on_b, NULL), 0);
	assert_true(wait_for(&b_calls, 2));
}

static void wake_runs_turn(void **state)
{
	int before;

	(void)state;
	usleep(20000); /* the thread asleep */
	before = atomic_load(&turns);
	service_wake();
	assert_true(wait_for(&turns, before + 1));
}

static void wake_after_runs_turn_later(void **state)
{
	int before;

	(void)state;
	usleep(20000);
	before = atomic_load(&turns);
	service_wake_after(300);
	service_wake_after(400); /* a turn is due before: no change */
	usleep(100000);
	assert_int_equal(atomic_load(&turns), before); /* not at once */
	assert_true(wait_for(&turns, before + 1));
	usleep(20000);
	before = atomic_load(&turns);
	service_wake_after(300);
	service_wake_after(10); /* earlier: the timer moves */
	usleep(150000);
	assert_int_equal(atomic_load(&turns), before + 1);
	/* A per-turn function's own bound: ten more turns, each within 5 ms,
	 * without anything else waking the thread. */
	atomic_store(&ticks_wanted, 10);
	service_wake();
	assert_true(wait_for(&turns, before + 11));
	assert_int_equal(atomic_load(&ticks_wanted), 0);
}

static void timed_work_asks_its_next_turn(void **state)
{
	int64_t t0;

	(void)state;
	usleep(20000); /* the thread asleep, without a time-out */
	t0 = now_ms();
	atomic_store(&timed_again, 1);
	atomic_store(&timed_due, t0 + 60);
	service_wake_after(60);
	usleep(20000);
	assert_int_equal(atomic_load(&timed_runs), 0); /* not due yet */
	assert_true(wait_for(&timed_runs, 1));
	assert_true(now_ms() - t0 >= 60);
	/* the next turn the work asked for comes with no wake from outside */
	assert_true(wait_for(&timed_runs, 2));
}

static void table_limit(void **state)
{
	int p[SERVICE_WATCHES][2], n = 0, rc = 0;

	(void)state;
	for (; n < SERVICE_WATCHES && rc == 0; n++) {
		nonblocking_pipe(p[n]);
		rc = service_watch(p[n][0], POLLIN, on_b, NULL);
	}
	assert_int_equal(rc, -ENOSPC);
	for (int i = 0; i < n; i++) {
		service_unwatch(p[i][0]);
		close(p[i][0]);
		close(p[i][1]);
	}
}

static void quiesce_parks_thread(void **state)
{
	int before;

	(void)state;
	usleep(20000);
	service_fork_quiesce();
	before = atomic_load(&a_ready);
	assert_int_equal(write(pa[1], "z", 1), 1);
	usleep(50000);
	assert_int_equal(atomic_load(&a_ready), before); /* asleep, kept there */
	service_fork_resume();
	assert_true(wait_for(&a_ready, before + 1));
}

/* now + ms, CLOCK_MONOTONIC ns */
static int64_t after_ms(int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (int64_t)ms * 1000000;
}

static void *pause_briefly(void *arg)
{
	*(int *)arg = service_pause_until(after_ms(20));
	return NULL;
}

static void pause_parks_thread(void **state)
{
	pthread_t th;
	int before, rc = 1;

	(void)state;
	usleep(20000);
	assert_int_equal(service_pause_until(after_ms(1000)), 0);
	/* parked: another pause waits for it, and gives up at its deadline */
	assert_int_equal(pthread_create(&th, NULL, pause_briefly, &rc), 0);
	pthread_join(th, NULL);
	assert_int_equal(rc, -ETIMEDOUT);
	before = atomic_load(&a_ready);
	assert_int_equal(write(pa[1], "w", 1), 1);
	usleep(50000);
	assert_int_equal(atomic_load(&a_ready), before);
	service_resume();
	assert_true(wait_for(&a_ready, before + 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(start),
		cmocka_unit_test(watch_runs_callback),
		cmocka_unit_test(callback_stops_watch),
		cmocka_unit_test(wake_runs_turn),
		cmocka_unit_test(wake_after_runs_turn_later),
		cmocka_unit_test(timed_work_asks_its_next_turn),
		cmocka_unit_test(table_limit),
		cmocka_unit_test(quiesce_parks_thread),
		cmocka_unit_test(pause_parks_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
