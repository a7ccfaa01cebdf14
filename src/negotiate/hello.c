/* hello.c - I/O of the hello exchange on the TCP control connection:
 * bounded writes and peeks, the client's cancel, a late answer dropped. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/proto.h"
#include "base/real.h"

#include "negotiate/internal.h"

/* Write all of buf to fd, waiting for room up to deadline. */
int cm_ctl_write(int fd, const void *buf, size_t len, int64_t deadline)
{
	const uint8_t *p = buf;
	struct pollfd pf = {.fd = fd, .events = POLLOUT};

	while (len) {
		ssize_t w = rsock_real.send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			p += w;
			len -= (size_t)w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (!rsock_real.poll(&pf, 1, clock_left_ms(deadline)))
			return -ETIMEDOUT;
	}
	return 0;
}

/* Wait until at least `want` bytes can be peeked, then peek them. Returns the
 * bytes peeked (== want), 0 at EOF, or -errno (-ETIMEDOUT). */
ssize_t cm_ctl_peek(int fd, void *buf, size_t want, int64_t deadline)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};

	for (;;) {
		ssize_t r = rsock_real.recv(fd, buf, want, MSG_PEEK | MSG_DONTWAIT);
		if (r == (ssize_t)want || r == 0)
			return r;
		if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (clock_left_ms(deadline) == 0)
			return -ETIMEDOUT;
		/* Partial message: sleep a little rather than spin on POLLIN. */
		if (r > 0)
			usleep(200);
		else if (!rsock_real.poll(&pf, 1, clock_left_ms(deadline)))
			return -ETIMEDOUT;
	}
}

ssize_t cm_ctl_peek_hello(int fd, uint8_t *buf, int ack, int64_t deadline)
{
	size_t v1 = ack ? PROTO_HELLO_ACK_LEN : PROTO_HELLO_LEN;
	ssize_t r = cm_ctl_peek(fd, buf, v1, deadline);
	int n;

	if (r == (ssize_t)v1 && (n = proto_hello_len(buf, v1, ack)) > (int)v1)
		r = cm_ctl_peek(fd, buf, (size_t)n, deadline);
	return r;
}

void cm_ctl_consume(int fd, size_t n)
{
	uint8_t b[64];

	while (n) {
		ssize_t r = rsock_real.recv(fd, b, n < sizeof(b) ? n : sizeof(b), MSG_DONTWAIT);
		if (r <= 0)
			break;
		n -= (size_t)r;
	}
}

int cm_cancel_encode(uint8_t *b)
{
	memset(b, 0, CM_CANCEL_LEN);
	b[0] = PROTO_MAGIC & 0xff;
	b[1] = (PROTO_MAGIC >> 8) & 0xff;
	b[2] = (PROTO_MAGIC >> 16) & 0xff;
	b[3] = PROTO_MAGIC >> 24;
	b[4] = CM_CANCEL_TYPE;
	b[6] = CM_CANCEL_LEN;
	return CM_CANCEL_LEN;
}

int cm_is_cancel(const uint8_t *b)
{
	uint8_t c[CM_CANCEL_LEN];

	cm_cancel_encode(c);
	return !memcmp(b, c, CM_CANCEL_LEN);
}

/* One step of cm_drop_stale: 1 when the expected message was dropped, 0
 * when other bytes or the end come first, else -EAGAIN / -EINPROGRESS /
 * -errno. */
static int drop_one(int fd, int kind)
{
	uint8_t b[PROTO_MSG_MAX_LEN];
	size_t want = kind == CM_STALE_CANCEL ? CM_CANCEL_LEN : PROTO_MSG_MAX_LEN;
	ssize_t r = rsock_real.recv(fd, b, want, MSG_PEEK | MSG_DONTWAIT);
	int d;

	if (r < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	if (r == 0)
		return 0;
	if (kind == CM_STALE_ACK) {
		struct proto_hello_ack a;
		d = proto_hello_ack_decode(b, (size_t)r, &a);
	} else if (kind == CM_STALE_HELLO) {
		struct proto_hello h;
		d = proto_hello_decode(b, (size_t)r, &h);
	} else {
		uint8_t c[CM_CANCEL_LEN];
		cm_cancel_encode(c);
		d = memcmp(b, c, (size_t)r) ? -EPROTO : r < CM_CANCEL_LEN ? -EAGAIN : CM_CANCEL_LEN;
	}
	if (d == -EAGAIN)
		return -EINPROGRESS;
	if (d < 0)
		return 0;
	cm_ctl_consume(fd, (size_t)d);
	return 1;
}

int cm_drop_stale(int fd, int *stale)
{
	while (*stale != CM_STALE_NONE) {
		int r = drop_one(fd, *stale);
		if (r < 0)
			return r;
		/* A late hello is followed by its cancel: the client had no
		 * answer either. */
		*stale = r == 1 && *stale == CM_STALE_HELLO ? CM_STALE_CANCEL : CM_STALE_NONE;
	}
	return 0;
}

/* Consume the client's cancel when it is next on the stream: 1 if it was.
 * A client that gave up on its hello's answer sends it, then application
 * data. */
int cm_drop_cancel(int fd)
{
	uint8_t c[CM_CANCEL_LEN];
	ssize_t r = rsock_real.recv(fd, c, sizeof(c), MSG_PEEK | MSG_DONTWAIT);

	if (r != CM_CANCEL_LEN || !cm_is_cancel(c))
		return 0;
	cm_ctl_consume(fd, CM_CANCEL_LEN);
	return 1;
}
