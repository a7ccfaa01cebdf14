/* vfork.h - streams a vfork child duplicates before its exec (Python's
 * subprocess dup2s a socket given as stdin or stdout onto 0 and 1): the
 * child shares our memory, so nothing is recorded in the tables, but its
 * exec hands the stream to the new image as if the original descriptor
 * itself were inherited (doc/design.md, "Descriptors, fork, exec"). */
#ifndef RSOCK_PATH_VFORK_H
#define RSOCK_PATH_VFORK_H

#include "path/prefix.h"

struct path_stream;

/* A vfork child gave the stream of oldfd another number, newfd. */
void ho_vfork_dup(int oldfd, int newfd, struct path_stream *s);

/* In that vfork child, the owner's thread switched s for it (the same
 * object: the owner's stream, so its prefix stays the owner's): keep pre,
 * what the new image reads first, beside the duplicate. Returns 1 when
 * kept (pre is ours then), 0 when this is no such child. */
int ho_vfork_keep(struct path_stream *s, struct ho_pre *pre);

/* What that vfork child keeps for s's new image, or NULL. */
struct ho_pre *ho_vfork_prefix(struct path_stream *s);

/* The number this vfork child gave fd's stream (fd itself may be closed
 * there already), or -1. */
int ho_vfork_newfd(int fd);

/* The new image of an exec from this process will hold fd's stream: fd is
 * not close-on-exec, or this vfork child duplicated it (ho_vfork_dup).
 * 1 or 0. */
int ho_exec_inherits(int fd);

#endif
