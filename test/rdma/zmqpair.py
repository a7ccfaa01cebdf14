#!/usr/bin/env python3
"""zmqpair.py - ZeroMQ (libzmq: its own I/O threads, epoll, eventfd,
non-blocking connect) over two TCP connections, for applications.bats.

  zmqpair.py srv ADDR PORT        REP on PORT, PULL on PORT+1
  zmqpair.py cli ADDR PORT FROM   from FROM: 50 requests of 1 B to 300 KB,
                                  each answered with its SHA-256; then 400
                                  pushed messages of up to 60 KB and an END
The server prints "pull N DIGEST", the client "req ok K of 50" and
"push N DIGEST"."""
import hashlib
import os
import sys

import zmq

role, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = zmq.Context()
if role == "srv":
    rep = ctx.socket(zmq.REP)
    rep.bind("tcp://%s:%d" % (addr, port))
    pull = ctx.socket(zmq.PULL)
    pull.bind("tcp://%s:%d" % (addr, port + 1))
    for _ in range(50):
        m = rep.recv()
        rep.send(hashlib.sha256(m).digest())
    h, n = hashlib.sha256(), 0
    while True:
        m = pull.recv()
        if m == b"END":
            break
        h.update(m)
        n += len(m)
    print("pull", n, h.hexdigest(), flush=True)
else:
    src = sys.argv[4]
    req = ctx.socket(zmq.REQ)
    req.connect("tcp://%s:0;%s:%d" % (src, addr, port))
    ok = 0
    for i in range(50):
        m = os.urandom(1 + (i * 7919) % 300000)
        req.send(m)
        ok += req.recv() == hashlib.sha256(m).digest()
    print("req ok", ok, "of 50", flush=True)
    push = ctx.socket(zmq.PUSH)
    push.connect("tcp://%s:0;%s:%d" % (src, addr, port + 1))
    h, n = hashlib.sha256(), 0
    for i in range(400):
        m = os.urandom(100 + (i * 104729) % 60000)
        h.update(m)
        n += len(m)
        push.send(m)
    push.send(b"END")
    print("push", n, h.hexdigest(), flush=True)
    push.close(linger=30000)
    req.close()
    ctx.term()
