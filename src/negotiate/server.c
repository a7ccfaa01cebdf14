/* server.c - the server side: whether an accepted stream was probed, and
 * its handshake (the hello, the answer, the data connection accepted by
 * the library's thread). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <time.h>

#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received */

#include "base/clock.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/ownfd.h"
#include "base/proto.h"
#include "base/real.h"

#include "negotiate/internal.h"

struct pending *cm_pendings;

static int send_nak(int fd, int status, int64_t deadline)
{
	struct proto_hello_ack a = {.version = PROTO_VERSION, .status = (uint16_t)status};
	uint8_t buf[PROTO_HELLO_ACK_LEN];

	proto_hello_ack_encode(&a, buf, sizeof(buf));
	return cm_ctl_write(fd, buf, sizeof(buf), deadline);
}

int cm_server_probed(const void *owner, int fd, enum rsock_fallback_reason *why)
{
	struct sockaddr_storage peer, local;
	socklen_t pl = sizeof(peer), ll = sizeof(local);

	/* (A listener whose port's beacon is another listener's counts: with
	 * SO_REUSEPORT one beacon answers for all of them, in this process or
	 * another of this user, and the kernel hands a stream to any.) */
	if (!cm_shm_drain(owner) && !cm_has_beacon(owner)) {
		log_debug("accept: fd %d: its listener has no beacon: TCP", fd);
		*why = ownfd_room() ? RSOCK_FB_NO_DEVICE : RSOCK_FB_RESOURCES; /* (cm_listen) */
		return -EOPNOTSUPP;
	}
	if (rsock_real.getpeername(fd, (struct sockaddr *)&peer, &pl) ||
	    rsock_real.getsockname(fd, (struct sockaddr *)&local, &ll)) {
		*why = RSOCK_FB_PROTOCOL;
		return -EOPNOTSUPP;
	}
	if (!cm_tuple_take((struct sockaddr *)&peer, (struct sockaddr *)&local)) {
		log_debug("accept: fd %d from port %u was not probed: a plain client", fd,
			  sa_port((struct sockaddr *)&peer));
		*why = RSOCK_FB_PEER; /* a plain client: TCP from the first byte */
		return -EOPNOTSUPP;
	}
	return 0;
}

int cm_server_accept(const void *owner, int fd, const struct cm_bufs *bufs,
		     struct path_stream **out, enum rsock_fallback_reason *why)
{
	*out = NULL;
	if (cm_server_probed(owner, fd, why))
		return -EOPNOTSUPP;
	int stale; /* (RSOCK_MODE=rdma: a stream left on TCP is refused) */

	return cm_server_handshake(fd, bufs, out, &stale, why);
}

/* Whether another process took this stream's hello already: the hello is
 * its first bytes, so bytes received and no longer queued were read by
 * someone, and this process has not (it would have settled the stream).
 * vsftpd forks the two processes of a login before either uses the
 * stream: without this, the second would wait for a hello the first had
 * answered until the handshake bound, 4 s per login. Read before the
 * queue, so that bytes arriving in between make it err towards waiting. */
/* tcpi_state values after the peer's FIN (the kernel's tcp_states.h;
 * <linux/tcp.h>, needed for tcpi_bytes_received, does not name them). */
enum { TCPS_CLOSE_WAIT = 8, TCPS_LAST_ACK = 9, TCPS_CLOSING = 11 };

static int hello_taken(int fd)
{
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	int inq = 0;
	uint64_t got;

	if (rsock_real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) ||
	    tl < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received) ||
	    rsock_real.ioctl(fd, FIONREAD, &inq) || inq < 0)
		return 0;
	/* The peer's FIN takes a sequence number, which bytes_received
	 * counts: a client that wrote and closed before the accept looked
	 * like a taken hello, and its hello and cancel reached the
	 * application as data (test/rdma/lateaccept.py). */
	got = ti.tcpi_bytes_received;
	if (got && (ti.tcpi_state == TCPS_CLOSE_WAIT || ti.tcpi_state == TCPS_LAST_ACK ||
		    ti.tcpi_state == TCPS_CLOSING))
		got--;
	return got > (uint64_t)inq;
}


/* Read the client's hello from fd into *h (consumed), waiting until
 * *deadline (set here). 0, or -EOPNOTSUPP with *why: the stream stays on TCP
 * without an answer. */
static int hello_read(int fd, struct proto_hello *h, int64_t *deadline, int *stale,
		      enum rsock_fallback_reason *why)
{
	uint8_t buf[PROTO_MSG_MAX_LEN];
	ssize_t r;
	int rc = 0;

	/* A librsock client: its hello is the first thing on the stream. */
	if (hello_taken(fd)) {
		log_debug("accept: fd %d: another process answered the hello already: TCP here", fd);
		*why = RSOCK_FB_PEER;
		return -EOPNOTSUPP;
	}
	*deadline = clock_now_ms() + 2 * cm_settings.handshake_ms;
	log_debug("accept: waiting for the hello on fd %d", fd);
	r = cm_ctl_peek_hello(fd, buf, 0, *deadline);
	if (r <= 0 || (rc = proto_hello_decode(buf, (size_t)r, h)) <= 0) {
		log_debug("accept: no usable hello (%zd bytes, decode %d)", r, r > 0 ? rc : 0);
		/* Not there in time (a cut wire, a stopped client): the client
		 * sent it all the same, unless it gave up before (then its
		 * first bytes are data), and cancels it when no answer comes.
		 * Both are dropped when they arrive. */
		if (r == -ETIMEDOUT || (r > 0 && rc == -EAGAIN))
			*stale = CM_STALE_HELLO;
		*why = RSOCK_FB_PROTOCOL; /* leave the bytes to the application */
		return -EOPNOTSUPP;
	}
	cm_ctl_consume(fd, (size_t)rc);
	if (cm_drop_cancel(fd)) {
		/* The client gave up waiting for the answer (a server that
		 * accepts late): what follows is application data. */
		log_debug("accept: fd %d: the client gave up on its hello already: TCP", fd);
		*why = RSOCK_FB_PEER;
		return -EOPNOTSUPP;
	}
	return 0;
}

/* The stream's transport (p->tp) on the data listener of local (*l), set
 * to the client's rings, and p listed for the library thread's accept. 0, or
 * -errno with *why (p->tp, if made, is the caller's to close). */
static int pending_make(int fd, const struct cm_bufs *bufs, const struct proto_hello *h,
			const struct sockaddr *local, struct pending *p, struct listener **l,
			enum rsock_fallback_reason *why)
{
	if (atomic_load_explicit(&tp_creds_stale, memory_order_relaxed)) {
		log_debug("accept: fd %d stays on TCP: this process changed its credentials "
			  "since it opened the RDMA device", fd);
		*why = RSOCK_FB_NO_DEVICE;
		return -EACCES;
	}
	*why = RSOCK_FB_RESOURCES;
	if (!ownfd_room()) /* (before the data listener opens the device) */
		return -EMFILE;
	pthread_mutex_lock(&cm_lock);
	if ((*l = cm_listener_for(local)))
		(*l)->users++; /* (cm_listener_put at the handshake's end) */
	pthread_mutex_unlock(&cm_lock);
	*why = RSOCK_FB_NO_DEVICE;
	if (!*l)
		return -ENODEV;
	*why = RSOCK_FB_RESOURCES;
	if (!cm_dev_usable((*l)->id->verbs) ||
	    tp_new((*l)->id->verbs, ring_size_for(bufs->rcvbuf, cm_settings.ring_kb * 1024),
		   ring_size_for(bufs->sndbuf, cm_settings.ring_kb * 1024), fd, &p->tp))
		return -ENOMEM;
	*why = RSOCK_FB_PROTOCOL;
	if (tp_set_peer(p->tp, h->ring_addr, h->ring_rkey, h->ring_size, h->max_inline, h->version))
		return -EPROTO;
	p->token = h->token;
	p->ctx = (*l)->id->verbs;
	pthread_mutex_lock(&cm_lock);
	p->next = cm_pendings;
	cm_pendings = p;
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

/* The answer to the hello: the data listener's port and our rings. Then
 * CQ and QP, while the client resolves and connects. 0 or -errno. */
static int answer_send(int fd, const struct pending *p, const struct listener *l, uint64_t token,
		       int64_t deadline)
{
	struct proto_hello_ack a = {.version = PROTO_VERSION};
	uint8_t buf[PROTO_HELLO_ACK_LEN];
	int rc;

	a.token = token;
	a.rdma_port = sa_port((struct sockaddr *)&l->addr);
	a.ring_addr = (uintptr_t)p->tp->rx.buf;
	a.ring_rkey = p->tp->rx_mr->rkey;
	a.ring_size = p->tp->rx.size;
	proto_hello_ack_encode(&a, buf, sizeof(buf));
	if ((rc = cm_ctl_write(fd, buf, PROTO_HELLO_ACK_LEN, deadline)))
		return rc;
	/* CQ and QP now, while the client resolves and connects, rather than
	 * in the library's thread when its request comes: the thread then only moves
	 * the QP on and accepts (if the request comes first, the thread makes
	 * the QP on its id). */
	if (l->id->port_num)
		tp_prepare_qp(p->tp, l->id->port_num);
	else
		tp_create_cq(p->tp);
	return 0;
}

/* Wait for the data connection (0), or the client's cancel or its end
 * (-ECONNABORTED), or the deadline (-ETIMEDOUT). A request accepted (its QP
 * in RTS) and no cancel by the deadline, which is past the client's own bound: the
 * client is connected and may have written into our ring, its ESTABLISHED
 * only late here (the library's thread busy): up (0). */
static int connected_wait(int fd, struct pending *p, int64_t deadline)
{
	struct timespec ts;
	ssize_t r;

	for (;;) {
		uint8_t c[CM_CANCEL_LEN];
		pthread_mutex_lock(&cm_lock);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 2000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		if (p->state != PEND_UP)
			pthread_cond_timedwait(&cm_cond, &cm_lock, &ts);
		int st = p->state;
		pthread_mutex_unlock(&cm_lock);
		if (st == PEND_UP)
			return 0;
		/* A connection that failed here failed at the client too,
		 * whose cancel follows (bounded by the deadline): leaving
		 * before it came would hand it to the application. */
		r = rsock_real.recv(fd, c, sizeof(c), MSG_PEEK | MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
			/* The client ended its side. Once we accepted its
			 * request it may have been connected, have written
			 * and closed before the library's thread saw ESTABLISHED
			 * here: what it sent is in our ring, so the outcome
			 * of the connection decides, and at the deadline, with
			 * no cancel, it was connected. */
			if (st != PEND_ACCEPTING)
				return -ECONNABORTED;
			if (clock_left_ms(deadline) == 0)
				return 0;
			continue;
		}
		if (r == CM_CANCEL_LEN && cm_is_cancel(c)) {
			cm_ctl_consume(fd, CM_CANCEL_LEN);
			return -ECONNABORTED;
		}
		if (clock_left_ms(deadline) == 0)
			return st == PEND_ACCEPTING ? 0 : -ETIMEDOUT;
	}
}

/* Take p off the pending list; its id's events no longer name it. */
static void pending_unlist(struct pending *p)
{
	pthread_mutex_lock(&cm_lock);
	for (struct pending **pp = &cm_pendings; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	if (p->tp->id)
		p->tp->id->context = NULL;
	pthread_mutex_unlock(&cm_lock);
}

int cm_server_handshake(int fd, const struct cm_bufs *bufs, struct path_stream **out,
			int *stale, enum rsock_fallback_reason *why)
{
	struct sockaddr_storage local;
	socklen_t ll = sizeof(local);
	struct proto_hello h;
	struct pending p = {.obj.kind = CTX_PENDING, .state = PEND_WAIT};
	struct listener *l = NULL;
	int64_t deadline;
	int rc;

	*out = NULL;
	*stale = CM_STALE_NONE;
	if (rsock_real.getsockname(fd, (struct sockaddr *)&local, &ll)) {
		*why = RSOCK_FB_PROTOCOL;
		return -EOPNOTSUPP;
	}
	sa_unmap(&local); /* an IPv4 client of a dual-stack listener: IPv4 data listener */
	if (hello_read(fd, &h, &deadline, stale, why))
		return -EOPNOTSUPP;
	if (h.flags & PROTO_HELLO_SHM) {
		if ((rc = cm_shm_server(fd, &h, bufs != NULL, deadline, out, why)))
			*stale = CM_STALE_CANCEL; /* (as below) */
		return rc;
	}
	if (!bufs) {
		*why = RSOCK_FB_NOT_IMPLEMENTED; /* declined: the stream goes to exec */
		goto nak;
	}
	if (pending_make(fd, bufs, &h, (struct sockaddr *)&local, &p, &l, why))
		goto nak;
	*why = RSOCK_FB_PEER;
	/* From here a client without our answer in time (a cut wire, a
	 * stopped client) sends its cancel whenever it finds out: it is
	 * dropped when it arrives, unless it came already or the client's
	 * end did. */
	*stale = CM_STALE_CANCEL;
	if ((rc = fault_at(FAULT_ANSWER_LATE))) /* (a slow wire: the client gives up first) */
		usleep((useconds_t)rc * 1000);
	if (answer_send(fd, &p, l, h.token, deadline))
		goto unlist;
	if ((rc = connected_wait(fd, &p, deadline))) {
		if (rc == -ECONNABORTED)
			*stale = CM_STALE_NONE;
		goto unlist;
	}
	*stale = CM_STALE_NONE;
	pending_unlist(&p);
	tp_up(p.tp);
	*out = &p.tp->s; /* handed upward as a path (path.h) */
	log_debug("accept: fd %d carried by RDMA", fd);
	cm_fault_up(p.tp);
	if (p.path_event) /* (its device went, or its address moved, meanwhile) */
		cm_stream_event(p.tp->id, p.path_event - 1);
	cm_listener_put(l);
	return 0;
unlist:
	if (p.qp_err)
		*why = RSOCK_FB_RESOURCES; /* ours, not the client's: its request was rejected */
	if (cm_drop_cancel(fd)) /* one that came with the end (a failed answer) */
		*stale = CM_STALE_NONE;
	log_debug("accept: fd %d stays on TCP (reason %d)", fd, *why);
	pending_unlist(&p);
	tp_close(p.tp, 1);
	cm_listener_put(l);
	return -EOPNOTSUPP;
nak:
	if (p.tp)
		tp_close(p.tp, 1);
	if (l)
		cm_listener_put(l);
	send_nak(fd, *why, deadline);
	*stale = CM_STALE_CANCEL; /* (the client cancels if the answer comes late) */
	return -EOPNOTSUPP;
}
