#!/usr/bin/env python3
"""statpair.py - the two ends of a stream whose bytes a test controls, for
test/bats/stat.bats (rsock-stat). Each end writes DIR/NAME.ready (its pid)
once its transfer is done, then holds the stream open until DIR/stop exists,
and exits normally (so that RSOCK_STATS=1 prints).

  statpair.py server DIR NAME NRECV NSEND     (writes DIR/NAME.port first)
  statpair.py client DIR NAME PORT NSEND NRECV [fork NCHILD | exec]
fork: after the transfer the client forks; the child sends NCHILD more bytes
on the same stream and writes DIR/NAME.child (its pid). exec: after the
transfer the client execs `sleep 60` (the stream closed on exec).
STATPAIR_SERVER: the server's address (default 127.0.0.1); STATPAIR_CLIENT:
the client's source address (default: the kernel's choice)."""
import os
import socket
import sys
import time


def recv_exact(s, n):
    got = 0
    while got < n:
        b = s.recv(min(65536, n - got))
        if not b:
            raise SystemExit("peer closed after %d of %d bytes" % (got, n))
        got += len(b)


def put(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def hold(d):
    while not os.path.exists(os.path.join(d, "stop")):
        time.sleep(0.05)


def main():
    role, d, name = sys.argv[1], sys.argv[2], sys.argv[3]
    base = os.path.join(d, name)
    if role == "server":
        nrecv, nsend = int(sys.argv[4]), int(sys.argv[5])
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((os.environ.get("STATPAIR_SERVER", "127.0.0.1"), 0))
        ls.listen(4)
        put(base + ".port", str(ls.getsockname()[1]))
        c, _ = ls.accept()
        recv_exact(c, nrecv)
        c.sendall(b"s" * nsend)
        put(base + ".ready", str(os.getpid()))
        hold(d)
        c.close()
        return
    port, nsend, nrecv = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    extra = sys.argv[7:]
    src = os.environ.get("STATPAIR_CLIENT")
    c = socket.create_connection((os.environ.get("STATPAIR_SERVER", "127.0.0.1"), port),
                                 source_address=(src, 0) if src else None)
    c.sendall(b"c" * nsend)
    recv_exact(c, nrecv)
    if extra and extra[0] == "exec":
        put(base + ".ready", str(os.getpid()))
        os.execvp("sleep", ["sleep", "60"])
    if extra and extra[0] == "fork":
        pid = os.fork()
        if pid == 0:
            c.sendall(b"k" * int(extra[1]))
            put(base + ".child", str(os.getpid()))
            hold(d)
            sys.exit(0)
        put(base + ".ready", str(os.getpid()))
        hold(d)
        os.waitpid(pid, 0)
        return
    put(base + ".ready", str(os.getpid()))
    hold(d)
    c.close()


main()
