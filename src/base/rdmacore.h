/* rdmacore.h - rdma-core (librdmacm, libibverbs, their providers and
 * libnl) loaded at the first RDMA need, not with the library
 * (doc/design.md, "Initialisation"). rdmacore.c defines, with hidden
 * visibility, each librdmacm and libibverbs function the library calls;
 * the first call loads both libraries with dlopen and binds every
 * function at the symbol version a link would have recorded. The rest of
 * the tree calls rdma-core by its own names, as if linked. */
#ifndef RSOCK_RDMACORE_H
#define RSOCK_RDMACORE_H

/* Load librdmacm and libibverbs and bind the functions the library uses,
 * once per process (later calls return the first outcome at once).
 * Returns 0, or -ENODEV when a library cannot be loaded (the next call
 * tries again) or a function is missing (for good); meanwhile every
 * rdma-core function the library calls fails with ENODEV: no RDMA.
 * Thread-safe, no lock: threads racing here load the same objects. */
int rdmacore_load(void);

/* Whether rdmacore_load() succeeded in this process (or its parent before
 * a fork). No system call. */
int rdmacore_loaded(void);

#endif
