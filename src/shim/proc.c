/* shim/proc.c - fork and vfork, and the RLIMIT_FSIZE the log follows. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <sys/resource.h>
#include <sys/syscall.h>

#include "shim/shim.h"

#include "core/exec.h"
#include "path/handover.h"
#include "base/log.h"
#include "base/statpub.h"
#include "path/path.h"

RSOCK_EXPORT pid_t fork(void)
{
	/* The library's locks are taken across the fork, and ho_forks counted,
	 * by the handlers init.c registers with pthread_atfork (their work
	 * leaves errno alone too, in both processes). */
	return SHIM_KEPT(shim_active() ? rsock_real.fork() : REAL_CALL(fork));
}

/* vfork cannot be wrapped by a C function: the child would return from our
 * frame and clobber the parent's stack. The exported vfork is a stub that
 * asks for the real entry point, then jumps to it with the caller's own
 * stack and return address, so the semantics are exactly libc's. The vfork
 * child shares our memory until it execs or exits, and what it does to its
 * descriptors (Python's subprocess closes all of them with close_range,
 * dup2s the child's stdin and stdout) is its own: the shims must not record
 * it in the parent's tables (shim_vforked()). */
RSOCK_HIDDEN void *shim_vfork_target(void);
RSOCK_HIDDEN void *shim_vfork_target(void)
{
	if (!rsock_ready())
		rsock_init();
	/* The child shares our memory, the pid cache included (init.h). */
	atomic_store(&rsock_pid_nocache, 1);
	atomic_store(&rsock_vfork_pid, (pid_t)syscall(SYS_getpid));
	return rsock_real.vfork ? (void *)rsock_real.vfork : (void *)rsock_real.fork;
}

#if defined(__x86_64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork, @function\n"
	"vfork:\n"
	"	sub $8, %rsp\n"
	"	call shim_vfork_target\n"
	"	add $8, %rsp\n"
	"	jmp *%rax\n"
	".size vfork, .-vfork\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork, %function\n"
	"vfork:\n"
	"	stp x29, x30, [sp, #-16]!\n"
	"	bl shim_vfork_target\n"
	"	ldp x29, x30, [sp], #16\n"
	"	br x0\n"
	".size vfork, .-vfork\n");
#else
/* Elsewhere vfork is served by fork, which POSIX allows. */
RSOCK_EXPORT pid_t vfork(void)
{
	return fork();
}
#endif

/* ---- exec ---------------------------------------------------------------------
 * The new image has no transport state. An accepted stream still waiting for
 * its handshake (it settles at first use, doc/design.md, "Descriptors, fork,
 * exec") and not
 * marked close-on-exec would reach the new program with the client's hello
 * at its head: before any exec it is settled, declining RDMA, so the new
 * program gets a plain TCP stream (inetd-style servers, sshd's re-exec). */
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void decline_one(int fd, struct conn *c, void *arg)
{
	(void)arg;
	if (atomic_load(&c->hello_due) && ho_exec_inherits(fd))
		conn_settle(c, fd, CONN_SETTLE_FULL);
}

/* An RDMA stream the new image inherits (or that a child of ours may hold,
 * whose stream would die with our verbs objects) moves to TCP first, in
 * order; what was not read yet goes to the new image (handover.h). */
static void handover_one(int fd, struct conn *c, void *arg)
{
	struct path_stream *s = c->stream;

	(void)arg;
	if (atomic_load(&c->path) != CONN_PATH_RDMA || !s || path_switched(s))
		return;
	if (shim_vforked()) { /* our memory is the parent's (shim.h) */
		if (ho_exec_inherits(fd))
			path_handover_shared(s);
	} else if (ho_exec_inherits(fd) || path_forked(s)) {
		path_handover(s);
	}
}

/* The environment to exec with: envp, or a copy naming handed-over prefixes
 * (free it with exec_done). */
static char **exec_prepare(char *const envp[])
{
	int saved = errno;
	char **env = (char **)envp;

	if (shim_active()) {
		fdtab_each(decline_one, NULL);
		fdtab_each(handover_one, NULL);
		env = ho_exec_env(envp);
		if (!env)
			env = (char **)envp;
	}
	errno = saved;
	return env;
}

/* The exec failed (or posix_spawn returned): drop the copy. */
static void exec_done(char **env, char *const envp[])
{
	int saved = errno;

	ho_exec_env_free(env, envp);
	errno = saved;
}

/* Around a call that replaces the image: the environment as exec_prepare
 * makes it, and rsock-stat's segment removed (the new image makes its own);
 * exec_end, when the call returned (it failed), makes the segment again and
 * drops the copy. */
static char **exec_begin(char *const envp[])
{
	char **env = exec_prepare(envp);

	statpub_unlink();
	return env;
}

static void exec_end(char **env, char *const envp[])
{
	statpub_exec_failed();
	exec_done(env, envp);
}

RSOCK_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	char **env = exec_begin(envp);
	int r = REAL_CALL(execve, path, argv, env);

	exec_end(env, envp);
	return r;
}

RSOCK_EXPORT int execv(const char *path, char *const argv[])
{
	char **env = exec_begin(environ);
	int r = env == environ ? REAL_CALL(execv, path, argv) : REAL_CALL(execve, path, argv, env);

	exec_end(env, environ);
	return r;
}

RSOCK_EXPORT int execvp(const char *file, char *const argv[])
{
	char **env = exec_begin(environ);
	int r = env == environ ? REAL_CALL(execvp, file, argv) : REAL_CALL(execvpe, file, argv, env);

	exec_end(env, environ);
	return r;
}

RSOCK_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	char **env = exec_begin(envp);
	int r = REAL_CALL(execvpe, file, argv, env);

	exec_end(env, envp);
	return r;
}

RSOCK_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	char **env = exec_begin(envp);
	int r = REAL_CALL(fexecve, fd, argv, env);

	exec_end(env, envp);
	return r;
}

RSOCK_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			     const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	char **env;
	int r, e0;

	if (!rsock_real.posix_spawn)
		return ENOSYS;
	e0 = errno; /* an error is the result: errno stays the application's */
	env = exec_prepare(envp);
	r = rsock_real.posix_spawn(pid, path, fa, attr, argv, env);
	exec_done(env, envp);
	errno = e0;
	return r;
}

RSOCK_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			      const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	char **env;
	int r, e0;

	if (!rsock_real.posix_spawnp)
		return ENOSYS;
	e0 = errno; /* an error is the result: errno stays the application's */
	env = exec_prepare(envp);
	r = rsock_real.posix_spawnp(pid, file, fa, attr, argv, env);
	exec_done(env, envp);
	errno = e0;
	return r;
}

/* system() and popen() run /bin/sh through glibc's internal posix_spawn,
 * which no preload sees: the hand-over is done here. When prefixes must
 * travel, the environment the shell gets is swapped in for the call (the
 * shell's environment is read when it is spawned; a setenv() by another
 * thread meanwhile may be lost). */
static char **env_swap_in(void)
{
	char **env = exec_prepare(environ);

	if (env == environ)
		return NULL;
	char **old = environ;
	environ = env;
	return old;
}

static void env_swap_out(char **old)
{
	char **env = environ;

	if (!old)
		return;
	environ = old;
	exec_done(env, old);
}

RSOCK_EXPORT int system(const char *cmd)
{
	char **old;
	int r, e0, e;

	if (!rsock_real.system) {
		errno = ENOSYS;
		return -1;
	}
	if (!cmd) /* is there a shell */
		return rsock_real.system(cmd);
	e0 = errno;
	old = env_swap_in();
	r = rsock_real.system(cmd);
	e = errno;
	env_swap_out(old);
	errno = r == -1 ? e : e0;
	return r;
}

RSOCK_EXPORT FILE *popen(const char *cmd, const char *type)
{
	char **old;
	FILE *f;
	int e0, e;

	if (!rsock_real.popen) {
		errno = ENOSYS;
		return NULL;
	}
	e0 = errno;
	old = env_swap_in();
	f = rsock_real.popen(cmd, type);
	e = errno;
	env_swap_out(old);
	errno = f ? e0 : e;
	return f;
}

/* execl, execlp, execle: their arguments as a vector, then the v variant.
 * (glibc's own execl calls its internal execve, which no preload sees.) */

/* The arguments after the first one, up to and including the NULL. */
static size_t execl_count(va_list ap)
{
	va_list c;
	size_t n = 1;

	va_copy(c, ap);
	while (va_arg(c, char *))
		n++;
	va_end(c);
	return n;
}

/* argv[0] = first, then the next n - 1 arguments and the NULL. */
static void execl_fill(char **argv, const char *first, size_t n, va_list *ap)
{
	argv[0] = (char *)first;
	for (size_t i = 1; i <= n; i++)
		argv[i] = va_arg(*ap, char *);
}

RSOCK_EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;

	va_start(ap, arg);
	size_t n = execl_count(ap);
	char *argv[n + 1];
	execl_fill(argv, arg, n, &ap);
	va_end(ap);
	return execv(path, argv);
}

RSOCK_EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;

	va_start(ap, arg);
	size_t n = execl_count(ap);
	char *argv[n + 1];
	execl_fill(argv, arg, n, &ap);
	va_end(ap);
	return execvp(file, argv);
}

RSOCK_EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	char **envp;

	va_start(ap, arg);
	size_t n = execl_count(ap);
	char *argv[n + 1];
	execl_fill(argv, arg, n, &ap);
	envp = va_arg(ap, char **);
	va_end(ap);
	return execve(path, argv, envp);
}

/* ---- RLIMIT_FSIZE ----------------------------------------------------------------
 * The log writes nothing past the application's file-size limit (log.c):
 * follow the limit it sets for itself. These four are called early, by
 * sanitizer runtimes and other libraries' constructors before the library
 * is initialised, so they neither initialise it nor use the real table:
 * they are what glibc does on a 64-bit system, prlimit64() directly (struct
 * rlimit is struct rlimit64 there). */

_Static_assert(sizeof(struct rlimit) == sizeof(struct rlimit64) &&
		       sizeof(rlim_t) == sizeof(rlim64_t),
	       "setrlimit and prlimit are served by prlimit64 on 64-bit systems only");

static int rl_call(pid_t pid, int resource, const void *rl, void *old)
{
	if (syscall(SYS_prlimit64, pid, resource, rl, old) != 0)
		return -1;
	if (rl && resource == RLIMIT_FSIZE && (pid == 0 || pid == getpid())) {
		rlim_t cur = ((const struct rlimit *)rl)->rlim_cur;
		log_fsize_set(cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)cur);
	}
	return 0;
}

RSOCK_EXPORT int setrlimit(__rlimit_resource_t resource, const struct rlimit *rl)
{
	return rl_call(0, (int)resource, rl, NULL);
}

RSOCK_EXPORT int setrlimit64(__rlimit_resource_t resource, const struct rlimit64 *rl)
{
	return rl_call(0, (int)resource, rl, NULL);
}

RSOCK_EXPORT int prlimit(pid_t pid, __rlimit_resource_t resource, const struct rlimit *rl,
			 struct rlimit *old)
{
	return rl_call(pid, (int)resource, rl, old);
}

RSOCK_EXPORT int prlimit64(pid_t pid, __rlimit_resource_t resource, const struct rlimit64 *rl,
			   struct rlimit64 *old)
{
	return rl_call(pid, (int)resource, rl, old);
}
