/* handover.h - moving an RDMA stream back to kernel TCP, in order, when a
 * process that cannot drive its verbs objects needs it (doc/design.md,
 * "Descriptors, fork, exec"): an exec'd image, a forked child, or the
 * owner's close while children may still hold the socket. Its pieces (module
 * prefix ho_): the prefix (prefix.h), the shared records and the owner's
 * request pipe (registry.h), the streams a vfork child duplicates
 * (vfork.h); the environment entry for an exec'd image is core/exec.h. */
#ifndef RSOCK_HANDOVER_H
#define RSOCK_HANDOVER_H

#include "path/prefix.h"
#include "path/registry.h"
#include "path/vfork.h"

#endif
