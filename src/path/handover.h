/* handover.h - moving an RDMA stream back to kernel TCP, in order, when a
 * process that cannot drive its verbs objects needs it (doc/design.md
 * section 6): an exec'd image, a forked child, or the owner's close while
 * children may still hold the socket.
 *
 * Three pieces live here (module prefix ho_):
 *  - the prefix: what came over RDMA and was not read when the stream moved,
 *    kept in a memfd mapped MAP_SHARED by every process holding the stream,
 *    so that each byte is read once whoever reads it;
 *  - the shared record of each RDMA stream (MAP_SHARED, inherited by forked
 *    children) through which a child asks the owning process to switch, and
 *    the owner's bell (a pipe its cm thread watches; a pipe, unlike an
 *    eventfd, can be opened again through /proc by a child that closed it);
 *  - the environment entry that hands prefixes to an exec'd image. */
#ifndef RSOCK_HANDOVER_H
#define RSOCK_HANDOVER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "base/compiler.h"

#define HO_ENV "RSOCK_HANDOVER"

/* ---- the prefix ---- */
struct ho_pre;

/* A prefix holding a copy of the bytes of the n pieces in v, in order (the
 * unread parts of a stream's spill and ring, each possibly wrapped). Returns
 * 0 and *out, or -errno. */
int ho_pre_new(const struct iovec *v, int n, struct ho_pre **out);
/* Map the prefix in memfd (which stays open, close-on-exec, owned by the
 * prefix). -EPROTO when it is not a valid prefix. */
int ho_pre_open(int memfd, struct ho_pre **out);
/* Bytes not yet read. */
size_t ho_pre_left(const struct ho_pre *p);
/* Copy up to max bytes into iov (from byte `skip` of iov); consume them unless
 * flags has MSG_PEEK; with MSG_TRUNC copy nothing (TCP's discard). Returns
 * the count. Safe between threads and processes. */
size_t ho_pre_read(struct ho_pre *p, const struct iovec *iov, int iovcnt, size_t skip, size_t max,
		   int flags);
/* The prefix's memfd (another process may open it through /proc). */
int ho_pre_fd(const struct ho_pre *p);
void ho_pre_free(struct ho_pre *p);

/* ---- shared records and the owner's bell ---- */
enum ho_state { HO_IDLE = 0, HO_ASKED, HO_DONE, HO_FAILED };

struct ho_rec {
	_Atomic uint32_t state; /* enum ho_state; a futex word */
	int32_t pre_fd;         /* the owner's prefix memfd after DONE, or -1 */
	int32_t bell_fd;        /* the write end of the owner's bell (a pipe) */
	int32_t owner;          /* pid of the process whose verbs objects carry it */
	uint64_t bell_ino;      /* the bell pipe's inode: a child's inherited copy is checked */
};

struct tp;
/* A record for t, owned by this process (NULL when none can be had: the
 * stream then simply cannot be handed to another process). Registers t so
 * that the bell finds it; starts the cm thread that listens to the bell. */
struct ho_rec *ho_register(struct tp *t);
/* t is going away (owner only): no request reaches it any more. forked: a
 * child may still hold the stream, so its record is never reused. */
void ho_unregister(struct tp *t, int forked);
/* t was switched by its owner on its own account (its close after a fork):
 * children find it done, and the prefix in memfd fd (or -1). */
void ho_publish(struct tp *t, int fd);
/* The descriptor the cm thread polls for the hand-over (an epoll set of the
 * bell and the registered streams' control connections), or -1. */
int ho_bell_fd(void);
/* It was readable (cm thread): switch every registered stream some other
 * process asked for, and look at the control connections that moved (a
 * peer's SWITCH is answered there when the application is elsewhere). */
void ho_serve(void);
/* Another process's stream (rec->owner != rsock_pid()): ask the owner to
 * switch it and wait (bounded). Returns 0 and *pre (NULL when nothing was
 * unread), or -errno (-EIO: the owner is gone or did not answer). */
int ho_request(struct ho_rec *rec, struct ho_pre **pre);

/* Forks of this process so far (the owner's close switches a stream that a
 * child may still hold). */
extern _Atomic unsigned ho_forks RSOCK_HIDDEN;

/* For init.c's pthread_atfork handlers: the registry's lock is held across
 * fork(), so that no child inherits it held by a thread it does not have. */
void ho_fork_lock(void);
void ho_fork_unlock(void);

/* ---- exec ---- */
/* Before an exec: the environment for the new image, envp plus HO_ENV naming
 * the prefixes of the sockets that survive it (which prepare() switched).
 * Returns envp itself when nothing is to be handed over, a new array (free
 * with ho_exec_env_free) otherwise, or NULL (out of memory: exec anyway). */
char **ho_exec_env(char *const envp[]);
void ho_exec_env_free(char **env, char *const envp[]);

/* A vfork child gave the stream of oldfd another number, newfd (Python's
 * subprocess dup2s a socket given as stdin or stdout onto 0 and 1): it
 * shares our memory, so nothing is recorded in the tables, but its exec
 * hands the stream to the new image as if oldfd itself were inherited. */
void ho_vfork_dup(int oldfd, int newfd, struct tp *t);

/* In that vfork child, the owner's thread switched t for it (the same
 * object: the owner's tp, so t->pre stays the owner's): keep pre, what the
 * new image reads first, beside the duplicate. Returns 1 when kept (pre is
 * ours then), 0 when this is no such child. */
int ho_vfork_keep(struct tp *t, struct ho_pre *pre);

/* What that vfork child keeps for t's new image, or NULL. */
struct ho_pre *ho_vfork_prefix(struct tp *t);

/* The new image of an exec from this process will hold fd's stream: fd is
 * not close-on-exec, or this vfork child duplicated it (ho_vfork_dup). */
int ho_exec_inherits(int fd);
/* In a new image: adopt the sockets named by HO_ENV (their prefixes come
 * first, then the kernel socket), and remove the variable. */
void ho_adopt_env(void);

#endif
