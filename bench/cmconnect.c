/* cmconnect.c - bare rdma_cm connection set-up, the floor against which
 * bench/suite.sh puts librsock's connect().
 *
 *   cmconnect server ADDR PORT COUNT       accept COUNT connections, then exit
 *   cmconnect client ADDR PORT SRC COUNT   COUNT connections one after the
 *                                          other: prints "p50_us conns/s"
 *
 * One connection: resolve the address and the route, create a QP, connect,
 * ESTABLISHED (the time measured), then disconnect and destroy. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/rdma_cma.h>

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static struct sockaddr_in addr(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "cmconnect: bad address %s\n", ip);
		exit(2);
	}
	return a;
}

/* The next event, which must be `want`; the id it is about in *id. */
static void expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, struct rdma_cm_id **id)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	if (ev->event != want) {
		fprintf(stderr, "cmconnect: %s, expected %s\n", rdma_event_str(ev->event),
			rdma_event_str(want));
		exit(1);
	}
	if (id)
		*id = ev->id;
	rdma_ack_cm_event(ev);
}

static struct ibv_pd *pd_of(struct ibv_context *ctx)
{
	static struct ibv_context *c;
	static struct ibv_pd *pd;

	if (c != ctx) {
		c = ctx;
		if (!(pd = ibv_alloc_pd(ctx)))
			die("ibv_alloc_pd");
	}
	return pd;
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16,
					      .max_send_sge = 1, .max_recv_sge = 1}};

	if (rdma_create_qp(id, pd_of(id->verbs), &qa))
		die("rdma_create_qp");
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
	struct rdma_cm_id *id;

	if (!ch)
		die("rdma_create_event_channel");
	if (argc == 5 && !strcmp(argv[1], "server")) {
		struct sockaddr_in a = addr(argv[2], atoi(argv[3]));
		long n = atol(argv[4]), done = 0;
		struct rdma_cm_id *lid;
		if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) ||
		    rdma_bind_addr(lid, (struct sockaddr *)&a) || rdma_listen(lid, 64))
			die("listen");
		while (done < n) {
			struct rdma_cm_event *ev;
			if (rdma_get_cm_event(ch, &ev))
				die("rdma_get_cm_event");
			id = ev->id;
			switch (ev->event) {
			case RDMA_CM_EVENT_CONNECT_REQUEST:
				make_qp(id);
				if (rdma_accept(id, &cp))
					die("rdma_accept");
				break;
			case RDMA_CM_EVENT_DISCONNECTED:
				rdma_ack_cm_event(ev);
				rdma_destroy_qp(id);
				rdma_destroy_id(id);
				done++;
				continue;
			default:
				break;
			}
			rdma_ack_cm_event(ev);
		}
		return 0;
	}
	if (argc != 6 || strcmp(argv[1], "client")) {
		fprintf(stderr, "usage: see the head of bench/cmconnect.c\n");
		return 2;
	}
	struct sockaddr_in dst = addr(argv[2], atoi(argv[3])), src = addr(argv[4], 0);
	long n = atol(argv[5]);
	double *lat = calloc((size_t)n, sizeof(double)), t0 = now_us();

	for (long i = 0; i < n; i++) {
		double t = now_us();
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000))
			die("rdma_resolve_addr");
		expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
		if (rdma_resolve_route(id, 2000))
			die("rdma_resolve_route");
		expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
		make_qp(id);
		if (rdma_connect(id, &cp))
			die("rdma_connect");
		expect(ch, RDMA_CM_EVENT_ESTABLISHED, NULL);
		lat[i] = now_us() - t;
		rdma_disconnect(id);
		expect(ch, RDMA_CM_EVENT_DISCONNECTED, NULL);
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}
	double total = now_us() - t0;
	qsort(lat, (size_t)n, sizeof(double), cmp);
	printf("%.1f %.1f\n", lat[n / 2], n / (total / 1e6));
	return 0;
}
