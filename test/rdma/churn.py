"""churn.py - many short streams, one after the other, from one process.

    churn.py serve ADDR PORT N [MARK]  accept N streams one by one: read 16
                                       bytes, send them back, close (a stream
                                       the client reset may fail anywhere:
                                       counted, not fatal)
    churn.py client ADDR PORT N MARK [abrupt]
                                       N streams: connect, 16 B out and back,
                                       close; with "abrupt" every second
                                       stream is reset instead: 16 B out and
                                       close at once with SO_LINGER {1, 0},
                                       the echo unread

Both print, after MARK streams and after the last (a second later, so that
the library's thread has torn closed streams down), "at K qp Q cq C mr M
mrlen L fds F rss R": the queue pairs, completion queues, memory
registrations and registered bytes this process holds (`rdma -j resource
show`), its open descriptors and its resident set in KiB (and on stderr
the descriptors' targets); the client then waits 2 s, so that the server's
look finds no stream being set up. At the end the
client prints "close_p50_us X", the median time of close(), and the server
"served N echoed E failed F".
"""
import json
import os
import socket
import struct
import subprocess
import sys
import time

from echoes import read_exact


def held():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = []
    for kind in ("qp", "cq", "mr"):
        r = subprocess.run(["rdma", "-j", "resource", "show", kind], env=env,
                           capture_output=True, text=True, check=True)
        mine = [e for e in json.loads(r.stdout or "[]") if e.get("pid") == os.getpid()]
        out.append(len(mine))
        if kind == "mr":
            out.append(sum(int(e.get("mrlen", 0)) for e in mine))
    out.append(len(os.listdir("/proc/self/fd")))
    with open("/proc/self/status") as f:
        out.append(next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")))
    return out


def report(i):
    time.sleep(1)
    print("at %d qp %d cq %d mr %d mrlen %d fds %d rss %d" % ((i,) + tuple(held())), flush=True)
    fds = []
    for f in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            fds.append("%s:%s" % (f, os.readlink("/proc/self/fd/" + f)))
        except OSError:
            pass
    print("at %d descriptors %s" % (i, " ".join(fds)), file=sys.stderr, flush=True)


def serve(addr, port, n, mark):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)
    echoed = failed = 0
    for i in range(1, n + 1):
        c, _ = s.accept()
        try:
            c.sendall(read_exact(c, 16))
            echoed += 1
        except OSError:
            failed += 1
        c.close()
        if mark and i in (mark, n):
            report(i)
    print("served %d echoed %d failed %d" % (n, echoed, failed), flush=True)


def client(addr, port, n, mark, abrupt):
    closes = []
    reset = struct.pack("ii", 1, 0)
    for i in range(1, n + 1):
        c = socket.create_connection((addr, port))
        c.sendall(b"0123456789abcdef")
        if abrupt and i % 2 == 0:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, reset)
        else:
            b = read_exact(c, 16)
            assert b == b"0123456789abcdef", "stream %d: %r" % (i, b)
        t = time.monotonic()
        c.close()
        closes.append(time.monotonic() - t)
        if i in (mark, n):
            report(i)
            if i == mark:
                time.sleep(2)  # the server's look at what it holds, with no stream set up
    closes.sort()
    print("close_p50_us %.0f" % (closes[len(closes) // 2] * 1e6), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
              int(sys.argv[5]) if len(sys.argv) > 5 else 0)
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
               len(sys.argv) > 6 and sys.argv[6] == "abrupt")
