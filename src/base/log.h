/* log.h - logging without stdio or malloc; errno is preserved.
 *
 * Lines look like "rsock[pid:tid] warn: message\n" and go to RSOCK_LOG_FILE or
 * stderr. Formats understood: %s %d %i %u %x %p %c %% with the l, ll and z
 * length modifiers; anything else is copied as is. */
#ifndef RSOCK_LOG_H
#define RSOCK_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "base/compiler.h"

enum log_level { LOG_NONE = 0, LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG, LOG_TRACE };

extern int rsock_log_level RSOCK_HIDDEN;

/* Format into buf (always NUL-terminated when size > 0). Returns the length written. */
size_t log_vformat(char *buf, size_t size, const char *fmt, va_list ap);
size_t log_format(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Append the decimal digits of v at p (no NUL; at most 20 bytes). Returns
 * the end. A name built with it runs less code than log_format's. */
char *log_dec(char *p, unsigned long long v);

/* Emit one line at level. Never fails visibly, never changes errno. */
void log_emit(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Set the destination: path NULL means stderr. Returns 0 or -errno (then stderr is used). */
int log_open(const char *path);

/* RLIMIT_FSIZE: read it now (init), or note the application's new soft
 * limit (UINT64_MAX: none). Lines that would pass it are not written. */
void log_fsize_init(void);
void log_fsize_set(uint64_t limit);

/* The library's own log descriptor, or -1 (stderr). The fd shims protect it. */
int log_fd_get(void);
/* The application replaced our log fd (dup2 onto it): forget it and reopen
 * the file. Returns the new descriptor or -1. */
int log_fd_lost(void);

#define LOG_AT(lvl, ...)                                \
	do {                                            \
		if (RSOCK_UNLIKELY(rsock_log_level >= (lvl))) \
			log_emit((lvl), __VA_ARGS__);   \
	} while (0)

#define log_error(...) LOG_AT(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) LOG_AT(LOG_WARN, __VA_ARGS__)
#define log_info(...) LOG_AT(LOG_INFO, __VA_ARGS__)
#define log_debug(...) LOG_AT(LOG_DEBUG, __VA_ARGS__)
#define log_trace(...) LOG_AT(LOG_TRACE, __VA_ARGS__)

/* Rate-limited warning: at most `burst` lines per call site every 10 seconds,
 * then one line saying how many were suppressed. */
struct log_ratelimit {
	long window;       /* start of the current window, seconds (CLOCK_MONOTONIC) */
	unsigned count;    /* lines in this window */
	unsigned missed;   /* suppressed in this window */
};
int log_ratelimit_ok(struct log_ratelimit *rl, unsigned burst);

#define log_warn_rl(...)                                              \
	do {                                                          \
		static struct log_ratelimit rl_;                      \
		if (rsock_log_level >= LOG_WARN && log_ratelimit_ok(&rl_, 5)) \
			log_emit(LOG_WARN, __VA_ARGS__);               \
	} while (0)

/* The log's writer lock (a spin flag; log_emit holds it around its write),
 * also held across fork() by init.c's pthread_atfork handlers. */
void log_fork_lock(void);
void log_fork_unlock(void);

#endif
