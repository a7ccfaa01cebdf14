/* ucm.c - see ucm.h. Each command is one write() of a header and the
 * command's structure; responses are written by the kernel where the
 * command's `response` field points. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_user_cm.h>

#include "base/real.h"
#include "negotiate/ucm.h"

int ucm_open(void)
{
	int fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC | O_NONBLOCK);

	return fd < 0 ? -errno : fd;
}

static int cmd(int fd, uint32_t op, const void *in, uint16_t in_len, uint16_t out_len)
{
	struct {
		struct rdma_ucm_cmd_hdr hdr;
		uint8_t body[sizeof(struct rdma_ucm_reject) + 64];
	} m;
	size_t len = sizeof(m.hdr) + in_len;
	ssize_t w;

	if (in_len > sizeof(m.body))
		return -EINVAL;
	m.hdr.cmd = op;
	m.hdr.in = in_len;
	m.hdr.out = out_len;
	memcpy(m.body, in, in_len);
	w = rsock_real.write(fd, &m, len);
	if (w < 0)
		return -errno;
	return w == (ssize_t)len ? 0 : -EIO;
}

int ucm_create(int fd, uint64_t uid, uint32_t *id)
{
	struct rdma_ucm_create_id c = {.uid = uid, .ps = RDMA_PS_TCP, .qp_type = 2 /* IBV_QPT_RC */};
	struct rdma_ucm_create_id_resp cr = {0};
	int rc;

	c.response = (uintptr_t)&cr;
	if ((rc = cmd(fd, RDMA_USER_CM_CMD_CREATE_ID, &c, sizeof(c), sizeof(cr))))
		return rc;
	*id = cr.id;
	return 0;
}

int ucm_listen(int fd, const struct sockaddr *addr, socklen_t len, uint64_t uid, uint32_t *id,
	       int backlog)
{
	struct rdma_ucm_bind b = {0};
	struct rdma_ucm_listen l = {0};
	uint32_t nid;
	int rc;

	if (len > sizeof(b.addr))
		return -EINVAL;
	if ((rc = ucm_create(fd, uid, &nid)))
		return rc;
	b.id = nid;
	b.addr_size = (uint16_t)len;
	memcpy(&b.addr, addr, len);
	l.id = nid;
	l.backlog = (uint32_t)backlog;
	if ((rc = cmd(fd, RDMA_USER_CM_CMD_BIND, &b, sizeof(b), 0)) ||
	    (rc = cmd(fd, RDMA_USER_CM_CMD_LISTEN, &l, sizeof(l), 0))) {
		ucm_destroy(fd, nid);
		return rc;
	}
	*id = nid;
	return 0;
}

int ucm_resolve_ip(int fd, uint32_t id, const struct sockaddr *src, const struct sockaddr *dst,
		   int timeout_ms)
{
	struct rdma_ucm_resolve_ip r;
	socklen_t sl = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	socklen_t dl = dst->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);

	memset(&r, 0, sizeof(r));
	memcpy(&r.src_addr, src, sl);
	memcpy(&r.dst_addr, dst, dl);
	r.id = id;
	r.timeout_ms = (uint32_t)timeout_ms;
	return cmd(fd, RDMA_USER_CM_CMD_RESOLVE_IP, &r, sizeof(r), 0);
}

int ucm_resolve_route(int fd, uint32_t id, int timeout_ms)
{
	struct rdma_ucm_resolve_route r = {.id = id, .timeout_ms = (uint32_t)timeout_ms};

	return cmd(fd, RDMA_USER_CM_CMD_RESOLVE_ROUTE, &r, sizeof(r), 0);
}

int ucm_connect(int fd, uint32_t id, uint32_t qpn, const void *pdata, uint8_t len)
{
	struct rdma_ucm_connect c;

	memset(&c, 0, sizeof(c)); /* len fits: private_data holds 256 */
	c.id = id;
	c.conn_param.qp_num = qpn;
	memcpy(c.conn_param.private_data, pdata, len);
	c.conn_param.private_data_len = len;
	/* as tp_conn_param: no RDMA READ, retries at their maximum */
	c.conn_param.retry_count = 7;
	c.conn_param.rnr_retry_count = 7;
	c.conn_param.valid = 1;
	return cmd(fd, RDMA_USER_CM_CMD_CONNECT, &c, sizeof(c), 0);
}

int ucm_destroy(int fd, uint32_t id)
{
	struct rdma_ucm_destroy_id_resp r;
	struct rdma_ucm_destroy_id d = {.response = (uintptr_t)&r, .id = id};

	return cmd(fd, RDMA_USER_CM_CMD_DESTROY_ID, &d, sizeof(d), sizeof(r));
}

int ucm_get_event(int fd, struct ucm_event *ev)
{
	struct rdma_ucm_event_resp r;
	struct rdma_ucm_get_event g = {.response = (uintptr_t)&r};
	int rc;

	memset(&r, 0, sizeof(r));
	rc = cmd(fd, RDMA_USER_CM_CMD_GET_EVENT, &g, sizeof(g), sizeof(r));
	if (rc == -EAGAIN)
		return 0;
	if (rc)
		return rc;
	ev->uid = r.uid;
	ev->id = r.id;
	ev->event = r.event;
	ev->status = (int32_t)r.status;
	ev->pdata_len = r.param.conn.private_data_len;
	memcpy(ev->pdata, r.param.conn.private_data, sizeof(ev->pdata));
	return 1;
}

int ucm_reject(int fd, uint32_t id, const void *pdata, uint8_t len)
{
	struct rdma_ucm_reject r = {.id = id, .private_data_len = len};

	if (len)
		memcpy(r.private_data, pdata, len);
	return cmd(fd, RDMA_USER_CM_CMD_REJECT, &r, sizeof(r), 0);
}
