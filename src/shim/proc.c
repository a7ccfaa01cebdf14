/* shim/proc.c - fork and vfork. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include "shim.h"

RSOCK_EXPORT pid_t fork(void)
{
	pid_t pid;
	int saved;

	if (!shim_active())
		return REAL_CALL(fork);
	fdtab_fork_prepare();
	pid = rsock_real.fork();
	saved = errno;
	if (pid == 0)
		fdtab_fork_child();
	else
		fdtab_fork_parent();
	errno = saved;
	return pid;
}

/* vfork cannot be wrapped by a C function: the child would return from our
 * frame and clobber the parent's stack. The exported vfork is a stub that
 * asks for the real entry point, then jumps to it with the caller's own
 * stack and return address, so the semantics are exactly libc's. The vfork
 * child may only exec or _exit, so the library has nothing to do in it. */
RSOCK_HIDDEN void *shim_vfork_target(void);
RSOCK_HIDDEN void *shim_vfork_target(void)
{
	if (!rsock_ready())
		rsock_init();
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
