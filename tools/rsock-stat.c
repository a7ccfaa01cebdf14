/* rsock-stat - the streams of every librsock process on the host, read from
 * their segments /dev/shm/rsock-<pid> (src/base/statpub.h has the layout;
 * man/rsock-stat.1 the options and outputs). Nothing but libc.
 *
 * A segment is another process's memory: everything read from it is
 * validated (magic, version, sizes, indices, strings, enums), and a slot is
 * kept only when its generation was even and the same before and after the
 * copy. A segment whose process is gone, or whose pid now names another
 * process (it started after the segment was made), is ignored and removed
 * when we may. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STATPUB_LAYOUT_ONLY
#include "base/statpub.h"

#define FB_MAX 16
static const char *const fb_names[FB_MAX] = {
	"rules", "no_device", "peer", "resources", "protocol", "not_implemented",
};
static const char *const path_names[] = {"undecided", "tcp", "rdma", "shm"};
static const char *const state_names[] = {"unknown", "connecting", "established", "shut-rd",
					  "shut-wr", "shut-rdwr", "closed"};
#define NPATH 4
#define NSTATE 7

struct stream {
	int pid;
	uint64_t made;
	uint32_t idx;
	struct statpub_slot s; /* validated copy */
	double tx_rate, rx_rate;
	int has_rate;
};

struct proc {
	int pid;
	uint32_t uid;
	uint64_t made;
	char comm[16];
	int64_t c[STATPUB_C_MAX];
	uint64_t bytes[STATPUB_BYTE_PATHS][2]; /* [path][tx]: closed + live */
	uint32_t live, unpublished;
	double tx_rate, rx_rate;
	int has_rate;
};

struct sample {
	struct proc *procs;
	size_t nprocs, capprocs;
	struct stream *streams;
	size_t nstreams, capstreams;
	double when;
};

static int opt_summary, opt_json, opt_prom, opt_pid = -1;
static double opt_interval;
static long opt_count = -1;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Field 22 of /proc/<pid>/stat; 0 and errno set when unreadable. */
static uint64_t proc_start(int pid)
{
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0) {
		errno = ENOENT;
		return 0;
	}
	buf[n] = 0;
	if (!(p = strrchr(buf, ')'))) {
		errno = EINVAL;
		return 0;
	}
	p++;
	for (int field = 3; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p) {
		errno = EINVAL;
		return 0;
	}
	return strtoull(p + 1, NULL, 10);
}

static void *grow(void *p, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return p;
	size_t c = *cap ? *cap * 2 : 16;
	void *q = realloc(p, c * size);
	if (!q) {
		perror("rsock-stat");
		exit(1);
	}
	*cap = c;
	return q;
}

/* Printable copy of a fixed-size string from the segment. */
static void safe_str(char *dst, const char *src, size_t len)
{
	size_t i;

	for (i = 0; i + 1 < len && src[i]; i++)
		dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
	dst[i] = 0;
}

/* A slot copied consistently and validated: 1, else 0 (free, changing or bad). */
static int read_slot(const struct statpub_slot *src, struct statpub_slot *out)
{
	for (int tries = 0; tries < 4; tries++) {
		uint32_t g1 = atomic_load_explicit(&src->gen, memory_order_acquire);
		if (g1 & 1)
			continue;
		memcpy(out, (const void *)src, sizeof(*out));
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&src->gen, memory_order_relaxed) != g1)
			continue;
		if (out->used != 1)
			return 0;
		if (out->path >= NPATH)
			out->path = STATPUB_PATH_UNDECIDED;
		if (out->state >= NSTATE)
			out->state = 0;
		if (out->fallback < -1 || out->fallback >= FB_MAX)
			out->fallback = -1;
		if (out->local.sin6_family != AF_INET && out->local.sin6_family != AF_INET6)
			out->local.sin6_family = 0;
		if (out->peer.sin6_family != AF_INET && out->peer.sin6_family != AF_INET6)
			out->peer.sin6_family = 0;
		char dev[sizeof(out->device)];
		safe_str(dev, out->device, sizeof(dev));
		memcpy(out->device, dev, sizeof(dev));
		return 1;
	}
	return 0;
}

/* Remove a stale segment, if it is still the file we looked at. */
static void remove_stale(const char *path, const struct stat *st)
{
	struct stat now;

	if (lstat(path, &now) == 0 && now.st_ino == st->st_ino && now.st_dev == st->st_dev)
		unlink(path);
}

static void read_segment(struct sample *sm, const char *name, int pid)
{
	char path[300];
	struct stat st;
	const struct statpub_header *h;
	struct proc *p;
	void *map;
	int fd;

	snprintf(path, sizeof(path), STATPUB_DIR "/%s", name);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) /* another user's (EACCES), or gone meanwhile */
		return;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < (off_t)STATPUB_HDR_SIZE ||
	    st.st_size > ((off_t)1 << 32)) {
		close(fd);
		return;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return;
	h = map;
	if (h->magic != STATPUB_MAGIC || h->version != STATPUB_VERSION ||
	    h->header_size < sizeof(*h) || h->header_size > (uint64_t)st.st_size ||
	    h->slot_size < sizeof(struct statpub_slot) || h->slot_size > 65536 ||
	    (uint64_t)h->header_size + (uint64_t)h->nslots * h->slot_size > (uint64_t)st.st_size ||
	    h->pid != pid)
		goto out; /* not ready yet, or not a segment we know: left alone */
	errno = 0;
	uint64_t start = proc_start(pid);
	if (!start && errno != EACCES && errno != EINVAL) {
		remove_stale(path, &st); /* its process is gone */
		goto out;
	}
	/* Started after the segment was made: the pid is another
	 * process's now (a start time is in clock ticks, rounded down). */
	long hz = sysconf(_SC_CLK_TCK);
	if (start && hz > 0 && start * (1000000000u / (uint64_t)hz) > h->made) {
		remove_stale(path, &st);
		goto out;
	}
	sm->procs = grow(sm->procs, &sm->capprocs, sm->nprocs, sizeof(*sm->procs));
	p = &sm->procs[sm->nprocs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	p->uid = h->uid;
	p->made = h->made;
	safe_str(p->comm, h->comm, sizeof(p->comm));
	for (int i = 0; i < STATPUB_C_MAX; i++)
		p->c[i] = atomic_load_explicit(&h->counters[i], memory_order_relaxed);
	for (int r = 0; r < STATPUB_BYTE_PATHS; r++)
		for (int t = 0; t < 2; t++)
			p->bytes[r][t] = atomic_load_explicit(&h->closed_bytes[r][t], memory_order_relaxed);
	p->unpublished = atomic_load_explicit(&h->unpublished, memory_order_relaxed);
	uint32_t hi = atomic_load_explicit(&h->slots_hi, memory_order_acquire);
	if (hi > h->nslots)
		hi = h->nslots;
	for (uint32_t i = 0; i < hi; i++) {
		const struct statpub_slot *src =
			(const void *)((const char *)map + h->header_size + (size_t)i * h->slot_size);
		struct stream s;
		if (!read_slot(src, &s.s))
			continue;
		s.pid = pid;
		s.made = p->made;
		s.idx = i;
		s.has_rate = 0;
		for (int r = 0; r < STATPUB_BYTE_PATHS; r++)
			for (int t = 0; t < 2; t++)
				p->bytes[r][t] += s.s.bytes[r][t];
		p->live++;
		sm->streams = grow(sm->streams, &sm->capstreams, sm->nstreams, sizeof(*sm->streams));
		sm->streams[sm->nstreams++] = s;
	}
out:
	munmap(map, (size_t)st.st_size);
}

static int take_sample(struct sample *sm)
{
	DIR *d = opendir(STATPUB_DIR);
	struct dirent *e;

	sm->nprocs = sm->nstreams = 0;
	sm->when = now_s();
	if (!d) {
		fprintf(stderr, "rsock-stat: %s: %s\n", STATPUB_DIR, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		const char *n = e->d_name;
		char *end;
		long pid;
		if (strncmp(n, STATPUB_PREFIX, strlen(STATPUB_PREFIX)))
			continue;
		n += strlen(STATPUB_PREFIX);
		if (*n < '1' || *n > '9')
			continue;
		errno = 0;
		pid = strtol(n, &end, 10);
		if (*end || errno || pid <= 0 || pid > 0x7fffffff)
			continue;
		if (opt_pid >= 0 && pid != opt_pid)
			continue;
		read_segment(sm, e->d_name, (int)pid);
	}
	closedir(d);
	return 0;
}

static uint64_t s_tx(const struct statpub_slot *s)
{
	return s->bytes[0][1] + s->bytes[1][1] + s->bytes[2][1];
}

static uint64_t s_rx(const struct statpub_slot *s)
{
	return s->bytes[0][0] + s->bytes[1][0] + s->bytes[2][0];
}

/* A process's bytes, all paths, sent (tx 1) or received. */
static uint64_t p_bytes(const struct proc *p, int tx)
{
	return p->bytes[0][tx] + p->bytes[1][tx] + p->bytes[2][tx];
}

/* Rates against the previous sample: a stream is the same when its pid,
 * process start, slot index and publication time are. */
static void rates(struct sample *cur, const struct sample *prev)
{
	double dt = cur->when - prev->when;

	if (dt <= 0)
		return;
	for (size_t i = 0; i < cur->nstreams; i++) {
		struct stream *a = &cur->streams[i];
		for (size_t j = 0; j < prev->nstreams; j++) {
			const struct stream *b = &prev->streams[j];
			if (a->pid != b->pid || a->made != b->made || a->idx != b->idx ||
			    a->s.since != b->s.since || a->s.fd != b->s.fd)
				continue;
			a->tx_rate = (double)(s_tx(&a->s) - s_tx(&b->s)) / dt;
			a->rx_rate = (double)(s_rx(&a->s) - s_rx(&b->s)) / dt;
			a->has_rate = s_tx(&a->s) >= s_tx(&b->s) && s_rx(&a->s) >= s_rx(&b->s);
			break;
		}
	}
	for (size_t i = 0; i < cur->nprocs; i++) {
		struct proc *a = &cur->procs[i];
		for (size_t j = 0; j < prev->nprocs; j++) {
			const struct proc *b = &prev->procs[j];
			if (a->pid != b->pid || a->made != b->made)
				continue;
			uint64_t at = p_bytes(a, 1), bt = p_bytes(b, 1);
			uint64_t ar = p_bytes(a, 0), br = p_bytes(b, 0);
			a->tx_rate = (double)(at - bt) / dt;
			a->rx_rate = (double)(ar - br) / dt;
			a->has_rate = at >= bt && ar >= br;
			break;
		}
	}
}

static const struct proc *proc_of(const struct sample *sm, int pid)
{
	for (size_t i = 0; i < sm->nprocs; i++)
		if (sm->procs[i].pid == pid)
			return &sm->procs[i];
	return NULL;
}

static void fmt_addr(char *buf, size_t len, const struct sockaddr_in6 *a)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (a->sin6_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)a;
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		snprintf(buf, len, "%s:%u", ip, ntohs(in->sin_port));
	} else if (a->sin6_family == AF_INET6) {
		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(buf, len, "[%s]:%u", ip, ntohs(a->sin6_port));
	} else {
		snprintf(buf, len, "*");
	}
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

static void json_addr(const char *key, const struct sockaddr_in6 *a)
{
	char ip[INET6_ADDRSTRLEN] = "";
	unsigned port = 0;

	if (a->sin6_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)a;
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		port = ntohs(in->sin_port);
	} else if (a->sin6_family == AF_INET6) {
		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		port = ntohs(a->sin6_port);
	}
	printf(",\"%s_addr\":", key);
	if (*ip)
		json_str(ip);
	else
		printf("null");
	printf(",\"%s_port\":%u", key, port);
}

static const char *state_name(const struct statpub_slot *s)
{
	/* A non-blocking connect's completion is the kernel's to see: a
	 * stream that carried bytes is up. */
	if (s->state == STATPUB_ST_CONNECTING && (s_tx(s) || s_rx(s)))
		return state_names[STATPUB_ST_ESTABLISHED];
	return state_names[s->state];
}

static const char *fb_name(int fb)
{
	static char buf[16];

	if (fb < 0 || fb >= FB_MAX)
		return "-";
	if (fb_names[fb])
		return fb_names[fb];
	snprintf(buf, sizeof(buf), "reason%d", fb);
	return buf;
}

static void print_streams(const struct sample *sm)
{
	if (!opt_json) {
		printf("%-7s %-15s %4s %-22s %-22s %-9s %-11s %12s %12s", "PID", "PROGRAM", "FD",
		       "LOCAL", "PEER", "PATH", "STATE", "TX_BYTES", "RX_BYTES");
		if (opt_interval > 0)
			printf(" %10s %10s", "TX/S", "RX/S");
		printf(" DETAIL\n");
	}
	for (size_t i = 0; i < sm->nstreams; i++) {
		const struct stream *st = &sm->streams[i];
		const struct statpub_slot *s = &st->s;
		const struct proc *p = proc_of(sm, st->pid);
		const char *comm = p ? p->comm : "?";
		if (opt_json) {
			printf("{\"type\":\"stream\",\"pid\":%d,\"comm\":", st->pid);
			json_str(comm);
			printf(",\"fd\":%d,\"role\":\"%s\"", s->fd,
			       s->role == STATPUB_ROLE_ACCEPTED ? "accepted" : "client");
			json_addr("local", &s->local);
			json_addr("peer", &s->peer);
			printf(",\"path\":\"%s\",\"state\":\"%s\",\"tx_bytes\":%" PRIu64
			       ",\"rx_bytes\":%" PRIu64 ",\"since\":%" PRId64,
			       path_names[s->path], state_name(s), s_tx(s), s_rx(s), s->since);
			printf(",\"fallback\":");
			if (s->path == STATPUB_PATH_TCP && s->fallback >= 0)
				json_str(fb_name(s->fallback));
			else
				printf("null");
			if (s->path == STATPUB_PATH_RDMA) {
				printf(",\"device\":");
				json_str(s->device);
				printf(",\"qpn\":%u,\"rx_ring\":%u,\"tx_ring\":%u,\"peer_ring\":%u,"
				       "\"msgs_out\":%u,\"inflight_bytes\":%" PRIu64,
				       s->qpn, s->rx_ring, s->tx_ring, s->peer_ring, s->msgs_out, s->inflight);
			}
			if (st->has_rate)
				printf(",\"tx_rate\":%.0f,\"rx_rate\":%.0f", st->tx_rate, st->rx_rate);
			printf("}\n");
			continue;
		}
		char la[64], pa[64];
		fmt_addr(la, sizeof(la), &s->local);
		fmt_addr(pa, sizeof(pa), &s->peer);
		printf("%-7d %-15s %4d %-22s %-22s %-9s %-11s %12" PRIu64 " %12" PRIu64, st->pid, comm,
		       s->fd, la, pa, path_names[s->path], state_name(s), s_tx(s), s_rx(s));
		if (opt_interval > 0) {
			if (st->has_rate)
				printf(" %10.0f %10.0f", st->tx_rate, st->rx_rate);
			else
				printf(" %10s %10s", "-", "-");
		}
		if (s->path == STATPUB_PATH_TCP && s->fallback >= 0)
			printf(" fallback=%s", fb_name(s->fallback));
		else if (s->path == STATPUB_PATH_RDMA)
			printf(" dev=%s qpn=%u rings=%u/%u/%u credits=%u/%" PRIu64,
			       *s->device ? s->device : "-", s->qpn, s->rx_ring, s->tx_ring, s->peer_ring,
			       s->msgs_out, s->inflight);
		printf("\n");
	}
}

/* One process's counters, or the totals (p->pid 0). */
static void print_counters(const struct proc *p, size_t nprocs)
{
	if (opt_json) {
		if (p->pid) {
			printf("{\"type\":\"process\",\"pid\":%d,\"comm\":", p->pid);
			json_str(p->comm);
			printf(",\"uid\":%u", p->uid);
		} else {
			printf("{\"type\":\"totals\",\"processes\":%zu", nprocs);
		}
		printf(",\"streams\":%u,\"streams_tcp\":%" PRId64 ",\"streams_rdma\":%" PRId64
		       ",\"streams_shm\":%" PRId64 ",\"tx_bytes_tcp\":%" PRIu64 ",\"rx_bytes_tcp\":%" PRIu64
		       ",\"tx_bytes_rdma\":%" PRIu64 ",\"rx_bytes_rdma\":%" PRIu64
		       ",\"tx_bytes_shm\":%" PRIu64 ",\"rx_bytes_shm\":%" PRIu64 ",\"fallbacks\":{",
		       p->live, p->c[STATPUB_C_STREAMS_TCP], p->c[STATPUB_C_STREAMS_RDMA],
		       p->c[STATPUB_C_STREAMS_SHM], p->bytes[0][1], p->bytes[0][0], p->bytes[1][1],
		       p->bytes[1][0], p->bytes[2][1], p->bytes[2][0]);
		for (int i = 0, first = 1; i < FB_MAX; i++) {
			if (!fb_names[i] && !p->c[STATPUB_C_FALLBACK + i])
				continue;
			printf("%s\"%s\":%" PRId64, first ? "" : ",", fb_name(i), p->c[STATPUB_C_FALLBACK + i]);
			first = 0;
		}
		printf("},\"registered_bytes\":%" PRId64 ",\"tracked_fds\":%" PRId64
		       ",\"handovers\":%" PRId64 ",\"cq_events\":%" PRId64 ",\"cq_arms\":%" PRId64
		       ",\"zcopy_bytes\":%" PRId64 ",\"failovers\":%" PRId64 ",\"unpublished\":%u",
		       p->c[STATPUB_C_REGISTERED], p->c[STATPUB_C_TRACKED_FDS], p->c[STATPUB_C_HANDOVERS],
		       p->c[STATPUB_C_CQ_EVENTS], p->c[STATPUB_C_CQ_ARMS], p->c[STATPUB_C_ZCOPY],
		       p->c[STATPUB_C_FAILOVERS], p->unpublished);
		if (p->has_rate)
			printf(",\"tx_rate\":%.0f,\"rx_rate\":%.0f", p->tx_rate, p->rx_rate);
		printf("}\n");
		return;
	}
	if (p->pid)
		printf("%d %s:", p->pid, p->comm);
	else
		printf("total (%zu processes):", nprocs);
	printf(" streams now=%u tcp=%" PRId64 " rdma=%" PRId64 " shm=%" PRId64 " bytes tcp tx=%" PRIu64
	       " rx=%" PRIu64 " rdma tx=%" PRIu64 " rx=%" PRIu64 " shm tx=%" PRIu64 " rx=%" PRIu64
	       " fallbacks",
	       p->live, p->c[STATPUB_C_STREAMS_TCP], p->c[STATPUB_C_STREAMS_RDMA],
	       p->c[STATPUB_C_STREAMS_SHM], p->bytes[0][1], p->bytes[0][0], p->bytes[1][1],
	       p->bytes[1][0], p->bytes[2][1], p->bytes[2][0]);
	for (int i = 0; i < FB_MAX; i++)
		if (fb_names[i] || p->c[STATPUB_C_FALLBACK + i])
			printf(" %s=%" PRId64, fb_name(i), p->c[STATPUB_C_FALLBACK + i]);
	printf(" registered=%" PRId64 " tracked_fds=%" PRId64 " handovers=%" PRId64
	       " cq_events=%" PRId64 " cq_arms=%" PRId64 " zcopy=%" PRId64 " failovers=%" PRId64,
	       p->c[STATPUB_C_REGISTERED], p->c[STATPUB_C_TRACKED_FDS], p->c[STATPUB_C_HANDOVERS],
	       p->c[STATPUB_C_CQ_EVENTS], p->c[STATPUB_C_CQ_ARMS], p->c[STATPUB_C_ZCOPY],
	       p->c[STATPUB_C_FAILOVERS]);
	if (p->has_rate)
		printf(" tx/s=%.0f rx/s=%.0f", p->tx_rate, p->rx_rate);
	printf("\n");
}

static void print_summary(const struct sample *sm)
{
	struct proc tot;

	memset(&tot, 0, sizeof(tot));
	tot.has_rate = sm->nprocs > 0;
	for (size_t i = 0; i < sm->nprocs; i++) {
		const struct proc *p = &sm->procs[i];
		print_counters(p, 0);
		for (int c = 0; c < STATPUB_C_MAX; c++)
			tot.c[c] += p->c[c];
		for (int r = 0; r < STATPUB_BYTE_PATHS; r++)
			for (int t = 0; t < 2; t++)
				tot.bytes[r][t] += p->bytes[r][t];
		tot.live += p->live;
		tot.unpublished += p->unpublished;
		tot.tx_rate += p->tx_rate;
		tot.rx_rate += p->rx_rate;
		tot.has_rate &= p->has_rate;
	}
	print_counters(&tot, sm->nprocs);
}

/* A label value in the text exposition format. */
static void prom_label(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if (*s == '\n')
			printf("\\n");
		else
			putchar(*s);
	}
	putchar('"');
}

static void prom_head(const char *name, const char *type, const char *help)
{
	printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_pid(const char *name, const struct proc *p, const char *extra)
{
	printf("%s{%spid=\"%d\",comm=", name, extra, p->pid);
	prom_label(p->comm);
	printf("}");
}

static void print_prometheus(const struct sample *sm)
{
	uint64_t by_path[NPATH] = {0};
	int64_t fb[FB_MAX] = {0};
	static const struct {
		const char *name, *type, *help;
		int idx;
	} per_proc[] = {
		{"rsock_registered_bytes", "gauge", "Memory registered with RDMA devices now.", STATPUB_C_REGISTERED},
		{"rsock_tracked_fds", "gauge", "Descriptors in the library's fd table now.", STATPUB_C_TRACKED_FDS},
		{"rsock_handovers_total", "counter", "RDMA streams moved to kernel TCP.", STATPUB_C_HANDOVERS},
		{"rsock_cq_events_total", "counter", "Completion events read.", STATPUB_C_CQ_EVENTS},
		{"rsock_cq_arms_total", "counter", "Completion events requested.", STATPUB_C_CQ_ARMS},
		{"rsock_zcopy_bytes_total", "counter", "Bytes sent from the application's buffer without a copy.", STATPUB_C_ZCOPY},
		{"rsock_failovers_total", "counter", "RDMA streams moved to kernel TCP by a broken path.", STATPUB_C_FAILOVERS},
	};

	for (size_t i = 0; i < sm->nstreams; i++)
		by_path[sm->streams[i].s.path]++;
	prom_head("rsock_processes", "gauge", "Processes running librsock with a published stream.");
	printf("rsock_processes %zu\n", sm->nprocs);
	prom_head("rsock_streams", "gauge", "Streams open now, by path.");
	for (int i = 0; i < NPATH; i++)
		printf("rsock_streams{path=\"%s\"} %" PRIu64 "\n", path_names[i], by_path[i]);
	prom_head("rsock_streams_total", "counter", "Streams connected or accepted, by path and process.");
	for (size_t i = 0; i < sm->nprocs; i++) {
		const struct proc *p = &sm->procs[i];
		prom_pid("rsock_streams_total", p, "path=\"tcp\",");
		printf(" %" PRId64 "\n", p->c[STATPUB_C_STREAMS_TCP]);
		prom_pid("rsock_streams_total", p, "path=\"rdma\",");
		printf(" %" PRId64 "\n", p->c[STATPUB_C_STREAMS_RDMA]);
		prom_pid("rsock_streams_total", p, "path=\"shm\",");
		printf(" %" PRId64 "\n", p->c[STATPUB_C_STREAMS_SHM]);
	}
	prom_head("rsock_bytes_total", "counter", "Bytes carried, by path, direction and process.");
	for (size_t i = 0; i < sm->nprocs; i++) {
		const struct proc *p = &sm->procs[i];
		for (int r = 0; r < STATPUB_BYTE_PATHS; r++)
			for (int t = 1; t >= 0; t--) {
				char extra[64];
				snprintf(extra, sizeof(extra), "path=\"%s\",direction=\"%s\",",
					 path_names[r + 1], t ? "tx" : "rx");
				prom_pid("rsock_bytes_total", p, extra);
				printf(" %" PRIu64 "\n", p->bytes[r][t]);
			}
		for (int f = 0; f < FB_MAX; f++)
			fb[f] += p->c[STATPUB_C_FALLBACK + f];
	}
	prom_head("rsock_fallbacks_total", "counter", "Streams left on kernel TCP, by reason.");
	for (int f = 0; f < FB_MAX; f++)
		if (fb_names[f] || fb[f])
			printf("rsock_fallbacks_total{reason=\"%s\"} %" PRId64 "\n", fb_name(f), fb[f]);
	for (size_t k = 0; k < sizeof(per_proc) / sizeof(per_proc[0]); k++) {
		prom_head(per_proc[k].name, per_proc[k].type, per_proc[k].help);
		for (size_t i = 0; i < sm->nprocs; i++) {
			prom_pid(per_proc[k].name, &sm->procs[i], "");
			printf(" %" PRId64 "\n", sm->procs[i].c[per_proc[k].idx]);
		}
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: rsock-stat [-s] [-j | --prometheus] [-p PID] [-i SECONDS [-c COUNT]]\n"
		   "  -s            per-process counters and totals instead of streams\n"
		   "  -p PID        only that process\n"
		   "  -j, --json    JSON, one object a line\n"
		   "  --prometheus  text exposition format (node_exporter's textfile collector)\n"
		   "  -i SECONDS    repeat every SECONDS, with rates since the previous sample\n"
		   "  -c COUNT      with -i: stop after COUNT samples\n"
		   "  -h, --help    this text\n");
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{"summary", no_argument, NULL, 's'},   {"json", no_argument, NULL, 'j'},
		{"pid", required_argument, NULL, 'p'}, {"interval", required_argument, NULL, 'i'},
		{"count", required_argument, NULL, 'c'}, {"prometheus", no_argument, NULL, 'P'},
		{"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0},
	};
	struct sample a = {0}, b = {0}, *cur = &a, *prev = &b;
	char *end;
	int o;

	while ((o = getopt_long(argc, argv, "sjp:i:c:h", longs, NULL)) != -1) {
		switch (o) {
		case 's':
			opt_summary = 1;
			break;
		case 'j':
			opt_json = 1;
			break;
		case 'P':
			opt_prom = 1;
			break;
		case 'p':
			errno = 0;
			opt_pid = (int)strtol(optarg, &end, 10);
			if (*end || errno || opt_pid <= 0) {
				fprintf(stderr, "rsock-stat: bad pid '%s'\n", optarg);
				return 2;
			}
			break;
		case 'i':
			opt_interval = strtod(optarg, &end);
			if (*end || !(opt_interval > 0) || opt_interval > 86400) {
				fprintf(stderr, "rsock-stat: bad interval '%s'\n", optarg);
				return 2;
			}
			break;
		case 'c':
			opt_count = strtol(optarg, &end, 10);
			if (*end || opt_count <= 0) {
				fprintf(stderr, "rsock-stat: bad count '%s'\n", optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc || (opt_json && opt_prom)) {
		usage(stderr);
		return 2;
	}
	for (long n = 0;; n++) {
		if (take_sample(cur)) {
			free(a.procs);
			free(a.streams);
			free(b.procs);
			free(b.streams);
			return 1;
		}
		if (n > 0)
			rates(cur, prev);
		if (opt_prom)
			print_prometheus(cur);
		else if (opt_summary)
			print_summary(cur);
		else
			print_streams(cur);
		fflush(stdout);
		if (!(opt_interval > 0) || (opt_count > 0 && n + 1 >= opt_count))
			break;
		if (!opt_json && !opt_prom)
			printf("\n");
		struct timespec ts = {(time_t)opt_interval,
				      (long)((opt_interval - (double)(time_t)opt_interval) * 1e9)};
		nanosleep(&ts, NULL);
		struct sample *t = prev;
		prev = cur;
		cur = t;
	}
	free(a.procs);
	free(a.streams);
	free(b.procs);
	free(b.streams);
	return 0;
}
