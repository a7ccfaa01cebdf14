/* Unit tests of the hand-over prefix (src/path/prefix.c; doc/design.md,
 * "Descriptors, fork, exec"): bytes read once, whichever process holding the
 * stream reads them. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "path/handover.h"
#include "base/real.h"

static uint8_t data[10000];

static int setup(void **state)
{
	(void)state;
	real_resolve();
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 13 + (i >> 8));
	return 0;
}

static void test_two_spans_iov_skip_peek(void **state)
{
	struct ho_pre *p;
	uint8_t a[100], b[300], c[10000];
	struct iovec iov[2] = {{a, sizeof(a)}, {b, sizeof(b)}};

	(void)state;
	/* a wrapped ring: its tail part, then its head part */
	struct iovec v[3] = {{data, 6000}, {data + 6000, 0}, {data + 6000, 4000}};
	assert_int_equal(ho_pre_new(v, 3, &p), 0);
	assert_int_equal(ho_pre_left(p), 10000);
	assert_true(ho_pre_fd(p) >= 0);
	/* peek: nothing consumed */
	assert_int_equal(ho_pre_read(p, iov, 2, 0, 400, MSG_PEEK), 400);
	assert_memory_equal(a, data, 100);
	assert_memory_equal(b, data + 100, 300);
	assert_int_equal(ho_pre_left(p), 10000);
	/* from byte 50 of the iov, at most 120 bytes */
	memset(a, 0, sizeof(a));
	assert_int_equal(ho_pre_read(p, iov, 2, 50, 120, 0), 120);
	assert_memory_equal(a + 50, data, 50);
	assert_memory_equal(b, data + 50, 70);
	assert_int_equal(ho_pre_left(p), 10000 - 120);
	/* MSG_TRUNC: counted without a buffer (TCP's discard), with
	 * MSG_PEEK not consumed */
	struct iovec none = {NULL, 30};
	assert_int_equal(ho_pre_read(p, &none, 1, 0, 30, MSG_TRUNC | MSG_PEEK), 30);
	assert_int_equal(ho_pre_left(p), 10000 - 120);
	assert_int_equal(ho_pre_read(p, &none, 1, 0, 30, MSG_TRUNC), 30);
	assert_int_equal(ho_pre_left(p), 10000 - 150);
	/* the rest, more asked than there is */
	struct iovec one = {c, sizeof(c)};
	assert_int_equal(ho_pre_read(p, &one, 1, 0, sizeof(c), 0), 10000 - 150);
	assert_memory_equal(c, data + 150, 10000 - 150);
	assert_int_equal(ho_pre_left(p), 0);
	assert_int_equal(ho_pre_read(p, &one, 1, 0, sizeof(c), 0), 0);
	ho_pre_free(p);
	assert_int_equal(ho_pre_left(NULL), 0);
}

static void test_shared_across_fork_and_open(void **state)
{
	struct ho_pre *p, *q;
	uint8_t c[3000];
	struct iovec one = {c, sizeof(c)};
	char path[64];
	int st, fd;
	pid_t pid;

	(void)state;
	struct iovec whole = {data, 5000};
	assert_int_equal(ho_pre_new(&whole, 1, &p), 0);
	pid = fork();
	if (pid == 0) {
		struct iovec v = {c, 1000};
		_exit(ho_pre_read(p, &v, 1, 0, 1000, 0) == 1000 && !memcmp(c, data, 1000) ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* the child's read consumed for everyone */
	assert_int_equal(ho_pre_left(p), 4000);
	/* another process opens it through /proc (here: ourselves) */
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)getpid(), ho_pre_fd(p));
	fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(ho_pre_open(fd, &q), 0);
	assert_int_equal(ho_pre_left(q), 4000);
	assert_int_equal(ho_pre_read(q, &one, 1, 0, 1500, 0), 1500);
	assert_memory_equal(c, data + 1000, 1500);
	assert_int_equal(ho_pre_left(p), 2500);
	assert_int_equal(ho_pre_read(p, &one, 1, 0, sizeof(c), 0), 2500);
	assert_memory_equal(c, data + 2500, 2500);
	ho_pre_free(q);
	ho_pre_free(p);
}

static void test_open_refuses_what_is_not_a_prefix(void **state)
{
	struct ho_pre *p;
	int fd;
	uint64_t hdr[3] = {0x5250534b52ull, 10, 5}; /* head beyond len */

	(void)state;
	fd = memfd_create("x", MFD_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(ho_pre_open(fd, &p), -EPROTO); /* empty */
	assert_int_equal(write(fd, hdr, sizeof(hdr)), sizeof(hdr));
	assert_int_equal(ho_pre_open(fd, &p), -EPROTO);
	hdr[1] = 0;
	hdr[2] = 1000; /* longer than the file */
	assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	assert_int_equal(ho_pre_open(fd, &p), -EPROTO);
	hdr[0] = 1; /* not the magic */
	hdr[2] = 0;
	assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	assert_int_equal(ho_pre_open(fd, &p), -EPROTO);
	close(fd);
	fd = open("/dev/null", O_RDONLY);
	assert_int_equal(ho_pre_open(fd, &p), -EPROTO); /* not a regular file */
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_spans_iov_skip_peek),
		cmocka_unit_test(test_shared_across_fork_and_open),
		cmocka_unit_test(test_open_refuses_what_is_not_a_prefix),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
