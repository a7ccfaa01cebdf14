/* tuples.c - the shared tuple table: a beacon records each valid probe's
 * tuple, the accepting process takes it (doc/design.md, "Choosing a path"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/real.h"

#include "negotiate/internal.h"

#define TUPLE_SLOTS 1024
#define TUPLE_LAYOUT 2 /* in the shared object's name: a new layout, a new object */
enum { TUPLE_FREE = 0, TUPLE_BUSY, TUPLE_READY };
struct cm_tuple {
	_Atomic uint32_t state;
	uint16_t family, cport, sport, pad;
	uint8_t caddr[16];
	uint8_t saddr[16]; /* the server address the probe named */
	int64_t stamp;     /* CLOCK_MONOTONIC, the same in every process */
};
/* MAP_SHARED: children forked after listen() see it, and so do the other
 * processes of this user in this network namespace (a named object):
 * listeners of one port in several processes (SO_REUSEPORT) each get
 * streams whose probe another process's beacon answered. */
static struct cm_tuple *tuples;

unsigned long long cm_netns_id(void)
{
	char b[64], *p;
	ssize_t n = readlink("/proc/self/ns/net", b, sizeof(b) - 1);
	unsigned long long v = 0;

	if (n <= 0)
		return 0;
	b[n] = 0;
	/* "net:[4026531840]" */
	for (p = strchr(b, '['); p && *++p >= '0' && *p <= '9';)
		v = v * 10 + (unsigned)(*p - '0');
	return v;
}

/* The named table of this user and namespace, created if need be; NULL
 * when there is none to be had (no /dev/shm, a chroot, a sandbox) or the
 * object found is not one this process should trust. */
static struct cm_tuple *tuples_named(size_t len)
{
	char name[96];
	struct stat st;
	void *p;
	int fd;

	snprintf(name, sizeof(name), "/librsock-tuples.%d.%u.%llu", TUPLE_LAYOUT,
		 (unsigned)geteuid(), cm_netns_id());
	fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || st.st_uid != geteuid() || (st.st_mode & 077) ||
	    (st.st_size != 0 && st.st_size != (off_t)len) ||
	    (st.st_size == 0 && ftruncate(fd, (off_t)len))) {
		rsock_real.close(fd);
		return NULL;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	rsock_real.close(fd);
	return p == MAP_FAILED ? NULL : p;
}

int cm_tuples_private(void)
{
	size_t len = TUPLE_SLOTS * sizeof(struct cm_tuple);
	void *p;

	if (tuples)
		return 0;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	tuples = p;
	return 0;
}

int cm_tuples_create(void)
{
	size_t len = TUPLE_SLOTS * sizeof(struct cm_tuple);
	void *p;

	if (tuples)
		return 0;
	if ((p = tuples_named(len))) {
		tuples = p;
		return 0;
	}
	log_debug("tuple table: a private one (no shared object of this user to be had: "
		  "listeners of a port in other processes cannot see its probes)");
	return cm_tuples_private();
}

/* Record a probe's tuple. 0, or -ENOSPC when the table is full (the stream
 * then stays on TCP). */
int cm_tuple_put(const struct proto_probe *pr)
{
	int64_t now = clock_now_ms();

	for (unsigned i = 0; tuples && i < TUPLE_SLOTS; i++) {
		struct cm_tuple *t = &tuples[i];
		uint32_t st = atomic_load(&t->state);
		if (st == TUPLE_READY && now - t->stamp > TUPLE_TTL_MS)
			atomic_compare_exchange_strong(&t->state, &st, TUPLE_FREE), st = TUPLE_FREE;
		if (st != TUPLE_FREE || !atomic_compare_exchange_strong(&t->state, &st, TUPLE_BUSY))
			continue;
		t->family = pr->family;
		t->cport = pr->client_port;
		t->sport = pr->server_port;
		memcpy(t->caddr, pr->client_addr, 16);
		memcpy(t->saddr, pr->server_addr, 16);
		t->stamp = now;
		atomic_store(&t->state, TUPLE_READY);
		return 0;
	}
	return -ENOSPC;
}

/* Take the entry for a stream accepted from peer on local. */
int cm_tuple_take(const struct sockaddr *peer, const struct sockaddr *local)
{
	uint8_t a[16], l[16];
	struct sockaddr_storage ss, ls;
	int64_t now = clock_now_ms();

	if (!tuples)
		return 0;
	peer = sa_copy_unmapped(&ss, peer); /* probes carry IPv4 as AF_INET */
	sa_addr16(peer, a);
	sa_addr16(sa_copy_unmapped(&ls, local), l);
	for (unsigned i = 0; i < TUPLE_SLOTS; i++) {
		struct cm_tuple *t = &tuples[i];
		uint32_t st = TUPLE_READY;
		if (atomic_load(&t->state) != TUPLE_READY || t->family != peer->sa_family ||
		    t->cport != sa_port(peer) || t->sport != sa_port(local) ||
		    memcmp(t->caddr, a, 16) || memcmp(t->saddr, l, 16) ||
		    now - t->stamp > TUPLE_TTL_MS)
			continue;
		if (atomic_compare_exchange_strong(&t->state, &st, TUPLE_FREE))
			return 1;
	}
	return 0;
}
