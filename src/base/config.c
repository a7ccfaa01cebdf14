/* config.c - see config.h. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/config.h"
#include "base/fault.h"
#include "base/log.h"

struct cm_settings cm_settings = {
	.ring_kb = 256, .probe_ms = 1500, .handshake_ms = 2000, .neg_cache_s = 30, .settle_ms = 100,
	.nonblock_ms = CM_NONBLOCK_DEFAULT};

struct tp_settings tp_settings = {.poll_us = 20, .poll_max_us = 500, .ring_cache = 8,
				  .zcopy_kb = 256};

struct rsock_config rsock_config = {.mode = RSOCK_MODE_AUTO, .log_level = LOG_WARN};

static const char *const mode_names[] = {"auto", "tcp", "rdma", "shm"};
static const char *const level_names[] = {"none", "error", "warn", "info", "debug", "trace"};

static int parse_name(const char *s, const char *const *names, int n)
{
	for (int i = 0; s && i < n; i++)
		if (!strcasecmp(s, names[i]))
			return i;
	return -EINVAL;
}

int config_parse_mode(const char *s, enum rsock_mode *out)
{
	int v = parse_name(s, mode_names, (int)RSOCK_ARRAY_SIZE(mode_names));

	if (v < 0)
		return v;
	*out = (enum rsock_mode)v;
	return 0;
}

int config_parse_ulong(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;

	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int config_parse_log_level(const char *s, int *out)
{
	unsigned long n;
	int v = parse_name(s, level_names, (int)RSOCK_ARRAY_SIZE(level_names));

	if (v >= 0) {
		*out = v;
		return 0;
	}
	if (config_parse_ulong(s, LOG_NONE, LOG_TRACE, &n))
		return -EINVAL;
	*out = (int)n;
	return 0;
}

int config_parse_bool(const char *s, int *out)
{
	static const char *const yes[] = {"1", "yes", "true", "on"};
	static const char *const no[] = {"0", "no", "false", "off"};

	if (parse_name(s, yes, 4) >= 0)
		*out = 1;
	else if (parse_name(s, no, 4) >= 0)
		*out = 0;
	else
		return -EINVAL;
	return 0;
}

/* An unsigned variable in [min, max]; out of range or malformed: warn, keep *v. */
static void config_env_ulong(const char *name, unsigned long min, unsigned long max, unsigned *v)
{
	const char *s = secure_getenv(name);
	unsigned long n;

	if (!s)
		return;
	if (config_parse_ulong(s, min, max, &n))
		log_warn("%s=%s is not a number in %lu..%lu; using %u", name, s, min, max, *v);
	else
		*v = (unsigned)n;
}

static void rule_line_error(unsigned lineno, void *ctx)
{
	log_warn("%s:%u: malformed rule ignored", (const char *)ctx, lineno);
}

int config_load(struct rsock_config *cfg)
{
	const char *s;

	/* The log level first, so that the other warnings honour it. */
	if ((s = secure_getenv("RSOCK_LOG_LEVEL")) && config_parse_log_level(s, &cfg->log_level))
		log_warn("RSOCK_LOG_LEVEL=%s is not none|error|warn|info|debug|trace|0-5; using warn", s);
	rsock_log_level = cfg->log_level;

	if ((s = secure_getenv("RSOCK_LOG_FILE")) && *s) {
		int rc = log_open(s);
		if (rc)
			log_warn("RSOCK_LOG_FILE=%s cannot be opened (errno %d); logging to stderr", s, -rc);
		else
			cfg->log_file = s;
	}
	if ((s = secure_getenv("RSOCK_MODE")) && config_parse_mode(s, &cfg->mode))
		log_warn("RSOCK_MODE=%s is not auto|tcp|rdma|shm; using auto", s);
	if ((s = secure_getenv("RSOCK_STATS")) && config_parse_bool(s, &cfg->stats_at_exit))
		log_warn("RSOCK_STATS=%s is not 0|1; using 0", s);
	if ((s = secure_getenv("RSOCK_SHM"))) {
		int on = 1;
		if (config_parse_bool(s, &on))
			log_warn("RSOCK_SHM=%s is not 0|1; using 1", s);
		cfg->no_shm = !on;
	}
	config_env_ulong("RSOCK_RING_KB", 16, 512 * 1024, &cm_settings.ring_kb);
	config_env_ulong("RSOCK_PROBE_MS", 1, 60000, &cm_settings.probe_ms);
	config_env_ulong("RSOCK_HANDSHAKE_MS", 1, 60000, &cm_settings.handshake_ms);
	config_env_ulong("RSOCK_NEG_CACHE_S", 0, 86400, &cm_settings.neg_cache_s);
	config_env_ulong("RSOCK_SETTLE_MS", 0, 60000, &cm_settings.settle_ms);
	if (secure_getenv("RSOCK_NONBLOCK_MS")) { /* unset: half of RSOCK_HANDSHAKE_MS */
		unsigned v = cm_settings.nonblock_ms == CM_NONBLOCK_DEFAULT ? cm_settings.handshake_ms / 2
									    : cm_settings.nonblock_ms;
		config_env_ulong("RSOCK_NONBLOCK_MS", 0, 60000, &v);
		cm_settings.nonblock_ms = v;
	}
	config_env_ulong("RSOCK_POLL_US", 0, 10000, &tp_settings.poll_us);
	config_env_ulong("RSOCK_POLL_MAX_US", 0, 100000, &tp_settings.poll_max_us);
	config_env_ulong("RSOCK_RING_CACHE", 0, 1024, &tp_settings.ring_cache);
	config_env_ulong("RSOCK_ZCOPY_KB", 0, 1024 * 1024, &tp_settings.zcopy_kb);
	if ((s = secure_getenv("RSOCK_FAULT")) && *s) {
		struct fault_plan plan;
		if (fault_parse(s, &plan) < 0)
			log_warn("RSOCK_FAULT=%s is not SITE[:N[xCOUNT|+]][=VALUE][,...]; no fault armed", s);
		else {
			fault_arm(&plan);
			log_warn("RSOCK_FAULT=%s: fault injection armed", s);
		}
	}
	/* The ring size must be a power of two: round down. */
	while (cm_settings.ring_kb & (cm_settings.ring_kb - 1))
		cm_settings.ring_kb &= cm_settings.ring_kb - 1;
	if ((s = secure_getenv("RSOCK_CONF")) && *s) {
		int n = rules_load_file(s, &cfg->rules, rule_line_error, (void *)s);
		if (n < 0)
			log_warn("RSOCK_CONF=%s cannot be read (errno %d); no rules applied", s, -n);
		else
			cfg->conf_path = s;
	}
	log_debug("config: mode=%s shm=%d log_level=%d rules=%zu program=%s", mode_names[cfg->mode],
		  !cfg->no_shm, cfg->log_level, cfg->rules.n, cfg->program ? cfg->program : "?");
	return 0;
}

enum rules_transport config_decide(const struct rsock_config *cfg, enum rules_role role,
				   const struct sockaddr *addr, socklen_t addrlen)
{
	if (cfg->mode == RSOCK_MODE_TCP)
		return RULES_TCP;
	/* No rule matching: the same-host path first (a local peer), unless
	 * RSOCK_SHM=0 and RSOCK_MODE is not shm */
	return rules_match_or(&cfg->rules, cfg->program ? cfg->program : "", role, addr, addrlen,
			      cfg->mode == RSOCK_MODE_SHM || !cfg->no_shm ? RULES_SHM : RULES_RDMA);
}
