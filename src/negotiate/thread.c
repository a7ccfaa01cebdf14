/* thread.c - negotiation's part of the library's thread (service.h): the
 * process's rdma_cm channel (data listeners' requests, accepted streams'
 * events) and the beacons' ucm file. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/timerfd.h>

#include "base/fault.h"
#include "base/log.h"
#include "base/real.h"
#include "base/ownfd.h"
#include "base/proc.h"
#include "service/service.h"

#include "negotiate/internal.h"

pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cm_cond = PTHREAD_COND_INITIALIZER;
struct rdma_event_channel *cm_ch;
int cm_ucm = -1;
pid_t cm_thread_pid;

static void on_connect_request(struct rdma_cm_event *ev)
{
	struct cm_obj *o = ev->listen_id ? ev->listen_id->context : NULL;
	const void *pd = ev->param.conn.private_data;
	uint8_t pdlen = ev->param.conn.private_data_len;

	if (o && o->kind == CTX_LISTENER && pd && pdlen >= 8) {
		uint64_t token;
		struct pending *p;
		memcpy(&token, pd, 8);
		token = le64toh(token); /* little-endian on the wire (doc/design.md, "Wire protocol") */
		pthread_mutex_lock(&cm_lock);
		for (p = cm_pendings; p; p = p->next)
			if (p->token == token && p->state == PEND_WAIT)
				break;
		if (p && p->ctx == ev->id->verbs && !(p->qp_err = tp_create_qp(p->tp, ev->id))) {
			struct rdma_conn_param cp;
			int e;
			tp_conn_param(&cp, NULL, 0);
			cp.qp_num = tp_own_qp_num(p->tp); /* 0: the QP is the id's */
			log_debug("accept: request for a pending stream, %s QP", cp.qp_num ? "its own" : "the id's");
			ev->id->context = p;
			if (!(e = fault_at(FAULT_ACCEPT)) && rdma_accept(ev->id, &cp) == 0) {
				p->state = PEND_ACCEPTING;
				pthread_mutex_unlock(&cm_lock);
				return;
			}
			/* Refused (the client gave up and its reject came
			 * first, say): the id is rejected and destroyed
			 * below, so the stream, which the waiting accept()
			 * closes, must no longer name it. */
			log_debug("accept: rdma_accept failed (errno %d): the stream stays on TCP",
				  e ? e : errno);
			tp_release_id(p->tp, ev->id);
			p->state = PEND_FAILED;
			pthread_cond_broadcast(&cm_cond);
		}
		pthread_mutex_unlock(&cm_lock);
	}
	rdma_reject(ev->id, NULL, 0);
	ev->id->context = NULL;
}

/* What an event leaves to do once it is acknowledged (librdmacm's
 * rdma_destroy_id waits for the acknowledgement of the events it gave). */
struct after {
	struct rdma_cm_id *doomed; /* an id to destroy */
	struct listener *dead;     /* a dead listener nobody uses: freed */
	int removal;               /* a device is being removed: librdmacm looks again */
};

/* DEVICE_REMOVAL and ADDR_CHANGE (doc/design.md, "Errors"): an established
 * stream's path is broken and it fails over now, here; a stream being
 * accepted does so once up (pending->path_event). For a device going
 * away, the ring cache's sets on it and its record go first, then the
 * data listener on it, then the streams' ids (tp_cm_event), so that
 * nothing of ours is left on it when librdmacm closes it after the last
 * id: the kernel's removal waits for that (soft-RoCE cannot take the
 * objects from us). */
static void on_path_event(struct rdma_cm_event *ev, struct after *a)
{
	int removal = ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL;
	struct ibv_context *ctx = ev->id->verbs;
	struct cm_obj *o;

	log_info("rdma_cm: %s", removal ? "DEVICE_REMOVAL: an RDMA device is being removed"
					: "ADDR_CHANGE: an address moved to another port");
	if (removal && ctx)
		tp_dev_gone(ctx);
	pthread_mutex_lock(&cm_lock);
	if (removal && ctx)
		cm_dev_forget(ctx);
	a->removal = removal;
	o = ev->id->context;
	if (o && o->kind == CTX_PENDING) {
		((struct pending *)o)->path_event =
			1 + (removal ? TP_CM_DEVICE_REMOVAL : TP_CM_ADDR_CHANGE);
	} else if (o && o->kind == CTX_LISTENER && removal) {
		struct listener *l = (struct listener *)o;
		for (struct listener **pp = &cm_listeners; *pp; pp = &(*pp)->next)
			if (*pp == l) {
				*pp = l->next;
				break;
			}
		l->dead = 1;
		if (!l->users)
			a->dead = l;
	}
	pthread_mutex_unlock(&cm_lock);
	if (!o)
		tp_cm_event(ev->id, removal ? TP_CM_DEVICE_REMOVAL : TP_CM_ADDR_CHANGE, &a->doomed);
}

static void on_event(struct rdma_cm_event *ev)
{
	struct after a = {NULL, NULL, 0};
	struct cm_obj *o;

	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		on_connect_request(ev);
		if (!ev->id->context)
			a.doomed = ev->id;
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_ADDR_CHANGE:
		on_path_event(ev, &a);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		/* The waiting accept() clears the context under cm_lock before
		 * its pending object goes away. */
		pthread_mutex_lock(&cm_lock);
		o = ev->id->context;
		if (o && o->kind == CTX_PENDING) {
			((struct pending *)o)->state =
				ev->event == RDMA_CM_EVENT_ESTABLISHED ? PEND_UP : PEND_FAILED;
			pthread_cond_broadcast(&cm_cond);
		}
		pthread_mutex_unlock(&cm_lock);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		/* Liveness comes from the TCP control connection, except for
		 * a stream still being accepted. A DREQ follows only an
		 * established connection; the kernel's CM handles the
		 * client's RTU and its DREQ on a workqueue that need not keep
		 * their order, and a DREQ that overtakes the RTU ends the
		 * wait for ESTABLISHED here for good (the RTU is dropped).
		 * The client was connected, may have written and closed: its
		 * bytes are in our ring, so the stream is up (waiting out
		 * the deadline would leave it on TCP with those bytes lost:
		 * streamcheck scenario 14). */
		pthread_mutex_lock(&cm_lock);
		o = ev->id->context;
		if (o && o->kind == CTX_PENDING && ((struct pending *)o)->state == PEND_ACCEPTING) {
			log_debug("accept: the client disconnected before its RTU arrived: connected");
			((struct pending *)o)->state = PEND_UP;
			pthread_cond_broadcast(&cm_cond);
		}
		pthread_mutex_unlock(&cm_lock);
		break;
	default:
		/* TIMEWAIT_EXIT ...: nothing to do here. */
		break;
	}
	rdma_ack_cm_event(ev);
	if (a.doomed)
		rdma_destroy_id(a.doomed);
	if (a.dead)
		cm_listener_free(a.dead); /* (looks again itself) */
	else if (a.removal)
		cm_dev_sync();
}

void cm_stream_event(struct rdma_cm_id *id, int kind)
{
	struct rdma_cm_id *doomed;

	tp_cm_event(id, (enum tp_cm_kind)kind, &doomed);
	if (doomed)
		rdma_destroy_id(doomed);
	if (kind == TP_CM_DEVICE_REMOVAL)
		cm_dev_sync();
}

/* The kernel refused the library's thread a command with EACCES: this process
 * changed its credentials since it opened the file (tp_creds_stale). The
 * thread stops watching it (it would be readable for ever): returns
 * -EACCES for the service's callback. */
static int creds_stale(const char *what)
{
	atomic_store_explicit(&tp_creds_stale, 1, memory_order_relaxed);
	log_debug("cm: the %s refuses this process since it changed its credentials "
		  "(setuid, setgid...): new streams stay on TCP", what);
	return -EACCES;
}

/* RSOCK_FAULT's cm_late and cm_swap sites (base/fault.h): ev is taken
 * late, or held (returns NULL) and taken after the next event. The thread
 * turns once: nothing else is done meanwhile. */
static struct rdma_cm_event *held;

static RSOCK_COLD struct rdma_cm_event *event_fault(struct rdma_cm_event *ev)
{
	int ms = fault_hit(FAULT_CM_LATE);

	if (ms)
		rsock_real.poll(NULL, 0, ms);
	if (held) {
		on_event(ev);
		ev = held;
		held = NULL;
	} else if (fault_hit(FAULT_CM_SWAP)) {
		held = ev;
		ev = NULL;
	}
	return ev;
}

/* RSOCK_FAULT's cm_addr_change, cm_removal and cq_err sites (base/fault.h):
 * the event made up for a stream that came up, VALUE ms later, on the
 * library's thread (a timer it watches), as tp_cm_event and
 * tp_async_event take a real one; the device stays. One at a time; a
 * stream closed by then is not found. */
static int synth_fd = -1;
static pid_t synth_pid;
static struct rdma_cm_id *synth_id;
static struct ibv_cq *synth_cq; /* cq_err's */
static enum tp_cm_kind synth_kind;

static RSOCK_COLD int synth_ready(int fd, short revents, void *arg)
{
	struct rdma_cm_id *id, *doomed;
	struct ibv_cq *cq;
	enum tp_cm_kind kind;
	uint64_t n;

	(void)revents, (void)arg;
	if (rsock_real.read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n))
		return 0;
	pthread_mutex_lock(&cm_lock);
	id = synth_id;
	cq = synth_cq;
	kind = synth_kind;
	synth_id = NULL;
	synth_cq = NULL;
	pthread_mutex_unlock(&cm_lock);
	if (cq) {
		log_warn("RSOCK_FAULT: a made-up IBV_EVENT_CQ_ERR for a stream");
		tp_async_event(IBV_EVENT_CQ_ERR, cq);
		return 0;
	}
	if (!id)
		return 0;
	log_warn("RSOCK_FAULT: a made-up %s for a stream",
		 kind == TP_CM_DEVICE_REMOVAL ? "DEVICE_REMOVAL" : "ADDR_CHANGE");
	if (tp_cm_event(id, kind, &doomed) && doomed)
		rdma_destroy_id(doomed);
	return 0;
}

void cm_fault_up(struct tp *t)
{
	struct itimerspec its = {{0, 0}, {0, 0}};
	int ms, a, r, q;

	if (!RSOCK_UNLIKELY(fault_armed) || !t->id)
		return;
	a = fault_hit(FAULT_CM_ADDR_CHANGE);
	r = fault_hit(FAULT_CM_REMOVAL);
	q = fault_hit(FAULT_CQ_ERR);
	if (!(ms = a ?: r ?: q))
		return;
	its.it_value.tv_sec = ms / 1000;
	its.it_value.tv_nsec = (long)(ms % 1000) * 1000000;
	pthread_mutex_lock(&cm_lock);
	if (synth_pid != rsock_pid()) {
		synth_fd = ownfd_move(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
		if (synth_fd >= 0 && service_watch(synth_fd, POLLIN, synth_ready, NULL)) {
			ownfd_close(synth_fd);
			synth_fd = -1;
		}
		synth_pid = rsock_pid();
	}
	if (synth_fd >= 0) {
		synth_id = a || r ? t->id : NULL;
		synth_cq = a || r ? NULL : t->cq;
		synth_kind = a ? TP_CM_ADDR_CHANGE : TP_CM_DEVICE_REMOVAL;
		timerfd_settime(synth_fd, 0, &its, NULL);
	}
	pthread_mutex_unlock(&cm_lock);
}

/* The process's channel was readable (or the turn is the thread's first):
 * handle every event there. */
static int channel_ready(int fd, short revents, void *arg)
{
	struct rdma_cm_event *ev;
	int err;

	(void)fd, (void)revents, (void)arg;
	for (;;) {
		while (rdma_get_cm_event(cm_ch, &ev) == 0)
			if (!RSOCK_UNLIKELY(fault_armed) || (ev = event_fault(ev)))
				on_event(ev);
		err = errno;
		if (!held)
			break;
		/* a held event waits at most 1 s for one to overtake it */
		struct pollfd p = {.fd = cm_ch->fd, .events = POLLIN};
		if (rsock_real.poll(&p, 1, 1000) <= 0) {
			on_event(held);
			held = NULL;
		}
	}
	return err == EACCES ? creds_stale("rdma_cm channel") : 0;
}

/* The beacons' ucm file: answer every probe there. */
static int ucm_ready(int fd, short revents, void *arg)
{
	struct ucm_event uev;
	int rc;

	(void)revents, (void)arg;
	while ((rc = ucm_get_event(fd, &uev)) == 1)
		if (uev.event == UCM_EVENT_CONNECT_REQUEST)
			cm_beacon_request(&uev);
	if (rc != -EACCES)
		return 0;
	/* Closing the file ends the beacons in the kernel: a client's probe
	 * is refused at once (a plain peer, to it) instead of waiting for an
	 * answer that cannot come. */
	pthread_mutex_lock(&cm_lock);
	ownfd_close(cm_ucm);
	cm_ucm = -1;
	pthread_mutex_unlock(&cm_lock);
	return creds_stale("beacons' connection manager");
}

int cm_start(void)
{
	int rc;

	if (cm_ch && cm_thread_pid == rsock_pid())
		return 0;
	/* In a forked child the inherited channel is the parent's (its thread
	 * reads it): this process gets a channel and a thread of its own. */
	if (!(cm_ch = cm_channel_new()))
		return errno ? -errno : -ENODEV;
	if ((cm_ucm = ucm_open()) < 0)
		return cm_ucm;
	cm_ucm = ownfd_move(cm_ucm);
	/* Watched first, in this order: connection events and probes come
	 * before the hand-over and the closed streams' teardown. */
	service_watch(cm_ch->fd, POLLIN, channel_ready, NULL);
	service_watch(cm_ucm, POLLIN, ucm_ready, NULL);
	if ((rc = service_start())) {
		service_unwatch(cm_ch->fd);
		service_unwatch(cm_ucm);
		return rc;
	}
	cm_thread_pid = rsock_pid();
	return 0;
}

int cm_service_start(void)
{
	int rc;

	pthread_mutex_lock(&cm_lock);
	rc = cm_start();
	pthread_mutex_unlock(&cm_lock);
	/* Without rdma_cm (no RDMA device or module) the thread still serves
	 * the same-host path's streams and the hand-over. */
	return rc ? service_start() : 0;
}

void cm_fork_lock(void)
{
	pthread_mutex_lock(&cm_lock);
}

void cm_fork_unlock(void)
{
	pthread_mutex_unlock(&cm_lock);
}
