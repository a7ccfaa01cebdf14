/* rules.h - operator rules deciding which streams may use RDMA.
 *
 * A rule file (RSOCK_CONF) holds one rule a line, first match wins:
 *
 *   use TRANSPORT PROGRAM ROLE ADDRESS[:PORTS]
 *
 *   TRANSPORT  rdma | tcp | shm   rdma: try RDMA (falling back per RSOCK_MODE), never the
 *                                 same-host path; tcp: neither; shm: the same-host path
 *                                 where the peer is on this host (doc/design.md, "The
 *                                 same-host path"), else as rdma
 *   PROGRAM    glob (fnmatch) on the program name (basename of argv[0]), or *
 *   ROLE       client | server | *      client: connect(); server: listen()/accept()
 *   ADDRESS    * | IPv4[/prefix] | [IPv6][/prefix] (IPv6 always in brackets)
 *   PORTS      * | N | N-M                 (omitted ":PORTS" means any port)
 *
 * '#' starts a comment, blank lines are ignored. Fields are separated by
 * blanks; keywords are case-insensitive. A prefix defaults to /32 (IPv4) or
 * /128 (IPv6); host bits beyond it are ignored. Ports are 0-65535 and N-M needs
 * N <= M. IPv4 rules also match IPv4-mapped IPv6 addresses (::ffff:a.b.c.d);
 * IPv6 rules match only AF_INET6 addresses (mapped ones included, compared as
 * 128 bits). Examples:
 *   use rdma * * *:6379          only port 6379 ...
 *   use tcp  * * *               ... and nothing else
 *   use tcp  * * 10.0.0.0/8      never 10.0.0.0/8
 *   use tcp  sshd * *            never for sshd
 * With no rule matching, the caller's default (config_decide: shm, or rdma
 * under RSOCK_SHM=0).
 */
#ifndef RSOCK_RULES_H
#define RSOCK_RULES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum rules_transport { RULES_RDMA = 0, RULES_TCP = 1, RULES_SHM = 2 };
enum rules_role { RULES_ROLE_ANY = 0, RULES_ROLE_CLIENT = 1, RULES_ROLE_SERVER = 2 };

struct rules_rule {
	enum rules_transport transport;
	char program[64];          /* fnmatch pattern; "*" = any */
	enum rules_role role;
	int family;                /* AF_UNSPEC (any address), AF_INET or AF_INET6 */
	uint8_t addr[16];          /* network byte order; first 4 bytes for AF_INET */
	unsigned prefix;           /* prefix length in bits */
	uint16_t port_lo, port_hi; /* host order; 0-65535 = any */
	unsigned line;             /* line number in the file, for messages */
};

struct rules_set {
	struct rules_rule *rules; /* malloc'd array, n entries */
	size_t n;
};

/* Parse one rule line (no trailing newline needed). Returns 1 and fills *out for
 * a rule, 0 for a blank or comment line, -EINVAL for a malformed line. Never logs. */
int rules_parse_line(const char *line, unsigned lineno, struct rules_rule *out);

/* Parse a whole rule text of len bytes into *set (replacing nothing: set must be
 * empty). Malformed lines are skipped; for each one, if err_line is non-NULL,
 * err_line(lineno, ctx) is called. Returns the number of rules (>= 0) or -ENOMEM.
 * The caller frees with rules_free(). */
int rules_parse_text(const char *text, size_t len, struct rules_set *set,
		     void (*err_line)(unsigned lineno, void *ctx), void *ctx);

/* Read and parse the file at path (at most 1 MiB). Returns the number of rules,
 * or -errno (-ENOENT, -EACCES, -EFBIG, -ENOMEM ...). Uses plain open/read/close:
 * inside the preloaded library the caller holds the per-thread guard, so the
 * shims pass these straight to libc. */
int rules_load_file(const char *path, struct rules_set *set,
		    void (*err_line)(unsigned lineno, void *ctx), void *ctx);

/* Decide for a stream. program: basename of the program; role: CLIENT or SERVER;
 * addr: the peer address (client) or the bound local address (server), may be
 * NULL (= matches only rules with ADDRESS * and any port; so does an address
 * that is neither a full sockaddr_in nor sockaddr_in6). Returns RULES_RDMA or
 * RULES_TCP. */
enum rules_transport rules_match(const struct rules_set *set, const char *program,
				 enum rules_role role, const struct sockaddr *addr,
				 socklen_t addrlen);

/* rules_match(), with none returned when no rule matches. */
enum rules_transport rules_match_or(const struct rules_set *set, const char *program,
				    enum rules_role role, const struct sockaddr *addr,
				    socklen_t addrlen, enum rules_transport none);

void rules_free(struct rules_set *set);

#endif
