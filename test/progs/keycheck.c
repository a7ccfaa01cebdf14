/* keycheck.c - a hostile librsock peer: can one stream's peer write into
 * another stream's receive ring? What does a protocol violation do to the
 * stream? (test/rdma/negotiation.bats)
 *
 *   keycheck server ADDR PORT N        an echo server (run it under librsock):
 *                                      accepts N connections, echoes each in
 *                                      a thread, prints "conn K: eof|error
 *                                      ERRNO after BYTES bytes" for each
 *   keycheck client ADDR PORT SRC      the hostile peer (run it without
 *                                      librsock): speaks librsock's
 *                                      negotiation itself (src/proto.c) and
 *                                      opens two RDMA streams to the server
 *
 * The client then posts, on stream 1's QP, an RDMA WRITE aimed at stream 2's
 * ring with stream 2's key, and prints what became of it: "cross-stream
 * write: refused (status S)" (the server's device refused the key for that
 * QP) or "cross-stream write: ACCEPTED". Then it sends "ping" on stream 2 the
 * way librsock does (a write with immediate data into the ring it was
 * given) and prints "stream 2: echo ok" when the echo comes back. On a
 * third stream it breaks the protocol (data beyond the ring, after 4 good
 * bytes) and prints what its TCP connection then says: "stream 3: TCP
 * ECONNRESET" (the server reset the stream at once), "eof", or "nothing
 * within 5 s". Exit status: 0 only when the cross write was refused and
 * stream 2 echoed. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "base/proto.h"

#define RING 65536

static void die(const char *what)
{
	fprintf(stderr, "keycheck: %s: %s\n", what, strerror(errno));
	exit(2);
}

static struct sockaddr_in sin_of(const char *ip, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "keycheck: bad address %s\n", ip);
		exit(2);
	}
	return a;
}

/* ---- server -------------------------------------------------------------------- */

struct job {
	int fd, k;
};

static void *echo(void *arg)
{
	struct job *j = arg;
	char buf[4096];
	long total = 0;

	for (;;) {
		ssize_t r = read(j->fd, buf, sizeof(buf));
		if (r == 0) {
			printf("conn %d: eof after %ld bytes\n", j->k, total);
			break;
		}
		if (r < 0) {
			printf("conn %d: error %s after %ld bytes\n", j->k, strerrorname_np(errno), total);
			break;
		}
		total += r;
		for (ssize_t off = 0; off < r;) {
			ssize_t w = send(j->fd, buf + off, (size_t)(r - off), MSG_NOSIGNAL);
			if (w <= 0)
				break;
			off += w;
		}
	}
	fflush(stdout);
	close(j->fd);
	return NULL;
}

static int server(const char *ip, int port, int n)
{
	struct sockaddr_in a = sin_of(ip, port);
	pthread_t th[16];
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);

	if (n < 1 || n > 16)
		n = 2;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 16))
		die("listen");
	printf("listening\n");
	fflush(stdout);
	for (int k = 0; k < n; k++) {
		struct job *j = malloc(sizeof(*j));
		if (!j || (j->fd = accept(l, NULL, NULL)) < 0)
			die("accept");
		j->k = k + 1;
		pthread_create(&th[k], NULL, echo, j);
	}
	for (int k = 0; k < n; k++)
		pthread_join(th[k], NULL);
	close(l);
	return 0;
}

/* ---- the hostile client ----------------------------------------------------- */

struct stream {
	int fd;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr; /* ring (first RING bytes) and a send area after it */
	uint8_t *mem;
	uint64_t token;
	struct proto_hello_ack ack;
};

static struct rdma_cm_event *event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	if (ev->event != want) {
		fprintf(stderr, "keycheck: rdma_cm event %s, wanted %s (status %d)\n",
			rdma_event_str(ev->event), rdma_event_str(want), ev->status);
		exit(2);
	}
	return ev;
}

static void resolve(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct sockaddr_in *src,
		    struct sockaddr_in *dst)
{
	if (rdma_resolve_addr(id, (struct sockaddr *)src, (struct sockaddr *)dst, 2000))
		die("rdma_resolve_addr");
	rdma_ack_cm_event(event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, 2000))
		die("rdma_resolve_route");
	rdma_ack_cm_event(event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
}

static void full_io(int fd, void *buf, size_t len, int rd)
{
	for (size_t off = 0; off < len;) {
		ssize_t r = rd ? read(fd, (char *)buf + off, len - off)
			       : write(fd, (char *)buf + off, len - off);
		if (r <= 0)
			die(rd ? "read (hello answer)" : "write (hello)");
		off += (size_t)r;
	}
}

static void open_stream(struct stream *s, struct sockaddr_in srv, struct sockaddr_in src)
{
	struct sockaddr_in me = src, data = srv;
	socklen_t ml = sizeof(me);
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
	struct proto_probe pr = {.version = PROTO_VERSION, .family = AF_INET};
	struct proto_hello h = {.version = PROTO_VERSION};
	struct proto_beacon b;
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC};
	struct rdma_cm_event *ev;
	uint8_t buf[64];
	uint32_t qpn;
	uint64_t wire;

	/* 1. our TCP port, then the probe: the beacon must answer. */
	me.sin_port = 0;
	if ((s->fd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    bind(s->fd, (struct sockaddr *)&me, sizeof(me)) ||
	    getsockname(s->fd, (struct sockaddr *)&me, &ml))
		die("bind");
	if (!(s->ch = rdma_create_event_channel()) ||
	    rdma_create_id(s->ch, &s->id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	src.sin_port = 0;
	resolve(s->ch, s->id, &src, &srv);
	pr.client_port = ntohs(me.sin_port);
	pr.server_port = ntohs(srv.sin_port);
	memcpy(pr.client_addr, &me.sin_addr, 4);
	memcpy(pr.server_addr, &srv.sin_addr, 4);
	proto_probe_encode(&pr, buf, sizeof(buf));
	cp.private_data = buf;
	cp.private_data_len = PROTO_PROBE_LEN;
	getrandom(&qpn, sizeof(qpn), 0);
	cp.qp_num = 0x800000u | (qpn & 0x7fffffu);
	if (rdma_connect(s->id, &cp))
		die("rdma_connect (probe)");
	ev = event(s->ch, RDMA_CM_EVENT_REJECTED);
	if (!ev->param.conn.private_data ||
	    proto_beacon_decode(ev->param.conn.private_data, ev->param.conn.private_data_len, &b) <= 0) {
		fprintf(stderr, "keycheck: no librsock beacon at the port\n");
		exit(2);
	}
	rdma_ack_cm_event(ev);
	rdma_destroy_id(s->id);

	/* 2. TCP, then our ring and the hello. */
	if (connect(s->fd, (struct sockaddr *)&srv, sizeof(srv)))
		die("connect");
	if (rdma_create_id(s->ch, &s->id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(s->id, (struct sockaddr *)&src) || !s->id->verbs)
		die("rdma_bind_addr");
	if (!(s->pd = ibv_alloc_pd(s->id->verbs)) || posix_memalign((void **)&s->mem, 4096, 2 * RING))
		die("ibv_alloc_pd");
	memset(s->mem, 0, 2 * RING);
	if (!(s->mr = ibv_reg_mr(s->pd, s->mem, 2 * RING,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
		die("ibv_reg_mr");
	getrandom(&s->token, sizeof(s->token), 0);
	h.token = s->token;
	h.ring_addr = (uintptr_t)s->mem;
	h.ring_rkey = s->mr->rkey;
	h.ring_size = RING;
	proto_hello_encode(&h, buf, sizeof(buf));
	full_io(s->fd, buf, PROTO_HELLO_LEN, 0);
	full_io(s->fd, buf, PROTO_HELLO_ACK_LEN, 1);
	if (proto_hello_ack_decode(buf, PROTO_HELLO_ACK_LEN, &s->ack) <= 0 || s->ack.status ||
	    s->ack.token != s->token) {
		fprintf(stderr, "keycheck: the server did not accept the hello\n");
		exit(2);
	}

	/* 3. The data connection, as librsock's client makes it. */
	data.sin_port = htons(s->ack.rdma_port);
	resolve(s->ch, s->id, NULL, &data);
	if (!(s->cq = ibv_create_cq(s->id->verbs, 64, NULL, NULL, 0)))
		die("ibv_create_cq");
	qa.send_cq = qa.recv_cq = s->cq;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 16;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(s->id, s->pd, &qa))
		die("rdma_create_qp");
	for (int i = 0; i < 16; i++) {
		struct ibv_recv_wr wr = {.wr_id = 1}, *bad;
		if (ibv_post_recv(s->id->qp, &wr, &bad))
			die("ibv_post_recv");
	}
	wire = htole64(s->token);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = &wire;
	cp.private_data_len = sizeof(wire);
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(s->id, &cp))
		die("rdma_connect (data)");
	rdma_ack_cm_event(event(s->ch, RDMA_CM_EVENT_ESTABLISHED));
}

/* Post a signalled write of len bytes from our send area; imm < 0: none. */
static void post(struct stream *via, uint64_t addr, uint32_t rkey, const void *data, uint32_t len,
		 long long imm)
{
	struct ibv_sge sge = {.addr = (uintptr_t)via->mem + RING, .length = len, .lkey = via->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *bad;

	memcpy(via->mem + RING, data, len);
	wr.opcode = imm < 0 ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
	if (imm >= 0)
		wr.imm_data = htonl((uint32_t)imm);
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(via->id->qp, &wr, &bad))
		die("ibv_post_send");
}

/* The next completion on s's CQ within 5 s; 0 when none came. */
static int next_wc(struct stream *s, struct ibv_wc *wc)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(s->cq, 1, wc);
		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec >= 5)
			return 0;
		usleep(100);
	}
}

/* Send msg (4 bytes) on s the way librsock sends data, and wait for the echo
 * server's answer in our ring: 1 when it came back intact. */
static int echo_of(struct stream *s, const char *msg)
{
	struct ibv_wc wc;
	uint32_t got = 0;

	post(s, s->ack.ring_addr, s->ack.ring_rkey, msg, 4, proto_imm_encode(PROTO_IMM_DATA, 4));
	while (got < 4 && next_wc(s, &wc)) {
		enum proto_imm_type type;
		uint32_t v;
		if (wc.status != IBV_WC_SUCCESS) {
			printf("completion status %d (%s)\n", wc.status, ibv_wc_status_str(wc.status));
			break;
		}
		if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
		    proto_imm_decode(ntohl(wc.imm_data), &type, &v) == 0 && type == PROTO_IMM_DATA)
			got += v;
	}
	return got >= 4 && memcmp(s->mem, msg, 4) == 0;
}

static int client(const char *ip, int port, const char *src_ip)
{
	struct sockaddr_in srv = sin_of(ip, port), src = sin_of(src_ip, 0);
	struct stream s1, s2, s3;
	struct ibv_wc wc;
	int refused = 0, echoed = 0;

	open_stream(&s1, srv, src);
	open_stream(&s2, srv, src);
	printf("two streams up: rkeys %#x and %#x\n", s1.ack.ring_rkey, s2.ack.ring_rkey);

	/* The attack: stream 1's QP, stream 2's ring and key. */
	post(&s1, s2.ack.ring_addr, s2.ack.ring_rkey, "EVILEVIL", 8, -1);
	if (!next_wc(&s1, &wc)) {
		printf("cross-stream write: no completion\n");
	} else if (wc.status == IBV_WC_SUCCESS) {
		printf("cross-stream write: ACCEPTED\n");
	} else {
		printf("cross-stream write: refused (status %d, %s)\n", wc.status,
		       ibv_wc_status_str(wc.status));
		refused = 1;
	}

	/* Stream 2 is untouched: "ping" the way librsock sends data. */
	echoed = echo_of(&s2, "ping");
	printf(echoed ? "stream 2: echo ok\n" : "stream 2: no echo\n");

	/* Stream 3: a message the protocol forbids (data beyond the ring the
	 * server gave us) after one it allows. The server's application reads
	 * the 4 bytes, then ECONNRESET, as after a TCP reset; and we, the
	 * peer, get that reset on the TCP connection at once, not a clean end
	 * of stream when the server closes (a librsock peer that waited for
	 * more data would otherwise wait for ever, or take the stream for
	 * complete). */
	open_stream(&s3, srv, src);
	if (echo_of(&s3, "pong")) {
		struct pollfd p = {.fd = s3.fd, .events = POLLIN};
		char c;
		ssize_t r;
		post(&s3, s3.ack.ring_addr + 4, s3.ack.ring_rkey, "junk", 4,
		     proto_imm_encode(PROTO_IMM_DATA, 2 * s3.ack.ring_size));
		if (poll(&p, 1, 5000) != 1)
			printf("stream 3: nothing on TCP within 5 s\n");
		else if ((r = recv(s3.fd, &c, 1, 0)) < 0)
			printf("stream 3: TCP %s\n", strerrorname_np(errno));
		else
			printf("stream 3: TCP %s\n", r ? "bytes" : "eof");
	} else {
		printf("stream 3: no echo\n");
	}
	fflush(stdout);
	rdma_disconnect(s1.id);
	rdma_disconnect(s2.id);
	rdma_disconnect(s3.id);
	close(s1.fd);
	close(s2.fd);
	close(s3.fd);
	return refused && echoed ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "server"))
		return server(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc == 5 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]), argv[4]);
	fprintf(stderr, "usage: keycheck server ADDR PORT N | keycheck client ADDR PORT SRC\n");
	return 2;
}
