/* exec.c - see exec.h and doc/design.md, "Descriptors, fork, exec". */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <dirent.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/real.h"
#include "core/conn.h"
#include "core/exec.h"
#include "core/fdtab.h"
#include "path/handover.h"
#include "path/path.h"
#include "path/rdma/transport.h" /* tp_adopt only (adopt_fd) */

struct env_acc {
	char *buf;
	size_t len, cap;
	int *fds;
	size_t nfds, capfds;
};

static void env_one(int fd, struct conn *c, void *arg)
{
	struct env_acc *a = arg;
	struct stat st;
	char item[64];
	int d, n;

	struct ho_pre *pre;

	if (atomic_load(&c->path) != CONN_PATH_RDMA || !c->stream || !path_switched(c->stream))
		return;
	if (!(pre = ho_vfork_prefix(c->stream)))
		pre = path_prefix(c->stream);
	if (!ho_pre_left(pre) || !ho_exec_inherits(fd) || (fstat(fd, &st) && fstat(ho_vfork_newfd(fd), &st)))
		return;
	/* A duplicate without close-on-exec: the new image's copy. */
	d = rsock_real.fcntl(ho_pre_fd(pre), F_DUPFD, 0);
	if (d < 0)
		return;
	n = snprintf(item, sizeof(item), "%s%llu:%d", a->len ? "," : "",
		     (unsigned long long)st.st_ino, d);
	if (a->len + (size_t)n + 1 > a->cap || a->nfds == a->capfds) {
		size_t nc = a->cap * 2 + 128, nf = a->capfds * 2 + 8;
		char *nb = realloc(a->buf, nc);
		int *nfd = nb ? realloc(a->fds, nf * sizeof(int)) : NULL;
		if (nb)
			a->buf = nb, a->cap = nc;
		if (nfd)
			a->fds = nfd, a->capfds = nf;
		if (!nb || !nfd) {
			rsock_real.close(d);
			return;
		}
	}
	memcpy(a->buf + a->len, item, (size_t)n + 1);
	a->len += (size_t)n;
	a->fds[a->nfds++] = d;
}

char **ho_exec_env(char *const envp[])
{
	struct env_acc a = {0};
	size_t n = 0, k = 0, pl = strlen(HO_ENV "=");
	char **env;

	fdtab_each(env_one, &a);
	if (!a.len) {
		free(a.buf);
		free(a.fds);
		return (char **)envp;
	}
	while (envp && envp[n])
		n++;
	/* [0] the variable, then envp without an older one, NULL; in slot
	 * n + 2 the descriptors to close should the exec fail (a -1 terminated
	 * list: ho_exec_env_free finds it there). */
	env = malloc((n + 3) * sizeof(char *) + sizeof(int) * (a.nfds + 1) + pl + a.len + 1);
	if (!env) {
		for (size_t i = 0; i < a.nfds; i++)
			rsock_real.close(a.fds[i]);
		free(a.buf);
		free(a.fds);
		return NULL;
	}
	int *fds = (int *)(env + n + 3);
	char *var = (char *)(fds + a.nfds + 1);
	memcpy(var, HO_ENV "=", pl);
	memcpy(var + pl, a.buf, a.len + 1);
	env[k++] = var;
	for (size_t i = 0; i < n; i++)
		if (strncmp(envp[i], HO_ENV "=", pl))
			env[k++] = envp[i];
	env[k] = NULL;
	for (size_t i = 0; i < a.nfds; i++)
		fds[i] = a.fds[i];
	fds[a.nfds] = -1;
	env[n + 2] = (char *)fds; /* k <= n + 1: after the NULL */
	log_debug("exec: handing %zu prefix(es) to the new image", a.nfds);
	free(a.buf);
	free(a.fds);
	return env;
}

void ho_exec_env_free(char **env, char *const envp[])
{
	size_t n = 0;

	if (!env || env == (char **)envp)
		return;
	while (envp && envp[n])
		n++;
	for (int *fds = (int *)env[n + 2]; *fds >= 0; fds++)
		rsock_real.close(*fds);
	free(env);
}

/* Track fd, a socket carrying the stream whose prefix is pre (which the conn
 * then owns through its stream). */
static struct conn *adopt_fd(int fd, struct ho_pre *pre)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct conn *c;
	struct tp *t;

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) ||
	    (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
		return NULL;
	if (!(c = conn_new(ss.ss_family)))
		return NULL;
	/* A direct call into the RDMA path: the stream handed over by the
	 * image before us is an RDMA-path object (switched, with its prefix),
	 * made here rather than by negotiation. */
	if (tp_adopt(fd, pre, &t)) {
		conn_unref(c);
		return NULL;
	}
	c->stream = &t->s;
	atomic_store(&c->role, CONN_ROLE_CLIENT);
	atomic_store(&c->nonblock, !!(rsock_real.fcntl(fd, F_GETFL) & O_NONBLOCK));
	atomic_store(&c->path, CONN_PATH_RDMA);
	path_sockopts_changed(c->stream); /* as the image before us left them */
	if (fdtab_insert(fd, c)) {
		conn_unref(c);
		return NULL;
	}
	return c; /* the table's reference; ours is the same */
}

void ho_adopt_env(void)
{
	const char *v = getenv(HO_ENV);
	char *copy, *save = NULL;

	if (!v || !*v)
		return;
	copy = strdup(v);
	unsetenv(HO_ENV);
	if (!copy)
		return;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned long long ino;
		int mfd, adopted = 0;
		struct ho_pre *pre;
		struct conn *c = NULL;
		DIR *d;
		struct dirent *e;

		if (sscanf(tok, "%llu:%d", &ino, &mfd) != 2 || mfd < 0)
			continue;
		if (ho_pre_open(mfd, &pre)) {
			log_warn("%s names descriptor %d, which is not a prefix: ignored", HO_ENV, mfd);
			continue;
		}
		/* The sockets with that inode: the exec'ing process may have
		 * moved them (dup2 onto 0 and 1, posix_spawn file actions). */
		if ((d = opendir("/proc/self/fd"))) {
			while ((e = readdir(d))) {
				struct stat st;
				int fd = atoi(e->d_name);
				if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d) ||
				    fstat(fd, &st) || !S_ISSOCK(st.st_mode) || st.st_ino != ino)
					continue;
				if (!c) {
					c = adopt_fd(fd, pre);
					adopted = c != NULL;
				} else if (fdtab_insert(fd, conn_ref(c))) {
					conn_unref(c);
				}
			}
			closedir(d);
		}
		if (!adopted)
			ho_pre_free(pre);
		else
			log_debug("adopted a stream moved to TCP with %zu unread bytes", ho_pre_left(pre));
	}
	free(copy);
}
