/* fault.c - see fault.h. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "base/fault.h"
#include "base/log.h"

int fault_armed;
static struct fault_plan plan_now;
static _Atomic unsigned long calls[FAULT_SITES];

enum value_kind { V_ERRNO, V_STATUS, V_MS, V_NONE };

static const struct {
	const char *name;
	enum value_kind kind;
	int dflt;
} sites[FAULT_SITES] = {
	[FAULT_REG_MR] = {"reg_mr", V_ERRNO, ENOMEM},
	[FAULT_CREATE_QP] = {"create_qp", V_ERRNO, ENOMEM},
	[FAULT_POST_SEND] = {"post_send", V_ERRNO, ENOMEM},
	[FAULT_POST_RECV] = {"post_recv", V_ERRNO, ENOMEM},
	[FAULT_WC] = {"wc", V_STATUS, IBV_WC_REM_ACCESS_ERR},
	[FAULT_POLL_CQ] = {"poll_cq", V_NONE, 1},
	[FAULT_REQ_NOTIFY] = {"req_notify", V_ERRNO, EIO},
	[FAULT_CM_LATE] = {"cm_late", V_MS, 1000},
	[FAULT_CM_SWAP] = {"cm_swap", V_NONE, 1},
	[FAULT_SWITCH_DROP] = {"switch_drop", V_NONE, 1},
	[FAULT_CM_ADDR_CHANGE] = {"cm_addr_change", V_MS, 1000},
	[FAULT_CM_REMOVAL] = {"cm_removal", V_MS, 1000},
	[FAULT_CQ_ERR] = {"cq_err", V_MS, 1000},
	[FAULT_CQ_SMALL] = {"cq_small", V_MS, 16},
	[FAULT_HELLO_LATE] = {"hello_late", V_MS, 3000},
	[FAULT_ANSWER_LATE] = {"answer_late", V_MS, 3000},
	[FAULT_ANSWER_SLOW] = {"answer_slow", V_MS, 3000},
	[FAULT_ACCEPT] = {"accept", V_ERRNO, EINVAL},
	[FAULT_SHM_END_LATE] = {"shm_end_late", V_MS, 200},
};

static const struct {
	const char *name;
	int status;
} statuses[] = {
	{"rem_access", IBV_WC_REM_ACCESS_ERR},
	{"rem_inv_req", IBV_WC_REM_INV_REQ_ERR},
	{"retry_exc", IBV_WC_RETRY_EXC_ERR},
	{"rnr_retry_exc", IBV_WC_RNR_RETRY_EXC_ERR},
	{"loc_prot", IBV_WC_LOC_PROT_ERR},
};

const char *fault_site_name(enum fault_site s)
{
	return (unsigned)s < FAULT_SITES ? sites[s].name : "?";
}

/* A decimal number in [min, max] spanning s[0..len). 0 or -EINVAL. */
static int number(const char *s, size_t len, unsigned long min, unsigned long max,
		  unsigned long *out)
{
	unsigned long v = 0;

	if (!len || len > 10)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* VALUE of a site of kind k, spanning s[0..len). 0 with *out or -EINVAL. */
static int value(enum value_kind k, const char *s, size_t len, int *out)
{
	unsigned long n;

	if (k == V_NONE)
		return -EINVAL;
	if (k == V_MS) {
		if (number(s, len, 0, 600000, &n))
			return -EINVAL;
		*out = (int)n;
		return 0;
	}
	if (k == V_STATUS) {
		for (size_t i = 0; i < RSOCK_ARRAY_SIZE(statuses); i++)
			if (strlen(statuses[i].name) == len && !memcmp(s, statuses[i].name, len)) {
				*out = statuses[i].status;
				return 0;
			}
		/* a number: any error status (IBV_WC_SUCCESS is none) */
		if (number(s, len, IBV_WC_LOC_LEN_ERR, IBV_WC_GENERAL_ERR, &n))
			return -EINVAL;
		*out = (int)n;
		return 0;
	}
	if (!number(s, len, 1, 4095, &n)) {
		*out = (int)n;
		return 0;
	}
	for (int e = 1; e < 4096; e++) {
		const char *name = strerrorname_np(e);
		if (name && strlen(name) == len && !memcmp(s, name, len)) {
			*out = e;
			return 0;
		}
	}
	return -EINVAL;
}

/* One SPEC spanning s[0..len) into plan. 0 or -EINVAL. */
static int spec(const char *s, size_t len, struct fault_plan *plan)
{
	const char *end = s + len, *colon = memchr(s, ':', len), *eq = memchr(s, '=', len);
	const char *name_end = colon ? colon : eq ? eq : end;
	struct fault_spec f = {.first = 1, .last = 1};
	unsigned long n;
	int site = -1;

	if (eq && colon && eq < colon)
		return -EINVAL;
	for (int i = 0; i < FAULT_SITES; i++)
		if (strlen(sites[i].name) == (size_t)(name_end - s) && !memcmp(s, sites[i].name, (size_t)(name_end - s)))
			site = i;
	if (site < 0 || plan->site[site].first)
		return -EINVAL; /* unknown, or named twice */
	f.value = sites[site].dflt;
	if (colon) {
		const char *p = colon + 1, *stop = eq ? eq : end, *q = p;
		while (q < stop && *q >= '0' && *q <= '9')
			q++;
		if (number(p, (size_t)(q - p), 1, ULONG_MAX / 2, &f.first))
			return -EINVAL;
		f.last = f.first;
		if (q < stop && *q == '+' && q + 1 == stop)
			f.last = ULONG_MAX;
		else if (q < stop && *q == 'x') {
			if (number(q + 1, (size_t)(stop - q - 1), 1, ULONG_MAX / 2, &n))
				return -EINVAL;
			f.last = f.first + n - 1;
		} else if (q != stop)
			return -EINVAL;
	}
	if (eq && value(sites[site].kind, eq + 1, (size_t)(end - eq - 1), &f.value))
		return -EINVAL;
	plan->site[site] = f;
	return 0;
}

int fault_parse(const char *s, struct fault_plan *plan)
{
	int n = 0;

	memset(plan, 0, sizeof(*plan));
	if (!s || !*s)
		goto bad;
	for (;;) {
		const char *comma = strchr(s, ',');
		size_t len = comma ? (size_t)(comma - s) : strlen(s);
		if (spec(s, len, plan))
			goto bad;
		n++;
		if (!comma)
			return n;
		s = comma + 1;
	}
bad:
	memset(plan, 0, sizeof(*plan));
	return -EINVAL;
}

void fault_arm(const struct fault_plan *plan)
{
	int any = 0;

	for (int i = 0; i < FAULT_SITES; i++) {
		plan_now.site[i] = plan ? plan->site[i] : (struct fault_spec){0};
		atomic_store_explicit(&calls[i], 0, memory_order_relaxed);
		any |= plan_now.site[i].first != 0;
	}
	fault_armed = any;
}

int fault_hit(enum fault_site s)
{
	const struct fault_spec *f = &plan_now.site[s];
	unsigned long n;

	if (!f->first)
		return 0;
	n = atomic_fetch_add_explicit(&calls[s], 1, memory_order_relaxed) + 1;
	if (n < f->first || n > f->last)
		return 0;
	log_warn("RSOCK_FAULT: %s fails, call %lu (value %d)", sites[s].name, n, f->value);
	return f->value;
}
