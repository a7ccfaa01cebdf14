/* mtx.c - the contended halves of mtx.h's lock (the classic three-state
 * futex mutex: a taker that finds it held marks it 2, "a thread may
 * sleep", and sleeps while it stays 2; a giver that finds 2 wakes one). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/mtx.h"

/* Both leave errno alone (the futex call's EAGAIN and EINTR are its
 * business): a caller may hold an errno it has yet to return. */
void mtx_lock_slow(struct mtx *m)
{
	int e = errno;

	/* Once marked 2 it stays 2 until given back: the one that takes it
	 * after a sleep marks 2 again, since others may still sleep. */
	while (atomic_exchange_explicit(&m->v, 2, memory_order_acquire) != 0)
		syscall(SYS_futex, &m->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
	errno = e;
}

void mtx_wake(struct mtx *m)
{
	int e = errno;

	syscall(SYS_futex, &m->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	errno = e;
}
