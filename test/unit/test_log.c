/* Unit tests of the malloc-free, stdio-free log formatter and rate limiter. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#pragma GCC diagnostic ignored "-Wformat-security"
#pragma GCC diagnostic ignored "-Wformat-nonliteral"

#include "base/log.h"

static void test_format(void **state)
{
	char b[128];

	log_format(b, sizeof(b), "a%db%uc%xd%se%cf%%g", -42, 42u, 255u, "str", 'Z');
	assert_string_equal(b, "a-42b42cffdstreZf%g");
	log_format(b, sizeof(b), "%ld %lu %lld %llu %zu %zd", -1L, 2UL, -3LL, 4ULL, (size_t)5,
		   (ssize_t)-6);
	assert_string_equal(b, "-1 2 -3 4 5 -6");
	const char *volatile nul = NULL;
	log_format(b, sizeof(b), "%s", nul);
	assert_string_equal(b, "(null)");
	log_format(b, sizeof(b), "%d", -2147483647 - 1);
	assert_string_equal(b, "-2147483648");
	log_format(b, sizeof(b), "%p", (void *)0x10);
	assert_string_equal(b, "0x10");
	const char *volatile trailing = "trailing %";
	log_format(b, sizeof(b), trailing);
	assert_string_equal(b, "trailing ");
}

static void test_dec(void **state)
{
	char buf[32];

	(void)state;
	*log_dec(buf, 0) = 0;
	assert_string_equal(buf, "0");
	*log_dec(buf, 4026531840ull) = 0;
	assert_string_equal(buf, "4026531840");
	*log_dec(buf, 18446744073709551615ull) = 0;
	assert_string_equal(buf, "18446744073709551615");
	assert_ptr_equal(log_dec(buf, 7), buf + 1); /* no NUL of its own */
}

static void test_truncation(void **state)
{
	char b[8];
	size_t n = log_format(b, sizeof(b), "%s", "0123456789");

	assert_int_equal(n, 7);
	assert_string_equal(b, "0123456");
	n = log_format(b, 1, "abc");
	assert_int_equal(n, 0);
	assert_string_equal(b, "");
}

static void test_emit_preserves_errno_and_writes_file(void **state)
{
	char path[] = "/tmp/rsock-log-XXXXXX";
	int fd = mkstemp(path);
	char buf[512] = {0};

	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(log_open(path), 0);
	assert_true(log_fd_get() >= 0);
	errno = EADDRINUSE;
	log_emit(LOG_WARN, "hello %d", 7);
	assert_int_equal(errno, EADDRINUSE);
	fd = open(path, O_RDONLY);
	assert_true(read(fd, buf, sizeof(buf) - 1) > 0);
	close(fd);
	assert_non_null(strstr(buf, "rsock["));
	assert_non_null(strstr(buf, "] warn: hello 7\n"));
	unlink(path);
}

static void test_debug_lines_carry_a_timestamp(void **state)
{
	char path[] = "/tmp/rsock-log-XXXXXX";
	int fd = mkstemp(path);
	char buf[512] = {0};
	const char *p;

	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(log_open(path), 0);
	log_emit(LOG_DEBUG, "stamped");
	log_emit(LOG_INFO, "plain");
	fd = open(path, O_RDONLY);
	assert_true(read(fd, buf, sizeof(buf) - 1) > 0);
	close(fd);
	/* "rsock[P:T] debug: S.UUUUUU stamped": seconds, a dot, 6 digits */
	assert_non_null(p = strstr(buf, "] debug: "));
	p += strlen("] debug: ");
	assert_true(*p >= '0' && *p <= '9');
	while (*p >= '0' && *p <= '9')
		p++;
	assert_int_equal(*p, '.');
	for (int i = 1; i <= 6; i++)
		assert_true(p[i] >= '0' && p[i] <= '9');
	assert_memory_equal(p + 7, " stamped\n", 9);
	assert_non_null(strstr(buf, "] info: plain\n")); /* the other levels: no stamp */
	unlink(path);
}

static void test_long_line_is_cut_not_overflowed(void **state)
{
	char big[2000];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	log_emit(LOG_ERROR, "%s%s", big, big); /* must not crash (ASan checks) */
}

static void test_ratelimit(void **state)
{
	struct log_ratelimit rl = {0};
	int ok = 0;

	for (int i = 0; i < 100; i++)
		ok += log_ratelimit_ok(&rl, 5);
	assert_int_equal(ok, 5);
	assert_int_equal(rl.missed, 95);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_dec),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_emit_preserves_errno_and_writes_file),
		cmocka_unit_test(test_debug_lines_carry_a_timestamp),
		cmocka_unit_test(test_long_line_is_cut_not_overflowed),
		cmocka_unit_test(test_ratelimit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
