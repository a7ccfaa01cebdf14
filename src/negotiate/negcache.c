/* negcache.c - the negative cache: peers whose probe found no librsock
 * (a plain peer, or none answered in time) stay on TCP for
 * RSOCK_NEG_CACHE_S without a new probe. */
#ifdef HAVE_CONFIG_H
#include "build-config.h"
#endif
#include <pthread.h>
#include <string.h>

#include "base/clock.h"
#include "base/config.h"

#include "negotiate/internal.h"

#define NEG_SLOTS 64
static struct {
	uint8_t addr[16];
	uint16_t family, port;
	int64_t until;
} neg[NEG_SLOTS];
static unsigned neg_next;

int cm_neg_lookup(const struct sockaddr *peer)
{
	uint8_t a[16];
	int64_t now = clock_now_ms();
	int hit = 0;

	sa_addr16(peer, a);
	pthread_mutex_lock(&cm_lock);
	for (int i = 0; i < NEG_SLOTS && !hit; i++)
		hit = neg[i].until > now && neg[i].family == peer->sa_family &&
		      neg[i].port == sa_port(peer) && !memcmp(neg[i].addr, a, 16);
	pthread_mutex_unlock(&cm_lock);
	return hit;
}

void cm_neg_insert(const struct sockaddr *peer)
{
	unsigned i;

	pthread_mutex_lock(&cm_lock);
	i = neg_next++ % NEG_SLOTS;
	sa_addr16(peer, neg[i].addr);
	neg[i].family = peer->sa_family;
	neg[i].port = sa_port(peer);
	neg[i].until = clock_now_ms() + (int64_t)cm_settings.neg_cache_s * 1000;
	pthread_mutex_unlock(&cm_lock);
}
