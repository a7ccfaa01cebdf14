"""churn.py - many short streams, one after the other, from one process.

    churn.py serve ADDR PORT N        accept N streams one by one: read 16 bytes,
                                      send them back, close
    churn.py client ADDR PORT N MARK  N streams: connect, 16 B out and back,
                                      close. After MARK streams and after the
                                      last (a second later, so that the
                                      library's thread has torn closed streams
                                      down) prints "at K qp Q cq C mr M": the
                                      queue pairs, completion queues and memory
                                      registrations this process holds
                                      (`rdma -j resource show`); at the end
                                      "close_p50_us X", the median time of
                                      close()
"""
import json
import os
import socket
import subprocess
import sys
import time


def serve(addr, port, n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)
    for _ in range(n):
        c, _ = s.accept()
        b = b""
        while len(b) < 16:
            d = c.recv(16 - len(b))
            if not d:
                break
            b += d
        c.sendall(b)
        c.close()


def held():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = []
    for kind in ("qp", "cq", "mr"):
        r = subprocess.run(["rdma", "-j", "resource", "show", kind], env=env,
                           capture_output=True, text=True, check=True)
        out.append(sum(1 for e in json.loads(r.stdout or "[]") if e.get("pid") == os.getpid()))
    return out


def client(addr, port, n, mark):
    closes = []
    for i in range(1, n + 1):
        c = socket.create_connection((addr, port))
        c.sendall(b"0123456789abcdef")
        b = b""
        while len(b) < 16:
            d = c.recv(16 - len(b))
            assert d, "EOF after %d bytes in stream %d" % (len(b), i)
            b += d
        assert b == b"0123456789abcdef", b
        t = time.monotonic()
        c.close()
        closes.append(time.monotonic() - t)
        if i in (mark, n):
            time.sleep(1)
            print("at %d qp %d cq %d mr %d" % ((i,) + tuple(held())), flush=True)
    closes.sort()
    print("close_p50_us %.0f" % (closes[len(closes) // 2] * 1e6), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
