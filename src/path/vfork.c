/* vfork.c - see vfork.h and doc/design.md, "Descriptors, fork, exec". */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/log.h"
#include "base/real.h"
#include "path/vfork.h"

/* The vfork child that last duplicated a stream, the streams' numbers in
 * the parent, their streams and what each new image reads first (only
 * that child reads them: its pid names it; the next such child frees the
 * prefixes, in this same memory). */
#define HO_VFORK_DUPS 16
static struct {
	_Atomic pid_t pid;
	int n;
	struct {
		int fd, newfd;
		struct path_stream *stream;
		struct ho_pre *pre;
	} d[HO_VFORK_DUPS];
} vdups;

static int vfork_mine(void)
{
	return atomic_load(&vdups.pid) == (pid_t)syscall(SYS_getpid);
}

void ho_vfork_dup(int oldfd, int newfd, struct path_stream *s)
{
	if (!vfork_mine()) {
		for (int i = 0; i < vdups.n; i++)
			ho_pre_forget(vdups.d[i].pre);
		vdups.n = 0;
		atomic_store(&vdups.pid, (pid_t)syscall(SYS_getpid));
	}
	for (int i = 0; i < vdups.n; i++)
		if (vdups.d[i].fd == oldfd)
			return;
	if (vdups.n == HO_VFORK_DUPS) {
		log_warn_rl("fd %d: a vfork child duplicates more than %d streams: "
			    "this one is not handed to its new image", oldfd, HO_VFORK_DUPS);
		return;
	}
	vdups.d[vdups.n].fd = oldfd;
	vdups.d[vdups.n].newfd = newfd;
	vdups.d[vdups.n].stream = s;
	vdups.d[vdups.n++].pre = NULL;
}

/* The number this vfork child gave fd's stream (fd itself may be closed
 * there already), or -1. */
int ho_vfork_newfd(int fd)
{
	if (vfork_mine())
		for (int i = 0; i < vdups.n; i++)
			if (vdups.d[i].fd == fd)
				return vdups.d[i].newfd;
	return -1;
}

int ho_vfork_keep(struct path_stream *s, struct ho_pre *pre)
{
	if (!vfork_mine())
		return 0;
	for (int i = 0; i < vdups.n; i++)
		if (vdups.d[i].stream == s && !vdups.d[i].pre) {
			vdups.d[i].pre = pre;
			return 1;
		}
	return 0;
}

struct ho_pre *ho_vfork_prefix(struct path_stream *s)
{
	if (!s || !vfork_mine())
		return NULL;
	for (int i = 0; i < vdups.n; i++)
		if (vdups.d[i].stream == s && vdups.d[i].pre)
			return vdups.d[i].pre;
	return NULL;
}

int ho_exec_inherits(int fd)
{
	int fl = rsock_real.fcntl(fd, F_GETFD);

	if (fl >= 0 && !(fl & FD_CLOEXEC))
		return 1;
	if (vfork_mine())
		for (int i = 0; i < vdups.n; i++)
			if (vdups.d[i].fd == fd)
				return 1;
	return 0;
}
