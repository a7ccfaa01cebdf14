/* registry.h - the shared record of each RDMA stream (MAP_SHARED, inherited
 * by forked children) through which a child asks the owning process to
 * switch it to kernel TCP, and the owner's request pipe, which the
 * library's thread watches (a pipe, unlike an eventfd, can be opened again
 * through /proc by a child that closed it). doc/design.md, "Descriptors,
 * fork, exec". */
#ifndef RSOCK_PATH_REGISTRY_H
#define RSOCK_PATH_REGISTRY_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/compiler.h"
#include "path/prefix.h"

enum ho_state { HO_IDLE = 0, HO_ASKED, HO_DONE, HO_FAILED };

/* In a MAP_SHARED page read by the owner's forked children (the same
 * library build): the layout is what both sides agree on. */
struct ho_rec {
	_Atomic uint32_t state; /* enum ho_state; a futex word */
	int32_t pre_fd;         /* the owner's prefix memfd after DONE, or -1 */
	int32_t req_fd;         /* the write end of the owner's request pipe */
	int32_t owner;          /* pid of the process whose verbs objects carry it */
	uint64_t req_ino;       /* the request pipe's inode: a child's inherited copy is checked */
};

struct path_stream;
/* What the registry needs from the layers above, set by init.c (init_run)
 * before any stream registers; may be unset (unit tests). A registered
 * stream itself is reached through its path's ops (path.h): handover,
 * prefix_fd, control_watch, control_fd. */
struct ho_hooks {
	/* Start this process's library thread with what else it watches
	 * (cm_service_start): 0 or -errno. Unset: service_start(). */
	int (*start)(void);
};
/* Copies *h (init.c, once, before any stream registers). */
void ho_hooks_set(const struct ho_hooks *h);

/* A record for s, owned by this process (NULL when none can be had: the
 * stream then simply cannot be handed to another process). Registers s so
 * that a request finds it; starts the library's thread, which watches the
 * request pipe. Takes ho_lock. */
struct ho_rec *ho_register(struct path_stream *s);
/* Before a stream's own descriptors are placed (tp_new): make this
 * process's request pipe and its epoll set, and start the library's thread
 * (with what else it watches), now rather than when the stream comes up,
 * so that they too land above the application's numbers while the stream's
 * own do (the application may lower its limit on open files meanwhile).
 * Best effort: ho_register does what is left. Takes ho_lock, then (not
 * holding it) the start hook's locks. */
void ho_prepare(void);
/* s is going away (owner only): no request reaches it any more. forked: a
 * child may still hold the stream, so its record is never reused. Its
 * control connection stays in the registry's epoll set until ho_unwatch
 * (an event for it meanwhile finds its slot empty, or another stream's,
 * which it only makes look at its control connection). Takes ho_lock. */
void ho_unregister(struct path_stream *s, int forked);
/* Before a registered stream's control descriptor fd closes (it was
 * unregistered): out of the registry's epoll set. Takes ho_lock. */
void ho_unwatch(int fd);
/* s was switched by its owner on its own account (its close after a fork):
 * children find it done, and the prefix in memfd fd (or -1). */
void ho_publish(struct path_stream *s, int fd);
/* Another process's stream (rec->owner != rsock_pid()): ask the owner to
 * switch it and wait (bounded). Returns 0 and *pre (NULL when nothing was
 * unread), or -errno (-EIO: the owner is gone or did not answer). */
int ho_request(struct ho_rec *rec, struct ho_pre **pre);

/* Run fn(s, arg) on each stream this process registered, holding ho_lock
 * (fn may take the stream's lock: doc/design.md, "Lock order and
 * lifetimes"), until one returns nonzero: returns that, else 0. A stream
 * found here is not torn down before fn returns (its close unregisters it
 * first, under ho_lock). */
int ho_each(int (*fn)(struct path_stream *s, void *arg), void *arg);

/* Forks of this process so far (the owner's close switches a stream that a
 * child may still hold). */
extern _Atomic unsigned ho_forks RSOCK_HIDDEN;
/* Count a fork (a prepare hook of init.c's fork table): our streams may now
 * be held elsewhere too. */
void ho_fork_count(void);

/* For init.c's pthread_atfork handlers: the registry's lock is held across
 * fork(), so that no child inherits it held by a thread it does not have. */
void ho_fork_lock(void);
void ho_fork_unlock(void);

#endif
