/* service.h - the library's thread: one per process, a small loop that
 * watches descriptors for the modules that register them and runs their
 * per-turn work (doc/design.md, "Lock order and lifetimes").
 *
 * A turn, in this order: the callback of every watched descriptor poll()
 * reported (POLLIN, or an error), in the order they were registered, with
 * what it reported; on the thread's first turn and on a turn at least
 * SERVICE_SWEEP_MS after the last such one, the callback of every watched
 * descriptor, 0 for one that was not ready (a callback drains what is there
 * either way; what only a call tells, such as a file that refuses this
 * process after a change of credentials, is found within that time while
 * the thread turns); the wake's count is read; every per-turn function
 * runs, in the order registered. A turn with nothing ready costs no system
 * call of the callbacks'. Then the
 * thread sleeps in poll() on the watched descriptors and its wake (a
 * timer), without a time-out unless a per-turn function said more work
 * waits or asked for a turn within some time (service_wake_after).
 *
 * The thread holds the run lock whenever it is not asleep in poll(); a fork
 * takes it first (service_fork_quiesce), so no child is forked while the
 * thread is in malloc or in a library whose internal locks the child would
 * inherit held. It knows nothing of what it watches. */
#ifndef RSOCK_SERVICE_H
#define RSOCK_SERVICE_H

#include <stdint.h>

#include "base/compiler.h"

/* A watched descriptor's callback, on the thread, run lock held: fd, the
 * events poll() reported (0: none, or the first turn) and the arg given to
 * service_watch. Returns 0 to keep watching, a -errno to stop (the watch is
 * removed; the descriptor stays the caller's). */
typedef int (*service_cb)(int fd, short revents, void *arg);

/* Watch fd for events (poll's POLLIN...) in this process's loop: cb runs on
 * the turns that find it ready, from the next poll() on, and on the sweeps.
 * Watches are per process: a forked child starts with none (the parent's
 * thread watches the parent's). Registering
 * before service_start is fine. 0, -EEXIST (fd is watched already) or
 * -ENOSPC (SERVICE_WATCHES watches at most: the library's few, and each
 * verbs device's asynchronous events). Takes the service's table lock, a
 * leaf below cm_lock and ho_lock. */
#define SERVICE_WATCHES 32
#define SERVICE_SWEEP_MS 1000
int service_watch(int fd, short events, service_cb cb, void *arg);
/* Stop watching fd (nothing when it is not watched). A callback already
 * running in the thread finishes its turn. */
void service_unwatch(int fd);

/* Run fn on every turn, after the watched descriptors' callbacks: fn
 * returns nonzero when more of its work waits (the thread then does not
 * sleep); work due later asks for its turn with service_wake_after. For the whole life of the library, forks included; registered
 * once, at start-up (init.c). 0 or -ENOSPC. */
int service_each_turn(int (*fn)(void));

/* Start the thread in this process if it has none (again in a child after
 * fork, where the parent's does not exist). Returns only once the thread
 * runs its loop, so a fork right after is safe. 0 or -errno. */
int service_start(void);
/* Whether this process's thread runs and can be woken (service_wake):
 * 1 or 0. */
int service_running(void);
/* Make the thread take a turn soon (from any thread; async-signal-safe;
 * takes no lock). */
void service_wake(void);
/* Make the thread take a turn within ms milliseconds, not at once: from
 * another thread through the thread's timer (a system call, none when a
 * turn is due by then already: the timer's, or the end of the sleep a
 * per-turn function asked for), which lets the caller go on undisturbed;
 * on the thread (a callback or per-turn function), a bound on its coming
 * sleep. Nothing when the thread does not run. Takes no lock. */
void service_wake_after(int ms);
/* Park the thread as service_fork_quiesce does, waiting for it at most
 * until deadline_ns (CLOCK_MONOTONIC, clock_now_ns()): 0, or -ETIMEDOUT
 * (not parked; its turn is still running). service_resume lets it go. */
int service_pause_until(int64_t deadline_ns);
void service_resume(void);

/* Around fork (init.c), before every other lock the thread may take: wait
 * until the thread sleeps in poll() and keep it there; resumed in parent
 * and child. */
void service_fork_quiesce(void);
void service_fork_resume(void);
/* The watch table's lock across fork (a leaf; init.c takes it last of
 * cm_lock, ho_lock and it). */
void service_fork_lock(void);
void service_fork_unlock(void);

#endif
