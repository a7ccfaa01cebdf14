/* shmsetup.c - setting the same-host path up (doc/design.md, "The same-host
 * path"): the shared memory and its doorbells made by the server and passed
 * to the client over the set-up connection, checked there. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/ownfd.h"
#include "base/proto.h"
#include "base/real.h"
#include "path/shm/ring.h"
#include "path/shm/shm.h"

#include "negotiate/internal.h"

#define SHM_SETUP_LEN 16
static int is_eventfd(int fd)
{
	char p[64], l[64];
	ssize_t n;

	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	n = readlink(p, l, sizeof(l) - 1);
	if (n < 0)
		return 0;
	l[n] = 0;
	return !strcmp(l, "anon_inode:[eventfd]");
}

/* Log who is at the other end of the set-up connection fd. */
static void peer_log(int fd, const char *who)
{
	struct ucred uc;
	socklen_t l = sizeof(uc);

	if (rsock_real.getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) == 0)
		log_debug("shm: set-up with %s pid %d uid %u gid %u", who, (int)uc.pid,
			  (unsigned)uc.uid, (unsigned)uc.gid);
}

/* Wait until fd has events ev, or deadline (ms). 1, or 0. */
static int fd_wait(int fd, short ev, int64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = ev};

	for (;;) {
		int left = clock_left_ms(deadline);
		int r = rsock_real.poll(&p, 1, left > 0 ? left : 0);
		if (r > 0)
			return 1;
		if (r == 0 || errno != EINTR)
			return 0;
	}
}

int cm_shm_client_await(struct cm_client *c, int fd, const struct proto_hello_ack *a, int ok,
			struct path_stream **out)
{
	uint8_t m[SHM_SETUP_LEN], one;
	char cbuf[CMSG_SPACE(3 * sizeof(int))];
	struct iovec iov = {m, sizeof(m)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	int fds[3] = {-1, -1, -1}, live = -1, rc = -EOPNOTSUPP;
	ssize_t r;

	*out = NULL;
	if (!(a->flags & PROTO_ACK_SHM) || a->ring_size != c->shm_size) {
		log_debug("shm: fd %d: the answer is not a same-host one: TCP", fd);
		goto out;
	}
	/* The server connected before it answered: the connection waits. */
	if (!fd_wait(c->shm_lfd, POLLIN, c->deadline) ||
	    (live = ownfd_move(rsock_real.accept4(c->shm_lfd, NULL, NULL,
						  SOCK_NONBLOCK | SOCK_CLOEXEC))) < 0)
		goto out;
	if (!fd_wait(live, POLLIN, c->deadline) ||
	    (r = rsock_real.recvmsg(live, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT)) != SHM_SETUP_LEN)
		goto out;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k && i < 3; i++)
				memcpy(&fds[i], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			for (size_t i = 3; i < k; i++) { /* more than asked for */
				int x;
				memcpy(&x, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				rsock_real.close(x);
			}
		}
	for (int i = 0; i < 3; i++)
		fds[i] = ownfd_move(fds[i]);
	peer_log(live, "server");
	/* The secret came only on the TCP stream, and only the server read
	 * it: a third process that connected here first cannot echo it. */
	uint32_t magic = (uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 |
			 (uint32_t)m[3] << 24;
	uint32_t size = (uint32_t)m[4] | (uint32_t)m[5] << 8 | (uint32_t)m[6] << 16 |
			(uint32_t)m[7] << 24;
	uint64_t secret = 0;
	for (int i = 0; i < 8; i++)
		secret |= (uint64_t)m[8 + i] << (8 * i);
	struct stat sb;
	if (magic != SHM_MAGIC || size != c->shm_size || secret != c->shm_secret || fds[0] < 0 ||
	    fds[1] < 0 || fds[2] < 0 || fstat(fds[0], &sb) || !S_ISREG(sb.st_mode) ||
	    (uint64_t)sb.st_size != shm_map_len(size) ||
	    (fcntl(fds[0], F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW)) !=
		    (F_SEAL_SHRINK | F_SEAL_GROW) ||
	    !is_eventfd(fds[1]) || !is_eventfd(fds[2])) {
		log_warn_rl("shm: fd %d: the set-up message is not the server's: TCP", fd);
		goto out;
	}
	if (!ok) {
		log_debug("shm: fd %d: declined (exec, stdio, another process): TCP", fd);
		goto out; /* the server stays on TCP too */
	}
	rc = shm_stream_new(fds[0], size, 0, fds[1], fds[2], -1, fd, out);
	fds[0] = fds[1] = fds[2] = -1;
	if (rc) {
		log_debug("shm: fd %d: the stream could not be made (%d): TCP", fd, rc);
		rc = -EOPNOTSUPP;
		goto out;
	}
	shm_stream_key(*out, c->token);
	one = 1;
	/* (Refused: the server closed the stream already; its end is in the
	 * rings, where this side reads it.) */
	rsock_real.send(live, &one, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	ownfd_close(live);
	return 0;
out:
	if (live >= 0) {
		/* The server learns at its next look, or when its library's
		 * thread sees the cancel on TCP (sent first: the server takes
		 * it off when it learns). */
		uint8_t cancel[CM_CANCEL_LEN];
		cm_ctl_write(fd, cancel, (size_t)cm_cancel_encode(cancel), clock_now_ms() + 1000);
		one = 0;
		rsock_real.send(live, &one, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (fds[2] >= 0 && is_eventfd(fds[2])) { /* its doorbell: it may sleep */
			uint64_t v = 1;
			if (rsock_real.write(fds[2], &v, sizeof(v)) < 0) {
				/* a full counter is readable too */
			}
		}
		ownfd_close(live);
	}
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			ownfd_close(fds[i]);
	return rc;
}

/* The memfd of a stream's shared memory, sealed at its size (a peer cannot
 * shrink it under our mapping: no SIGBUS), or -errno. */
static int memfd_make(uint32_t size)
{
	int fd = (int)syscall(SYS_memfd_create, "rsock-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)shm_map_len(size)) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		int e = -errno;
		rsock_real.close(fd);
		return e;
	}
	return ownfd_move(fd);
}

/* Connect to the client's set-up socket named by token: the connection, or
 * -1. */
static int setup_connect(uint64_t token)
{
	struct sockaddr_un un;
	int fd = cm_shm_unix_socket(SOCK_STREAM);

	if (fd < 0)
		return -1;
	memset(&un, 0, sizeof(un));
	un.sun_family = AF_UNIX;
	int n = snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1, "rsock-shmc.%016" PRIx64, token);
	if (rsock_real.connect(fd, (struct sockaddr *)&un,
			       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n))) {
		ownfd_close(fd);
		return -1;
	}
	return fd;
}

/* Send the set-up message (magic, ring size, the hello's secret) with the
 * memfd and both doorbells on live. 0 or -1. */
static int setup_send(int live, uint32_t size, uint64_t secret, const int fds[3])
{
	uint8_t m[SHM_SETUP_LEN];
	char cbuf[CMSG_SPACE(3 * sizeof(int))];
	struct iovec iov = {m, sizeof(m)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm;

	memset(cbuf, 0, sizeof(cbuf));
	for (int i = 0; i < 4; i++) {
		m[i] = (uint8_t)(SHM_MAGIC >> (8 * i));
		m[4 + i] = (uint8_t)(size >> (8 * i));
	}
	for (int i = 0; i < 8; i++)
		m[8 + i] = (uint8_t)(secret >> (8 * i));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(3 * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, 3 * sizeof(int));
	return rsock_real.sendmsg(live, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == SHM_SETUP_LEN ? 0 : -1;
}

int cm_shm_server(int fd, const struct proto_hello *h, int ok, int64_t deadline,
		  struct path_stream **out, enum rsock_fallback_reason *why)
{
	int fds[3] = {-1, -1, -1}, live = -1;
	uint8_t buf[PROTO_HELLO_ACK_LEN];
	struct proto_hello_ack a = {.version = PROTO_VERSION, .flags = PROTO_ACK_SHM,
				    .token = h->token, .ring_size = h->ring_size};

	*out = NULL;
	*why = RSOCK_FB_RESOURCES;
	if (!ok) {
		*why = RSOCK_FB_NOT_IMPLEMENTED;
		goto nak;
	}
	if (!shm_ring_size_ok(h->ring_size) || h->ring_rkey) {
		*why = RSOCK_FB_PROTOCOL;
		goto nak;
	}
	if ((fds[0] = memfd_make(h->ring_size)) < 0 ||
	    (fds[1] = ownfd_move(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))) < 0 ||
	    (fds[2] = ownfd_move(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))) < 0)
		goto nak;
	if ((live = setup_connect(h->token)) < 0) {
		*why = RSOCK_FB_PEER; /* the client gave up (its set-up socket is gone) */
		goto nak;
	}
	peer_log(live, "client");
	if (setup_send(live, h->ring_size, h->ring_addr, fds))
		goto nak;
	*why = RSOCK_FB_RESOURCES;
	/* The stream is the memory's from here, pending the client's word on
	 * the set-up connection (1: it took the memory; 0 or its end: TCP,
	 * what we wrote meanwhile sent again there), which the stream reads
	 * at its next look: no wait here for the client's first use. */
	if (shm_stream_new(fds[0], h->ring_size, 1, fds[2], fds[1], live, fd, out)) {
		fds[0] = fds[1] = fds[2] = live = -1; /* closed */
		goto nak;
	}
	shm_stream_key(*out, h->token);
	proto_hello_ack_encode(&a, buf, sizeof(buf));
	if (cm_ctl_write(fd, buf, sizeof(buf), deadline)) {
		path_close(*out, 1);
		*out = NULL;
		return -EOPNOTSUPP;
	}
	log_debug("accept: fd %d carried by the same-host path", fd);
	return 0;
nak:
	a.status = (uint16_t)*why;
	a.flags = 0;
	proto_hello_ack_encode(&a, buf, sizeof(buf));
	cm_ctl_write(fd, buf, sizeof(buf), deadline);
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			ownfd_close(fds[i]);
	if (live >= 0)
		ownfd_close(live);
	return -EOPNOTSUPP;
}

int cm_server_shm_hello(int fd)
{
	uint8_t b[PROTO_MSG_MAX_LEN]; /* (a later version's may be longer) */
	struct proto_hello h;
	ssize_t r = rsock_real.recv(fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);

	return r >= PROTO_HELLO_LEN && proto_hello_decode(b, (size_t)r, &h) > 0 &&
	       (h.flags & PROTO_HELLO_SHM) && cm_shm_own_client(h.token);
}
