/* proto.h - librsock wire messages (doc/design.md, "Choosing a path" and
 * "Wire protocol"; the version this build speaks is PROTO_VERSION).
 *
 * Encoders write into caller buffers; decoders validate every field
 * (magic, version, length, sizes, flags) and return -EPROTO for anything
 * malformed, hostile or from a future incompatible version. No allocation,
 * no logging, all integers little-endian on the wire, no struct is ever
 * copied to the wire as it lies in memory. */
#ifndef RSOCK_PROTO_H
#define RSOCK_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_MAGIC 0x314b5352u /* "RSK1" little-endian */
/* 2 adds SWITCH (the hand-over to TCP), 3 its FAILOVER, 4 the read mark */
#define PROTO_VERSION 4
#define PROTO_VERSION_SWITCH 2 /* the first version that speaks SWITCH */
#define PROTO_VERSION_FAILOVER 3 /* the first whose SWITCH has FAILOVER and rx_bytes */
/* The first whose ring (hello, hello_ack) is followed by an 8-byte word the
 * peer writes its read mark into, and which writes its own (doc/design.md,
 * "Wire protocol"). */
#define PROTO_VERSION_MARK 4

/* rdma_cm private data of the probe (client -> beacon connect request). */
struct proto_probe {
	uint16_t version;
	uint16_t family;      /* AF_INET or AF_INET6 */
	uint16_t client_port; /* host order */
	uint16_t server_port; /* host order */
	uint8_t client_addr[16];
	uint8_t server_addr[16];
};
#define PROTO_PROBE_LEN 48 /* fits the 56-byte RDMA_PS_TCP connect private data */

/* rdma_cm private data of the beacon's reject: "librsock listens here". */
struct proto_beacon {
	uint16_t version;     /* highest version the server speaks */
	uint16_t flags;
	uint16_t data_port;   /* version >= 2: a hint, the port of the beacon process's
			       * rdma_cm listener on the probed address (host order);
			       * 0 when it has none. HELLO_ACK's rdma_port decides. */
};
#define PROTO_BEACON_LEN 12

/* First bytes on the TCP control connection, client -> server. */
struct proto_hello {
	uint16_t version;
	uint32_t flags;
	uint64_t token;      /* random, echoed as rdma_cm private data */
	uint64_t ring_addr;  /* client's receive ring */
	uint32_t ring_rkey;
	uint32_t ring_size;  /* power of two, RING_MIN_SIZE..RING_MAX_SIZE */
	uint32_t max_inline;
};
#define PROTO_HELLO_LEN 44

/* Server -> client answer on TCP. status 0 = go RDMA, else a fallback reason
 * (enum rsock_fallback_reason) and the other fields are ignored. */
struct proto_hello_ack {
	uint16_t version;
	uint16_t status;
	uint16_t rdma_port;  /* the accepting process's rdma_cm listener, host order */
	uint16_t flags;      /* PROTO_ACK_SHM (version >= 2; 0 in version 1) */
	uint64_t token;      /* echoed */
	uint64_t ring_addr;
	uint32_t ring_rkey;
	uint32_t ring_size;
	uint32_t max_inline;
};
#define PROTO_HELLO_ACK_LEN 44
/* hello's flags: a same-host stream (doc/design.md, "The same-host path"):
 * token names the client's set-up socket, ring_addr is the secret the
 * server's set-up message echoes, ring_rkey 0, ring_size each ring's. */
#define PROTO_HELLO_SHM 1u
/* hello_ack's flags: the server set the same-host stream up (rdma_port 0). */
#define PROTO_ACK_SHM 1u

/* Either direction on TCP, after the RDMA connection is up (version >= 2):
 * "I send nothing more over RDMA; rdma_bytes is everything I wrote into
 * your ring; what follows on TCP is application data" (doc/design.md
 * "Descriptors, fork, exec": the hand-over). Version 3 adds rx_bytes, the
 * peer's bytes this side received over RDMA and keeps, and the FAILOVER
 * flag: this side's path broke, and what follows on TCP starts at the
 * peer's rx_bytes (the failover). The encoder writes version 2's 24 bytes
 * for version 2 (no rx_bytes), 32 bytes for a later one. */
struct proto_switch {
	uint16_t version;
	uint32_t flags;
	uint64_t rdma_bytes;
	uint64_t rx_bytes;   /* version >= 3; 0 from a version-2 message */
};
#define PROTO_SWITCH_LEN 24  /* version 2 */
#define PROTO_SWITCH3_LEN 32 /* version 3 */
#define PROTO_SWITCH_FAILOVER 1u /* flags, version >= 3 */

/* The 32-bit immediate of an RDMA WRITE WITH IMMEDIATE. */
enum proto_imm_type {
	PROTO_IMM_DATA = 0,   /* value = bytes written into the ring */
	PROTO_IMM_CREDIT = 1, /* value = bytes consumed since the last credit */
	PROTO_IMM_FIN = 2,    /* value = 0: no more data (shutdown SHUT_WR / close) */
	PROTO_IMM_RESET = 3,  /* value = 0: abortive close (ECONNRESET for the peer) */
};
#define PROTO_IMM_VALUE_MAX ((1u << 30) - 1)

/* Decoder bounds: the u16 length of a hello/hello_ack is at most this (a longer
 * one is refused, never waited for); max_inline is at most PROTO_MAX_INLINE. */
#define PROTO_MSG_MAX_LEN 256
#define PROTO_MAX_INLINE 4096

/* Each encoder returns the number of bytes written, or -ENOSPC when len is too
 * small. Each decoder returns the bytes consumed, -EAGAIN when more bytes are
 * needed (len too short so far), or -EPROTO. Fields are validated as soon as
 * they are present, so a prefix that cannot begin a valid message is -EPROTO
 * at once; *m is written only on success. Probe and beacon (rdma_cm private
 * data, which the CM may pad) accept len beyond their length and consume
 * their version-1 length. NULL pointers give -EINVAL. */
int proto_probe_encode(const struct proto_probe *m, void *buf, size_t len);
int proto_probe_decode(const void *buf, size_t len, struct proto_probe *m);
int proto_beacon_encode(const struct proto_beacon *m, void *buf, size_t len);
int proto_beacon_decode(const void *buf, size_t len, struct proto_beacon *m);
int proto_hello_encode(const struct proto_hello *m, void *buf, size_t len);
int proto_hello_decode(const void *buf, size_t len, struct proto_hello *m);
int proto_hello_ack_encode(const struct proto_hello_ack *m, void *buf, size_t len);
int proto_hello_ack_decode(const void *buf, size_t len, struct proto_hello_ack *m);
/* The length a hello (ack 0) or hello_ack (ack 1) at buf says it has, from
 * its first 8 bytes: PROTO_HELLO_LEN..PROTO_MSG_MAX_LEN, or -EAGAIN (fewer
 * bytes), -EPROTO (not such a message, or a length out of range), -EINVAL
 * (NULL). A reader peeks that much before it decodes a later version's
 * longer message. */
int proto_hello_len(const void *buf, size_t len, int ack);
int proto_switch_encode(const struct proto_switch *m, void *buf, size_t len);
int proto_switch_decode(const void *buf, size_t len, struct proto_switch *m);

/* An immediate every decoder refuses (FIN with a non-zero value). */
#define PROTO_IMM_POISON ((uint32_t)PROTO_IMM_FIN << 30 | PROTO_IMM_VALUE_MAX)

/* Immediate data: encode returns type << 30 | value, inline (every data
 * message's); a type outside the enum or a value above PROTO_IMM_VALUE_MAX
 * gives one that decode refuses instead of a silently truncated one, and so
 * do DATA/CREDIT with value 0 and FIN/RESET with a non-zero value, by their
 * natural encoding. decode returns 0 or -EPROTO (unknown type, value out of
 * range: 0 for DATA/CREDIT, non-zero for FIN/RESET). */
static inline uint32_t proto_imm_encode(enum proto_imm_type type, uint32_t value)
{
	if ((unsigned)type > PROTO_IMM_RESET || value > PROTO_IMM_VALUE_MAX)
		return PROTO_IMM_POISON;
	return (uint32_t)type << 30 | value;
}
int proto_imm_decode(uint32_t imm, enum proto_imm_type *type, uint32_t *value);

#endif
