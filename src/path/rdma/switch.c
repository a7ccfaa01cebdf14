/* switch.c - the hand-over to TCP in the owning process (doc/design.md,
 * "Descriptors, fork, exec"): the control connection watched, the SWITCH exchange, what a
 * change of credentials and a forked child's socket ask for. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <linux/sockios.h>

#include "base/fault.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/stats.h"
#include "path/handover.h"
#include "path/rdma/internal.h"

_Atomic int tp_creds_stale;

/* Whether the control connection says the peer is gone, or moves the stream
 * to TCP (its SWITCH). Caller holds the lock. */
void tp_check_control(struct tp *t)
{
	char b[64];
	ssize_t r;

	if (tp_switched(t))
		return; /* the kernel socket carries application data now */
	r = rsock_real.recv(t->tcp_fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	if (r == 0 && t->rd_shut) {
		/* Our own shutdown(SHUT_RD) ends the kernel socket's input too:
		 * this end says nothing about the peer. */
	} else if (r == 0) {
		if (!t->peer_gone) {
			log_debug("fd %d: the control connection was closed by the peer", t->tcp_fd);
			atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
		}
		t->peer_gone = 1;
		/* Gone with our bytes unread (killed, or exited with them): the
		 * reset its kernel would send for a TCP socket, after what
		 * arrived (doc/design.md, "Errors"); else the end of stream.
		 * What it sent over RDMA (credits, FIN, RESET) is in the CQ by
		 * now: taken first. */
		if (!t->eof && !t->err && !t->switching && tp_peer_left_unread(t) &&
		    (tp_progress(t), !t->eof && !t->err && tp_peer_left_unread(t)))
			tp_fail(t, -ECONNRESET, "the peer ended with bytes unread", 0);
		tp_waitq_wake(t);
	} else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		if (!t->err)
			t->err = -errno;
		if (!t->peer_gone)
			atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
		t->peer_gone = 1;
		tp_waitq_wake(t);
	} else if (r > 0) {
		struct proto_switch m;
		int d = proto_switch_decode(b, (size_t)r, &m);

		if (d > 0) {
			/* Exactly the message: application data follows it. */
			rsock_real.recv(t->tcp_fd, b, (size_t)d, MSG_DONTWAIT);
			if (fault_at(FAULT_SWITCH_DROP))
				return; /* (the peer waits for an answer that never comes) */
			log_debug("fd %d: the peer moves the stream to TCP%s", t->tcp_fd,
				  m.flags & PROTO_SWITCH_FAILOVER ? " (its path broke)" : "");
			tp_switch_locked(t, &m);
			tp_waitq_wake(t);
			return;
		}
		if (d == -EAGAIN)
			return; /* the rest of a SWITCH is on its way */
		/* Nothing else is expected on the control connection of an RDMA
		 * stream; discard stray bytes so they cannot spin us. */
		log_warn_rl("fd %d: %zd unexpected bytes on the control connection", t->tcp_fd, r);
		rsock_real.recv(t->tcp_fd, b, (size_t)r, MSG_DONTWAIT);
	}
}

/* Until everything posted on t has completed (a signalled fence asked for
 * when nothing signalled is outstanding), or an error, or deadline
 * (CLOCK_MONOTONIC ms). 0, -ETIMEDOUT, or post_fence's -errno. Caller holds
 * the lock. */
int tp_await_posted(struct tp *t, int64_t deadline)
{
	int rc = 0;

	while (t->sq_busy && !t->err && !t->path_down && !rc) {
		if (tp_progress(t))
			continue;
		if (!t->sig_count && t->sq_busy < TP_SQ_DEPTH && (rc = tp_post_fence(t))) {
			if (rc != -EACCES)
				tp_fail(t, -ECONNRESET, "posting a fence failed", TP_FAIL_PATH);
			break;
		}
		if (clock_now_ms() > deadline)
			rc = -ETIMEDOUT;
		else
			rsock_real.poll(NULL, 0, 1);
	}
	return rc;
}

/* The peer's SWITCH when it is whole on the control connection: consumed
 * then (application data may follow it), 0 and *m. -EAGAIN while it is not;
 * -EPIPE or -ECONNRESET when the peer closed its socket instead; -EPROTO,
 * -ETIMEDOUT (TCP's). */
static int take_switch(struct tp *t, struct proto_switch *m)
{
	uint8_t b[PROTO_MSG_MAX_LEN];
	ssize_t r = rsock_real.recv(t->tcp_fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);

	if (r > 0) {
		int d = proto_switch_decode(b, (size_t)r, m);
		if (d > 0) {
			rsock_real.recv(t->tcp_fd, b, (size_t)d, MSG_DONTWAIT);
			return 0;
		}
		return d == -EAGAIN ? -EAGAIN : -EPROTO;
	}
	if (r == 0)
		return -EPIPE;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return -EAGAIN;
	return errno == ECONNRESET || errno == ETIMEDOUT ? -errno : -EPIPE;
}

/* take_switch by deadline (ms), absorbing RDMA completions meanwhile.
 * Caller holds the lock. */
static int read_switch(struct tp *t, struct proto_switch *m, int64_t deadline)
{
	for (;;) {
		struct pollfd p = {.fd = t->tcp_fd, .events = POLLIN};
		int rc = take_switch(t, m);

		if (rc != -EAGAIN)
			return rc;
		tp_progress(t);
		if (clock_now_ms() > deadline)
			return -ETIMEDOUT;
		/* (readable with a part of it: the rest is a moment away) */
		if (rsock_real.poll(&p, 1, 2) > 0)
			rsock_real.poll(NULL, 0, 1);
	}
}

/* The bound of a failover's wait for the peer's SWITCH (doc/design.md,
 * "Descriptors, fork, exec"): while the peer's kernel has not acknowledged
 * ours, the wire is out, and TCP rides that out by its retransmissions or
 * ends it with its own ETIMEDOUT; TP_SWITCH_MS counts from the
 * acknowledgement. Looked at every TP_FO_LOOK_MS. -ETIMEDOUT once passed,
 * else 0. Caller holds the lock. */
static int fo_bound(struct tp *t)
{
	int q = 0;
	int64_t now = clock_now_ms();

	if (now < t->fo_look_ms)
		return 0;
	if (!t->fo_acked && !rsock_real.ioctl(t->tcp_fd, SIOCOUTQ, &q) && q > 0) {
		t->fo_look_ms = now + TP_FO_LOOK_MS;
		return 0;
	}
	if (!t->fo_acked) {
		t->fo_acked = 1;
		t->fo_look_ms = now + TP_SWITCH_MS;
		return 0;
	}
	return -ETIMEDOUT;
}

/* The switch itself, in the owning process, lock held. peer: the peer's
 * SWITCH, read first (NULL: this side speaks first). Afterwards the unread
 * ring bytes are the prefix and the kernel socket carries the rest, both
 * ways. On failure the kernel socket is shut down both ways (the
 * application sees EOF and EPIPE, never bytes out of order), or, for a
 * failover, the stream is broken (tp_fo_broken), and -errno returned. */
static int switch_within(struct tp *t, const struct proto_switch *peer, int64_t deadline, int wait);
static int switch_steps(struct tp *t, const struct proto_switch *peer, int64_t deadline, int wait);

int tp_switch_locked(struct tp *t, const struct proto_switch *peer)
{
	return switch_within(t, peer, clock_now_ms() + TP_SWITCH_MS, 1);
}

/* switch_locked, bounded by deadline (CLOCK_MONOTONIC ms). Without wait, a
 * failover whose peer has not answered yet returns -EINPROGRESS. */
static int switch_within(struct tp *t, const struct proto_switch *peer, int64_t deadline, int wait)
{
	int rc;

	t->switching = 1;
	rc = switch_steps(t, peer, deadline, wait);
	t->switching = 0;
	return rc;
}

void tp_failover_due(struct tp *t)
{
	if (!t->path_down || t->switching || tp_switched(t) || t->err)
		return;
	/* Waiting for the peer's SWITCH: it comes through tp_check_control
	 * (the control connection readable wakes every waiter); the bound
	 * is looked at now and then, and a peer gone ends the wait at once. */
	if (t->fo_sent && !t->peer_gone && clock_now_ms() < t->fo_look_ms)
		return;
	switch_within(t, NULL, clock_now_ms() + TP_SWITCH_MS, 0);
}

void tp_failover_wait(struct tp *t, int64_t deadline)
{
	if (t->path_down && !t->switching && !tp_switched(t) && !t->err)
		switch_within(t, NULL, deadline, 1);
}

/* Steps 1 to 4 of the exchange (doc/design.md, "Wire protocol"), or the
 * failover's: the QP frozen, the counts exchanged, the peer's missing bytes
 * written again. 0 or -errno. */
static int exchange(struct tp *t, const struct proto_switch *peer, int64_t deadline, int wait)
{
	int rc = 0, fo = t->path_down || (peer && (peer->flags & PROTO_SWITCH_FAILOVER));
	struct proto_switch got;
	uint64_t kept, peer_total = 0;

	if (!fo) {
		/* 1. Everything we posted has landed in the peer's ring. */
		rc = tp_await_posted(t, deadline);
		/* The device refuses this process (creds_lost): what it posted
		 * is in the send queue, and the peer waits for every byte up
		 * to our total (its step 4). */
		if (rc == -EACCES)
			rc = 0;
		if (t->path_down && !t->err) { /* the path broke meanwhile */
			fo = 1;
			rc = 0;
		}
		if (t->err && !rc)
			rc = t->err;
	}
	/* Failing over: nothing more arrives; what did is counted. */
	if (!rc && fo)
		tp_fo_freeze(t);
	/* 2. Say where our RDMA bytes end, and (version 3) what we keep of
	 * the peer's; TCP carries what follows. */
	kept = t->rx.tail;
	if (!rc && !t->fo_sent) {
		rc = tp_fo_send_switch(t, fo, deadline);
		if (!rc && fo) {
			t->fo_sent = 1;
			t->fo_look_ms = clock_now_ms() + TP_FO_LOOK_MS;
		}
	}
	/* 3. Hear where the peer's end: a failover outside a synchronous
	 * switch leaves the wait to the stream's calls and readiness. */
	if (!rc && !peer) {
		rc = wait || !fo ? read_switch(t, &got, deadline) : take_switch(t, &got);
		if (rc == -EAGAIN && !(rc = fo_bound(t)))
			return -EINPROGRESS;
		if (rc == 0) {
			peer = &got;
		} else if (rc == -EPIPE || rc == -ECONNRESET) {
			/* The peer's socket is closed: everything it wrote
			 * completed before (its close waits for that, or fails
			 * over). Its reads are over: nothing to send again. */
			t->peer_gone = 1;
			tp_progress(t);
			peer_total = t->rx.tail;
			rc = 0;
		}
	}
	if (!rc && peer && !fo && (peer->flags & PROTO_SWITCH_FAILOVER)) {
		/* Our plain SWITCH crossed the peer's FAILOVER: keep what we
		 * had when we sent ours, as it said. */
		fo = 1;
		tp_fo_freeze(t);
		t->rx.tail = kept;
	}
	if (!rc && fo) {
		if (peer)
			rc = tp_fo_resend(t, peer->rx_bytes, deadline);
	} else if (!rc) {
		if (peer)
			peer_total = peer->rdma_bytes;
		/* 4. Everything the peer posted is in our ring. */
		while (!rc && !tp_switch_rx_done(t->rx.tail, peer_total) && !t->err) {
			if (tp_progress(t))
				continue;
			if (clock_now_ms() > deadline)
				rc = -ETIMEDOUT;
			else
				rsock_real.poll(NULL, 0, 1);
		}
		if (!rc && tp_switch_rx_done(t->rx.tail, peer_total) != 1)
			rc = -EPROTO; /* more arrived than the peer says it sent */
	}
	if (!rc && t->fin_sent)
		rsock_real.shutdown(t->tcp_fd, SHUT_WR); /* our FIN, now TCP's */
	if (fo)
		t->failed_over = 1;
	return rc;
}

static int switch_steps(struct tp *t, const struct proto_switch *peer, int64_t deadline, int wait)
{
	int rc = 0;

	if (tp_switched(t))
		return 0;
	tp_progress(t);
	if (!t->err && !t->peer_gone) {
		if ((rc = exchange(t, peer, deadline, wait)) == -EINPROGRESS)
			return rc;
	}
	else if (t->path_down)
		tp_fo_freeze(t); /* the peer is gone: keep what arrived */
	if (!rc && tp_unread(t)) {
		/* the spill's bytes, then the ring's, each possibly wrapped */
		struct iovec v[4];
		ring_unread_iov(&t->spill, v);
		ring_unread_iov(&t->rx, v + 2);
		rc = ho_pre_new(v, 4, &t->pre);
		if (!rc) {
			ring_consume(&t->spill, (size_t)ring_used(&t->spill));
			ring_consume(&t->rx, (size_t)ring_used(&t->rx));
		}
	}
	if (rc && t->failed_over) {
		tp_fo_broken(t, rc);
		return rc;
	}
	if (rc) {
		log_warn("fd %d: the stream could not be moved to TCP (%s): it is shut down",
			 t->tcp_fd, strerror(-rc));
		rsock_real.shutdown(t->tcp_fd, SHUT_RDWR);
	} else {
		log_debug("fd %d: moved to TCP%s, %zu unread bytes first", t->tcp_fd,
			  t->failed_over ? " (failover)" : "", ho_pre_left(t->pre));
		if (t->failed_over)
			stats_failover();
		else
			stats_handover();
	}
	atomic_store_explicit(&t->sw, 1, memory_order_release);
	atomic_fetch_add_explicit(&t->evseq, 1, memory_order_relaxed);
	tp_waitq_wake(t); /* the owner's other threads asleep on it read TCP now */
	if (atomic_load_explicit(&t->watchers, memory_order_relaxed))
		tp_kick();
	return rc;
}

/* The kernel refused a verbs command of this process with EACCES: the
 * process changed its credentials since it opened the device (see
 * tp_creds_stale). The stream moves to TCP, as for a hand-over; the peer's
 * RDMA writes still land and are read (polling the completion queue and
 * posting receives are no commands on soft-RoCE either). Returns 1 when the
 * stream is switched now, 0 when it cannot be (the caller fails it). Caller
 * holds the lock. */
int tp_creds_lost(struct tp *t)
{
	atomic_store_explicit(&tp_creds_stale, 1, memory_order_relaxed);
	if (tp_switched(t))
		return 1;
	if (!t->up || t->peer_version < PROTO_VERSION_SWITCH)
		return 0;
	log_debug("fd %d: the RDMA device refuses this process since it changed its credentials "
		  "(setuid, setgid...): the stream moves to TCP", t->tcp_fd);
	tp_switch_locked(t, NULL);
	return 1;
}

/* forked: a child forked since t came up may hold the socket. Then the
 * stream moves to TCP for it (by deadline, CLOCK_MONOTONIC ms), and what
 * was not read stays for it in the prefix, left open (*pfd; -1 if none).
 * Returns 1 when so: the caller publishes it (ho_publish) once it has
 * released the lock (the hand-over lock comes before the stream's).
 * Caller holds t->lock. */
int tp_switch_for_children(struct tp *t, int forked, int64_t deadline, int *pfd)
{
	*pfd = -1;
	if (!forked || !t->up || tp_switched(t) || t->err || t->peer_gone ||
	    t->peer_version < PROTO_VERSION_SWITCH || switch_within(t, NULL, deadline, 1))
		return 0;
	if ((*pfd = tp_prefix_fd(t)) >= 0)
		t->pre = NULL; /* an orphan now, left open: doc/design.md, "Descriptors, fork, exec" */
	return 1;
}
