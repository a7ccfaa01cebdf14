/* shim/api.c - the public rsock_* API (include/rsock/rsock.h). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <fcntl.h>
#include <string.h>

#include "shim/shim.h"

#include "base/stats.h"
#include "path/path.h"
#include "rsock/rsock.h"

RSOCK_EXPORT const char *rsock_version(void)
{
	return PACKAGE_VERSION;
}

RSOCK_EXPORT int rsock_fd_transport(int fd)
{
	struct conn *c;
	int t = RSOCK_TRANSPORT_NONE;

	shim_active();
	if (fd < 0 || REAL_CALL(fcntl, fd, F_GETFD) < 0) {
		errno = EBADF;
		return -1;
	}
	if ((c = fdtab_get(fd)) && !c->instance) {
		conn_settle_maybe(c, fd); /* an accepted stream decides at its first use */
		switch (atomic_load(&c->path)) {
		case CONN_PATH_TCP:
			t = RSOCK_TRANSPORT_TCP;
			break;
		case CONN_PATH_RDMA:
			t = c->stream ? c->stream->ops->transport : RSOCK_TRANSPORT_RDMA;
			break;
		default:
			t = RSOCK_TRANSPORT_UNDECIDED;
		}
	}
	conn_unref(c);
	return t;
}

RSOCK_EXPORT int rsock_stats_get(struct rsock_stats *st, size_t size)
{
	struct rsock_stats full;

	if (!st || size < 2 * sizeof(uint32_t)) {
		errno = EINVAL;
		return -1;
	}
	shim_active();
	stats_snapshot(&full, fdtab_count());
	if (size > sizeof(full))
		size = sizeof(full);
	full.size = (uint32_t)size;
	memcpy(st, &full, size);
	return 0;
}
