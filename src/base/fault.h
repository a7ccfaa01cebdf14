/* fault.h - fault injection: RSOCK_FAULT names call sites of the library
 * and which of their calls fail, for the tests of failures nothing outside
 * the process can cause (doc/design.md, "Errors").
 *
 * Grammar (librsock(7)):
 *   RSOCK_FAULT = SPEC { "," SPEC }
 *   SPEC        = SITE [ ":" NTH [ "x" COUNT | "+" ] ] [ "=" VALUE ]
 * The NTH call at SITE in the process (counted from 1; default 1) fails,
 * and the COUNT - 1 calls after it (default 1), or every later call ("+").
 * VALUE: an errno name or number for the verbs sites (default ENOMEM, EIO
 * for req_notify, EINVAL for accept), a completion status for wc
 * (rem_access, rem_inv_req, retry_exc, rnr_retry_exc, loc_prot, or a number; default
 * rem_access),
 * milliseconds for cm_late (default 1000), hello_late, answer_late and
 * answer_slow (default 3000), shm_end_late (default 200) and for cm_addr_change,
 * cm_removal and cq_err (the event's delay after the stream came up,
 * default 1000), entries for cq_small (default 16);
 * none for the others. A site appears once; anything malformed arms
 * nothing. */
#ifndef RSOCK_FAULT_H
#define RSOCK_FAULT_H

#include "base/compiler.h"

enum fault_site {
	FAULT_REG_MR = 0,   /* ibv_reg_mr of a stream's rings: NULL with errno */
	FAULT_CREATE_QP,    /* a stream's QP creation (either side): -errno */
	FAULT_POST_SEND,    /* ibv_post_send (data, credits, FIN, fences): errno */
	FAULT_POST_RECV,    /* ibv_post_recv (a chain of receives): errno */
	FAULT_WC,           /* after a successful completion, an error one; QP to error */
	FAULT_POLL_CQ,      /* ibv_poll_cq returns -1 */
	FAULT_REQ_NOTIFY,   /* ibv_req_notify_cq: errno */
	FAULT_CM_LATE,      /* the library's thread takes an rdma_cm event late */
	FAULT_CM_SWAP,      /* ... after the event that follows it */
	FAULT_SWITCH_DROP,  /* a SWITCH read from the peer goes unanswered */
	FAULT_CM_ADDR_CHANGE, /* a stream that comes up gets a made-up ADDR_CHANGE */
	FAULT_CM_REMOVAL,   /* ... a made-up DEVICE_REMOVAL (the device stays) */
	FAULT_CQ_ERR,       /* ... a made-up IBV_EVENT_CQ_ERR: its CQ overran */
	FAULT_CQ_SMALL,     /* a stream's CQ made with VALUE entries: it can overrun */
	FAULT_HELLO_LATE,   /* the client's hello goes VALUE ms late */
	FAULT_ANSWER_LATE,  /* the server's answer to a hello goes VALUE ms late */
	FAULT_ANSWER_SLOW,  /* the client reads the server's answer VALUE ms late */
	FAULT_ACCEPT,       /* the library's thread's rdma_accept of a stream's request */
	FAULT_SHM_END_LATE, /* a same-host reader looks for the end or a move VALUE ms after an empty ring */
	FAULT_SITES
};

struct fault_spec {
	unsigned long first; /* the first failing call (1..); 0: the site is not armed */
	unsigned long last;  /* the last one; ULONG_MAX: every call from first on */
	int value;           /* errno, completion status or milliseconds */
};

struct fault_plan {
	struct fault_spec site[FAULT_SITES];
};

/* Non-zero once a plan with at least one site is armed: written at
 * initialisation only (fault_arm), so the test is one predictable branch. */
extern int fault_armed RSOCK_HIDDEN;

/* Parse an RSOCK_FAULT value into *plan (cleared first). Returns the number
 * of sites armed (>= 1), or -EINVAL with *plan cleared. */
int fault_parse(const char *s, struct fault_plan *plan);

/* Make plan the process's (call counts restart at 0). Called by config_load
 * before any stream exists; plan NULL disarms. */
void fault_arm(const struct fault_plan *plan);

/* Count a call at site s: its value (> 0) when this call is to fail, else 0.
 * Logs each failure it causes. Thread-safe (an atomic count). */
int fault_hit(enum fault_site s);

/* The name of site s ("reg_mr", ...). */
const char *fault_site_name(enum fault_site s);

/* A call at site s fails now: its value (> 0: an errno, a completion status,
 * milliseconds), else 0. Unarmed, one load of fault_armed and a branch. */
#define fault_at(s) (RSOCK_UNLIKELY(fault_armed) ? fault_hit(s) : 0)

#endif
