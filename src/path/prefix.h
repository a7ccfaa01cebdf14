/* prefix.h - what came over RDMA and was not read when a stream moved to
 * kernel TCP (doc/design.md, "Descriptors, fork, exec"), kept in a memfd
 * mapped MAP_SHARED by every process holding the stream, so that each byte
 * is read once whoever reads it (module prefix ho_pre_). */
#ifndef RSOCK_PATH_PREFIX_H
#define RSOCK_PATH_PREFIX_H

#include <stddef.h>
#include <sys/uio.h>

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
/* Unmap p and close its memfd; NULL is ignored. */
void ho_pre_free(struct ho_pre *p);
/* Free p without closing its descriptor: a prefix a previous vfork child
 * kept, whose descriptor was that child's (gone with its exec). NULL is
 * ignored. */
void ho_pre_forget(struct ho_pre *p);

#endif
