/* real.h - the one table of real libc entry points, resolved once with
 * dlsym(RTLD_NEXT) by init.c. Every shim reaches libc only through it. */
#ifndef RSOCK_REAL_H
#define RSOCK_REAL_H

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/compiler.h"

/* glibc declares the sockaddr arguments of the socket API as transparent
 * unions under _GNU_SOURCE; the shims use the same types so that their
 * definitions match the declarations. SA(x) gives the plain pointer. */
#define SA(x) ((x).__sockaddr__)

/* X(return type, name, parameter list, required) */
#define RSOCK_REAL_FUNCS(X)                                                              \
	X(int, socket, (int, int, int), 1)                                               \
	X(int, socketpair, (int, int, int, int *), 1)                                    \
	X(int, bind, (int, __CONST_SOCKADDR_ARG, socklen_t), 1)                          \
	X(int, listen, (int, int), 1)                                                    \
	X(int, accept, (int, __SOCKADDR_ARG, socklen_t *), 1)                            \
	X(int, accept4, (int, __SOCKADDR_ARG, socklen_t *, int), 1)                      \
	X(int, connect, (int, __CONST_SOCKADDR_ARG, socklen_t), 1)                       \
	X(int, close, (int), 1)                                                          \
	X(int, close_range, (unsigned int, unsigned int, int), 0)                        \
	X(void, closefrom, (int), 0)                                                     \
	X(int, shutdown, (int, int), 1)                                                  \
	X(ssize_t, read, (int, void *, size_t), 1)                                       \
	X(ssize_t, readv, (int, const struct iovec *, int), 1)                           \
	X(ssize_t, write, (int, const void *, size_t), 1)                                \
	X(ssize_t, writev, (int, const struct iovec *, int), 1)                          \
	X(ssize_t, send, (int, const void *, size_t, int), 1)                            \
	X(ssize_t, sendto, (int, const void *, size_t, int, __CONST_SOCKADDR_ARG, socklen_t), 1) \
	X(ssize_t, sendmsg, (int, const struct msghdr *, int), 1)                        \
	X(int, sendmmsg, (int, struct mmsghdr *, unsigned int, int), 1)                  \
	X(ssize_t, recv, (int, void *, size_t, int), 1)                                  \
	X(ssize_t, recvfrom, (int, void *, size_t, int, __SOCKADDR_ARG, socklen_t *), 1) \
	X(ssize_t, recvmsg, (int, struct msghdr *, int), 1)                              \
	X(int, recvmmsg, (int, struct mmsghdr *, unsigned int, int, struct timespec *), 1) \
	X(int, poll, (struct pollfd *, nfds_t, int), 1)                                  \
	X(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *), 1) \
	X(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *), 1)         \
	X(int, pselect, (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *), 1) \
	X(int, epoll_create, (int), 1)                                                   \
	X(int, epoll_create1, (int), 1)                                                  \
	X(int, epoll_ctl, (int, int, int, struct epoll_event *), 1)                      \
	X(int, epoll_wait, (int, struct epoll_event *, int, int), 1)                     \
	X(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *), 1)  \
	X(int, epoll_pwait2, (int, struct epoll_event *, int, const struct timespec *, const sigset_t *), 0) \
	X(int, fcntl, (int, int, ...), 1)                                                \
	X(int, fcntl64, (int, int, ...), 0)                                              \
	X(int, ioctl, (int, unsigned long, ...), 1)                                      \
	X(int, getsockopt, (int, int, int, void *, socklen_t *), 1)                      \
	X(int, setsockopt, (int, int, int, const void *, socklen_t), 1)                  \
	X(int, getsockname, (int, __SOCKADDR_ARG, socklen_t *), 1)                       \
	X(int, getpeername, (int, __SOCKADDR_ARG, socklen_t *), 1)                       \
	X(int, dup, (int), 1)                                                            \
	X(int, dup2, (int, int), 1)                                                      \
	X(int, dup3, (int, int, int), 1)                                                 \
	X(FILE *, fdopen, (int, const char *), 1)                                        \
	X(int, fclose, (FILE *), 1)                                                      \
	X(pid_t, fork, (void), 1)                                                        \
	X(pid_t, vfork, (void), 1)                                                       \
	X(int, execve, (const char *, char *const *, char *const *), 1)                  \
	X(int, execv, (const char *, char *const *), 1)                                  \
	X(int, execvp, (const char *, char *const *), 1)                                 \
	X(int, execvpe, (const char *, char *const *, char *const *), 0)                 \
	X(int, fexecve, (int, char *const *, char *const *), 0)                          \
	X(int, posix_spawn, (pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *, char *const *, char *const *), 0) \
	X(int, posix_spawnp, (pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *, char *const *, char *const *), 0) \
	X(int, system, (const char *), 0)                                                \
	X(FILE *, popen, (const char *, const char *), 0)                                \
	X(ssize_t, sendfile, (int, int, off_t *, size_t), 1)                             \
	X(ssize_t, sendfile64, (int, int, off64_t *, size_t), 0)                         \
	X(ssize_t, splice, (int, loff_t *, int, loff_t *, size_t, unsigned int), 0)      \
	X(ssize_t, __read_chk, (int, void *, size_t, size_t), 0)                         \
	X(ssize_t, __recv_chk, (int, void *, size_t, size_t, int), 0)                    \
	X(ssize_t, __recvfrom_chk, (int, void *, size_t, size_t, int, __SOCKADDR_ARG, socklen_t *), 0) \
	X(int, __poll_chk, (struct pollfd *, nfds_t, int, size_t), 0)                    \
	X(int, __ppoll_chk, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t), 0)

struct rsock_real {
#define RSOCK_REAL_FIELD(ret, name, args, req) ret(*name) args;
	RSOCK_REAL_FUNCS(RSOCK_REAL_FIELD)
#undef RSOCK_REAL_FIELD
};

/* Filled by real_resolve() before the init state reaches RESOLVED; read-only after. */
extern struct rsock_real rsock_real RSOCK_HIDDEN;

/* Resolve every entry with dlsym(RTLD_NEXT). Returns 0, or -ENOSYS when a
 * required symbol is missing or resolves to our own wrapper (the entry is then
 * left NULL and the shims fail that call with ENOSYS). Only calls dlsym and
 * dl_iterate_phdr. */
int real_resolve(void);

#endif
