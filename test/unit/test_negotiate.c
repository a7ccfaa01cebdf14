/* test_negotiate.c - what of src/negotiate runs without an RDMA device or
 * rdma_cm: the negative cache (insert, lookup, expiry, eviction) and the
 * tuple table's put and take, keyed by both addresses and ports (on a
 * private table, not the shared object of this user). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "base/config.h"
#include "negotiate/internal.h"

static struct sockaddr_storage v4(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *s = (struct sockaddr_in *)&ss;

	memset(&ss, 0, sizeof(ss));
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
	return ss;
}

static struct sockaddr_storage v6(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;

	memset(&ss, 0, sizeof(ss));
	s->sin6_family = AF_INET6;
	s->sin6_port = htons(port);
	assert_int_equal(inet_pton(AF_INET6, ip, &s->sin6_addr), 1);
	return ss;
}

#define SA(ss) ((struct sockaddr *)&(ss))

/* ---- the negative cache ---- */

static void neg_insert_lookup(void **state)
{
	struct sockaddr_storage a = v4("10.1.0.1", 5000), port = v4("10.1.0.1", 5001),
				addr = v4("10.1.0.2", 5000), six = v6("fd00::1", 5000);

	(void)state;
	cm_settings.neg_cache_s = 60;
	assert_int_equal(cm_neg_lookup(SA(a)), 0);
	cm_neg_insert(SA(a));
	assert_int_equal(cm_neg_lookup(SA(a)), 1);
	assert_int_equal(cm_neg_lookup(SA(port)), 0); /* keyed by port */
	assert_int_equal(cm_neg_lookup(SA(addr)), 0); /* and by address */
	assert_int_equal(cm_neg_lookup(SA(six)), 0);
	cm_neg_insert(SA(six));
	assert_int_equal(cm_neg_lookup(SA(six)), 1);
}

static void neg_expiry(void **state)
{
	struct sockaddr_storage a = v4("10.1.1.1", 6000);

	(void)state;
	cm_settings.neg_cache_s = 0; /* expires at once */
	cm_neg_insert(SA(a));
	assert_int_equal(cm_neg_lookup(SA(a)), 0);
}

static void neg_eviction(void **state)
{
	struct sockaddr_storage a = v4("10.1.2.1", 7000);

	(void)state;
	cm_settings.neg_cache_s = 60;
	cm_neg_insert(SA(a));
	for (int i = 0; i < NEG_SLOTS - 1; i++) {
		struct sockaddr_storage o = v4("10.1.3.1", (uint16_t)(8000 + i));
		cm_neg_insert(SA(o));
	}
	assert_int_equal(cm_neg_lookup(SA(a)), 1); /* NEG_SLOTS entries fit */
	struct sockaddr_storage o = v4("10.1.3.2", 9000);
	cm_neg_insert(SA(o));
	assert_int_equal(cm_neg_lookup(SA(a)), 0); /* the oldest goes */
	assert_int_equal(cm_neg_lookup(SA(o)), 1);
}

/* ---- the tuple table ---- */

static struct proto_probe probe4(const char *caddr, uint16_t cport, const char *saddr, uint16_t sport)
{
	struct proto_probe pr = {.version = PROTO_VERSION, .family = AF_INET};

	pr.client_port = cport;
	pr.server_port = sport;
	assert_int_equal(inet_pton(AF_INET, caddr, pr.client_addr), 1);
	assert_int_equal(inet_pton(AF_INET, saddr, pr.server_addr), 1);
	return pr;
}

static int tuples_setup(void **state)
{
	(void)state;
	return cm_tuples_private();
}

static void tuple_put_take(void **state)
{
	struct proto_probe pr = probe4("10.2.0.1", 40000, "10.2.0.9", 80);
	struct sockaddr_storage peer = v4("10.2.0.1", 40000), local = v4("10.2.0.9", 80);

	(void)state;
	assert_int_equal(cm_tuple_take(SA(peer), SA(local)), 0);
	assert_int_equal(cm_tuple_put(&pr), 0);
	assert_int_equal(cm_tuple_take(SA(peer), SA(local)), 1);
	assert_int_equal(cm_tuple_take(SA(peer), SA(local)), 0); /* taken once */
}

static void tuple_keys(void **state)
{
	struct proto_probe pr = probe4("10.2.1.1", 40001, "10.2.1.9", 8080);
	struct sockaddr_storage peer = v4("10.2.1.1", 40001), local = v4("10.2.1.9", 8080);
	struct sockaddr_storage cport = v4("10.2.1.1", 40002), caddr = v4("10.2.1.2", 40001);
	struct sockaddr_storage sport = v4("10.2.1.9", 8081), saddr = v4("10.2.1.8", 8080);

	(void)state;
	assert_int_equal(cm_tuple_put(&pr), 0);
	assert_int_equal(cm_tuple_take(SA(cport), SA(local)), 0);
	assert_int_equal(cm_tuple_take(SA(caddr), SA(local)), 0);
	assert_int_equal(cm_tuple_take(SA(peer), SA(sport)), 0);
	assert_int_equal(cm_tuple_take(SA(peer), SA(saddr)), 0);
	assert_int_equal(cm_tuple_take(SA(peer), SA(local)), 1);
}

/* A dual-stack listener's IPv4 client: the accepted socket's addresses are
 * IPv4-mapped, the probe's are AF_INET. */
static void tuple_mapped(void **state)
{
	struct proto_probe pr = probe4("10.2.2.1", 40003, "10.2.2.9", 443);
	struct sockaddr_storage peer = v6("::ffff:10.2.2.1", 40003), local = v6("::ffff:10.2.2.9", 443);

	(void)state;
	assert_int_equal(cm_tuple_put(&pr), 0);
	assert_int_equal(cm_tuple_take(SA(peer), SA(local)), 1);
}

static void tuple_full(void **state)
{
	struct proto_probe pr;

	(void)state;
	for (int i = 0; i < TUPLE_SLOTS; i++) {
		pr = probe4("10.2.3.1", (uint16_t)(10000 + i), "10.2.3.9", 22);
		assert_int_equal(cm_tuple_put(&pr), 0);
	}
	pr = probe4("10.2.3.2", 10000, "10.2.3.9", 22);
	assert_int_equal(cm_tuple_put(&pr), -ENOSPC);
	for (int i = 0; i < TUPLE_SLOTS; i++) {
		struct sockaddr_storage peer = v4("10.2.3.1", (uint16_t)(10000 + i)),
					local = v4("10.2.3.9", 22);
		assert_int_equal(cm_tuple_take(SA(peer), SA(local)), 1);
	}
	assert_int_equal(cm_tuple_put(&pr), 0); /* room again */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(neg_insert_lookup),
		cmocka_unit_test(neg_expiry),
		cmocka_unit_test(neg_eviction),
		cmocka_unit_test(tuple_put_take),
		cmocka_unit_test(tuple_keys),
		cmocka_unit_test(tuple_mapped),
		cmocka_unit_test(tuple_full),
	};

	return cmocka_run_group_tests(tests, tuples_setup, NULL);
}
