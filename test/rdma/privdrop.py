#!/usr/bin/env python3
"""privdrop.py ADDR PORT MODE N: an echo server that changes its credentials,
as daemons do, for the RDMA suite (test/rdma/forkexec.bats).

MODE accept-then-setuid: the first stream is accepted and answers one
  message, then the process calls setgid(0)/setuid(0) (same ids, new
  credentials: what rsync's daemon child does), then keeps echoing it.
MODE listen-then-drop: the process listens as root, then drops to nobody
  (65534) before accepting (what a daemon binding a low port does).
Each of N streams is echoed until EOF; prints "served N" at the end."""
import os
import socket
import sys

from echoes import echo_to_eof

addr, port, mode, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port))
s.listen(8)
if mode == "listen-then-drop":
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
for i in range(n):
    c, _ = s.accept()
    if mode == "accept-then-setuid" and i == 0:
        c.sendall(c.recv(100))
        os.setgid(0)
        os.setuid(0)
    echo_to_eof(c)
print("served", n, flush=True)
