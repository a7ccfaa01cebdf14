/* Unit tests of RSOCK_FAULT's grammar (fault_parse) and of the counting of
 * calls (fault_arm, fault_hit, fault_at). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "base/fault.h"
#include "base/log.h"

static void test_defaults(void **state)
{
	struct fault_plan p;

	(void)state;
	assert_int_equal(fault_parse("reg_mr", &p), 1);
	assert_int_equal(p.site[FAULT_REG_MR].first, 1);
	assert_int_equal(p.site[FAULT_REG_MR].last, 1);
	assert_int_equal(p.site[FAULT_REG_MR].value, ENOMEM);
	assert_int_equal(p.site[FAULT_POST_SEND].first, 0); /* not named: not armed */
	assert_int_equal(fault_parse("wc", &p), 1);
	assert_int_equal(p.site[FAULT_WC].value, IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(fault_parse("req_notify", &p), 1);
	assert_int_equal(p.site[FAULT_REQ_NOTIFY].value, EIO);
	assert_int_equal(fault_parse("cm_late", &p), 1);
	assert_int_equal(p.site[FAULT_CM_LATE].value, 1000);
	assert_int_equal(fault_parse("accept", &p), 1);
	assert_int_equal(p.site[FAULT_ACCEPT].value, EINVAL);
}

static void test_occurrences(void **state)
{
	struct fault_plan p;

	(void)state;
	assert_int_equal(fault_parse("reg_mr:1,post_send:3", &p), 2);
	assert_int_equal(p.site[FAULT_REG_MR].first, 1);
	assert_int_equal(p.site[FAULT_POST_SEND].first, 3);
	assert_int_equal(p.site[FAULT_POST_SEND].last, 3);
	assert_int_equal(fault_parse("post_recv:10x4", &p), 1);
	assert_int_equal(p.site[FAULT_POST_RECV].first, 10);
	assert_int_equal(p.site[FAULT_POST_RECV].last, 13);
	assert_int_equal(fault_parse("create_qp:2+", &p), 1);
	assert_int_equal(p.site[FAULT_CREATE_QP].first, 2);
	assert_true(p.site[FAULT_CREATE_QP].last == ULONG_MAX);
	assert_int_equal(fault_parse("switch_drop:1x1,cm_swap:2,poll_cq:7", &p), 3);
	assert_int_equal(fault_parse("cm_addr_change:2=250,cm_removal", &p), 2);
	assert_int_equal(p.site[FAULT_CM_ADDR_CHANGE].first, 2);
	assert_int_equal(p.site[FAULT_CM_ADDR_CHANGE].value, 250);
	assert_int_equal(p.site[FAULT_CM_REMOVAL].value, 1000); /* the default delay */
	assert_int_equal(fault_parse("cm_removal=EIO", &p), -EINVAL); /* milliseconds */
	assert_int_equal(fault_parse("cq_err:3=150", &p), 1);
	assert_int_equal(p.site[FAULT_CQ_ERR].first, 3);
	assert_int_equal(p.site[FAULT_CQ_ERR].value, 150);
	assert_int_equal(fault_parse("cq_small", &p), 1);
	assert_int_equal(p.site[FAULT_CQ_SMALL].value, 16);
	assert_int_equal(fault_parse("shm_end_late:1+", &p), 1);
	assert_int_equal(p.site[FAULT_SHM_END_LATE].value, 200);
}

static void test_values(void **state)
{
	struct fault_plan p;

	(void)state;
	assert_int_equal(fault_parse("reg_mr=EACCES", &p), 1);
	assert_int_equal(p.site[FAULT_REG_MR].value, EACCES);
	assert_int_equal(fault_parse("post_send:5x2=11", &p), 1);
	assert_int_equal(p.site[FAULT_POST_SEND].value, 11);
	assert_int_equal(p.site[FAULT_POST_SEND].last, 6);
	assert_int_equal(fault_parse("wc:3=retry_exc", &p), 1);
	assert_int_equal(p.site[FAULT_WC].value, IBV_WC_RETRY_EXC_ERR);
	assert_int_equal(fault_parse("wc=rnr_retry_exc", &p), 1);
	assert_int_equal(p.site[FAULT_WC].value, IBV_WC_RNR_RETRY_EXC_ERR);
	assert_int_equal(fault_parse("wc=rem_inv_req", &p), 1);
	assert_int_equal(p.site[FAULT_WC].value, IBV_WC_REM_INV_REQ_ERR);
	assert_int_equal(fault_parse("wc=4", &p), 1);
	assert_int_equal(p.site[FAULT_WC].value, IBV_WC_LOC_PROT_ERR);
	assert_int_equal(fault_parse("cm_late:2=1500", &p), 1);
	assert_int_equal(p.site[FAULT_CM_LATE].first, 2);
	assert_int_equal(p.site[FAULT_CM_LATE].value, 1500);
	assert_int_equal(fault_parse("cm_late=0", &p), 1);
}

static void test_malformed(void **state)
{
	static const char *const bad[] = {
		"", "nope", "reg_mr:", "reg_mr:0", "reg_mr:-1", "reg_mr:1x", "reg_mr:1x0",
		"reg_mr:1+2", "reg_mr:+", "reg_mr:1,", ",reg_mr", "reg_mr,reg_mr:2",
		"reg_mr=", "reg_mr=ENOTANERRNO", "reg_mr=0", "reg_mr=4096", "reg_mr=1=2",
		"wc=success", "wc=0", "wc=99", "poll_cq=1", "cm_swap=1", "switch_drop=EIO",
		"cm_late=600001", "cm_late=-5", "reg_mr=EIO:2", "REG_MR", " reg_mr", "reg_mr ",
		"reg_mr:99999999999", "post_send:3x2x2",
	};
	struct fault_plan p;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p.site[FAULT_REG_MR].first = 7;
		if (fault_parse(bad[i], &p) != -EINVAL)
			fail_msg("accepted: \"%s\"", bad[i]);
		assert_int_equal(p.site[FAULT_REG_MR].first, 0); /* cleared */
	}
	assert_int_equal(fault_parse(NULL, &p), -EINVAL);
}

static void test_hits(void **state)
{
	struct fault_plan p;
	int got[8];

	(void)state;
	rsock_log_level = LOG_NONE;
	fault_arm(NULL);
	assert_int_equal(fault_armed, 0);
	assert_int_equal(fault_at(FAULT_POST_SEND), 0);
	assert_int_equal(fault_parse("post_send:3x2=EAGAIN,post_recv:2+", &p), 2);
	fault_arm(&p);
	assert_int_not_equal(fault_armed, 0);
	for (int i = 0; i < 8; i++)
		got[i] = fault_at(FAULT_POST_SEND);
	assert_int_equal(got[0], 0);
	assert_int_equal(got[1], 0);
	assert_int_equal(got[2], EAGAIN);
	assert_int_equal(got[3], EAGAIN);
	assert_int_equal(got[4], 0);
	assert_int_equal(got[7], 0);
	assert_int_equal(fault_at(FAULT_POST_RECV), 0);
	for (int i = 0; i < 5; i++)
		assert_int_equal(fault_at(FAULT_POST_RECV), ENOMEM);
	assert_int_equal(fault_at(FAULT_REG_MR), 0); /* not armed */
	fault_arm(&p); /* counts start again */
	assert_int_equal(fault_at(FAULT_POST_SEND), 0);
	fault_arm(NULL);
	assert_int_equal(fault_armed, 0);
	assert_string_equal(fault_site_name(FAULT_SWITCH_DROP), "switch_drop");
	assert_string_equal(fault_site_name(FAULT_CM_REMOVAL), "cm_removal");
	assert_string_equal(fault_site_name(FAULT_CQ_ERR), "cq_err");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),   cmocka_unit_test(test_occurrences),
		cmocka_unit_test(test_values),     cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_hits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
