/* prefix.c - see prefix.h and doc/design.md, "Descriptors, fork, exec". */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/ownfd.h"
#include "path/prefix.h"

#define HO_MAGIC 0x5250534b52ull /* "RKSPR" */

struct ho_shm {
	uint64_t magic;
	_Atomic uint64_t head; /* bytes consumed, by any process */
	uint64_t len;
	uint8_t data[];
};

struct ho_pre {
	int fd;
	size_t map_len;
	struct ho_shm *shm;
};

static int pre_map(int fd, size_t map_len, struct ho_pre **out)
{
	struct ho_pre *p = calloc(1, sizeof(*p));
	void *m;

	if (!p)
		return -ENOMEM;
	m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		int rc = -errno;
		free(p);
		return rc;
	}
	p->fd = fd;
	p->map_len = map_len;
	p->shm = m;
	ownfd_mark(fd);
	*out = p;
	return 0;
}

int ho_pre_new(const struct iovec *v, int n, struct ho_pre **out)
{
	size_t len = 0, map_len, at = 0;

	for (int i = 0; i < n; i++)
		len += v[i].iov_len;
	map_len = sizeof(struct ho_shm) + len;
	int fd = memfd_create("rsock-prefix", MFD_CLOEXEC);
	int rc;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)map_len) || (rc = pre_map(fd, map_len, out))) {
		rc = errno ? -errno : -ENOMEM;
		ownfd_close(fd);
		return rc;
	}
	for (int i = 0; i < n; i++) {
		if (v[i].iov_len)
			memcpy((*out)->shm->data + at, v[i].iov_base, v[i].iov_len);
		at += v[i].iov_len;
	}
	(*out)->shm->len = len;
	atomic_store(&(*out)->shm->head, 0);
	(*out)->shm->magic = HO_MAGIC;
	return 0;
}

int ho_pre_open(int memfd, struct ho_pre **out)
{
	struct stat st;
	struct ho_pre *p;
	int rc;

	if (fstat(memfd, &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size < sizeof(struct ho_shm))
		return -EPROTO;
	if ((rc = pre_map(memfd, (size_t)st.st_size, &p)))
		return rc;
	if (p->shm->magic != HO_MAGIC || p->shm->len > (size_t)st.st_size - sizeof(struct ho_shm) ||
	    atomic_load(&p->shm->head) > p->shm->len) {
		ownfd_forget(memfd);
		munmap(p->shm, p->map_len);
		free(p);
		return -EPROTO;
	}
	fcntl(memfd, F_SETFD, FD_CLOEXEC);
	*out = p;
	return 0;
}

size_t ho_pre_left(const struct ho_pre *p)
{
	return p ? (size_t)(p->shm->len - atomic_load_explicit(&p->shm->head, memory_order_acquire)) : 0;
}

size_t ho_pre_read(struct ho_pre *p, const struct iovec *iov, int iovcnt, size_t skip, size_t max,
		   int flags)
{
	uint64_t h = atomic_load_explicit(&p->shm->head, memory_order_acquire);
	int peek = !!(flags & MSG_PEEK);

	for (;;) {
		size_t n = p->shm->len - h, done = 0, sk = skip;
		if (n > max)
			n = max;
		if (flags & MSG_TRUNC)
			done = n;
		for (int i = 0; i < iovcnt && done < n; i++) {
			size_t l;
			if (sk >= iov[i].iov_len) {
				sk -= iov[i].iov_len;
				continue;
			}
			l = iov[i].iov_len - sk;
			if (l > n - done)
				l = n - done;
			memcpy((uint8_t *)iov[i].iov_base + sk, p->shm->data + h + done, l);
			done += l;
			sk = 0;
		}
		/* The bytes never change: copy first, then claim them; whoever
		 * loses the race copies again from the new head. */
		if (peek || !done ||
		    atomic_compare_exchange_weak_explicit(&p->shm->head, &h, h + done,
							  memory_order_acq_rel, memory_order_acquire))
			return done;
	}
}

int ho_pre_fd(const struct ho_pre *p)
{
	return p ? p->fd : -1;
}

void ho_pre_free(struct ho_pre *p)
{
	if (!p)
		return;
	munmap(p->shm, p->map_len);
	ownfd_close(p->fd);
	free(p);
}

/* A prefix a previous vfork child kept: its descriptor was that child's
 * (gone with its exec), the number means something else here. */
void ho_pre_forget(struct ho_pre *p)
{
	if (!p)
		return;
	munmap(p->shm, p->map_len);
	free(p);
}
