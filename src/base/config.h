/* config.h - run-time configuration from RSOCK_* environment variables and
 * the rule file, parsed once by init.c. */
#ifndef RSOCK_CONFIG_H
#define RSOCK_CONFIG_H

#include "base/compiler.h"
#include "base/rules.h"

enum rsock_mode {
	RSOCK_MODE_AUTO = 0, /* the same-host path to a local peer, else RDMA where possible, else TCP */
	RSOCK_MODE_TCP = 1,  /* never RDMA nor the same-host path */
	RSOCK_MODE_RDMA = 2, /* as auto, but a clear error instead of a fallback to TCP */
	RSOCK_MODE_SHM = 3,  /* as auto, the same-host path even with RSOCK_SHM=0 */
};

struct rsock_config {
	enum rsock_mode mode;
	int log_level;          /* enum log_level */
	const char *log_file;   /* NULL: stderr */
	const char *conf_path;  /* NULL: no rule file */
	int stats_at_exit;      /* RSOCK_STATS */
	int no_shm;             /* RSOCK_SHM=0: no same-host path unless a rule or mode shm says so */
	const char *program;    /* basename of the program, for the rules */
	struct rules_set rules;
};

extern struct rsock_config rsock_config RSOCK_HIDDEN;

/* Settings from the environment of the negotiation (config.c fills them, negotiate/ reads them). */
struct cm_settings {
	unsigned ring_kb;      /* RSOCK_RING_KB: receive and send ring, each */
	unsigned probe_ms;     /* RSOCK_PROBE_MS: bound on the probe */
	unsigned handshake_ms; /* RSOCK_HANDSHAKE_MS: bound on hello/ack and rdma connect */
	unsigned neg_cache_s;  /* RSOCK_NEG_CACHE_S: how long a plain peer is remembered */
	unsigned settle_ms;    /* RSOCK_SETTLE_MS: an accepted stream unused this long answers its hello (0: only at its first use) */
	unsigned nonblock_ms;  /* RSOCK_NONBLOCK_MS: a non-blocking socket's wait for its hello's answer
				* (CM_NONBLOCK_DEFAULT: half of handshake_ms) */
};
#define CM_NONBLOCK_DEFAULT 0xffffffffu
extern struct cm_settings cm_settings RSOCK_HIDDEN;

/* Settings from the environment of the RDMA path (config.c fills them, path/rdma/ reads them). */
struct tp_settings {
	unsigned poll_us;     /* RSOCK_POLL_US: busy-poll before blocking, microseconds (0: never) */
	unsigned poll_max_us; /* RSOCK_POLL_MAX_US: ceiling of the adaptive busy-poll (0: fixed) */
	unsigned ring_cache;  /* RSOCK_RING_CACHE: registered ring sets kept for reuse */
	unsigned zcopy_kb;    /* RSOCK_ZCOPY_KB: blocking sends of a buffer this long go
	                         without the copy (0: never) */
};
extern struct tp_settings tp_settings RSOCK_HIDDEN;

/* Parsers used by config_load and unit-tested on their own. Each returns 0 and
 * stores the value, or -EINVAL leaving *out untouched. */
int config_parse_mode(const char *s, enum rsock_mode *out);
int config_parse_log_level(const char *s, int *out);
int config_parse_bool(const char *s, int *out);
int config_parse_ulong(const char *s, unsigned long min, unsigned long max, unsigned long *out);

/* Fill `cfg` from the environment (secure_getenv) and the rule file. Invalid
 * values are warned about and replaced by the default. Returns 0; never fails. */
int config_load(struct rsock_config *cfg);

/* Which transport the rules allow for a stream; see rules_match(). */
enum rules_transport config_decide(const struct rsock_config *cfg, enum rules_role role,
				   const struct sockaddr *addr, socklen_t addrlen);

#endif
