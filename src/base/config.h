/* config.h - run-time configuration from RSOCK_* environment variables and
 * the rule file, parsed once by init.c. */
#ifndef RSOCK_CONFIG_H
#define RSOCK_CONFIG_H

#include "base/compiler.h"
#include "base/rules.h"

enum rsock_mode {
	RSOCK_MODE_AUTO = 0, /* RDMA where possible, else kernel TCP */
	RSOCK_MODE_TCP = 1,  /* never RDMA */
	RSOCK_MODE_RDMA = 2, /* RDMA or a clear error, never a silent fallback */
};

struct rsock_config {
	enum rsock_mode mode;
	int log_level;          /* enum log_level */
	const char *log_file;   /* NULL: stderr */
	const char *conf_path;  /* NULL: no rule file */
	int stats_at_exit;      /* RSOCK_STATS */
	const char *program;    /* basename of the program, for the rules */
	struct rules_set rules;
};

extern struct rsock_config rsock_config RSOCK_HIDDEN;

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
