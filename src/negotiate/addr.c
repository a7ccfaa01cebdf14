/* addr.c - socket address helpers of the negotiation: ports, the probe's
 * 16-byte address layout, IPv4-mapped addresses, the route's source. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/real.h"

#include "negotiate/internal.h"

uint16_t sa_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
}

void sa_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

/* Address bytes in the probe's layout (IPv4 in the first 4 of 16). */
void sa_addr16(const struct sockaddr *sa, uint8_t out[16])
{
	memset(out, 0, 16);
	if (sa->sa_family == AF_INET)
		memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	else
		memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

int sa_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	return IN6_IS_ADDR_LOOPBACK(a) ||
	       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* The wildcard address (INADDR_ANY / in6addr_any). */
/* The wildcard address of ss's family, port unchanged. */
void sa_wildcard(struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_addr.s_addr = htonl(INADDR_ANY);
	else if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_addr = in6addr_any;
}

int sa_is_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

socklen_t sa_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* An IPv4-mapped IPv6 address (an AF_INET6 socket talking IPv4: a dual-stack
 * [::] listener's IPv4 clients, a client dialling ::ffff:a.b.c.d) becomes
 * the AF_INET address it stands for, port kept: rdma_cm binds, resolves and
 * listens on IPv4 addresses, not on their mapped form, and the probe and the
 * tuple table speak AF_INET for IPv4 whatever the socket's family. */
void sa_unmap(struct sockaddr_storage *ss)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	struct sockaddr_in v4;

	if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
		return;
	memset(&v4, 0, sizeof(v4));
	v4.sin_family = AF_INET;
	v4.sin_port = s6->sin6_port;
	memcpy(&v4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, &v4, sizeof(v4));
}

/* *out = sa, unmapped (sa_unmap); returns out as a sockaddr. */
struct sockaddr *sa_copy_unmapped(struct sockaddr_storage *out, const struct sockaddr *sa)
{
	memcpy(out, sa, sa_len(sa));
	sa_unmap(out);
	return (struct sockaddr *)out;
}

/* The other way, for a socket of family `family`: an AF_INET address given
 * to an AF_INET6 socket becomes ::ffff:a.b.c.d. */
void sa_map_for(int family, struct sockaddr_storage *ss)
{
	struct sockaddr_in v4;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	if (family != AF_INET6 || ss->ss_family != AF_INET)
		return;
	memcpy(&v4, ss, sizeof(v4));
	memset(ss, 0, sizeof(*ss));
	s6->sin6_family = AF_INET6;
	s6->sin6_port = v4.sin_port;
	s6->sin6_addr.s6_addr[10] = 0xff;
	s6->sin6_addr.s6_addr[11] = 0xff;
	memcpy(&s6->sin6_addr.s6_addr[12], &v4.sin_addr, 4);
}

/* The source address the kernel would use to reach peer (no packet sent). */
int sa_route_source(const struct sockaddr *peer, struct sockaddr_storage *src)
{
	socklen_t l = sizeof(*src);
	int s = rsock_real.socket(peer->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int rc = 0;

	if (s < 0)
		return -errno;
	if (rsock_real.connect(s, peer, sa_len(peer)) || rsock_real.getsockname(s, (struct sockaddr *)src, &l))
		rc = -errno;
	rsock_real.close(s);
	return rc;
}
