/* path.h - what any stream path provides to the layers above it (shim,
 * event, core, init, and the hand-over registry): a stream object that
 * begins with a struct path_stream, whose ops carry the data, the
 * readiness, the ends and the hand-over to kernel TCP. The RDMA path
 * (path/rdma) is one; its set-up is negotiation's (negotiate/), which
 * hands the stream upward as its struct path_stream. Above this header a
 * stream's path is only ever reached through the path_*() wrappers below,
 * each of which does nothing but dispatch: the fast path pays one indirect
 * call per operation (doc/design.md, "The fast path").
 *
 * Unless said otherwise an op returns 0, a count or -errno, takes the
 * stream's own lock itself (the caller holds none of the stream's), and
 * may be called from any thread of the process that holds the stream. */
#ifndef RSOCK_PATH_PATH_H
#define RSOCK_PATH_PATH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct ho_pre;
struct path_stream;
struct statpub_slot;

/* A thread asleep on a stream (poll() or a blocking call): woken through
 * its thread's eventfd when another thread's progress changes the stream
 * (path_wait_fd). */
struct path_waiter {
	struct path_waiter *next;
	int fd;                      /* the sleeping thread's wake-up eventfd, -1: none */
	int rung;
	int on;                      /* counted in the stream's sleepers */
};

struct path_ops {
	const char *name; /* "rdma", "shm" */
	int transport;    /* enum rsock_transport: RSOCK_TRANSPORT_RDMA or _SHM */
	int stats_path;   /* enum stats_path (base/stats.h): STATS_RDMA or STATS_SHM */

	/* ---- data ---- */
	/* Send from iov. flags: MSG_DONTWAIT honoured, nonblock = O_NONBLOCK
	 * of the fd. Returns bytes sent (possibly partial when non-blocking),
	 * or -errno (-EAGAIN, -EPIPE, -ECONNRESET ...). Never raises SIGPIPE:
	 * on a stream whose peer is gone it returns -EPIPE and the caller
	 * writes to the kernel socket, so that the kernel behaves as TCP. */
	ssize_t (*send)(struct path_stream *s, const struct iovec *iov, int iovcnt, int flags,
			int nonblock);
	/* Receive into iov; MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT honoured.
	 * Returns bytes, 0 at EOF, or -errno. */
	ssize_t (*recv)(struct path_stream *s, const struct iovec *iov, int iovcnt, int flags,
			int nonblock);
	/* Bytes readable now (FIONREAD). */
	int (*readable_bytes)(struct path_stream *s);

	/* ---- readiness (poll, select, epoll) ---- */
	/* POLLIN/POLLOUT/POLLHUP/POLLERR/POLLRDHUP bits, without blocking. */
	short (*poll_events)(struct path_stream *s);
	/* As poll_events; *seq (if given) receives the stream's event count,
	 * which grows with every event (the edges of edge-triggered epoll).
	 * With do_arm, events are requested too, so that event_fd becomes
	 * readable on the next one. */
	short (*ready)(struct path_stream *s, int do_arm, uint64_t *seq);
	/* 1 when the next event is requested (armed), or the stream needs none
	 * (another process's, or handed over to TCP). */
	int (*armed)(struct path_stream *s);
	/* One look for progress, a waiter's busy-poll: 1 when there was some.
	 * Never blocks (0 when another thread holds the stream). */
	int (*spin)(struct path_stream *s);
	/* Consume a pending event of event_fd without waking anyone. 1 when
	 * there was one. */
	int (*consume)(struct path_stream *s);
	/* The descriptor that becomes readable on the stream's events (after
	 * ready(do_arm)), or -1 (none in this process). */
	int (*event_fd)(struct path_stream *s);
	/* The descriptor to sleep on for the stream's progress, after arming:
	 * -1 when nothing needs arming (ready already). A descriptor returned
	 * makes the caller a sleeper until wait_end(s, w); the caller also
	 * sleeps on w->fd when it is >= 0 (its thread's wake-up eventfd, which
	 * other threads' progress writes). */
	int (*wait_fd)(struct path_stream *s, struct path_waiter *w);
	/* Ends the wait wait_fd began on w; nothing when it began none. */
	void (*wait_end)(struct path_stream *s, struct path_waiter *w);
	/* After the sleep on wait_fd's descriptor: consume its event (waking
	 * the epoll instances that watch the stream, so that none sleeps on
	 * the event consumed here). */
	void (*wait_done)(struct path_stream *s);
	/* A waiter saw the control connection (control_fd) readable: the next
	 * ready() looks at it. An atomic store; no lock. */
	void (*control_event)(struct path_stream *s);
	/* Handed over with nothing unread left: poll and epoll may treat the
	 * stream as the kernel socket it now is. 1 or 0. */
	int (*kernel_only)(struct path_stream *s);
	/* delta more (+1) or fewer (-1) epoll registrations of the stream; 0
	 * only reads the count. shared: the epoll instance is another
	 * process's (its registrations of event_fd may outlive ours). Returns
	 * the new count. Atomic; no lock. */
	int (*watchers_add)(struct path_stream *s, int delta, int shared);
	/* The control connection: the stream's TCP socket (our own
	 * duplicate), which poll and epoll watch beside event_fd. Immutable. */
	int (*control_fd)(struct path_stream *s);

	/* ---- ends ---- */
	/* shutdown(SHUT_RD) of the application's descriptor fd: reads return
	 * what is buffered, then 0, and blocked readers wake. */
	int (*shutdown_rd)(struct path_stream *s, int fd);
	/* shutdown(SHUT_WR): FIN after the data. */
	int (*shutdown_wr)(struct path_stream *s);
	/* The last descriptor closed (abort: unread data -> reset instead of
	 * FIN). s is released: the caller's reference is gone. */
	void (*close)(struct path_stream *s, int abort);
	/* The socket's SO_RCVLOWAT, SO_RCVTIMEO, SO_SNDTIMEO or SO_LINGER may
	 * have changed: read them back from the kernel. */
	void (*sockopts_changed)(struct path_stream *s);
	/* getsockopt(SO_ERROR): the stream's error not yet told (a positive
	 * errno, now told: as TCP's sock_error, the calls after it see the
	 * end of the stream), or 0 (then the kernel socket's answer goes).
	 * NULL: the kernel's only. */
	int (*sock_error)(struct path_stream *s);
	/* At exit: let what this process posted complete (bounded by until_ns,
	 * clock_now_ns()); s stays open. self: the kernel's id of the process. */
	void (*exit_drain)(struct path_stream *s, pid_t self, int64_t until_ns);

	/* ---- the hand-over to kernel TCP (doc/design.md, "Descriptors,
	 * fork, exec") ---- */
	/* Move the stream to kernel TCP, in order; blocks (bounded). 0, or
	 * -errno (the stream is then broken). Takes the stream's lock: the
	 * registry calls it under ho_lock (ho_lock first). */
	int (*handover)(struct path_stream *s);
	/* handover() from a child sharing the owner's memory (vfork) that is
	 * about to exec: always asks the owner. */
	int (*handover_shared)(struct path_stream *s);
	/* 1 once handed over: the kernel socket carries the stream. An atomic
	 * load; no lock. */
	int (*switched)(struct path_stream *s);
	/* Handed over: the bytes that came over the path and are not read
	 * yet (read before the kernel socket's), or NULL. */
	struct ho_pre *(*prefix)(struct path_stream *s);
	/* Handed over: how many of them are left. */
	size_t (*prefix_left)(struct path_stream *s);
	/* Handed over: the prefix's memfd, or -1. */
	int (*prefix_fd)(struct path_stream *s);
	/* 1 when this process made the stream and has forked since the stream
	 * came up: a child may hold it (its exec or its death would strand
	 * it). Reads without a lock. */
	int (*forked)(struct path_stream *s);
	/* The library's thread saw the control connection readable: look at
	 * it (answer the peer's hand-over, notice its close). Returns 1 while
	 * it should be watched on. */
	int (*control_watch)(struct path_stream *s);

	/* ---- observability ---- */
	/* Describe the stream in slot for rsock-stat (base/statpub.h: device,
	 * queue pair, ring sizes) and keep its credits there up to date,
	 * until called with NULL (the slot is given back then). May be NULL. */
	void (*publish)(struct path_stream *s, struct statpub_slot *slot);
};

/* The first member of every path's stream object. */
struct path_stream {
	const struct path_ops *ops;
};

static inline void path_publish(struct path_stream *s, struct statpub_slot *slot)
{
	if (s->ops->publish)
		s->ops->publish(s, slot);
}

static inline ssize_t path_send(struct path_stream *s, const struct iovec *iov, int iovcnt,
				int flags, int nonblock)
{
	return s->ops->send(s, iov, iovcnt, flags, nonblock);
}

static inline ssize_t path_recv(struct path_stream *s, const struct iovec *iov, int iovcnt,
				int flags, int nonblock)
{
	return s->ops->recv(s, iov, iovcnt, flags, nonblock);
}

static inline int path_readable_bytes(struct path_stream *s)
{
	return s->ops->readable_bytes(s);
}

static inline short path_poll_events(struct path_stream *s)
{
	return s->ops->poll_events(s);
}

static inline short path_ready(struct path_stream *s, int do_arm, uint64_t *seq)
{
	return s->ops->ready(s, do_arm, seq);
}

static inline int path_armed(struct path_stream *s)
{
	return s->ops->armed(s);
}

static inline int path_spin(struct path_stream *s)
{
	return s->ops->spin(s);
}

static inline int path_consume(struct path_stream *s)
{
	return s->ops->consume(s);
}

static inline int path_event_fd(struct path_stream *s)
{
	return s->ops->event_fd(s);
}

static inline int path_wait_fd(struct path_stream *s, struct path_waiter *w)
{
	return s->ops->wait_fd(s, w);
}

static inline void path_wait_end(struct path_stream *s, struct path_waiter *w)
{
	s->ops->wait_end(s, w);
}

static inline void path_wait_done(struct path_stream *s)
{
	s->ops->wait_done(s);
}

static inline void path_control_event(struct path_stream *s)
{
	s->ops->control_event(s);
}

static inline int path_kernel_only(struct path_stream *s)
{
	return s->ops->kernel_only(s);
}

static inline int path_watchers_add(struct path_stream *s, int delta, int shared)
{
	return s->ops->watchers_add(s, delta, shared);
}

/* The stream's epoll registrations now. */
static inline int path_watchers(struct path_stream *s)
{
	return s->ops->watchers_add(s, 0, 0);
}

static inline int path_control_fd(struct path_stream *s)
{
	return s->ops->control_fd(s);
}

static inline int path_shutdown_rd(struct path_stream *s, int fd)
{
	return s->ops->shutdown_rd(s, fd);
}

static inline int path_shutdown_wr(struct path_stream *s)
{
	return s->ops->shutdown_wr(s);
}

static inline void path_close(struct path_stream *s, int abort)
{
	s->ops->close(s, abort);
}

static inline void path_sockopts_changed(struct path_stream *s)
{
	s->ops->sockopts_changed(s);
}

static inline int path_sock_error(struct path_stream *s)
{
	return s->ops->sock_error ? s->ops->sock_error(s) : 0;
}

static inline void path_exit_drain(struct path_stream *s, pid_t self, int64_t until_ns)
{
	s->ops->exit_drain(s, self, until_ns);
}

static inline int path_handover(struct path_stream *s)
{
	return s->ops->handover(s);
}

static inline int path_handover_shared(struct path_stream *s)
{
	return s->ops->handover_shared(s);
}

static inline int path_switched(struct path_stream *s)
{
	return s->ops->switched(s);
}

static inline struct ho_pre *path_prefix(struct path_stream *s)
{
	return s->ops->prefix(s);
}

static inline size_t path_prefix_left(struct path_stream *s)
{
	return s->ops->prefix_left(s);
}

static inline int path_prefix_fd(struct path_stream *s)
{
	return s->ops->prefix_fd(s);
}

static inline int path_forked(struct path_stream *s)
{
	return s->ops->forked(s);
}

static inline int path_control_watch(struct path_stream *s)
{
	return s->ops->control_watch(s);
}

#endif
