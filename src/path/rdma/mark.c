/* mark.c - the read mark (doc/design.md, "Wire protocol"): each side
 * writes into a word of its peer's, after the peer's receive ring, how many
 * of the peer's bytes its application has read, within TP_MARK_MS of a
 * read. A peer that sees this process die (its control connection ended
 * by the kernel, no FIN or RESET over RDMA) tells from it whether we left
 * bytes unread, when kernel TCP's close would have sent a reset. An RDMA
 * WRITE without immediate: the peer takes no completion and no wake-up for
 * it. The library's thread writes it (a list of the streams read since
 * their last mark, one turn per TP_MARK_MS while the list is not empty),
 * so a request and its answer cost no work request more; exit() writes
 * it too. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <pthread.h>
#include <stdatomic.h>

#include "base/clock.h"
#include "base/proc.h"
#include "path/rdma/internal.h"
#include "service/service.h"

/* The streams read since their last mark, newest first; the lock is a leaf
 * below t->lock (the library's thread only tries a stream's lock while
 * holding it). */
static pthread_mutex_t mark_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tp *mark_head;
/* When the thread's next turn for the list is (it asked for one), 0: none.
 * A turn that wrote marks asks for the next one TP_MARK_MS later whatever
 * the list holds, so that a stream read meanwhile costs its reader no
 * wake-up of the thread: while streams are read, the thread wakes once per
 * TP_MARK_MS, and once more after the last. */
static _Atomic int64_t mark_due_ms;

static void mark_unlink(struct tp *t)
{
	if (t->mark_next)
		t->mark_next->mark_pprev = t->mark_pprev;
	*t->mark_pprev = t->mark_next;
	t->mark_next = NULL;
	t->mark_pprev = NULL;
}

/* Whether t writes marks now: up on RDMA, healthy, to a peer whose word
 * exists (version 4), with inline data for the 8 bytes. */
static int mark_possible(struct tp *t)
{
	return t->up && t->qp && t->peer_version >= PROTO_VERSION_MARK && t->max_inline >= 8 &&
	       !t->err && !t->path_down && !t->fo_frozen && !tp_switched(t) &&
	       t->owner == rsock_pid();
}

void tp_send_mark(struct tp *t)
{
	uint64_t v = t->rx_read + 1; /* (0: no mark ever written) */
	uint8_t b[8];
	struct ibv_sge sge = {.addr = (uintptr_t)b, .length = sizeof(b)};

	if (t->mark_sent == v || !mark_possible(t) ||
	    t->sq_busy + TP_CTL_RESERVE >= TP_SQ_DEPTH)
		return;
	for (unsigned i = 0; i < sizeof(b); i++) /* little-endian, as every field */
		b[i] = (uint8_t)(v >> (8 * i));
	int rc = tp_post_write(t, &sge, t->peer.size, 0, PW_INLINE | PW_NOIMM);
	if (rc == 0)
		t->mark_sent = v;
	else
		tp_post_refused(t, rc, "posting a read mark failed");
}

void tp_mark_due(struct tp *t)
{
	int ask;

	if (t->mark_pprev || t->mark_sent == t->rx_read + 1 || !mark_possible(t))
		return;
	if (!service_running()) {
		tp_send_mark(t); /* (no thread to write it later: now) */
		return;
	}
	pthread_mutex_lock(&mark_lock);
	t->mark_next = mark_head;
	if (mark_head)
		mark_head->mark_pprev = &t->mark_next;
	t->mark_pprev = &mark_head;
	mark_head = t;
	if ((ask = !atomic_load(&mark_due_ms)))
		atomic_store(&mark_due_ms, clock_now_ms() + TP_MARK_MS);
	pthread_mutex_unlock(&mark_lock);
	if (ask)
		service_wake_after(TP_MARK_MS);
}

int tp_mark_turn(void)
{
	int64_t due = atomic_load(&mark_due_ms);
	struct tp *t, *next;
	int left = 0, some, ms;

	if (!due || due > clock_now_ms())
		return 0; /* (the turn asked for comes when due) */
	pthread_mutex_lock(&mark_lock);
	some = mark_head != NULL;
	for (t = mark_head; t; t = next) {
		next = t->mark_next;
		if (mtx_trylock(&t->lock)) {
			/* In use: a reader spinning for the peer's answer
			 * holds the lock for its whole spin (tp_wait_event),
			 * which in a request-response exchange is most of the
			 * time. It writes the mark when it sees this ask, and
			 * the stream stays for the next turn, TP_MARK_MS on:
			 * looking again each millisecond took a wake-up of
			 * this thread per millisecond from the streams' CPU. */
			atomic_store_explicit(&t->mark_wanted, 1, memory_order_relaxed);
			continue;
		}
		tp_send_mark(t);
		if (t->mark_sent != t->rx_read + 1 && mark_possible(t))
			left = 1; /* the send queue was full: the next turn */
		else
			mark_unlink(t);
		mtx_unlock(&t->lock);
	}
	ms = left ? 1 : some ? TP_MARK_MS : 0;
	atomic_store(&mark_due_ms, ms ? clock_now_ms() + ms : 0);
	pthread_mutex_unlock(&mark_lock);
	if (ms)
		service_wake_after(ms);
	return 0;
}

void tp_mark_drop(struct tp *t)
{
	if (!t->mark_pprev)
		return;
	pthread_mutex_lock(&mark_lock);
	mark_unlink(t);
	pthread_mutex_unlock(&mark_lock);
}

void tp_mark_lock(void)
{
	pthread_mutex_lock(&mark_lock);
}

void tp_mark_unlock(void)
{
	pthread_mutex_unlock(&mark_lock);
}

void tp_mark_fork_child(void)
{
	mark_head = NULL; /* the parent's streams: our copies never go on it */
	atomic_store(&mark_due_ms, 0);
}
