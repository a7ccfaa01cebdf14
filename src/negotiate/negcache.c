/* negcache.c - the negative cache: peers whose probe found no librsock
 * (a plain peer, or none answered in time), and peers whose route has no
 * RDMA device behind it (the local check), stay on TCP for
 * RSOCK_NEG_CACHE_S without a new probe or check. Two levels: this process's
 * slots, and a file shared by the processes of this user in this network
 * namespace, read and written with pread/pwrite (never mapped: a file
 * another process truncates cannot fault us), every entry checked on
 * read (doc/design.md, "Choosing a path"). */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/real.h"

#include "negotiate/internal.h"

static struct {
	uint8_t addr[16];
	uint16_t family, port;
	int kind; /* CM_NEG_* */
	int64_t until;
} neg[NEG_SLOTS];
static unsigned neg_next;

/* The shared file: NEG_FILE_SLOTS entries of 32 bytes, no header (the
 * layout is in the file's name). An entry counts only if its check word
 * matches, its family is AF_INET or AF_INET6 and its stamp lies within
 * this process's RSOCK_NEG_CACHE_S before now: a torn, stale, foreign or
 * hostile entry is skipped. An entry can only keep a stream on TCP. The
 * family's top bit marks a peer without an RDMA device on its route
 * (CM_NEG_NO_DEVICE): a reader that does not know the bit skips it. */
#define NEG_FILE_LAYOUT 1
#define NEG_REC_NO_DEVICE 0x8000
struct neg_rec {
	uint32_t check;
	uint16_t family, port; /* family | NEG_REC_NO_DEVICE, or family */
	uint8_t addr[16];
	int64_t stamp; /* CLOCK_MONOTONIC ms, the same in every process of the host */
};
_Static_assert(sizeof(struct neg_rec) == 32, "the shared file's entry is 32 bytes");
/* The shared file's path: unset (the default, made at first use), none
 * (this process's slots alone), or the path. The file is opened for each
 * read or write and closed at once: a process holds no descriptor for it
 * (none to move out of the application's range, none a fork or an exec
 * inherits), and one that finds a peer in its own slots never opens it. */
enum { NEG_UNSET, NEG_NONE, NEG_PATH };
static int neg_state = NEG_UNSET;              /* cm_lock */
static char neg_path[128];                     /* cm_lock */
static struct neg_rec neg_buf[NEG_FILE_SLOTS]; /* cm_lock: the file as last read */

static uint32_t rec_check(const struct neg_rec *r)
{
	const uint8_t *p = (const uint8_t *)r + sizeof(r->check);
	uint32_t h = 2166136261u; /* FNV-1a over everything but the check */

	for (size_t i = 0; i < sizeof(*r) - sizeof(r->check); i++)
		h = (h ^ p[i]) * 16777619u;
	return h | 1; /* never 0, which an empty slot holds */
}

/* Whether r is a valid entry younger than ttl_ms at now. */
static int rec_live(const struct neg_rec *r, int64_t now, int64_t ttl_ms)
{
	uint16_t family = r->family & ~NEG_REC_NO_DEVICE;

	return r->check == rec_check(r) && (family == AF_INET || family == AF_INET6) &&
	       r->stamp <= now && now - r->stamp < ttl_ms;
}

/* The file at path, opened read-write (made 0600 if need be) and checked
 * to be a regular file of this user that nobody else may read or write:
 * a descriptor (the caller closes it), or -errno (-EPERM for a file not to
 * be trusted). */
static int neg_open(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);

	if (fd < 0)
		return -errno;
	/* Ours alone, or not used: another user's file, or one others may
	 * write, could tell us lies about any peer. */
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
		rsock_real.close(fd);
		return -EPERM;
	}
	return fd;
}

int cm_neg_share(const char *path)
{
	int fd;

	neg_state = NEG_NONE;
	if (!path)
		return 0;
	if (strlen(path) >= sizeof(neg_path))
		return -ENAMETOOLONG;
	if ((fd = neg_open(path)) < 0)
		return fd;
	rsock_real.close(fd);
	memcpy(neg_path, path, strlen(path) + 1);
	neg_state = NEG_PATH;
	return 0;
}

/* The shared file, opened (the default one named at first use): a
 * descriptor the caller closes, or -1. Caller holds cm_lock. */
static int neg_file(void)
{
	int fd;

	if (neg_state == NEG_UNSET) {
		/* "/dev/shm/librsock-negcache.LAYOUT.UID.NETNS", 79 bytes at most */
		static const char pre[] = "/dev/shm/librsock-negcache.";
		char *p = neg_path + sizeof(pre) - 1;
		memcpy(neg_path, pre, sizeof(pre) - 1);
		p = log_dec(p, NEG_FILE_LAYOUT);
		*p++ = '.';
		p = log_dec(p, (unsigned)geteuid());
		*p++ = '.';
		*log_dec(p, cm_netns_id()) = 0;
		neg_state = NEG_PATH;
	}
	if (neg_state != NEG_PATH)
		return -1;
	if ((fd = neg_open(neg_path)) == -EPERM)
		neg_state = NEG_NONE; /* not to be trusted: not looked at again */
	return fd < 0 ? -1 : fd;
}

static void rec_key(struct neg_rec *r, const struct sockaddr *peer)
{
	memset(r, 0, sizeof(*r));
	r->family = peer->sa_family;
	r->port = sa_port(peer);
	sa_addr16(peer, r->addr);
}

static int rec_same(const struct neg_rec *a, const struct neg_rec *b)
{
	return !((a->family ^ b->family) & ~NEG_REC_NO_DEVICE) && a->port == b->port &&
	       !memcmp(a->addr, b->addr, 16);
}

/* The entries of the shared file open at fd (n of them read). Caller
 * holds cm_lock. */
static int file_read(int fd, struct neg_rec *t)
{
	ssize_t r = fd >= 0 ? pread(fd, t, NEG_FILE_SLOTS * sizeof(*t), 0) : -1;

	return r > 0 ? (int)((size_t)r / sizeof(*t)) : 0;
}

/* Note peer in this process's slots as `kind` until `until`. Caller holds
 * cm_lock. */
static void slot_put(const struct sockaddr *peer, int kind, int64_t until)
{
	unsigned i = neg_next++ % NEG_SLOTS;

	sa_addr16(peer, neg[i].addr);
	neg[i].family = peer->sa_family;
	neg[i].port = sa_port(peer);
	neg[i].kind = kind;
	neg[i].until = until;
}

int cm_neg_lookup(const struct sockaddr *peer)
{
	struct neg_rec key;
	uint8_t a[16];
	int64_t now = clock_now_ms(), ttl = (int64_t)cm_settings.neg_cache_s * 1000;
	int hit = 0, n = 0, fd;

	if (ttl <= 0)
		return 0;
	sa_addr16(peer, a);
	rec_key(&key, peer);
	pthread_mutex_lock(&cm_lock);
	for (int i = 0; i < NEG_SLOTS && !hit; i++)
		if (neg[i].until > now && neg[i].family == peer->sa_family &&
		    neg[i].port == sa_port(peer) && !memcmp(neg[i].addr, a, 16))
			hit = neg[i].kind;
	if (!hit && (fd = neg_file()) >= 0) {
		n = file_read(fd, neg_buf);
		rsock_real.close(fd);
	}
	for (int i = 0; i < n && !hit; i++)
		if (rec_same(&neg_buf[i], &key) && rec_live(&neg_buf[i], now, ttl)) {
			hit = neg_buf[i].family & NEG_REC_NO_DEVICE ? CM_NEG_NO_DEVICE : CM_NEG_PEER;
			slot_put(peer, hit, neg_buf[i].stamp + ttl); /* the next lookup is ours */
		}
	pthread_mutex_unlock(&cm_lock);
	return hit;
}

/* Write key into the shared file: over its own entry, else a dead one,
 * else at the end, else over the oldest. Two processes may pick one slot
 * at once: one entry is lost, which costs a probe. Caller holds cm_lock. */
static void file_insert(struct neg_rec *key, int64_t now, int64_t ttl)
{
	int fd = neg_file(), n, slot = -1;

	if (fd < 0)
		return;
	n = file_read(fd, neg_buf);
	for (int i = 0; i < n && slot < 0; i++)
		if (rec_same(&neg_buf[i], key))
			slot = i;
	for (int i = 0; i < n && slot < 0; i++)
		if (!rec_live(&neg_buf[i], now, ttl))
			slot = i;
	if (slot < 0 && n < NEG_FILE_SLOTS)
		slot = n;
	if (slot < 0) /* all live: the oldest goes */
		for (int i = slot = 0; i < n; i++)
			if (neg_buf[i].stamp < neg_buf[slot].stamp)
				slot = i;
	key->stamp = now;
	key->check = rec_check(key);
	/* a full /dev/shm fails it: this process's slots still hold the peer */
	if (pwrite(fd, key, sizeof(*key), (off_t)slot * (off_t)sizeof(*key)) < 0)
		log_debug("negative cache: the shared file takes no entry (errno %d)", errno);
	rsock_real.close(fd);
}

void cm_neg_insert(const struct sockaddr *peer, int kind)
{
	struct neg_rec key;
	int64_t now = clock_now_ms(), ttl = (int64_t)cm_settings.neg_cache_s * 1000;

	rec_key(&key, peer);
	if (kind == CM_NEG_NO_DEVICE)
		key.family |= NEG_REC_NO_DEVICE;
	pthread_mutex_lock(&cm_lock);
	slot_put(peer, kind, now + ttl);
	if (ttl > 0)
		file_insert(&key, now, ttl);
	pthread_mutex_unlock(&cm_lock);
}
