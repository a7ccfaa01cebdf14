/* test_negotiate.c - what of src/negotiate runs without an RDMA device or
 * rdma_cm: the negative cache (insert, lookup, expiry, eviction; the file
 * it shares with other processes, and what that file's reader refuses), which
 * netdev has an RDMA device behind it (on a sysfs tree made for the test) and
 * the tuple table's put and take, keyed by both addresses and ports (on
 * private tables and files, not the shared objects of this user), and the
 * dropping of late negotiation messages at the head of a stream (a Unix
 * stream pair stands for the TCP connection). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/proto.h"
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
	cm_neg_insert(SA(a), CM_NEG_PEER);
	assert_int_equal(cm_neg_lookup(SA(a)), 1);
	assert_int_equal(cm_neg_lookup(SA(port)), 0); /* keyed by port */
	assert_int_equal(cm_neg_lookup(SA(addr)), 0); /* and by address */
	assert_int_equal(cm_neg_lookup(SA(six)), 0);
	cm_neg_insert(SA(six), CM_NEG_PEER);
	assert_int_equal(cm_neg_lookup(SA(six)), 1);
}

static void neg_expiry(void **state)
{
	struct sockaddr_storage a = v4("10.1.1.1", 6000);

	(void)state;
	cm_settings.neg_cache_s = 0; /* expires at once */
	cm_neg_insert(SA(a), CM_NEG_PEER);
	assert_int_equal(cm_neg_lookup(SA(a)), 0);
}

static void neg_eviction(void **state)
{
	struct sockaddr_storage a = v4("10.1.2.1", 7000);

	(void)state;
	cm_settings.neg_cache_s = 60;
	cm_neg_insert(SA(a), CM_NEG_PEER);
	for (int i = 0; i < NEG_SLOTS - 1; i++) {
		struct sockaddr_storage o = v4("10.1.3.1", (uint16_t)(8000 + i));
		cm_neg_insert(SA(o), CM_NEG_PEER);
	}
	assert_int_equal(cm_neg_lookup(SA(a)), 1); /* NEG_SLOTS entries fit */
	struct sockaddr_storage o = v4("10.1.3.2", 9000);
	cm_neg_insert(SA(o), CM_NEG_PEER);
	assert_int_equal(cm_neg_lookup(SA(a)), 0); /* the oldest goes */
	assert_int_equal(cm_neg_lookup(SA(o)), 1);
}

/* ---- the shared file of the negative cache ---- */

int real_resolve(void); /* base/real.h, whose SA() is another */

static char share_path[] = "/tmp/rsock-test-negcache.XXXXXX";

static int share_setup(void **state)
{
	int fd = mkstemp(share_path);

	(void)state;
	if (fd < 0 || real_resolve()) /* the cache closes files through rsock_real */
		return -1;
	close(fd);
	cm_settings.neg_cache_s = 60;
	return cm_neg_share(share_path);
}

static int share_teardown(void **state)
{
	(void)state;
	unlink(share_path);
	return cm_neg_share(NULL);
}

/* A forked child stands for the next process of the user: it has this
 * process's slots as they were at the fork, so peers inserted on one side
 * after it are known to the other through the file only. */
static void neg_shared_between_processes(void **state)
{
	struct sockaddr_storage a = v4("10.4.0.1", 5432), b = v4("10.4.0.2", 6379),
				c = v6("fd00::4", 443);
	pid_t pid;
	int st;

	(void)state;
	assert_int_equal(cm_neg_lookup(SA(a)), 0);
	if ((pid = fork()) == 0) {
		cm_neg_insert(SA(a), CM_NEG_PEER);
		cm_neg_insert(SA(c), CM_NEG_PEER);
		_exit(cm_neg_lookup(SA(b)) == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(st, 0);
	assert_int_equal(cm_neg_lookup(SA(a)), 1); /* learned by the child */
	assert_int_equal(cm_neg_lookup(SA(c)), 1);
	assert_int_equal(cm_neg_lookup(SA(b)), 0);
	cm_neg_insert(SA(b), CM_NEG_PEER);
	if ((pid = fork()) == 0)
		_exit(cm_neg_lookup(SA(b)) == 1 ? 0 : 1);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(st, 0);
}

/* cm_neg_lookup(peer) in a forked child: a process that starts with this
 * one's slots and keeps nothing it finds. */
static int fresh_lookup(const struct sockaddr *peer)
{
	pid_t pid;
	int st;

	if ((pid = fork()) == 0)
		_exit(cm_neg_lookup(peer));
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* A route without an RDMA device, cached in one process, is known as such
 * (not as a plain peer) to the next; a probe's verdict on the same peer
 * takes the same entry. */
static void neg_no_device_shared(void **state)
{
	struct sockaddr_storage a = v4("10.7.0.1", 80), b = v6("fd00::7", 80);
	pid_t pid;
	int st;

	(void)state;
	if ((pid = fork()) == 0) {
		cm_neg_insert(SA(a), CM_NEG_NO_DEVICE);
		cm_neg_insert(SA(b), CM_NEG_NO_DEVICE);
		_exit(cm_neg_lookup(SA(a)) == CM_NEG_NO_DEVICE ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(st, 0);
	assert_int_equal(fresh_lookup(SA(a)), CM_NEG_NO_DEVICE); /* through the file */
	assert_int_equal(fresh_lookup(SA(b)), CM_NEG_NO_DEVICE);
	if ((pid = fork()) == 0) {
		cm_neg_insert(SA(a), CM_NEG_PEER);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(fresh_lookup(SA(a)), CM_NEG_PEER); /* the file's one entry for a */
	/* an entry found in the file is kept: the next lookup opens nothing */
	assert_int_equal(cm_neg_lookup(SA(b)), CM_NEG_NO_DEVICE);
	assert_int_equal(truncate(share_path, 0), 0);
	assert_int_equal(cm_neg_lookup(SA(b)), CM_NEG_NO_DEVICE);
	assert_int_equal(fresh_lookup(SA(a)), 0);
}

/* The file's entry (negcache.c's layout 1): written here by hand, as a
 * corrupt or hostile file would hold it. */
struct rec {
	uint32_t check;
	uint16_t family, port;
	uint8_t addr[16];
	int64_t stamp;
};

static uint32_t rec_check(const struct rec *r)
{
	const uint8_t *p = (const uint8_t *)r + 4;
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < sizeof(*r) - 4; i++)
		h = (h ^ p[i]) * 16777619u;
	return h | 1;
}

static struct rec rec_of(const struct sockaddr *sa, int64_t stamp)
{
	struct rec r;

	memset(&r, 0, sizeof(r));
	r.family = sa->sa_family;
	r.port = sa_port(sa);
	sa_addr16(sa, r.addr);
	r.stamp = stamp;
	r.check = rec_check(&r);
	return r;
}

static void file_put(const void *b, size_t len, off_t at)
{
	int fd = open(share_path, O_WRONLY);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, b, len, at), (ssize_t)len);
	close(fd);
}

/* Only a well-formed, live entry counts; whatever else the file holds is
 * passed over without harm. Each lookup is a fresh process's (a child's: a
 * file's entry found is kept in the finder's own slots), so every answer
 * comes from the file. */
static void neg_shared_refuses_bad_entries(void **state)
{
	struct sockaddr_storage a = v4("10.5.0.1", 8080);
	int64_t now = clock_now_ms();
	struct rec r;

	(void)state;
	assert_int_equal(truncate(share_path, 0), 0);
	r = rec_of(SA(a), now - 1000);
	file_put(&r, sizeof(r), 0);
	assert_int_equal(fresh_lookup(SA(a)), 1); /* the layout above is the file's */
	r.port++;                                  /* check word no longer matches */
	file_put(&r, sizeof(r), 0);
	assert_int_equal(fresh_lookup(SA(a)), 0);
	r = rec_of(SA(a), now + 3600 * 1000); /* stamped in the future */
	file_put(&r, sizeof(r), 0);
	assert_int_equal(fresh_lookup(SA(a)), 0);
	r = rec_of(SA(a), now - 61 * 1000); /* older than this process's 60 s */
	file_put(&r, sizeof(r), 0);
	assert_int_equal(fresh_lookup(SA(a)), 0);
	r = rec_of(SA(a), now - 1000);
	r.family = AF_UNIX;
	r.check = rec_check(&r);
	file_put(&r, sizeof(r), 0);
	assert_int_equal(fresh_lookup(SA(a)), 0);
	/* garbage, a file far too long, one cut inside an entry */
	static uint8_t junk[64 * 1024];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 131 + 7);
	file_put(junk, sizeof(junk), 0);
	assert_int_equal(fresh_lookup(SA(a)), 0);
	assert_int_equal(truncate(share_path, 7), 0);
	assert_int_equal(fresh_lookup(SA(a)), 0);
	r = rec_of(SA(a), now - 1000);
	file_put(&r, sizeof(r) - 1, 0);
	assert_int_equal(fresh_lookup(SA(a)), 0);
	/* an insert repairs what it overwrites; a child sees it */
	struct sockaddr_storage b = v4("10.5.0.2", 8080);
	pid_t pid;
	int st;
	cm_neg_insert(SA(b), CM_NEG_PEER);
	if ((pid = fork()) == 0)
		_exit(cm_neg_lookup(SA(b)) == 1 ? 0 : 1);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(st, 0);
}

/* A file others may write, a link, a directory: not used. */
static void neg_shared_refuses_files(void **state)
{
	char dir[] = "/tmp/rsock-test-negdir.XXXXXX", link[64], open_file[64];
	struct sockaddr_storage a = v4("10.6.0.1", 80);

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(open_file, sizeof(open_file), "%s/f", dir);
	snprintf(link, sizeof(link), "%s/l", dir);
	close(open(open_file, O_CREAT | O_WRONLY, 0600));
	assert_int_equal(chmod(open_file, 0622), 0);
	assert_int_equal(cm_neg_share(open_file), -EPERM);
	assert_int_equal(symlink(share_path, link), 0);
	assert_true(cm_neg_share(link) < 0);
	assert_true(cm_neg_share(dir) < 0);
	cm_neg_insert(SA(a), CM_NEG_PEER); /* this process's slots alone */
	assert_int_equal(cm_neg_lookup(SA(a)), 1);
	unlink(open_file);
	unlink(link);
	rmdir(dir);
	assert_int_equal(cm_neg_share(share_path), 0);
}

/* ---- which netdev has an RDMA device behind it (a sysfs tree made here) ---- */

static char sys_root[] = "/tmp/rsock-test-sys.XXXXXX";

static void sys_file(const char *rel, const char *text)
{
	char path[512], *slash;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", sys_root, rel);
	for (slash = strchr(path + strlen(sys_root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		mkdir(path, 0700);
		*slash = '/';
	}
	if (text) {
		assert_non_null(f = fopen(path, "w"));
		fputs(text, f);
		fclose(f);
	} else {
		mkdir(path, 0700);
	}
}

static int local(const char *ifname)
{
	char dev[64] = "";

	return cm_dev_of_netdev(sys_root, ifname, dev, sizeof(dev));
}

static void dev_of_netdev(void **state)
{
	char dev[64] = "", cmd[600];

	(void)state;
	assert_non_null(mkdtemp(sys_root));
	sys_file("class/net/veth0/type", "1\n");
	sys_file("class/net/eth9/type", "1\n");
	sys_file("class/net/vlan5/type", "1\n");
	sys_file("class/net/vlan5/lower_veth0", NULL);
	sys_file("class/net/ib0/type", "32\n");
	sys_file("class/net/lo/type", "772\n");
	assert_int_equal(local("veth0"), CM_LOCAL_NONE); /* no class/infiniband: no device */
	sys_file("class/infiniband/rxe0/node_type", "1: CA\n");
	sys_file("class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "veth0\n");
	sys_file("class/infiniband/mlx4_0/node_type", "1: CA\n");
	sys_file("class/infiniband/mlx4_0/ports/1/link_layer", "InfiniBand\n");
	assert_int_equal(cm_dev_of_netdev(sys_root, "veth0", dev, sizeof(dev)), CM_LOCAL_RDMA);
	assert_string_equal(dev, "rxe0");
	assert_int_equal(local("vlan5"), CM_LOCAL_RDMA); /* through its lower device */
	assert_int_equal(local("eth9"), CM_LOCAL_NONE);
	assert_int_equal(local("lo"), CM_LOCAL_NONE);
	assert_int_equal(local("ib0"), CM_LOCAL_UNSURE);   /* IPoIB: rdma_cm decides */
	assert_int_equal(local("veth7"), CM_LOCAL_UNSURE); /* not in this sysfs */
	sys_file("class/net/eth3/type", "1\n");
	sys_file("class/infiniband/siw0/node_type", "4: RNIC\n");
	sys_file("class/infiniband/siw0/ports/1/gid_attrs/ndevs/0", "eth3\n");
	assert_int_equal(local("eth3"), CM_LOCAL_NONE); /* iWARP: never probed */
	sys_file("class/infiniband/roce9/node_type", "1: CA\n");
	sys_file("class/infiniband/roce9/ports/1/link_layer", "Ethernet\n");
	assert_int_equal(local("eth9"), CM_LOCAL_UNSURE); /* a RoCE port naming no netdev */
	assert_int_equal(local("veth0"), CM_LOCAL_RDMA);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", sys_root);
	assert_int_equal(system(cmd), 0);
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
	cm_neg_share(NULL); /* the tests of this process's slots share nothing */
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

/* ---- late negotiation messages (cm_drop_stale) ------------------------------ */

static void put(int fd, const void *b, size_t n)
{
	assert_int_equal(write(fd, b, n), (ssize_t)n);
}

static size_t queued(int fd)
{
	uint8_t b[512];
	ssize_t r = recv(fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	return r < 0 ? 0 : (size_t)r;
}

/* A late message of kind dropped (or, with other bytes first, not): the
 * stream settled, left bytes queued. */
static void drop_leaves(int fd, int kind, size_t left)
{
	int st = kind;

	assert_int_equal(cm_drop_stale(fd, &st), 0);
	assert_int_equal(st, CM_STALE_NONE);
	assert_int_equal(queued(fd), left);
}

static void stale_pair(int sv[2])
{
	assert_int_equal(real_resolve(), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

static void stale_ack(void **state)
{
	struct proto_hello_ack a = {.version = PROTO_VERSION, .status = 2};
	uint8_t ack[PROTO_HELLO_ACK_LEN];
	int sv[2], st = CM_STALE_ACK;

	(void)state;
	stale_pair(sv);
	assert_int_equal(proto_hello_ack_encode(&a, ack, sizeof(ack)), PROTO_HELLO_ACK_LEN);
	assert_int_equal(cm_drop_stale(sv[0], &st), -EAGAIN); /* nothing yet */
	put(sv[1], ack, 10);
	assert_int_equal(cm_drop_stale(sv[0], &st), -EINPROGRESS); /* its beginning */
	assert_int_equal(st, CM_STALE_ACK);
	put(sv[1], ack + 10, sizeof(ack) - 10);
	put(sv[1], "data", 4);
	assert_int_equal(cm_drop_stale(sv[0], &st), 0);
	assert_int_equal(st, CM_STALE_NONE);
	assert_int_equal(queued(sv[0]), 4); /* the data stays */
	drop_leaves(sv[0], CM_STALE_ACK, 4); /* application bytes first: nothing consumed */
	close(sv[0]);
	close(sv[1]);
}

static void stale_hello_cancel(void **state)
{
	struct proto_hello h = {.version = PROTO_VERSION, .token = 7, .ring_size = 65536};
	uint8_t hello[PROTO_HELLO_LEN], cancel[CM_CANCEL_LEN];
	int sv[2], st = CM_STALE_HELLO;

	(void)state;
	stale_pair(sv);
	assert_int_equal(proto_hello_encode(&h, hello, sizeof(hello)), PROTO_HELLO_LEN);
	cm_cancel_encode(cancel);
	put(sv[1], hello, sizeof(hello));
	assert_int_equal(cm_drop_stale(sv[0], &st), -EAGAIN); /* the hello went, its cancel is due */
	assert_int_equal(st, CM_STALE_CANCEL);
	assert_int_equal(queued(sv[0]), 0);
	put(sv[1], cancel, 3);
	assert_int_equal(cm_drop_stale(sv[0], &st), -EINPROGRESS);
	put(sv[1], cancel + 3, sizeof(cancel) - 3);
	put(sv[1], "GET /", 5);
	assert_int_equal(cm_drop_stale(sv[0], &st), 0);
	assert_int_equal(st, CM_STALE_NONE);
	assert_int_equal(queued(sv[0]), 5);
	/* a cancel's first bytes then others: data, kept whole */
	st = CM_STALE_CANCEL;
	char buf[8];
	assert_int_equal(read(sv[0], buf, 5), 5);
	put(sv[1], cancel, 4);
	put(sv[1], "xyzw", 4);
	assert_int_equal(cm_drop_stale(sv[0], &st), 0);
	assert_int_equal(queued(sv[0]), 8);
	/* the end of the stream settles it */
	assert_int_equal(read(sv[0], buf, 8), 8);
	st = CM_STALE_HELLO;
	close(sv[1]);
	assert_int_equal(cm_drop_stale(sv[0], &st), 0);
	assert_int_equal(st, CM_STALE_NONE);
	close(sv[0]);
}

/* A later version's longer hello and hello_ack (doc/design.md, "Wire
 * protocol"): peeked whole for the handshake, dropped whole when late. */
static void longer_messages(void **state)
{
	struct proto_hello h = {.version = 9, .token = 7, .ring_size = 65536};
	struct proto_hello_ack a = {.version = 9, .status = 2};
	uint8_t m[60], b[PROTO_MSG_MAX_LEN];
	int sv[2], st;

	(void)state;
	stale_pair(sv);
	assert_int_equal(proto_hello_encode(&h, m, sizeof(m)), PROTO_HELLO_LEN);
	m[6] = sizeof(m); /* its length field: 60, the rest a later version's */
	memset(m + PROTO_HELLO_LEN, 0xcc, sizeof(m) - PROTO_HELLO_LEN);
	put(sv[1], m, sizeof(m));
	put(sv[1], "data", 4);
	assert_int_equal(cm_ctl_peek_hello(sv[0], b, 0, clock_now_ms() + 1000), (ssize_t)sizeof(m));
	assert_int_equal(proto_hello_decode(b, sizeof(m), &h), (int)sizeof(m));
	st = CM_STALE_HELLO; /* the same, late: dropped whole, then its cancel is due */
	assert_int_equal(cm_drop_stale(sv[0], &st), 0);
	assert_int_equal(queued(sv[0]), 4);
	assert_int_equal(read(sv[0], b, 4), 4);

	assert_int_equal(proto_hello_ack_encode(&a, m, sizeof(m)), PROTO_HELLO_ACK_LEN);
	m[6] = sizeof(m);
	memset(m + PROTO_HELLO_ACK_LEN, 0xcc, sizeof(m) - PROTO_HELLO_ACK_LEN);
	put(sv[1], m, sizeof(m));
	put(sv[1], "data", 4);
	assert_int_equal(cm_ctl_peek_hello(sv[0], b, 1, clock_now_ms() + 1000), (ssize_t)sizeof(m));
	drop_leaves(sv[0], CM_STALE_ACK, 4);
	close(sv[0]);
	close(sv[1]);
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
		cmocka_unit_test(dev_of_netdev),
		cmocka_unit_test(stale_ack),
		cmocka_unit_test(stale_hello_cancel),
	};
	const struct CMUnitTest shared[] = {
		cmocka_unit_test(neg_shared_between_processes),
		cmocka_unit_test(neg_shared_refuses_bad_entries),
		cmocka_unit_test(neg_no_device_shared),
		cmocka_unit_test(neg_shared_refuses_files),
		cmocka_unit_test(longer_messages),
	};

	return cmocka_run_group_tests(tests, tuples_setup, NULL) ||
	       cmocka_run_group_tests(shared, share_setup, share_teardown);
}
