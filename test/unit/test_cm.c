/* test_cm.c - what of src/negotiate/devices.c runs without an RDMA device:
 * the look for an iWARP device in sysfs (cm_iwarp_device), on a tree made
 * in a temporary directory. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "negotiate/cm.h"

static char root[64];

static void put(const char *dev, const char *node_type)
{
	char p[256];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", root, dev);
	assert_int_equal(mkdir(p, 0755), 0);
	if (!node_type)
		return;
	snprintf(p, sizeof(p), "%s/%s/node_type", root, dev);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, node_type, strlen(node_type)), (ssize_t)strlen(node_type));
	close(fd);
}

static void drop(const char *dev)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s/node_type", root, dev);
	unlink(p);
	snprintf(p, sizeof(p), "%s/%s", root, dev);
	assert_int_equal(rmdir(p), 0);
}

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/rsock-cm-XXXXXX");
	return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return rmdir(root);
}

/* InfiniBand and RoCE devices ("1: CA": mlx5, rxe) are not iWARP; an RNIC
 * ("4: RNIC": cxgb4, irdma in iWARP mode, siw) is, whatever else is there. */
static void test_iwarp_device(void **state)
{
	char name[64] = "";
	(void)state;

	assert_int_equal(cm_iwarp_device(root, name, sizeof(name)), 0); /* no device */
	put("rxe0", "1: CA\n");
	put("mlx5_0", "1: CA\n");
	put("odd", NULL); /* no node_type */
	assert_int_equal(cm_iwarp_device(root, name, sizeof(name)), 0);
	put("cxgb4_0", "4: RNIC\n");
	assert_int_equal(cm_iwarp_device(root, name, sizeof(name)), 1);
	assert_string_equal(name, "cxgb4_0");
	drop("cxgb4_0");
	assert_int_equal(cm_iwarp_device(root, name, sizeof(name)), 0);
	drop("rxe0");
	drop("mlx5_0");
	drop("odd");
	assert_int_equal(cm_iwarp_device("/nonexistent/rsock", name, sizeof(name)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_iwarp_device, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
