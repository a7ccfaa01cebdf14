/* devices.c - the verbs contexts this process has seen and which of them
 * it may use; from sysfs alone, whether an address's netdev has an RDMA
 * device behind it, and the look for an iWARP device. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/log.h"
#include "base/ownfd.h"
#include "base/real.h"
#include "base/proc.h"
#include "service/service.h"

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

/* The device's asynchronous events, on the library's thread: a stream's CQ
 * that overran or QP that failed fails over (tp_async_event), each event
 * acknowledged first (a CQ or QP is destroyed only once its events are). */
static int async_ready(int fd, short revents, void *arg)
{
	struct ibv_context *ctx = arg;
	struct ibv_async_event ev;

	(void)fd, (void)revents;
	while (ibv_get_async_event(ctx, &ev) == 0) {
		enum ibv_event_type type = ev.event_type;
		const void *obj = type == IBV_EVENT_CQ_ERR     ? (const void *)ev.element.cq
				  : type == IBV_EVENT_QP_FATAL ? (const void *)ev.element.qp
							       : NULL;
		ibv_ack_async_event(&ev);
		log_debug("%s: asynchronous event %s", ibv_get_device_name(ctx->device),
			  ibv_event_type_str(type));
		if (obj)
			tp_async_event(type, obj);
	}
	return errno == EAGAIN || errno == EINTR ? 0 : -errno;
}

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
		/* rdma-core opened the device for librdmacm, at the lowest
		 * free numbers: its two descriptors move above the
		 * application's, as ours do (ownfd_move), kept where they are
		 * only when the limit on open files leaves no room there.
		 * rdma-core reads the numbers from the context at each use,
		 * and nothing uses them now: the open happened in the bind
		 * that just returned (under librdmacm's lock, which also
		 * allocated its PD), and no stream of ours is on the device
		 * before this first sight of it. */
		ctx->cmd_fd = ownfd_move(ctx->cmd_fd);
		ctx->async_fd = ownfd_move(ctx->async_fd);
		if (fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0 &&
		    service_watch(ctx->async_fd, POLLIN, async_ready, ctx))
			log_debug("%s: its asynchronous events are not watched",
				  ibv_get_device_name(ctx->device));
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

void cm_dev_forget(struct ibv_context *ctx)
{
	for (struct cm_dev **pp = &cm_devs; *pp; pp = &(*pp)->next)
		if ((*pp)->ctx == ctx) {
			struct cm_dev *d = *pp;
			service_unwatch(ctx->async_fd); /* (this process's watch, if any) */
			*pp = d->next;
			free(d);
			return;
		}
}

void cm_dev_sync(void)
{
	struct ibv_context **l = rdma_get_devices(NULL);

	if (!l)
		return;
	/* (It opens every device still there: their descriptors are the
	 * library's too, and this process's.) */
	pthread_mutex_lock(&cm_lock);
	for (int i = 0; l[i]; i++)
		dev_find(l[i]);
	pthread_mutex_unlock(&cm_lock);
	rdma_free_devices(l);
}

int cm_dev_parent_has(const char *name)
{
	int found = 0;

	pthread_mutex_lock(&cm_lock);
	for (struct cm_dev *d = cm_devs; d && !found; d = d->next)
		found = d->pid != rsock_pid() && !strcmp(ibv_get_device_name(d->ctx->device), name);
	pthread_mutex_unlock(&cm_lock);
	return found;
}

/* A path shorter than PATH_MAX - 1 bytes into b: 0, or -1 when it does not fit
 * (nothing in sysfs is that long: treated as absent). */
static int __attribute__((format(printf, 2, 3))) pathf(char *b, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	n = log_vformat(b, PATH_MAX, fmt, ap); /* (no stdio: a smaller formatter) */
	va_end(ap);
	return n >= PATH_MAX - 1 ? (b[0] = '\0', -1) : 0;
}

/* The first line of the file at path (sysfs), without its newline: its
 * length, or -1. */
static int read_line(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return (int)strlen(buf);
}

#define NETDEV_MAX 8 /* a netdev and the ones below it (vlan, bond, macvlan) */
#define NETDEV_NAME 64

/* ifname and the netdevs below it (sysfs lower_* links), at most
 * NETDEV_MAX, into names: the count, or -1 when ifname is not in this
 * sysfs (another network namespace's) or one of them is IPoIB. */
static int netdevs_below(const char *sys, const char *ifname, char names[][NETDEV_NAME])
{
	char path[PATH_MAX], type[16];
	int n = 1;

	log_format(names[0], NETDEV_NAME, "%s", ifname);
	for (int i = 0; i < n; i++) {
		DIR *d;
		struct dirent *e;
		pathf(path, "%s/class/net/%s/type", sys, names[i]);
		if (read_line(path, type, sizeof(type)) <= 0 || atoi(type) == ARPHRD_INFINIBAND)
			return -1; /* IPoIB: its port lists no netdev; rdma_cm decides */
		pathf(path, "%s/class/net/%s", sys, names[i]);
		if (!(d = opendir(path)))
			return -1;
		while ((e = readdir(d)) && n < NETDEV_MAX)
			if (!strncmp(e->d_name, "lower_", 6))
				log_format(names[n++], NETDEV_NAME, "%s", e->d_name + 6);
		closedir(d);
	}
	return n;
}

/* Whether port dir `port` (sysfs) of an RDMA device sits on one of the n
 * netdevs: 1, 0, or -1 when it cannot be told (an Ethernet port whose
 * default GID names no netdev). A RoCE or iWARP port's default GID (index
 * 0) belongs to the netdev the port is on; its upper devices' addresses are
 * further GIDs of the same port. An InfiniBand port carries IP only through
 * IPoIB netdevs, which netdevs_below() leaves to rdma_cm. */
static int port_on(const char *port, char names[][NETDEV_NAME], int n)
{
	char path[PATH_MAX], nd[NETDEV_NAME];

	pathf(path, "%s/gid_attrs/ndevs/0", port);
	if (read_line(path, nd, sizeof(nd)) <= 0) {
		pathf(path, "%s/link_layer", port);
		return read_line(path, nd, sizeof(nd)) > 0 && !strcmp(nd, "InfiniBand") ? 0 : -1;
	}
	for (int i = 0; i < n; i++)
		if (!strcmp(nd, names[i]))
			return 1;
	return 0;
}

int cm_dev_of_netdev(const char *sys, const char *ifname, char *dev, size_t len)
{
	char names[NETDEV_MAX][NETDEV_NAME], path[PATH_MAX], type[16];
	int n = netdevs_below(sys, ifname, names), unsure = 0, found = 0;
	struct dirent *e;
	DIR *d;

	if (n < 0)
		return CM_LOCAL_UNSURE;
	pathf(path, "%s/class/infiniband", sys);
	if (!(d = opendir(path)))
		return CM_LOCAL_NONE; /* no RDMA device in this host (or namespace) */
	while (!found && (e = readdir(d))) {
		struct dirent *pe;
		DIR *pd;
		if (e->d_name[0] == '.')
			continue;
		pathf(path, "%s/class/infiniband/%s/ports", sys, e->d_name);
		if (!(pd = opendir(path))) {
			unsure = 1;
			continue;
		}
		while (!found && (pe = readdir(pd))) {
			char port[PATH_MAX];
			int on;
			if (pe->d_name[0] == '.')
				continue;
			pathf(port, "%s/%s", path, pe->d_name);
			if ((on = port_on(port, names, n)) < 0)
				unsure = 1;
			found = on > 0;
		}
		closedir(pd);
		if (found) {
			log_format(dev, len, "%s", e->d_name);
			pathf(path, "%s/class/infiniband/%s/node_type", sys, e->d_name);
			if (read_line(path, type, sizeof(type)) <= 0 || atoi(type) != IBV_NODE_CA) {
				/* iWARP: its rdma_cm connect is a TCP connection to
				 * the peer's port, which a plain listener accepts */
				closedir(d);
				return CM_LOCAL_NONE;
			}
		}
	}
	closedir(d);
	return found ? CM_LOCAL_RDMA : unsure ? CM_LOCAL_UNSURE : CM_LOCAL_NONE;
}

/* The name of the netdev that holds IPv4 address a (SIOCGIFCONF: one call,
 * where getifaddrs() dumps every link's statistics): 0, or -1 (not among
 * the first 64 addresses: rdma_cm decides then). An alias
 * label ("eth0:1") names its netdev. */
static int ifname_v4(const struct sockaddr *a, char *name, size_t len)
{
	struct ifreq r[64];
	struct ifconf ic = {.ifc_len = sizeof(r), .ifc_req = r};
	int s = rsock_real.socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = -1;

	if (s < 0)
		return -1;
	if (ioctl(s, SIOCGIFCONF, &ic) == 0)
		for (size_t i = 0; rc && i < (size_t)ic.ifc_len / sizeof(r[0]); i++)
			if (!memcmp(&((struct sockaddr_in *)&r[i].ifr_addr)->sin_addr,
				    &((const struct sockaddr_in *)a)->sin_addr, 4)) {
				r[i].ifr_name[IFNAMSIZ - 1] = '\0';
				r[i].ifr_name[strcspn(r[i].ifr_name, ":")] = '\0';
				log_format(name, len, "%s", r[i].ifr_name);
				rc = 0;
			}
	rsock_real.close(s);
	return rc;
}

/* The same for an IPv6 address, from /proc/net/if_inet6 ("<32 hex digits>
 * <index> <prefix> <scope> <flags> <name>" a line): 0 or -1. */
static int ifname_v6(const struct sockaddr *a, char *name, size_t len)
{
	const uint8_t *want = ((const struct sockaddr_in6 *)a)->sin6_addr.s6_addr;
	char buf[16384], *line, *save = NULL, hex[33]; /* some 300 addresses */
	int fd = open("/proc/net/if_inet6", O_RDONLY | O_CLOEXEC | O_NOCTTY), rc = -1;
	size_t n = 0;
	ssize_t r;

	if (fd < 0)
		return -1;
	while (n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	close(fd);
	buf[n] = '\0';
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", want[i]);
	for (line = strtok_r(buf, "\n", &save); rc && line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' ');
		if (!strncmp(line, hex, 32) && sp && sp[1]) {
			snprintf(name, len, "%s", sp + 1);
			rc = 0;
		}
	}
	return rc;
}

int cm_dev_local(const struct sockaddr *src, char *dev, size_t len)
{
	char ifname[IFNAMSIZ + 1];

	if ((src->sa_family == AF_INET ? ifname_v4(src, ifname, sizeof(ifname))
				       : ifname_v6(src, ifname, sizeof(ifname))) < 0)
		return CM_LOCAL_UNSURE;
	return cm_dev_of_netdev("/sys", ifname, dev, len);
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
