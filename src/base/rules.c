/* rules.c - see rules.h for the grammar.
 *
 * Parsing works on (pointer, length) spans so that rules_parse_text needs
 * no copy of the text; each field is copied into a bounded buffer before
 * it is converted, and a field too long for its buffer makes the line
 * malformed. Numbers are decimal digits only, range-checked. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/rules.h"

#define RULES_FILE_MAX (1u << 20) /* rules_load_file: 1 MiB */
#define FIELD_MAX 96              /* longest TRANSPORT/ROLE/ADDRESS field */
#define NFIELDS 5

struct span {
	const char *p;
	size_t n;
};

static int is_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Copy a span into dst[cap] as a string; 0, or -EINVAL when it does not fit. */
static int span_str(struct span s, char *dst, size_t cap)
{
	if (s.n >= cap)
		return -EINVAL;
	memcpy(dst, s.p, s.n);
	dst[s.n] = '\0';
	return 0;
}

static int span_is(struct span s, const char *word)
{
	size_t n = strlen(word);

	return s.n == n && !strncasecmp(s.p, word, n);
}

/* A decimal number of 1-5 digits (no sign, no space) at most max: 0, -EINVAL. */
static int parse_num(const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;
	size_t n = strlen(s);

	if (n == 0 || n > 5 || strspn(s, "0123456789") != n)
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* PORTS: "*", "N" or "N-M" with N <= M. */
static int parse_ports(char *s, struct rules_rule *r)
{
	unsigned long lo, hi;
	char *dash;

	if (!strcmp(s, "*")) {
		r->port_lo = 0;
		r->port_hi = 65535;
		return 0;
	}
	dash = strchr(s, '-');
	if (dash)
		*dash = '\0';
	if (parse_num(s, 65535, &lo))
		return -EINVAL;
	if (!dash)
		hi = lo;
	else if (parse_num(dash + 1, 65535, &hi) || hi < lo)
		return -EINVAL;
	r->port_lo = (uint16_t)lo;
	r->port_hi = (uint16_t)hi;
	return 0;
}

/* Clear the host bits beyond prefix in a network-order address. */
static void mask_addr(uint8_t *a, unsigned bytes, unsigned prefix)
{
	for (unsigned i = 0; i < bytes; i++) {
		unsigned bit = i * 8;
		if (prefix <= bit)
			a[i] = 0;
		else if (prefix < bit + 8)
			a[i] &= (uint8_t)(0xff00u >> (prefix - bit));
	}
}

/* ADDRESS[:PORTS] as one field (s is a modifiable copy). */
static int parse_address(char *s, struct rules_rule *r)
{
	char *ports = NULL, *slash, *addr = s;
	unsigned long prefix;
	int family;

	r->port_lo = 0;
	r->port_hi = 65535;
	if (s[0] == '*') {
		if (s[1] == ':')
			ports = s + 2;
		else if (s[1])
			return -EINVAL;
		r->family = AF_UNSPEC;
		memset(r->addr, 0, sizeof(r->addr));
		r->prefix = 0;
		return ports ? parse_ports(ports, r) : 0;
	}
	if (s[0] == '[') {
		char *close = strchr(s, ']');
		if (!close)
			return -EINVAL;
		*close = '\0';
		addr = s + 1;
		family = AF_INET6;
		slash = close + 1;
		if (*slash != '/' && *slash != ':' && *slash != '\0')
			return -EINVAL;
		if (*slash != '/')
			slash = NULL;
		ports = strchr(close + 1, ':');
	} else {
		family = AF_INET;
		ports = strchr(s, ':');
		slash = strchr(s, '/');
		if (slash && ports && slash > ports)
			return -EINVAL;
	}
	if (ports)
		*ports++ = '\0';
	if (slash)
		*slash++ = '\0';
	memset(r->addr, 0, sizeof(r->addr));
	if (inet_pton(family, addr, r->addr) != 1)
		return -EINVAL;
	prefix = family == AF_INET ? 32 : 128;
	if (slash && parse_num(slash, prefix, &prefix))
		return -EINVAL;
	if (ports && parse_ports(ports, r))
		return -EINVAL;
	r->family = family;
	r->prefix = (unsigned)prefix;
	mask_addr(r->addr, family == AF_INET ? 4 : 16, r->prefix);
	return 0;
}

/* One line as a span: 1 (rule in *out), 0 (blank or comment), -EINVAL. */
static int parse_span(const char *p, size_t n, unsigned lineno, struct rules_rule *out)
{
	struct span f[NFIELDS];
	struct rules_rule r;
	char buf[FIELD_MAX];
	const char *hash = memchr(p, '#', n);
	size_t nf = 0, i = 0;

	if (hash)
		n = (size_t)(hash - p);
	while (i < n) {
		size_t start;
		unsigned char c = (unsigned char)p[i];

		if (is_space(c)) {
			i++;
			continue;
		}
		start = i;
		while (i < n && !is_space((unsigned char)p[i])) {
			c = (unsigned char)p[i];
			if (c < 0x20 || c == 0x7f) /* NUL and other controls */
				return -EINVAL;
			i++;
		}
		if (nf == NFIELDS)
			return -EINVAL;
		f[nf].p = p + start;
		f[nf].n = i - start;
		nf++;
	}
	if (nf == 0)
		return 0;
	if (nf != NFIELDS || !span_is(f[0], "use"))
		return -EINVAL;

	memset(&r, 0, sizeof(r));
	r.line = lineno;
	if (span_is(f[1], "rdma"))
		r.transport = RULES_RDMA;
	else if (span_is(f[1], "tcp"))
		r.transport = RULES_TCP;
	else if (span_is(f[1], "shm"))
		r.transport = RULES_SHM;
	else
		return -EINVAL;
	if (span_str(f[2], r.program, sizeof(r.program)))
		return -EINVAL;
	if (span_is(f[3], "*"))
		r.role = RULES_ROLE_ANY;
	else if (span_is(f[3], "client"))
		r.role = RULES_ROLE_CLIENT;
	else if (span_is(f[3], "server"))
		r.role = RULES_ROLE_SERVER;
	else
		return -EINVAL;
	if (span_str(f[4], buf, sizeof(buf)) || parse_address(buf, &r))
		return -EINVAL;
	*out = r;
	return 1;
}

/* Returns 1 (a rule, *out filled), 0 (blank or comment line) or -EINVAL (a
 * malformed line, or line/out NULL); *out is written only for a rule. */
int rules_parse_line(const char *line, unsigned lineno, struct rules_rule *out)
{
	if (!line || !out)
		return -EINVAL;
	return parse_span(line, strlen(line), lineno, out);
}

/* Returns the number of rules parsed into *set, -ENOMEM (set left empty), or
 * -EINVAL when set is NULL or not empty. */
int rules_parse_text(const char *text, size_t len, struct rules_set *set,
		     void (*err_line)(unsigned lineno, void *ctx), void *ctx)
{
	struct rules_rule *v = NULL;
	size_t n = 0, cap = 0, pos = 0;
	unsigned lineno = 0;

	if (!set || set->n || set->rules || (!text && len))
		return -EINVAL;
	while (pos < len) {
		const char *p = text + pos, *nl = memchr(p, '\n', len - pos);
		size_t ln = nl ? (size_t)(nl - p) : len - pos;
		struct rules_rule r;
		int rc;

		pos += ln + (nl != NULL);
		if (lineno < UINT_MAX)
			lineno++;
		rc = parse_span(p, ln, lineno, &r);
		if (rc < 0) {
			if (err_line)
				err_line(lineno, ctx);
			continue;
		}
		if (rc == 0)
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct rules_rule *nv;
			if (ncap > INT_MAX || ncap > SIZE_MAX / sizeof(*v) ||
			    !(nv = realloc(v, ncap * sizeof(*v)))) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
			cap = ncap;
		}
		v[n++] = r;
	}
	if (n && n < cap) {
		struct rules_rule *nv = realloc(v, n * sizeof(*v));
		if (nv)
			v = nv;
	}
	set->rules = v;
	set->n = n;
	return (int)n;
}

/* Returns the number of rules, or -errno from open/fstat/read, -EISDIR,
 * -EFBIG (over 1 MiB), -ENOMEM, -EINVAL (NULL or non-empty set). errno is
 * preserved. */
int rules_load_file(const char *path, struct rules_set *set,
		    void (*err_line)(unsigned lineno, void *ctx), void *ctx)
{
	int saved = errno, fd, rc;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	struct stat st;

	if (!path || !set || set->n || set->rules)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	if (fstat(fd, &st)) {
		rc = -errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		rc = -EISDIR;
		goto out;
	}
	if (S_ISREG(st.st_mode) && st.st_size > (off_t)RULES_FILE_MAX) {
		rc = -EFBIG;
		goto out;
	}
	/* Read to the end whatever st_size said (the file may change, or be
	 * a device): one byte more than the limit tells "too big". */
	for (;;) {
		ssize_t r;
		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 4096;
			char *nb;
			if (S_ISREG(st.st_mode) && !cap && st.st_size > 0)
				ncap = (size_t)st.st_size + 1;
			if (ncap > RULES_FILE_MAX + 1)
				ncap = RULES_FILE_MAX + 1;
			if (!(nb = realloc(buf, ncap))) {
				rc = -ENOMEM;
				goto out;
			}
			buf = nb;
			cap = ncap;
		}
		r = read(fd, buf + len, cap - len);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			goto out;
		}
		if (r == 0)
			break;
		len += (size_t)r;
		if (len > RULES_FILE_MAX) {
			rc = -EFBIG;
			goto out;
		}
	}
	rc = rules_parse_text(buf, len, set, err_line, ctx);
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	errno = saved;
	return rc;
}

/* Does addr (network order, bytes long) fall within the rule's prefix? */
static int prefix_match(const uint8_t *rule, const uint8_t *addr, unsigned prefix)
{
	unsigned full = prefix / 8, rest = prefix % 8;

	if (memcmp(rule, addr, full))
		return 0;
	if (rest) {
		uint8_t m = (uint8_t)(0xff00u >> rest);
		if ((rule[full] & m) != (addr[full] & m))
			return 0;
	}
	return 1;
}

static int addr_match(const struct rules_rule *r, const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr_in s4;
	struct sockaddr_in6 s6;
	const uint8_t *a = NULL;
	unsigned port = 0;

	if (sa && sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		memcpy(&s4, sa, sizeof(s4)); /* the caller's buffer may be unaligned */
		if (r->family == AF_INET)
			a = (const uint8_t *)&s4.sin_addr;
		port = ntohs(s4.sin_port);
	} else if (sa && sa->sa_family == AF_INET6 &&
		   len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		memcpy(&s6, sa, sizeof(s6));
		if (r->family == AF_INET6)
			a = s6.sin6_addr.s6_addr;
		else if (r->family == AF_INET && IN6_IS_ADDR_V4MAPPED(&s6.sin6_addr))
			a = s6.sin6_addr.s6_addr + 12;
		port = ntohs(s6.sin6_port);
	} else {
		/* No usable address: only "any address, any port" matches. */
		return r->family == AF_UNSPEC && r->port_lo == 0 && r->port_hi == 65535;
	}
	if (port < r->port_lo || port > r->port_hi)
		return 0;
	if (r->family == AF_UNSPEC)
		return 1;
	return a && prefix_match(r->addr, a, r->prefix);
}

enum rules_transport rules_match(const struct rules_set *set, const char *program,
				 enum rules_role role, const struct sockaddr *addr,
				 socklen_t addrlen)
{
	return rules_match_or(set, program, role, addr, addrlen, RULES_RDMA);
}

enum rules_transport rules_match_or(const struct rules_set *set, const char *program,
				    enum rules_role role, const struct sockaddr *addr,
				    socklen_t addrlen, enum rules_transport none)
{
	if (!program)
		program = "";
	for (size_t i = 0; set && i < set->n; i++) {
		const struct rules_rule *r = &set->rules[i];
		if (r->role != RULES_ROLE_ANY && r->role != role)
			continue;
		if (!addr_match(r, addr, addrlen))
			continue;
		if (strcmp(r->program, "*") && fnmatch(r->program, program, 0) != 0)
			continue;
		return r->transport;
	}
	return none;
}

void rules_free(struct rules_set *set)
{
	if (!set)
		return;
	free(set->rules);
	set->rules = NULL;
	set->n = 0;
}
