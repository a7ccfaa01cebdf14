/* proc.c - the once-state, the per-thread guard, the pid cache and the
 * library's threads (base/proc.h). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/proc.h"

_Atomic int rsock_init_state = INIT_NONE;
__thread int rsock_in_lib __attribute__((tls_model("initial-exec")));
pid_t *rsock_pid_slot;
_Atomic int rsock_pid_nocache;
_Atomic pid_t rsock_vfork_pid;

pid_t rsock_pid_slow(void)
{
	pid_t p = getpid();
	pid_t *s = rsock_pid_slot;

	if (s && !atomic_load_explicit(&rsock_pid_nocache, memory_order_relaxed))
		__atomic_store_n(s, p, __ATOMIC_RELAXED);
	return p;
}

/* The page of the pid cache (init.h); NULL leaves rsock_pid() a getpid(). */
void proc_pid_cache_init(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t len = pg > 0 ? (size_t)pg : 4096;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return;
#ifdef MADV_WIPEONFORK
	if (madvise(m, len, MADV_WIPEONFORK) == 0) {
		((pid_t *)m)[1] = (pid_t)syscall(SYS_getpid); /* the home pid (init.h) */
		rsock_pid_slot = m;
		return;
	}
#endif
	munmap(m, len);
}

void proc_fork_child(void)
{
	atomic_store(&rsock_vfork_pid, 0); /* this memory is the child's own */
	if (rsock_pid_slot)
		__atomic_store_n(&rsock_pid_slot[1], (pid_t)syscall(SYS_getpid), __ATOMIC_RELAXED);
}

int rsock_thread_start(void *(*fn)(void *), sem_t *up)
{
	pthread_t th;
	sigset_t all, old;
	int rc;

	sem_init(up, 0, 0);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes no signals */
	rc = -pthread_create(&th, NULL, fn, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return rc;
	while (sem_wait(up) && errno == EINTR)
		;
	pthread_detach(th);
	return 0;
}
