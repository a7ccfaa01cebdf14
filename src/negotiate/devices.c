/* devices.c - the verbs contexts this process has seen and which of them
 * it may use; the look for an iWARP device in sysfs. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/ownfd.h"
#include "base/proc.h"

#include "negotiate/internal.h"

/* Every verbs context this process has seen, with the process that opened
 * it. A context is usable only by that process: the kernel refuses the
 * commands of any other (a forked child gets EACCES, "changed security
 * contexts after opening file descriptor"), and librdmacm keeps the contexts
 * it opened for the life of the process, children included. A child of a
 * process that used a device therefore keeps its new streams on that device
 * on TCP (RSOCK_FB_NOT_IMPLEMENTED), and never touches the parent's objects. */
struct cm_dev {
	struct ibv_context *ctx;
	pid_t pid;          /* the process that first saw ctx */
	struct cm_dev *next;
};
static struct cm_dev *cm_devs;

/* The record of ctx, created (owned by this process) if there is none.
 * Caller holds cm_lock. NULL when out of memory. */
static struct cm_dev *dev_find(struct ibv_context *ctx)
{
	struct cm_dev *d;

	for (d = cm_devs; d; d = d->next)
		if (d->ctx == ctx)
			return d;
	if ((d = calloc(1, sizeof(*d)))) {
		d->ctx = ctx;
		d->pid = rsock_pid();
		d->next = cm_devs;
		cm_devs = d;
		/* rdma-core opened the device for librdmacm: its descriptors
		 * are ours, wherever they are (fdtab.h). */
		ownfd_mark(ctx->cmd_fd);
		ownfd_mark(ctx->async_fd);
	}
	return d;
}

/* The record of ctx when this process may use it (it opened it, as far as
 * the library can tell), else NULL. Records ctx as this process's when first
 * seen. Caller holds cm_lock. */
struct cm_dev *cm_dev_mine(struct ibv_context *ctx)
{
	struct cm_dev *d = ctx ? dev_find(ctx) : NULL;

	return d && d->pid == rsock_pid() ? d : NULL;
}

/* cm_dev_mine() for a caller that does not hold cm_lock: 1 or 0. */
int cm_dev_usable(struct ibv_context *ctx)
{
	int ok;

	pthread_mutex_lock(&cm_lock);
	ok = cm_dev_mine(ctx) != NULL;
	pthread_mutex_unlock(&cm_lock);
	return ok;
}

int cm_iwarp_device(const char *class_dir, char *name, size_t len)
{
	DIR *d = opendir(class_dir);
	struct dirent *e;
	int found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char path[PATH_MAX], buf[32];
		ssize_t n;
		int fd;

		if (e->d_name[0] == '.' ||
		    snprintf(path, sizeof(path), "%s/%s/node_type", class_dir, e->d_name) >=
			    (int)sizeof(path) ||
		    (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		if (strtol(buf, NULL, 10) == IBV_NODE_RNIC) {
			snprintf(name, len, "%s", e->d_name);
			found = 1;
		}
	}
	closedir(d);
	return found;
}
