/* ownfd.h - the library's own descriptors.
 *
 * Event channels, completion channels, our duplicates of sockets and epoll
 * instances, eventfds, pipes, the verbs devices' descriptors, the log file.
 * The application never opened them, so to it they are not open: close()
 * fails with EBADF, close_range() and closefrom() pass over them, and a
 * dup2() onto one is refused (shim/fd.c). Each is recorded with its file's
 * identity (device, inode): a mark whose number now names another file (a
 * descriptor the library closed without ownfd_forget) is dropped when next
 * looked at, so a stale mark can never make the application's own
 * descriptor unclosable. */
#ifndef RSOCK_OWNFD_H
#define RSOCK_OWNFD_H

#include "base/fdbits.h"

extern fdbits_map ownfd_pages RSOCK_HIDDEN;

/* True when fd may be one of the library's own (the mark is checked by
 * ownfd_is). Lock-free: only the calls that close or replace a descriptor
 * look at it, so that the data calls rdma-core makes on the library's
 * descriptors (the doorbell write() of a soft-RoCE post, a completion
 * channel's read()) cost no lookup. */
static inline int ownfd_maybe(int fd)
{
	return fdbits_test(ownfd_pages, fd);
}

/* The lowest number ownfd_move() moves a descriptor to. */
#define OWNFD_BASE 512

/* Whether the limit on open files (RLIMIT_NOFILE's soft limit, read now)
 * leaves a stream's own two descriptors room at OWNFD_BASE and above: 1 or
 * 0. Without it a new stream stays on TCP before the library opens
 * anything for it (a probe's file, a device), which would take one of the
 * application's numbers. */
int ownfd_room(void);

/* Record fd as the library's own. Returns 0 or -errno. */
int ownfd_mark(int fd);

/* Move fd to a number >= OWNFD_BASE (close-on-exec; the original is
 * closed) and record it as the library's own. Returns the number to use:
 * fd itself when it cannot move (then recorded where it is), -1 when fd < 0. */
int ownfd_move(int fd);

/* A close-on-exec duplicate of fd, recorded as the library's own: at a
 * number >= OWNFD_BASE when the limit on open files allows, else the
 * lowest free one. Returns it, or -1 with errno set. */
int ownfd_dup(int fd);

/* ownfd_dup at a number >= OWNFD_BASE only, for a stream's own descriptors:
 * a stream that would take one of the application's numbers stays on TCP.
 * Returns it, or -1 with errno set (EMFILE: no number there). */
int ownfd_dup_high(int fd);

/* The library is about to close fd (or rdma-core is about to close it for
 * us): forget the mark. */
void ownfd_forget(int fd);

/* Forget the mark of fd and close it. */
void ownfd_close(int fd);

/* fd is one of the library's own (the mark checked against the file). */
int ownfd_is(int fd);

/* The library's own descriptors in [lo, hi], ascending, in *out (free it).
 * Returns how many, or -ENOMEM. */
int ownfd_list(unsigned lo, unsigned hi, int **out);
/* Around fork(): ownfd's lock (a leaf) is held across it. */
void ownfd_fork_prepare(void);
void ownfd_fork_parent(void);
void ownfd_fork_child(void);

#endif
