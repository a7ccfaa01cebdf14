/* Unit tests of the segment rsock-stat reads (statpub.c): made at the
 * first stream with the counters so far, slots claimed and given back (their
 * bytes kept in the header), the counters followed, and a fork child moved
 * to a segment of its own at the same address. */
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/statpub.h"
#include "rsock/rsock.h"

static char seg[64];

/* The process's segment, as a reader maps it (NULL: none). */
static struct statpub_header *reader_map(pid_t pid)
{
	struct stat st;
	void *m;
	int fd;

	snprintf(seg, sizeof(seg), STATPUB_DIR "/" STATPUB_PREFIX "%d", (int)pid);
	if ((fd = open(seg, O_RDONLY)) < 0)
		return NULL;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(m != MAP_FAILED);
	return m;
}

static struct statpub_slot *slot_of(struct statpub_header *h, uint32_t i)
{
	return (struct statpub_slot *)((char *)h + h->header_size) + i;
}

static void test_segment(void **state)
{
	(void)state;
	struct rsock_stats now = {.streams_tcp = 2, .tx_bytes_tcp = 100};
	struct sockaddr_in l = {.sin_family = AF_INET, .sin_port = htons(7)};
	struct statpub_header *h;
	struct statpub_slot *a, *b, *ra;

	assert_false(statpub_live());
	assert_null(statpub_claim(3, STATPUB_ROLE_CLIENT, NULL, NULL)); /* no segment yet */
	statpub_count(STATPUB_C_HANDOVERS, 1);                            /* nothing */
	now.fallbacks[RSOCK_FB_NO_DEVICE] = 2;
	assert_int_equal(statpub_open(&now), 0);
	assert_true(statpub_live());
	assert_non_null(h = reader_map(getpid()));
	assert_true(h->magic == STATPUB_MAGIC);
	assert_int_equal(h->version, STATPUB_VERSION);
	assert_int_equal(h->pid, getpid());
	assert_int_equal(h->slot_size, sizeof(struct statpub_slot));
	assert_int_equal(h->counters[STATPUB_C_STREAMS_TCP], 2);
	assert_int_equal(h->counters[STATPUB_C_FALLBACK + RSOCK_FB_NO_DEVICE], 2);
	assert_int_equal(h->counters[STATPUB_C_HANDOVERS], 0);
	assert_int_equal(h->closed_bytes[0][1], 100);

	assert_non_null(a = statpub_claim(5, STATPUB_ROLE_CLIENT, (struct sockaddr *)&l, NULL));
	assert_non_null(b = statpub_claim(6, STATPUB_ROLE_ACCEPTED, NULL, NULL));
	assert_int_equal(h->slots_hi, 2);
	ra = slot_of(h, 0);
	assert_int_equal(ra->used, 1);
	assert_int_equal(ra->gen % 2, 0);
	assert_int_equal(ra->fd, 5);
	assert_int_equal(ra->local.sin6_family, AF_INET);
	assert_int_equal(ra->fallback, -1);
	statpub_bytes(a, 0, 1, 40);
	statpub_bytes(a, 1, 0, 2);
	statpub_credits(a, 3, 4096);
	statpub_rdma(a, "rxe0-with-a-name-longer-than-the-field-holds", 17, 1, 2, 3);
	assert_int_equal(ra->bytes[0][1], 40);
	assert_int_equal(ra->msgs_out, 3);
	assert_int_equal(ra->qpn, 17);
	assert_int_equal(ra->device[sizeof(ra->device) - 1], 0);
	statpub_count(STATPUB_C_CQ_EVENTS, 5);
	statpub_set(STATPUB_C_TRACKED_FDS, 9);
	assert_int_equal(h->counters[STATPUB_C_CQ_EVENTS], 5);
	assert_int_equal(h->counters[STATPUB_C_TRACKED_FDS], 9);

	statpub_release(a);
	assert_int_equal(ra->used, 0);
	assert_int_equal(h->closed_bytes[0][1], 140);
	assert_int_equal(h->closed_bytes[1][0], 2);
	/* the slot given back is the next one claimed */
	assert_ptr_equal(statpub_claim(7, STATPUB_ROLE_CLIENT, NULL, NULL), a);
	assert_int_equal(ra->bytes[0][1], 0);
	assert_int_equal(ra->qpn, 0);
	statpub_bytes(b, 0, 0, 11);

	/* a fork child: its own segment, the live slots copied, the parent's
	 * untouched; the slots live at the fork are the child's even when the
	 * parent gives one back before the child's handler runs */
	statpub_fork_lock();
	pid_t p = fork();
	if (p == 0) {
		atomic_store(&b->used, 0); /* the parent's release, early */
		statpub_fork_child();
		struct statpub_header *c = reader_map(getpid());
		if (!c || c->pid != getpid() || c->magic != STATPUB_MAGIC || slot_of(c, 1)->bytes[0][0] != 11 ||
		    !atomic_load(&slot_of(c, 1)->used))
			_exit(1);
		statpub_bytes(b, 0, 0, 1000); /* the child's own */
		if (slot_of(c, 1)->bytes[0][0] != 1011 || slot_of(h, 1)->bytes[0][0] != 11)
			_exit(2);
		statpub_unlink();
		_exit(access(seg, F_OK) == 0 ? 3 : 0);
	}
	int st;
	statpub_fork_unlock();
	assert_true(p > 0);
	assert_int_equal(waitpid(p, &st, 0), p);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(slot_of(h, 1)->bytes[0][0], 11);
	atomic_store(&b->used, 1); /* the child's stand-in release undone */

	/* exec: the file goes before, and comes back when it fails */
	snprintf(seg, sizeof(seg), STATPUB_DIR "/" STATPUB_PREFIX "%d", (int)getpid());
	statpub_unlink();
	assert_int_equal(access(seg, F_OK), -1);
	statpub_exec_failed();
	struct statpub_header *again = reader_map(getpid());
	assert_non_null(again);
	assert_int_equal(slot_of(again, 1)->bytes[0][0], 11);
	statpub_bytes(b, 0, 0, 1);
	assert_int_equal(slot_of(again, 1)->bytes[0][0], 12);
	statpub_unlink();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_segment),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
