/* transport.h - the RDMA data path of one stream: registered rings, RDMA
 * WRITE WITH IMMEDIATE into the peer's ring, credits, completions, waiting.
 *
 * The RDMA path's implementation of path.h. A struct tp is created by
 * negotiation during the handshake (tp_new), gets its QP from rdma_cm
 * (tp_create_qp), and is handed upward as its struct path_stream (t->s):
 * the layers above drive it only through path.h's ops (tp_path_ops, ops.c),
 * never through this header, which only the RDMA path itself, negotiation
 * (its set-up), core/exec.c (tp_adopt) and init.c (the hooks, fork handlers
 * and reaper it registers) include. All functions return -errno on failure.
 * One lock (tp->lock, base/mtx.h) protects the whole object; it is released while a
 * caller sleeps in poll(). */
#ifndef RSOCK_TRANSPORT_H
#define RSOCK_TRANSPORT_H

#include <pthread.h>
#include <stddef.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "base/compiler.h"
#include "base/mtx.h"
#include "base/config.h"
#include "base/proto.h"
#include "base/ring.h"
#include "path/adapt.h"
#include "path/path.h"

#define TP_SQ_DEPTH 128
/* Part of the wire protocol: a receiver takes one more as an error (see
 * doc/design.md, "Wire protocol"). */
#define TP_MAX_DATA_MSGS 63
/* The largest inline data message (the QP asks for this much, and the
 * send path gathers one in a stack buffer of this size). */
#define TP_INLINE_MAX 256u
/* The inline limit a stream uses, from what the provider reported when it
 * made the QP: that can be more than asked (mlx5 reports what its work
 * request's 64-byte blocks hold, some tens of bytes more than the 256
 * asked), and TP_INLINE_MAX is what the stack buffer holds. */
static inline uint32_t tp_inline_limit(uint32_t reported)
{
	return reported < TP_INLINE_MAX ? reported : TP_INLINE_MAX;
}

/* Set once the kernel refused a verbs command of this process with EACCES:
 * the process changed its credentials (setuid, setgid, setgroups...) after
 * it opened the RDMA device, and the kernel accepts write()-based commands
 * (soft-RoCE's post_send and req_notify_cq, every rdma_cm command) only
 * from the credentials the file was opened with. Its RDMA streams move to
 * TCP; new streams stay on TCP (src/negotiate/). See doc/design.md, "Descriptors, fork,
 * exec". */
extern _Atomic int tp_creds_stale RSOCK_HIDDEN;

/* A reader that has waited TP_SINK_WAITS times more after reading at least
 * TP_SINK_BYTES than after reading less, since it last sent, is a bulk
 * sink (the receiving end of a stream of large writes, not a request and
 * its answer): its read waits spin only RSOCK_POLL_US. The peer's bytes
 * gather in the ring while it sleeps, a wake-up is paid once per large
 * message, and where the CPUs were busy (4 streams on 2) the spin took the
 * CPU the senders needed. Small messages keep the spin: there a wake-up for
 * every few of them cost more than it saved. A wait that read nothing since
 * the last one (it was woken by one of its own credits' completions) counts
 * neither way, and the count goes up to TP_SINK_MAX, so an odd short
 * message does not make a sink spin again (doc/design.md, "Wire protocol"). */
#define TP_SINK_WAITS 4
#define TP_SINK_MAX 8
#define TP_SINK_BYTES (16u * 1024)
/* A blocking read about to wait notes the bytes it read since its last
 * wait in its count (0..TP_SINK_MAX; a send sets it to 0). Returns whether
 * the reader is a bulk sink. */
static inline int tp_sink_note(unsigned *waits, uint64_t read_since)
{
	if (!read_since)
		; /* a wake-up that brought nothing says nothing */
	else if (read_since < TP_SINK_BYTES)
		*waits -= !!*waits;
	else if (*waits < TP_SINK_MAX)
		(*waits)++;
	return *waits >= TP_SINK_WAITS;
}

struct ho_pre;
struct ho_rec;

struct tp {
	struct path_stream s;        /* first: what the layers above hold (path.h) */
	struct mtx lock;             /* base/mtx.h: two atomics per data call */
	struct tp *reap_next;        /* on the list of closed streams to tear down */
	int close_abort;             /* tp_close's verdict, for the teardown */
	int reap_drained;            /* closed: what it posted is done with */
	int64_t reap_until;          /* closed: the most its posts are waited for (ms) */
	struct rdma_cm_id *id;       /* owns the QP; NULL until connected */
	struct rdma_event_channel *ch; /* the id's private channel (client side, until
	                                  it is up: then the process's), or NULL */
	struct ibv_pd *pd;           /* the stream's own: its QP and its two MRs only */
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int own_qp;                  /* qp made by tp_prepare_qp, not on the id */
	int qp_ib;                   /* its port's link layer is InfiniBand */

	void *mem;                   /* rx ring then tx staging ring, one allocation */
	size_t mem_len;
	struct ibv_mr *rx_mr;        /* remote write: the peer's target */
	struct ibv_mr *tx_mr;        /* local only */
	struct ring rx;              /* what the peer wrote and we have not read */
	struct ring tx;              /* staging copies not yet completed */
	struct ring spill;           /* unread bytes moved out of rx, read before it
	                              * (a blocked send's way out: tp_send) */

	struct ring_remote peer;     /* the peer's receive ring */
	uint64_t peer_addr;
	uint32_t peer_rkey;
	uint32_t max_inline;
	struct ibv_send_wr wr;       /* tp_post_write's, reused: the fields it does not
	                                set stay zero */

	uint64_t msg_end[TP_MAX_DATA_MSGS + 1]; /* end positions of unacked data messages */
	/* Their bytes, for a failover's resend: in the staging ring (copied and
	 * inline messages, kept there until a signalled completion covers
	 * them) or the application's buffer (a zero-copy span, held by its
	 * send until its writes complete); valid while not landed. */
	const uint8_t *msg_src[TP_MAX_DATA_MSGS + 1];
	uint64_t msg_base;           /* where the oldest of them starts: the end of the
	                                last one credited (each starts where the one
	                                before it ends) */
	unsigned msg_head, msg_count;
	uint64_t tx_landed;          /* peer.tail when the last completed signalled WR was
	                                posted: every byte before it is in the peer's count */
	unsigned sq_posted;          /* WRs posted since the last signalled one */
	unsigned rq_owed;            /* receives consumed and not yet posted again */
	unsigned rq_out;             /* receives posted and not yet completed (or flushed) */
	unsigned sq_busy;            /* WRs not known complete */
	uint64_t sq_seq;             /* WRs posted so far */
	struct {
		uint64_t seq;        /* sq_seq of a signalled WR */
		uint64_t tx_tail;    /* staging released up to here when it completes */
		uint64_t peer_tail;  /* peer.tail when posted: tx_landed once it completes */
		int64_t ms;          /* when posted (clock_coarse_ms): a stuck device's witness */
	} sig[TP_SQ_DEPTH];          /* signalled WRs in flight, in posting order */
	unsigned sig_head, sig_count;
	uint64_t rx_unacked;         /* consumed bytes not yet credited to the peer */
	/* Ends (rx positions) of the data messages received and not yet
	 * credited, oldest first: the sender holds one of its
	 * TP_MAX_DATA_MSGS slots for each until a credit covers its end.
	 * rx_msg_read of them (from the oldest) are fully read. */
	uint64_t rx_msg_end[TP_MAX_DATA_MSGS + 1];
	unsigned rx_msg_head, rx_msg_count, rx_msg_read;
	/* The read mark (doc/design.md, "Wire protocol"): the peer's bytes the
	 * application has read (ring and spill), and what of it the peer's
	 * word says (written last). mark_in: our own word, after the receive
	 * ring, where the peer writes its count of our bytes it has read
	 * (NULL without one). */
	uint64_t rx_read, mark_sent;
	const uint8_t *mark_in;
	/* Its link on the list of streams whose mark is due (mark.c), under
	 * that list's lock and t->lock; mark_pprev NULL: not on it. */
	struct tp *mark_next, **mark_pprev;
	/* The library's thread found the stream's lock held when the mark
	 * was due: its holder, spinning for an event, writes it (mark.c). */
	_Atomic int mark_wanted;

	int tcp_fd;                  /* the control connection: our own duplicate */
	pid_t owner;                 /* the process whose verbs objects these are */
	int up;                      /* the RDMA connection was established */
	int eof;                     /* FIN received */
	int fin_sent;
	int peer_gone;               /* control connection closed by the peer */
	int err;                     /* sticky -errno: -ECONNRESET, -EIO ... */
	int err_told;                /* err was returned to a read or write (tp_err_report) */
	int rd_shut;                 /* shutdown(SHUT_RD): reads end once the ring is empty */
	int zc_off;                  /* registering a send's buffer failed: copy from now */
	int switching;               /* in switch_within: the control connection is TCP's next */
	int path_down;               /* -errno: the RDMA path broke, a failover is due */
	int fo_frozen;               /* failing over: the QP is in error, the ring's tail final */
	int fo_sent;                 /* our FAILOVER SWITCH is out: the peer's is awaited */
	int fo_acked;                /* ... and the peer's kernel has acknowledged it */
	int64_t fo_look_ms;          /* ... when the wait's bound is looked at next */
	int failed_over;             /* moved to TCP by a failover (its ring set is not kept) */
	int released;                /* its verbs objects and rdma_cm id went with its device
	                                (tp_cm_event); cc's number is a never-readable
	                                eventfd's now */
	_Atomic int consumers;       /* threads in tp_consume (tp_cm_event waits them out) */

	/* Readiness plumbing for poll and epoll (src/event/). */
	_Atomic int armed;           /* a completion event is requested or pending */
	_Atomic int sleepers;        /* threads asleep on the channel in poll() or a
	                                blocking call (tp_wait_fd, wait_event), and
	                                one arming until it stored armed (arm_counted) */
	struct path_waiter *waitq;     /* those of them with a wake-up eventfd, under lock */
	_Atomic uint64_t evseq;      /* counts completions and control events */
	_Atomic int watchers;        /* epoll registrations of this stream */
	_Atomic int hooked_shared;   /* registered in an epoll instance another
				      * process made: its completion channel may
				      * stay there, so the ring cache drops it */
	_Atomic int ctl_dirty;       /* the control connection was seen readable */
	int64_t ctl_last_ms;         /* when an empty read last looked at it */
	struct path_adapt wait;        /* recent waits for an event (path_spin_budget_ns) */
	unsigned sink_waits;         /* tp_sink_note's count: read waits after reading at
	                                least TP_SINK_BYTES less those after reading less,
	                                since the application last sent */
	uint64_t sink_mark;          /* rx.head at the last read wait */
	_Atomic int rcvlowat;        /* the socket's SO_RCVLOWAT, as the kernel keeps it (>= 1) */
	_Atomic int64_t timeo_ns[2]; /* its SO_RCVTIMEO and SO_SNDTIMEO (0: none) */
	_Atomic int linger_s;        /* its SO_LINGER: l_linger, or -1 (l_onoff 0) */

	/* The hand-over to TCP (doc/design.md, "Descriptors, fork, exec";
	 * handover.h). */
	uint16_t peer_version;       /* protocol version of the peer's hello */
	_Atomic int sw;              /* switched: the kernel socket carries the stream */
	struct ho_pre *pre;          /* after the switch: bytes from RDMA not yet read */
	struct ho_rec *rec;          /* the record other processes ask through */
	unsigned fork_gen;           /* ho_forks when the stream came up */

	/* Its slot for rsock-stat (path_publish), or NULL: credits are
	 * stored there where they change (flow.h). */
	struct statpub_slot *_Atomic pub;
};

/* The stream object of a struct path_stream the RDMA path made (its ops
 * are tp_path_ops). */
static inline struct tp *tp_of(struct path_stream *s)
{
	return (struct tp *)((char *)s - offsetof(struct tp, s));
}

/* The RDMA path's implementation of path.h (ops.c): thin adapters to the
 * tp_* functions below. Every struct tp has it (tp_new, tp_adopt). */
extern const struct path_ops tp_path_ops RSOCK_HIDDEN;

/* What the RDMA path calls in the layers above it, set by init.c before any
 * stream exists (tp_hooks_set). A member left NULL (unit tests) does
 * nothing: no epoll instance is woken, and with no reaper tp_close tears a
 * stream down itself. */
struct tp_hooks {
	void (*kick)(void);         /* wake every epoll instance to look again */
	int (*reaper_ready)(void);  /* 1: this process has a thread for tp_reap */
	void (*reaper_wake)(int ms); /* closed streams wait: tp_reap within ms */
};
/* Install the hooks (copied). Called once, before any stream exists. */
void tp_hooks_set(const struct tp_hooks *h);

/* Allocate the stream and its rings (receive ring of rx_size bytes, the
 * peer's target; send staging ring of tx_size), registered in a protection
 * domain of the stream's own on ctx (so that the peer's QP reaches this
 * stream's receive ring and nothing else), taken from the process's cache
 * of released ring sets when one of these sizes is there. Returns 0 and
 * *out, or -errno. */
int tp_new(struct ibv_context *ctx, uint32_t rx_size, uint32_t tx_size, int tcp_fd,
	   struct tp **out);

/* The peer's ring and limits and protocol version, from its hello /
 * hello_ack. -EPROTO if unusable. */
int tp_set_peer(struct tp *t, uint64_t addr, uint32_t rkey, uint32_t size, uint32_t max_inline,
		uint16_t version);

/* The RDMA connection is established: the stream is carried by it from now. */
void tp_up(struct tp *t);

/* The socket's SO_RCVLOWAT, SO_RCVTIMEO or SO_SNDTIMEO may have changed
 * (setsockopt): read them back from the kernel (which caps and rounds
 * them), for reads, writes and readiness. Also when the stream comes up. */
void tp_sockopts_changed(struct tp *t);

/* Move the stream to kernel TCP, in order (doc/design.md, "Descriptors,
 * fork, exec"): in the owning process by the SWITCH exchange with the peer, elsewhere by asking
 * the owner. Afterwards the bytes that came over RDMA and were not read are
 * read first (tp_prefix), then the kernel socket's. Blocks (bounded) for the
 * peer's answer. 0, or -errno when it could not be done (the stream is then
 * broken: reads and writes fail). */
int tp_handover(struct tp *t);

/* tp_handover() from a child that shares the owner's memory (vfork, clone
 * with CLONE_VM) and is about to exec: it always asks the owner, whatever
 * the pid cache says (the owner's, in such a child). */
int tp_handover_shared(struct tp *t);
static inline int tp_switched(struct tp *t)
{
	return atomic_load_explicit(&t->sw, memory_order_acquire);
}
struct ho_pre *tp_prefix(struct tp *t);
/* The library's thread saw the control connection readable: look at it (answer a
 * SWITCH, notice the peer's close). Returns 1 while it should be watched on. */
int tp_control_watch(struct tp *t);
/* Switched with nothing unread left: poll and epoll may treat the stream as
 * the kernel socket it now is. */
int tp_kernel_only(struct tp *t);
int tp_prefix_fd(struct tp *t);
/* Switched: the bytes that came over RDMA and are not read yet. */
size_t tp_prefix_left(struct tp *t);
/* A stream already moved to TCP, with its unread prefix (taken over), on
 * socket fd: what an exec'd image adopts. 0 and *out, or -errno. */
int tp_adopt(int fd, struct ho_pre *pre, struct tp **out);

/* What an rdma_cm event says of the device under a stream's id. */
enum tp_cm_kind {
	TP_CM_ADDR_CHANGE,    /* its address moved to another port (a bond's failover) */
	TP_CM_DEVICE_REMOVAL, /* the device is being removed */
};
/* rdma_cm reported kind for id (doc/design.md, "Errors"): if id is an
 * established stream's of this process, its RDMA path is broken and the
 * failover runs now, in the caller (the library's thread, or the accepting
 * thread for an event that came during the handshake); a stream that cannot
 * fail over is reset. For a device being removed, a stream now on TCP
 * releases its QP, CQ, completion channel, MRs and PD, and gives up its id:
 * *doomed (else NULL), which the caller destroys once it has acknowledged
 * the event (librdmacm waits for that). Returns 1 when id was a stream's,
 * else 0. Takes ho_lock, then the stream's lock. */
int tp_cm_event(struct rdma_cm_id *id, enum tp_cm_kind kind, struct rdma_cm_id **doomed);

/* The device reported an asynchronous event of a stream's CQ or QP:
 * IBV_EVENT_CQ_ERR (obj its CQ: an overrun, completions lost) or
 * IBV_EVENT_QP_FATAL (obj its QP). The stream's
 * RDMA path is broken and the failover runs now, in the caller (the
 * library's thread), as for tp_cm_event. obj is only compared with the
 * streams' own: the caller acknowledged the event already (a CQ or QP
 * destroyed since matches none). Returns 1 when obj was a stream's, else 0.
 * Takes ho_lock, then the stream's lock. */
int tp_async_event(enum ibv_event_type type, const void *obj);

/* The device of ctx is being removed: the ring cache frees its sets on ctx
 * and keeps none for it from now on (a closed stream's teardown frees them),
 * so that nothing of ours holds the device once the ids on it are
 * destroyed. Takes the cache's lock. */
void tp_dev_gone(struct ibv_context *ctx);

/* Create the stream's completion channel and CQ, if not yet there (any
 * thread: under t->lock). Lets a side create them while it waits for its
 * peer rather than after. 0 or -errno. */
int tp_create_cq(struct tp *t);

/* Create CQ (if needed) and QP on id, whose device must be the stream's,
 * and post the receives; id may be bound only (its route resolved later).
 * 0 also when t already has its QP on id. When tp_prepare_qp made the QP
 * ahead, id is a connection request's: the QP is moved to RTS with its
 * attributes. Under t->lock. Returns 0 or -errno; on success t owns the QP
 * (not the id itself). */
int tp_create_qp(struct tp *t, struct rdma_cm_id *id);

/* Give back id, which tp_create_qp took for a connection request that is
 * not accepted after all (rdma_accept failed): a QP made on id goes with
 * it, one made ahead stays t's; t no longer names id, which its caller
 * rejects and destroys. Takes t->lock. */
void tp_release_id(struct tp *t, struct rdma_cm_id *id);

/* The passive side's QP made ahead of the connection request, on the
 * stream's PD with ibv_create_qp (with the CQ if needed), moved to INIT on
 * port_num and given its receives: the library's thread then only moves it on
 * (tp_create_qp) when the request comes, instead of creating it while the
 * client waits. 0 (also when the QP is there already) or -errno. */
int tp_prepare_qp(struct tp *t, uint8_t port_num);

/* The number of the QP made by tp_prepare_qp, for rdma_accept's parameters
 * (rdma_cm does not own that QP), or 0 when the QP is the id's. */
uint32_t tp_own_qp_num(const struct tp *t);

/* Fill the rdma_cm connection parameters both sides use. */
void tp_conn_param(struct rdma_conn_param *p, const void *priv, uint8_t priv_len);

/* Send from iov. flags: MSG_DONTWAIT honoured, nonblock = O_NONBLOCK of the fd.
 * Returns bytes sent (possibly partial when non-blocking), or -errno
 * (-EAGAIN, -EPIPE, -ECONNRESET ...). Never raises SIGPIPE itself: on a
 * stream whose peer is gone it returns -EPIPE and the caller writes to the
 * kernel socket instead so that the kernel produces exactly TCP's behaviour. */
ssize_t tp_send(struct tp *t, const struct iovec *iov, int iovcnt, int flags, int nonblock);

/* Receive into iov; flags MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT honoured.
 * Returns bytes, 0 at EOF, or -errno. */
ssize_t tp_recv(struct tp *t, const struct iovec *iov, int iovcnt, int flags, int nonblock);

/* Readiness without blocking: POLLIN/POLLOUT/POLLHUP/POLLERR/POLLRDHUP bits. */
short tp_poll_events(struct tp *t);
/* The descriptor to sleep on for this stream's progress (the completion
 * channel), after arming notification. Returns -1 when nothing needs arming
 * (already ready). A descriptor returned makes the caller a sleeper until
 * tp_wait_end(t, w), and the caller must also sleep on tp_thread_wakefd()
 * (w->fd, when the wait is queued).
 * Several threads may sleep on one stream (ruby: one thread writing and
 * one reading a socket, each in poll(); it hung): one of them can take the
 * channel's event and the completion it announced while another is
 * between its look and its sleep. So a thread that consumes an event
 * while others sleep re-arms the CQ for them (tp_consume), and progress
 * made by any thread wakes the other sleepers (their wake-up eventfds). */
int tp_wait_fd(struct tp *t, struct path_waiter *w);
/* Ends the wait tp_wait_fd began on w; nothing when it began none. */
void tp_wait_end(struct tp *t, struct path_waiter *w);
/* After a sleep a signal handler interrupted: 1 when the call fails with
 * EINTR, 0 when it waits on (TCP's rule: doc/design.md, "Wire
 * protocol"). The same-host path uses it too. */
int tp_intr_fails(int64_t deadline);
/* This thread's wake-up eventfd (closed when the thread ends), or -1 when
 * it has none. */
int tp_thread_wakefd(void);
/* In a forked child: the forking thread's wake-up eventfd is the parent's
 * file; close our copy. */
void tp_wake_fork_child(void);
/* Consume a completion-channel event after the wait fd fired; when epoll
 * instances watch the stream they are kicked (tp_hooks.kick) so that none
 * sleeps on the event consumed here. */
void tp_wait_done(struct tp *t);

/* Consume a pending completion-channel event without kicking. Returns 1 if
 * there was one. Lock not held. */
int tp_consume(struct tp *t);

/* Readiness like tp_poll_events(); *seq (if given) receives the stream's
 * event count, which grows with every completion and control event (the
 * edges of edge-triggered epoll). With do_arm, completion events are
 * requested too (unless they already are), so that the completion channel
 * (tp_event_fd) becomes readable on the next completion. */
short tp_ready(struct tp *t, int do_arm, uint64_t *seq);

/* Whether the next completion raises an event (the CQ is armed), or the
 * stream needs none (another process's, or handed over to TCP). */
int tp_armed(struct tp *t);

/* A waiter saw the control connection (tcp_fd) readable: the next
 * tp_ready() looks at it. */
static inline void tp_control_event(struct tp *t)
{
	atomic_store_explicit(&t->ctl_dirty, 1, memory_order_relaxed);
}

/* One look at the completion queue, for a waiter's busy-poll: 1 when there
 * was something. Never blocks (0 when another thread holds the stream). */
int tp_spin(struct tp *t);

/* The completion channel's descriptor, or -1 (not this process's stream). */
int tp_event_fd(struct tp *t);

/* Bytes readable now (FIONREAD). */
int tp_readable_bytes(struct tp *t);

/* getsockopt(SO_ERROR) (path.h: sock_error): the stream's error not told
 * yet, as a positive errno, now told; else 0. Looks at the control
 * connection first, as readiness does. Takes the lock. */
int tp_sock_error(struct tp *t);

/* shutdown(SHUT_RD) of the application's descriptor fd: reads return what
 * the ring holds, then 0, and blocked readers wake. Returns 0 or -errno. */
int tp_shutdown_rd(struct tp *t, int fd);

/* shutdown(SHUT_WR): send FIN after the data. Returns 0 or -errno. */
int tp_shutdown_wr(struct tp *t);

/* Last descriptor closed. abort: unread data -> RESET instead of FIN. What
 * the peer must see is posted here (FIN after the data, or RESET); the wait
 * for its completion (bounded: TP_LINGER_MS) and the destruction of
 * everything are the reaper's (the library's thread: tp_reap), as TCP
 * leaves a closed socket to the kernel, when this process has one
 * (tp_hooks.reaper_ready) and the socket does not linger (SO_LINGER with
 * a time: close() waits that long, as TCP's). Without a reaper, close()
 * does it all. */
void tp_close(struct tp *t, int abort);

/* The library's thread, each turn: look at the closed streams tp_close left
 * to it, and tear down one whose posted writes are done (one at a time, so
 * that its other work waits at most one teardown). Returns 1 when more are
 * ready; asks for its next turn (tp_hooks.reaper_wake) while some wait, and
 * for a while after a close (close.c: REAP_HOT_MS). */
int tp_reap(void);

/* In a forked child: the parent's closed streams awaiting teardown are the
 * parent's; drop our copies (and our copies of their descriptors), and the
 * parent's list of read marks due. */
void tp_reap_fork_child(void);

/* At exit (the destructor, the library's thread parked when it could be):
 * what this process posted on its closed streams completes (bounded by
 * until_ns, clock_now_ns()); they are left to the kernel, and the reaper
 * tears nothing down any more. self: the process's id from the kernel. */
void tp_exit_reap(pid_t self, int64_t until_ns);

/* At exit: let what this process posted on t complete (bounded by
 * until_ns, CLOCK_MONOTONIC: clock_now_ns()); t stays open. self: the
 * process's id from the kernel. */
void tp_exit_drain(struct tp *t, pid_t self, int64_t until_ns);

/* The library's thread, each turn: the streams read since their last read
 * mark write it into the peer's word, TP_MARK_MS after the read at most
 * (doc/design.md, "Wire protocol"). Returns 0 (a later turn is asked for
 * with service_wake_after). */
int tp_mark_turn(void);
/* The library's thread, each turn: a stream whose signalled write is
 * overdue (TP_STALL_MS) fails over, whoever waits on it (stall.c). Returns
 * 0 (a later turn is asked for with service_wake_after). */
int tp_stall_turn(void);

/* For init.c's pthread_atfork handlers: the ring cache's lock, the reap
 * list's and the read marks' are held across fork(). */
void tp_fork_lock(void);
void tp_fork_unlock(void);

#endif
