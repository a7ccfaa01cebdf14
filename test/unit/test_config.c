/* Unit tests of the environment parsers and config_load(). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/log.h"

static void test_mode(void **state)
{
	enum rsock_mode m = RSOCK_MODE_RDMA;

	assert_int_equal(config_parse_mode("auto", &m), 0);
	assert_int_equal(m, RSOCK_MODE_AUTO);
	assert_int_equal(config_parse_mode("TCP", &m), 0);
	assert_int_equal(m, RSOCK_MODE_TCP);
	assert_int_equal(config_parse_mode("shm", &m), 0);
	assert_int_equal(m, RSOCK_MODE_SHM);
	assert_int_equal(config_parse_mode("rdma", &m), 0);
	assert_int_equal(m, RSOCK_MODE_RDMA);
	assert_int_equal(config_parse_mode("rdmax", &m), -EINVAL);
	assert_int_equal(config_parse_mode("", &m), -EINVAL);
	assert_int_equal(config_parse_mode(NULL, &m), -EINVAL);
	assert_int_equal(m, RSOCK_MODE_RDMA); /* untouched on error */
}

static void test_log_level(void **state)
{
	int l = -1;

	assert_int_equal(config_parse_log_level("debug", &l), 0);
	assert_int_equal(l, LOG_DEBUG);
	assert_int_equal(config_parse_log_level("0", &l), 0);
	assert_int_equal(l, LOG_NONE);
	assert_int_equal(config_parse_log_level("5", &l), 0);
	assert_int_equal(l, LOG_TRACE);
	assert_int_equal(config_parse_log_level("6", &l), -EINVAL);
	assert_int_equal(config_parse_log_level("-1", &l), -EINVAL);
	assert_int_equal(config_parse_log_level("3x", &l), -EINVAL);
	assert_int_equal(config_parse_log_level("verbose", &l), -EINVAL);
	assert_int_equal(l, LOG_TRACE);
}

static void test_ulong(void **state)
{
	unsigned long v = 7;

	assert_int_equal(config_parse_ulong("10", 1, 100, &v), 0);
	assert_int_equal(v, 10);
	assert_int_equal(config_parse_ulong("0", 1, 100, &v), -EINVAL);
	assert_int_equal(config_parse_ulong("101", 1, 100, &v), -EINVAL);
	assert_int_equal(config_parse_ulong("99999999999999999999999", 0, ~0ul, &v), -EINVAL);
	assert_int_equal(config_parse_ulong(" 5", 0, 100, &v), -EINVAL);
	assert_int_equal(config_parse_ulong("+5", 0, 100, &v), -EINVAL);
	assert_int_equal(config_parse_ulong("-5", 0, 100, &v), -EINVAL);
	assert_int_equal(config_parse_ulong("5 ", 0, 100, &v), -EINVAL);
	assert_int_equal(config_parse_ulong("", 0, 100, &v), -EINVAL);
	assert_int_equal(v, 10);
}

static void test_bool(void **state)
{
	int b = 5;

	assert_int_equal(config_parse_bool("1", &b), 0);
	assert_int_equal(b, 1);
	assert_int_equal(config_parse_bool("off", &b), 0);
	assert_int_equal(b, 0);
	assert_int_equal(config_parse_bool("2", &b), -EINVAL);
	assert_int_equal(b, 0);
}

static void test_load_defaults_on_invalid(void **state)
{
	struct rsock_config cfg = {.mode = RSOCK_MODE_AUTO, .log_level = LOG_NONE};

	setenv("RSOCK_MODE", "sideways", 1);
	setenv("RSOCK_STATS", "maybe", 1);
	setenv("RSOCK_LOG_LEVEL", "none", 1);
	unsetenv("RSOCK_CONF");
	unsetenv("RSOCK_LOG_FILE");
	assert_int_equal(config_load(&cfg), 0);
	assert_int_equal(cfg.mode, RSOCK_MODE_AUTO);
	assert_int_equal(cfg.stats_at_exit, 0);
	assert_int_equal(cfg.log_level, LOG_NONE);
}

static void test_load_values(void **state)
{
	struct rsock_config cfg = {.mode = RSOCK_MODE_AUTO, .log_level = LOG_WARN};

	setenv("RSOCK_MODE", "tcp", 1);
	setenv("RSOCK_STATS", "yes", 1);
	setenv("RSOCK_LOG_LEVEL", "error", 1);
	setenv("RSOCK_CONF", "/nonexistent/rsock.conf", 1);
	assert_int_equal(config_load(&cfg), 0);
	assert_int_equal(cfg.mode, RSOCK_MODE_TCP);
	assert_int_equal(cfg.stats_at_exit, 1);
	assert_int_equal(cfg.log_level, LOG_ERROR);
	assert_null(cfg.conf_path); /* unreadable file: warned, no rules */
	assert_int_equal(cfg.rules.n, 0);
	/* mode tcp overrides every rule */
	assert_int_equal(config_decide(&cfg, RULES_ROLE_CLIENT, NULL, 0), RULES_TCP);
	/* the same-host path first by default, in mode rdma too; RSOCK_SHM=0
	 * leaves RDMA, except in mode shm */
	cfg.mode = RSOCK_MODE_AUTO;
	assert_int_equal(config_decide(&cfg, RULES_ROLE_CLIENT, NULL, 0), RULES_SHM);
	cfg.mode = RSOCK_MODE_RDMA;
	assert_int_equal(config_decide(&cfg, RULES_ROLE_CLIENT, NULL, 0), RULES_SHM);
	setenv("RSOCK_SHM", "0", 1);
	assert_int_equal(config_load(&cfg), 0);
	assert_int_equal(cfg.no_shm, 1);
	cfg.mode = RSOCK_MODE_AUTO;
	assert_int_equal(config_decide(&cfg, RULES_ROLE_CLIENT, NULL, 0), RULES_RDMA);
	cfg.mode = RSOCK_MODE_SHM;
	assert_int_equal(config_decide(&cfg, RULES_ROLE_CLIENT, NULL, 0), RULES_SHM);
	setenv("RSOCK_SHM", "maybe", 1);
	assert_int_equal(config_load(&cfg), 0);
	assert_int_equal(cfg.no_shm, 0); /* invalid: warned, the default */
	unsetenv("RSOCK_SHM");
	unsetenv("RSOCK_CONF");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mode),
		cmocka_unit_test(test_log_level),
		cmocka_unit_test(test_ulong),
		cmocka_unit_test(test_bool),
		cmocka_unit_test(test_load_defaults_on_invalid),
		cmocka_unit_test(test_load_values),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
