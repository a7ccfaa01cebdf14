/* Unit tests of the operator rules: parsing, matching, file loading. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
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

#include "base/rules.h"

static struct rules_rule parse_ok(const char *line)
{
	struct rules_rule r;

	memset(&r, 0xa5, sizeof(r));
	if (rules_parse_line(line, 7, &r) != 1)
		fail_msg("not parsed: \"%s\"", line);
	assert_int_equal(r.line, 7);
	return r;
}

static void parse_bad(const char *line)
{
	struct rules_rule r, canary;

	memset(&r, 0x3c, sizeof(r));
	memcpy(&canary, &r, sizeof(r));
	if (rules_parse_line(line, 1, &r) != -EINVAL)
		fail_msg("accepted: \"%s\"", line);
	assert_memory_equal(&r, &canary, sizeof(r)); /* untouched */
}

static struct sockaddr_in sin4(const char *a, uint16_t port)
{
	struct sockaddr_in s;

	memset(&s, 0, sizeof(s));
	s.sin_family = AF_INET;
	s.sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, a, &s.sin_addr), 1);
	return s;
}

static struct sockaddr_in6 sin6(const char *a, uint16_t port)
{
	struct sockaddr_in6 s;

	memset(&s, 0, sizeof(s));
	s.sin6_family = AF_INET6;
	s.sin6_port = htons(port);
	assert_int_equal(inet_pton(AF_INET6, a, &s.sin6_addr), 1);
	return s;
}

/* Build a set from text; fails the test on a malformed line. */
static void set_from(struct rules_set *set, const char *text)
{
	int n;

	memset(set, 0, sizeof(*set));
	n = rules_parse_text(text, strlen(text), set, NULL, NULL);
	assert_true(n >= 0);
	assert_int_equal((size_t)n, set->n);
}

static enum rules_transport m4(const struct rules_set *s, const char *prog, enum rules_role role,
			       const char *a, uint16_t port)
{
	struct sockaddr_in sa = sin4(a, port);

	return rules_match(s, prog, role, (struct sockaddr *)&sa, sizeof(sa));
}

static enum rules_transport m6(const struct rules_set *s, const char *prog, enum rules_role role,
			       const char *a, uint16_t port)
{
	struct sockaddr_in6 sa = sin6(a, port);

	return rules_match(s, prog, role, (struct sockaddr *)&sa, sizeof(sa));
}

/* ---- parsing -------------------------------------------------------------- */

static void test_parse_blank_comment(void **state)
{
	struct rules_rule r;
	static const char *const empty[] = {"", " ", "\t \r", "# comment", "   # use tcp * * *",
					    "#", "\r", "\f\v"};

	memset(&r, 0x11, sizeof(r));
	for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++)
		assert_int_equal(rules_parse_line(empty[i], 1, &r), 0);
	assert_int_equal(r.line, 0x11111111u); /* untouched */
	assert_int_equal(rules_parse_line(NULL, 1, &r), -EINVAL);
	assert_int_equal(rules_parse_line("use tcp * * *", 1, NULL), -EINVAL);
}

static void test_parse_good(void **state)
{
	struct rules_rule r;

	r = parse_ok("use rdma * * *");
	assert_int_equal(r.transport, RULES_RDMA);
	assert_string_equal(r.program, "*");
	assert_int_equal(r.role, RULES_ROLE_ANY);
	assert_int_equal(r.family, AF_UNSPEC);
	assert_int_equal(r.port_lo, 0);
	assert_int_equal(r.port_hi, 65535);

	r = parse_ok("use SHM redis* * 127.0.0.1:6379");
	assert_int_equal(r.transport, RULES_SHM);

	r = parse_ok("  use\ttcp  sshd   server  10.1.2.3   # trailing comment");
	assert_int_equal(r.transport, RULES_TCP);
	assert_string_equal(r.program, "sshd");
	assert_int_equal(r.role, RULES_ROLE_SERVER);
	assert_int_equal(r.family, AF_INET);
	assert_int_equal(r.prefix, 32);
	assert_memory_equal(r.addr, "\x0a\x01\x02\x03", 4);
	assert_int_equal(r.port_lo, 0);
	assert_int_equal(r.port_hi, 65535);

	r = parse_ok("use rdma redis-* client *:6379\r"); /* CRLF file */
	assert_int_equal(r.role, RULES_ROLE_CLIENT);
	assert_string_equal(r.program, "redis-*");
	assert_int_equal(r.family, AF_UNSPEC);
	assert_int_equal(r.port_lo, 6379);
	assert_int_equal(r.port_hi, 6379);

	r = parse_ok("USE RDMA * CLIENT *:*"); /* keywords are case-insensitive */
	assert_int_equal(r.transport, RULES_RDMA);
	assert_int_equal(r.role, RULES_ROLE_CLIENT);
	assert_int_equal(r.port_lo, 0);
	assert_int_equal(r.port_hi, 65535);

	r = parse_ok("use tcp * * 10.0.0.0/8:1000-2000");
	assert_int_equal(r.prefix, 8);
	assert_memory_equal(r.addr, "\x0a\0\0\0", 4);
	assert_int_equal(r.port_lo, 1000);
	assert_int_equal(r.port_hi, 2000);

	r = parse_ok("use tcp * * 0.0.0.0/0");
	assert_int_equal(r.family, AF_INET);
	assert_int_equal(r.prefix, 0);
	r = parse_ok("use tcp * * 255.255.255.255/32:0-65535");
	assert_int_equal(r.prefix, 32);
	assert_int_equal(r.port_lo, 0);
	assert_int_equal(r.port_hi, 65535);
	r = parse_ok("use tcp * * 1.2.3.4:80-80");
	assert_int_equal(r.port_lo, 80);
	assert_int_equal(r.port_hi, 80);

	/* host bits beyond the prefix are cleared */
	r = parse_ok("use tcp * * 192.168.77.200/20");
	assert_memory_equal(r.addr, "\xc0\xa8\x40\x00", 4);
	r = parse_ok("use tcp * * 10.255.255.255/0");
	assert_memory_equal(r.addr, "\0\0\0\0", 4);

	r = parse_ok("use tcp * * [::1]");
	assert_int_equal(r.family, AF_INET6);
	assert_int_equal(r.prefix, 128);
	assert_int_equal(r.addr[15], 1);
	r = parse_ok("use tcp * * [fe80::]/10:22");
	assert_int_equal(r.prefix, 10);
	assert_int_equal(r.addr[0], 0xfe);
	assert_int_equal(r.addr[1], 0x80);
	assert_int_equal(r.port_lo, 22);
	r = parse_ok("use tcp * * [::]/0");
	assert_int_equal(r.prefix, 0);
	r = parse_ok("use tcp * * [2001:db8::ffff]/128:1-65535");
	assert_int_equal(r.prefix, 128);
	assert_int_equal(r.port_lo, 1);
	r = parse_ok("use tcp * * [2001:db8:ffff::1]/33");
	assert_memory_equal(r.addr, "\x20\x01\x0d\xb8\x80\0\0\0\0\0\0\0\0\0\0\0", 16);
	r = parse_ok("use tcp * * [::ffff:10.0.0.1]:5");
	assert_int_equal(r.family, AF_INET6);
	assert_int_equal(r.addr[10], 0xff);
	assert_int_equal(r.addr[12], 10);

	/* the longest program pattern that fits */
	char line[128];
	snprintf(line, sizeof(line), "use tcp %s * *",
		 "123456789012345678901234567890123456789012345678901234567890abc");
	r = parse_ok(line);
	assert_int_equal(strlen(r.program), 63);
	r = parse_ok("use tcp [a-z]*d?  * *");
	assert_string_equal(r.program, "[a-z]*d?");
}

static void test_parse_bad(void **state)
{
	static const char *const bad[] = {
		"use",
		"use tcp",
		"use tcp *",
		"use tcp * *",
		"use tcp * * * extra",
		"allow tcp * * *",
		"usetcp * * *",
		"use udp * * *",
		"use tcp * both *",
		"use tcp * * 10.0.0.0/33",
		"use tcp * * 10.0.0.0/-1",
		"use tcp * * 10.0.0.0/+8",
		"use tcp * * 10.0.0.0/ 8",
		"use tcp * * 10.0.0.0/",
		"use tcp * * 10.0.0.0/8/8",
		"use tcp * * 10.0.0.0/0x8",
		"use tcp * * 10.0.0.0/4294967304", /* 2^32 + 8 */
		"use tcp * * 10.0.0",
		"use tcp * * 10.0.0.256",
		"use tcp * * 10.0.0.1.",
		"use tcp * * 010.0.0.1",
		"use tcp * * host.example",
		"use tcp * * 10.0.0.1:",
		"use tcp * * 10.0.0.1:65536",
		"use tcp * * 10.0.0.1:99999999999999999999",
		"use tcp * * 10.0.0.1:-1",
		"use tcp * * 10.0.0.1:80-",
		"use tcp * * 10.0.0.1:-80",
		"use tcp * * 10.0.0.1:90-80",     /* reversed */
		"use tcp * * 10.0.0.1:1-2-3",
		"use tcp * * 10.0.0.1:80:81",
		"use tcp * * 10.0.0.1:8o",
		"use tcp * * 10.0.0.1:*-80",
		"use tcp * * 10.0.0.1:80/8",
		"use tcp * * *:",
		"use tcp * * */0",
		"use tcp * * **",
		"use tcp * * *:65536",
		"use tcp * * *:0x50",
		"use tcp * * ::1",                 /* IPv6 needs brackets */
		"use tcp * * [::1",
		"use tcp * * ::1]",
		"use tcp * * [::1]/129",
		"use tcp * * [::1]/",
		"use tcp * * [::1]80",
		"use tcp * * [::1]:",
		"use tcp * * [::1]:80/64",
		"use tcp * * [::1/64]",
		"use tcp * * [::1]]",
		"use tcp * * [[::1]",
		"use tcp * * []",
		"use tcp * * [*]",
		"use tcp * * [10.0.0.1]",
		"use tcp * * [fe80::1%eth0]",
		"use tcp * * [::1]/64:90-80",
		"use tcp * * [gggg::]",
		"use tcp * * 1.2.3.4\x01",
		"use tcp\x01 * * *",
		"use tcp * * 1.2.3.4/8 extra # comment",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		parse_bad(bad[i]);
	/* a comment may end a rule, also without a blank before it */
	parse_ok("use tcp * * 1.2.3.4/8#comment");
	parse_ok("use tcp * * 1.2.3.4/8 #");

	/* overlong fields */
	char line[512];
	snprintf(line, sizeof(line), "use tcp %s * *",
		 "1234567890123456789012345678901234567890123456789012345678901234");
	parse_bad(line); /* program: 64 characters */
	memset(line, 0, sizeof(line));
	strcpy(line, "use tcp * * *:");
	memset(line + strlen(line), '1', 200);
	parse_bad(line);
	strcpy(line, "use tcp * * [");
	memset(line + strlen(line), ':', 300);
	strcat(line, "]");
	parse_bad(line);
	strcpy(line, "use tcp * * 10.0.0.1/");
	memset(line + strlen(line), '0', 100);
	parse_bad(line);
	strcpy(line, "use tcp * * 10.0.0.1:");
	memset(line + strlen(line), '0', 10);
	strcat(line, "80");
	parse_bad(line);
}

struct errs {
	unsigned line[8];
	size_t n;
};

static void collect(unsigned lineno, void *ctx)
{
	struct errs *e = ctx;

	assert_true(e->n < 8);
	e->line[e->n++] = lineno;
}

static void test_parse_text(void **state)
{
	static const char text[] =
		"# rule file\n"
		"use tcp sshd * *\n"
		"\n"
		"use rdma * * *:6379\r\n"
		"this is not a rule\n"
		"use tcp * * 10.0.0.0/33\n"
		"use tcp * * *"; /* no final newline */
	struct rules_set set = {NULL, 0};
	struct errs e = {{0}, 0};

	assert_int_equal(rules_parse_text(text, strlen(text), &set, collect, &e), 3);
	assert_int_equal(set.n, 3);
	assert_int_equal(set.rules[0].line, 2);
	assert_int_equal(set.rules[1].line, 4);
	assert_int_equal(set.rules[2].line, 7);
	assert_int_equal(e.n, 2);
	assert_int_equal(e.line[0], 5);
	assert_int_equal(e.line[1], 6);
	/* the set must be empty */
	assert_int_equal(rules_parse_text(text, strlen(text), &set, NULL, NULL), -EINVAL);
	rules_free(&set);
	assert_null(set.rules);
	assert_int_equal(set.n, 0);
	rules_free(&set); /* twice is harmless */
	rules_free(NULL);

	/* empty text, NULL text of length 0 */
	assert_int_equal(rules_parse_text("", 0, &set, NULL, NULL), 0);
	assert_null(set.rules);
	assert_int_equal(rules_parse_text(NULL, 0, &set, NULL, NULL), 0);
	assert_int_equal(rules_parse_text(NULL, 5, &set, NULL, NULL), -EINVAL);
	assert_int_equal(rules_parse_text("", 0, NULL, NULL, NULL), -EINVAL);

	/* a NUL inside the text is a malformed line, not the end of the text */
	static const char withnul[] = "use tcp * * *\0junk\nuse rdma * * *\n";
	e.n = 0;
	assert_int_equal(rules_parse_text(withnul, sizeof(withnul) - 1, &set, collect, &e), 1);
	assert_int_equal(set.rules[0].transport, RULES_RDMA);
	assert_int_equal(e.n, 1);
	assert_int_equal(e.line[0], 1);
	rules_free(&set);

	/* only the given length is read */
	static const char cut[] = "use tcp * * *\nuse rdma * * *";
	assert_int_equal(rules_parse_text(cut, 13, &set, NULL, NULL), 1);
	assert_int_equal(set.rules[0].transport, RULES_TCP);
	rules_free(&set);

	/* many rules: the array grows */
	size_t big = 5000 * 24;
	char *t = malloc(big + 1), *p = t;
	for (int i = 0; i < 5000; i++)
		p += sprintf(p, "use tcp * * *:%d\n", i);
	assert_int_equal(rules_parse_text(t, (size_t)(p - t), &set, NULL, NULL), 5000);
	assert_int_equal(set.rules[4999].port_lo, 4999);
	assert_int_equal(set.rules[4999].line, 5000);
	rules_free(&set);
	free(t);
}

/* ---- matching -------------------------------------------------------------- */

static void test_match_order_and_ports(void **state)
{
	struct rules_set s;

	set_from(&s, "use rdma * * *:6379\n"
		     "use tcp * * *\n");
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "1.2.3.4", 6379), RULES_RDMA);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "1.2.3.4", 6380), RULES_TCP);
	assert_int_equal(m6(&s, "x", RULES_ROLE_SERVER, "2001:db8::1", 6379), RULES_RDMA);
	assert_int_equal(m6(&s, "x", RULES_ROLE_SERVER, "2001:db8::1", 80), RULES_TCP);
	/* an unknown address matches only "any address, any port" */
	assert_int_equal(rules_match(&s, "x", RULES_ROLE_CLIENT, NULL, 0), RULES_TCP);
	/* no rule matching: the caller's default (RSOCK_MODE=shm's) */
	assert_int_equal(rules_match_or(NULL, "x", RULES_ROLE_CLIENT, NULL, 0, RULES_SHM), RULES_SHM);
	rules_free(&s);

	set_from(&s, "use tcp * * *:1000-2000\n");
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "1.2.3.4", 999), RULES_RDMA);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "1.2.3.4", 1000), RULES_TCP);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "1.2.3.4", 2000), RULES_TCP);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "1.2.3.4", 2001), RULES_RDMA);
	assert_int_equal(rules_match(&s, "x", RULES_ROLE_CLIENT, NULL, 0), RULES_RDMA);
	rules_free(&s);

	/* first match wins, even when a later rule is more specific */
	set_from(&s, "use tcp * * 10.0.0.0/8\n"
		     "use rdma * * 10.1.0.0/16\n");
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "10.1.2.3", 1), RULES_TCP);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "11.1.2.3", 1), RULES_RDMA); /* no match */
	rules_free(&s);

	/* no rules at all, or no set */
	memset(&s, 0, sizeof(s));
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "10.1.2.3", 1), RULES_RDMA);
	assert_int_equal(rules_match(NULL, "x", RULES_ROLE_CLIENT, NULL, 0), RULES_RDMA);
}

static void test_match_prefixes(void **state)
{
	struct rules_set s;

	set_from(&s, "use tcp * * 192.168.0.0/23\n"
		     "use tcp * * 10.9.8.7/32:22\n"
		     "use tcp * * [2001:db8::]/33\n"
		     "use tcp * * [fe80::1]\n");
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "192.168.0.1", 5), RULES_TCP);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "192.168.1.255", 5), RULES_TCP);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "192.168.2.0", 5), RULES_RDMA);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "192.169.0.1", 5), RULES_RDMA);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "10.9.8.7", 22), RULES_TCP);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "10.9.8.7", 23), RULES_RDMA);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "10.9.8.6", 22), RULES_RDMA);
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "2001:db8:7fff::1", 5), RULES_TCP);
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "2001:db8:8000::1", 5), RULES_RDMA);
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "fe80::1", 5), RULES_TCP);
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "fe80::2", 5), RULES_RDMA);
	/* an IPv6 address never matches an IPv4 rule unless mapped, and back */
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "::c0a8:1", 5), RULES_RDMA); /* ::192.168.0.1 */
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "32.1.13.184", 5), RULES_RDMA); /* 2001:0db8 */
	rules_free(&s);

	set_from(&s, "use tcp * * 0.0.0.0/0\n");
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "1.2.3.4", 5), RULES_TCP);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "255.255.255.255", 5), RULES_TCP);
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "2001:db8::1", 5), RULES_RDMA);
	assert_int_equal(rules_match(&s, "x", RULES_ROLE_CLIENT, NULL, 0), RULES_RDMA);
	rules_free(&s);

	set_from(&s, "use tcp * * [::]/0\n");
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "2001:db8::1", 5), RULES_TCP);
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 5),
			 RULES_TCP);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "1.2.3.4", 5), RULES_RDMA);
	rules_free(&s);

	set_from(&s, "use tcp * * 1.2.3.4/31\n");
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "1.2.3.5", 5), RULES_TCP);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "1.2.3.6", 5), RULES_RDMA);
	rules_free(&s);
}

static void test_match_mapped(void **state)
{
	struct rules_set s;

	set_from(&s, "use tcp * * 10.0.0.0/8:80\n");
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "::ffff:10.1.2.3", 80), RULES_TCP);
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "::ffff:10.1.2.3", 81), RULES_RDMA);
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "::ffff:11.1.2.3", 80), RULES_RDMA);
	/* not mapped: IPv4-compatible and NAT64 forms stay IPv6 */
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "::10.1.2.3", 80), RULES_RDMA);
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "64:ff9b::10.1.2.3", 80), RULES_RDMA);
	rules_free(&s);

	/* an IPv6 rule on the mapped range matches mapped peers, not AF_INET ones */
	set_from(&s, "use tcp * * [::ffff:0:0]/96\n");
	assert_int_equal(m6(&s, "x", RULES_ROLE_CLIENT, "::ffff:10.1.2.3", 80), RULES_TCP);
	assert_int_equal(m4(&s, "x", RULES_ROLE_CLIENT, "10.1.2.3", 80), RULES_RDMA);
	rules_free(&s);
}

static void test_match_role_program(void **state)
{
	struct rules_set s;

	set_from(&s, "use tcp sshd * *\n"
		     "use tcp * server *:22\n"
		     "use tcp redis-* client *\n"
		     "use tcp [xy]ab? * *\n");
	assert_int_equal(m4(&s, "sshd", RULES_ROLE_CLIENT, "1.1.1.1", 1), RULES_TCP);
	assert_int_equal(m4(&s, "sshd", RULES_ROLE_SERVER, "1.1.1.1", 1), RULES_TCP);
	assert_int_equal(m4(&s, "sshd2", RULES_ROLE_SERVER, "1.1.1.1", 1), RULES_RDMA);
	assert_int_equal(m4(&s, "nginx", RULES_ROLE_SERVER, "1.1.1.1", 22), RULES_TCP);
	assert_int_equal(m4(&s, "nginx", RULES_ROLE_CLIENT, "1.1.1.1", 22), RULES_RDMA);
	assert_int_equal(m4(&s, "redis-cli", RULES_ROLE_CLIENT, "1.1.1.1", 1), RULES_TCP);
	assert_int_equal(m4(&s, "redis-server", RULES_ROLE_SERVER, "1.1.1.1", 1), RULES_RDMA);
	assert_int_equal(m4(&s, "redis", RULES_ROLE_CLIENT, "1.1.1.1", 1), RULES_RDMA);
	assert_int_equal(m4(&s, "xabz", RULES_ROLE_CLIENT, "1.1.1.1", 1), RULES_TCP);
	assert_int_equal(m4(&s, "zabz", RULES_ROLE_CLIENT, "1.1.1.1", 1), RULES_RDMA);
	assert_int_equal(m4(&s, "", RULES_ROLE_CLIENT, "1.1.1.1", 1), RULES_RDMA);
	assert_int_equal(m4(&s, NULL, RULES_ROLE_CLIENT, "1.1.1.1", 1), RULES_RDMA);
	/* an unknown role matches only role '*' rules */
	assert_int_equal(m4(&s, "nginx", RULES_ROLE_ANY, "1.1.1.1", 22), RULES_RDMA);
	assert_int_equal(m4(&s, "sshd", RULES_ROLE_ANY, "1.1.1.1", 22), RULES_TCP);
	rules_free(&s);

	set_from(&s, "use tcp * * *\n");
	assert_int_equal(m4(&s, "", RULES_ROLE_CLIENT, "1.1.1.1", 1), RULES_TCP);
	assert_int_equal(m4(&s, NULL, RULES_ROLE_SERVER, "1.1.1.1", 1), RULES_TCP);
	assert_int_equal(rules_match(&s, "x", RULES_ROLE_CLIENT, NULL, 0), RULES_TCP);
	rules_free(&s);
}

static void test_match_bad_sockaddr(void **state)
{
	struct rules_set s;
	struct sockaddr_in sa = sin4("10.0.0.1", 80);
	struct sockaddr_in6 sa6 = sin6("::1", 80);
	struct sockaddr un = {.sa_family = AF_UNIX};

	set_from(&s, "use tcp * * 10.0.0.0/8\n"
		     "use tcp * * [::1]\n"
		     "use tcp * * *:80\n");
	/* a truncated address is no address: only "* any port" would match */
	assert_int_equal(rules_match(&s, "x", RULES_ROLE_CLIENT, (struct sockaddr *)&sa,
				     sizeof(sa) - 9), RULES_RDMA);
	assert_int_equal(rules_match(&s, "x", RULES_ROLE_CLIENT, (struct sockaddr *)&sa6,
				     sizeof(sa6) - 1), RULES_RDMA);
	assert_int_equal(rules_match(&s, "x", RULES_ROLE_CLIENT, &un, sizeof(un)), RULES_RDMA);
	assert_int_equal(rules_match(&s, "x", RULES_ROLE_CLIENT, (struct sockaddr *)&sa, sizeof(sa)),
			 RULES_TCP);
	assert_int_equal(rules_match(&s, "x", RULES_ROLE_CLIENT, (struct sockaddr *)&sa6, sizeof(sa6)),
			 RULES_TCP);
	rules_free(&s);
}

/* ---- files ----------------------------------------------------------------- */

static char tmpdir[64];

static void path_in(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", tmpdir, name);
}

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static int setup_dir(void **state)
{
	strcpy(tmpdir, "/tmp/test_rules.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static void count_err(unsigned lineno, void *ctx)
{
	(*(unsigned *)ctx)++;
}

static void test_load_file(void **state)
{
	char path[128];
	struct rules_set set = {NULL, 0};
	unsigned nerr = 0;
	static const char text[] = "use tcp sshd * *\nbad line\nuse rdma * * *:6379\n";

	path_in(path, sizeof(path), "ok.conf");
	write_file(path, text, sizeof(text) - 1);
	errno = 1234;
	assert_int_equal(rules_load_file(path, &set, count_err, &nerr), 2);
	assert_int_equal(errno, 1234); /* preserved */
	assert_int_equal(nerr, 1);
	assert_int_equal(set.n, 2);
	assert_string_equal(set.rules[0].program, "sshd");
	assert_int_equal(set.rules[1].line, 3);
	/* the set must be empty */
	assert_int_equal(rules_load_file(path, &set, NULL, NULL), -EINVAL);
	rules_free(&set);

	/* empty file */
	path_in(path, sizeof(path), "empty.conf");
	write_file(path, "", 0);
	assert_int_equal(rules_load_file(path, &set, NULL, NULL), 0);
	assert_int_equal(set.n, 0);

	/* missing file, directory */
	path_in(path, sizeof(path), "missing.conf");
	assert_int_equal(rules_load_file(path, &set, NULL, NULL), -ENOENT);
	assert_int_equal(rules_load_file(tmpdir, &set, NULL, NULL), -EISDIR);
	assert_int_equal(rules_load_file("", &set, NULL, NULL), -ENOENT);
	assert_int_equal(rules_load_file(NULL, &set, NULL, NULL), -EINVAL);
	assert_null(set.rules);

	/* a device reads as an empty file */
	assert_int_equal(rules_load_file("/dev/null", &set, NULL, NULL), 0);

	/* unreadable (unless we run as root, who reads anything) */
	path_in(path, sizeof(path), "noperm.conf");
	write_file(path, text, sizeof(text) - 1);
	chmod(path, 0);
	if (geteuid() != 0)
		assert_int_equal(rules_load_file(path, &set, NULL, NULL), -EACCES);
}

static void test_load_file_size(void **state)
{
	char path[128];
	struct rules_set set = {NULL, 0};
	size_t max = 1u << 20;
	char *big = malloc(max + 1);
	static const char rule[] = "use tcp * * *:1\n"; /* 16 bytes */

	assert_non_null(big);
	for (size_t i = 0; i < max; i += 16)
		memcpy(big + i, rule, 16);
	big[max] = '\n';

	/* exactly 1 MiB: loaded */
	path_in(path, sizeof(path), "max.conf");
	write_file(path, big, max);
	assert_int_equal(rules_load_file(path, &set, NULL, NULL), (int)(max / 16));
	rules_free(&set);

	/* one byte more: too big */
	path_in(path, sizeof(path), "big.conf");
	write_file(path, big, max + 1);
	assert_int_equal(rules_load_file(path, &set, NULL, NULL), -EFBIG);
	assert_null(set.rules);
	assert_int_equal(set.n, 0);
	free(big);

	/* a device that never ends: refused after 1 MiB */
	assert_int_equal(rules_load_file("/dev/zero", &set, NULL, NULL), -EFBIG);
	assert_null(set.rules);

	/* a huge sparse file is refused without reading it */
	path_in(path, sizeof(path), "sparse.conf");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)64 << 20), 0);
	close(fd);
	assert_int_equal(rules_load_file(path, &set, NULL, NULL), -EFBIG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_blank_comment),
		cmocka_unit_test(test_parse_good),
		cmocka_unit_test(test_parse_bad),
		cmocka_unit_test(test_parse_text),
		cmocka_unit_test(test_match_order_and_ports),
		cmocka_unit_test(test_match_prefixes),
		cmocka_unit_test(test_match_mapped),
		cmocka_unit_test(test_match_role_program),
		cmocka_unit_test(test_match_bad_sockaddr),
		cmocka_unit_test(test_load_file),
		cmocka_unit_test(test_load_file_size),
	};
	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
