/* log.c - see log.h. Uses only raw syscalls through the real table. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/proc.h"

int rsock_log_level = LOG_WARN;

static _Atomic int log_fd = -1;        /* our own descriptor, -1 = use stderr */
static const char *log_path;           /* from the environment, lives forever */
static atomic_flag log_lock = ATOMIC_FLAG_INIT;

static size_t put_str(char *buf, size_t size, size_t pos, const char *s)
{
	if (!s)
		s = "(null)";
	while (*s) {
		if (pos + 1 < size)
			buf[pos] = *s;
		pos++;
		s++;
	}
	return pos;
}

static size_t put_num(char *buf, size_t size, size_t pos, unsigned long long v, unsigned base,
		      int negative)
{
	char tmp[24];
	int n = 0;

	do {
		tmp[n++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	if (negative)
		tmp[n++] = '-';
	while (n)
		pos = put_str(buf, size, pos, (char[]){tmp[--n], 0});
	return pos;
}

size_t log_vformat(char *buf, size_t size, const char *fmt, va_list ap)
{
	size_t pos = 0;

	for (const char *p = fmt; *p; p++) {
		if (*p != '%') {
			pos = put_str(buf, size, pos, (char[]){*p, 0});
			continue;
		}
		int lng = 0, sz = 0;
		p++;
		while (*p == 'l') {
			lng++;
			p++;
		}
		if (*p == 'z') {
			sz = 1;
			p++;
		}
		switch (*p) {
		case 'd':
		case 'i': {
			long long v = sz	 ? (long long)va_arg(ap, ssize_t)
				      : lng == 1 ? va_arg(ap, long)
				      : lng	 ? va_arg(ap, long long)
						 : va_arg(ap, int);
			pos = put_num(buf, size, pos, v < 0 ? -(unsigned long long)v : (unsigned long long)v, 10,
				      v < 0);
			break;
		}
		case 'u':
		case 'x': {
			unsigned long long v = sz	? va_arg(ap, size_t)
					     : lng == 1 ? va_arg(ap, unsigned long)
					     : lng	? va_arg(ap, unsigned long long)
							: va_arg(ap, unsigned);
			pos = put_num(buf, size, pos, v, *p == 'x' ? 16 : 10, 0);
			break;
		}
		case 'p':
			pos = put_str(buf, size, pos, "0x");
			pos = put_num(buf, size, pos, (uintptr_t)va_arg(ap, void *), 16, 0);
			break;
		case 's':
			pos = put_str(buf, size, pos, va_arg(ap, const char *));
			break;
		case 'c':
			pos = put_str(buf, size, pos, (char[]){(char)va_arg(ap, int), 0});
			break;
		case '%':
			pos = put_str(buf, size, pos, "%");
			break;
		case 0:
			p--;
			break;
		default:
			pos = put_str(buf, size, pos, (char[]){'%', *p, 0});
			break;
		}
	}
	if (size)
		buf[pos < size ? pos : size - 1] = 0;
	return pos < size ? pos : (size ? size - 1 : 0);
}

char *log_dec(char *p, unsigned long long v)
{
	char tmp[20];
	int n = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	while (n)
		*p++ = tmp[--n];
	return p;
}

size_t log_format(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	n = log_vformat(buf, size, fmt, ap);
	va_end(ap);
	return n;
}

/* The process's RLIMIT_FSIZE soft limit as far as the library knows it: read
 * at start-up (log_fsize_init) and followed through the application's
 * setrlimit/prlimit (src/shim/proc.c), so that checking it costs no system
 * call. A write beyond it raises SIGXFSZ, which kills, and sandboxed
 * processes set it to 0 (OpenSSH's pre-authentication child, whose seccomp
 * filter also kills on most system calls): a log line must never be what
 * ends the application. */
static _Atomic uint64_t log_fsize = UINT64_MAX;

void log_fsize_set(uint64_t limit)
{
	atomic_store_explicit(&log_fsize, limit, memory_order_relaxed);
}

void log_fsize_init(void)
{
	struct rlimit rl;

	if (syscall(SYS_prlimit64, 0, RLIMIT_FSIZE, NULL, &rl) == 0)
		log_fsize_set(rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur);
}

/* Whether n more bytes may be written to fd under that limit. */
static int log_fits(int fd, size_t n)
{
	uint64_t lim = atomic_load_explicit(&log_fsize, memory_order_relaxed);
	struct stat st;

	if (lim == UINT64_MAX)
		return 1;
	if (lim < n)
		return 0; /* (no system call: a sandbox may forbid it) */
	if (syscall(SYS_fstat, fd, &st) != 0 || !S_ISREG(st.st_mode))
		return 1;
	return (uint64_t)st.st_size + n <= lim;
}

int log_open(const char *path)
{
	int fd;

	log_path = path;
	if (!path || !*path)
		return 0;
	fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	/* Keep the descriptor out of the way of programs that expect low fds. */
	int high = (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 900);
	if (high >= 0) {
		syscall(SYS_close, fd);
		fd = high;
	}
	atomic_store(&log_fd, fd);
	return 0;
}

int log_fd_get(void)
{
	return atomic_load_explicit(&log_fd, memory_order_relaxed);
}

int log_fd_lost(void)
{
	atomic_store(&log_fd, -1);
	if (log_path)
		log_open(log_path);
	return atomic_load(&log_fd);
}

int log_ratelimit_ok(struct log_ratelimit *rl, unsigned burst)
{
	long now_s = (long)(clock_now_ns() / 1000000000);

	if (now_s - rl->window >= 10) {
		if (rl->missed)
			log_emit(LOG_WARN, "%u similar messages suppressed", rl->missed);
		rl->window = now_s;
		rl->count = 0;
		rl->missed = 0;
	}
	if (rl->count < burst) {
		rl->count++;
		return 1;
	}
	rl->missed++;
	return 0;
}

static const char *const level_names[] = {"", "error", "warn", "info", "debug", "trace"};

void log_emit(int level, const char *fmt, ...)
{
	int saved = errno;
	char line[512];
	size_t n;
	va_list ap;
	int fd;

	if (level < LOG_ERROR || level > LOG_TRACE)
		level = LOG_ERROR;
	n = log_format(line, sizeof(line), "rsock[%d:%ld] %s: ", (int)rsock_pid(),
		       (long)syscall(SYS_gettid), level_names[level]);
	if (level >= LOG_DEBUG) {
		/* Diagnosis lines carry CLOCK_MONOTONIC seconds, comparable
		 * between the processes of one host: "debug: 812.004211 ...". */
		struct timespec ts = clock_ns_ts(clock_now_ns());
		n += log_format(line + n, sizeof(line) - n, "%ld.", (long)ts.tv_sec);
		/* microseconds zero-padded to 6 digits: print 1uuuuuu, drop the 1 */
		size_t m = log_format(line + n, sizeof(line) - n, "%ld ", ts.tv_nsec / 1000 + 1000000);
		memmove(line + n, line + n + 1, m);
		n += m - 1;
	}
	va_start(ap, fmt);
	n += log_vformat(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	line[n++] = '\n';

	fd = atomic_load(&log_fd);
	if (fd < 0) {
		struct stat st;
		/* Never write into a stream the application put on fd 2. */
		if (syscall(SYS_fstat, 2, &st) != 0 || S_ISSOCK(st.st_mode))
			goto out;
		fd = 2;
	}
	if (!log_fits(fd, n))
		goto out;
	log_fork_lock();
	for (size_t off = 0; off < n;) {
		long w = syscall(SYS_write, fd, line + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	log_fork_unlock();
out:
	errno = saved;
}

void log_fork_lock(void)
{
	while (atomic_flag_test_and_set_explicit(&log_lock, memory_order_acquire))
		;
}

void log_fork_unlock(void)
{
	atomic_flag_clear_explicit(&log_lock, memory_order_release);
}
