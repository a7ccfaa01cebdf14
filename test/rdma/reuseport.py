#!/usr/bin/env python3
"""reuseport.py - listeners of one port with SO_REUSEPORT, for negotiation.bats.

  reuseport.py srv ADDR PORT N     N listeners on ADDR:PORT in this process,
                                   a thread each; every connection gets
                                   "PID:" and the bytes of its first read,
                                   then EOF. Prints "listening" when all are.
  reuseport.py cli ADDR PORT FROM N   N connections one after the other from
                                   FROM: prints "bad K servers M" (K replies
                                   other than "PID:" + the request, M
                                   processes that answered)."""
import os
import socket
import sys
import threading


def serve(ls):
    while True:
        c, _ = ls.accept()
        d = c.recv(100)
        c.sendall(b"%d:" % os.getpid() + d)
        c.close()


def main():
    role, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "srv":
        ls = []
        for _ in range(int(sys.argv[4])):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind((addr, port))
            s.listen(16)
            ls.append(s)
        for s in ls:
            threading.Thread(target=serve, args=(s,), daemon=True).start()
        print("listening", flush=True)
        threading.Event().wait()
    bad, who = 0, set()
    for i in range(int(sys.argv[5])):
        s = socket.socket()
        s.bind((sys.argv[4], 0))
        s.settimeout(20)
        s.connect((addr, port))
        s.sendall(b"req%d" % i)
        r = b"".join(iter(lambda: s.recv(100), b""))  # to EOF
        s.close()
        pid, _, body = r.partition(b":")
        who.add(pid)
        if body != b"req%d" % i:
            bad += 1
            print("bad reply", r[:40], file=sys.stderr)
    print("bad", bad, "servers", len(who))


main()
