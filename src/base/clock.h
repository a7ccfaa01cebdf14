/* clock.h - the library's one clock: CLOCK_MONOTONIC, in nanoseconds or
 * milliseconds, and the time left to a deadline; and CLOCK_BOOTTIME, for a
 * stamp other processes compare with /proc's start times. Every deadline,
 * time-out and time stamp inside the library is read from here. */
#ifndef RSOCK_CLOCK_H
#define RSOCK_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t clock_ts_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* Now, CLOCK_BOOTTIME nanoseconds: the clock of a process's start time in
 * /proc/<pid>/stat (field 22, in clock ticks). */
static inline int64_t clock_boot_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return clock_ts_ns(&ts);
}

/* Now, CLOCK_MONOTONIC nanoseconds. */
static inline int64_t clock_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return clock_ts_ns(&ts);
}

/* Now, CLOCK_MONOTONIC milliseconds. */
static inline int64_t clock_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Now in milliseconds from the coarse clock (a few ms of resolution, no
 * system call even where the vDSO's fine clock falls back to one): for
 * rate limits on the data path. */
static inline int64_t clock_coarse_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The CLOCK_MONOTONIC time ns (clock_now_ns() units) as a timespec, for
 * absolute waits (pthread_cond_timedwait on a CLOCK_MONOTONIC condition). */
static inline struct timespec clock_ns_ts(int64_t ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};

	return ts;
}

/* Milliseconds left until deadline (clock_now_ms() units), 0 when past. */
static inline int clock_left_ms(int64_t deadline)
{
	int64_t l = deadline - clock_now_ms();

	return l < 0 ? 0 : l > INT32_MAX ? INT32_MAX : (int)l;
}

#endif
