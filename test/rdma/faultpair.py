"""faultpair.py - both ends of test/rdma/inject.bats's streams, reporting
what the application sees: bytes, then EOF or an errno, and when
(CLOCK_MONOTONIC, one clock for every process of the machine).

srv HOST PORT OUT [echo]: take one stream, read it to its end (EOF or an
    error) into the file OUT, sending each piece back with echo; then
    print "srv got N then WHAT at T" (WHAT: EOF or an errno name).
cli HOST PORT SRC OUT [SOURCE_ADDR] [oob]: connect (from SOURCE_ADDR),
    print "cli connected" (or "cli connect ERRNO" and exit 1), write the
    file SRC in 64 KiB writes while a thread reads what comes back into
    OUT; then shut the writing down. With oob, after the first half a
    send(MSG_OOB) of one byte moves the stream to TCP (a hand-over): "cli
    oob at T" first. Prints "cli sent N then WHAT at T" (WHAT: ok or an
    errno name) and "cli got M then WHAT at T".
"""
import errno
import os
import socket
import sys
import threading
import time

import echoes


def what(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) and e.errno else repr(e)


def drain(s, out, echo=False):
    """Read s to its end into the file out (each piece sent back with echo):
    the byte count, and what ended it (EOF or an errno name)."""
    got, end = 0, "EOF"
    with open(out, "wb") as f:
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                f.write(d)
                got += len(d)
                if echo:
                    s.sendall(d)
        except OSError as e:
            end = what(e)
    return got, end


def server(host, port, out, echo):
    l = echoes.listener(host, port)
    c, _ = l.accept()
    got, end = drain(c, out, echo)
    print("srv got %d then %s at %.3f" % (got, end, time.monotonic()), flush=True)
    c.close()


def reader(s, out, res):
    got, end = drain(s, out)
    res.append("cli got %d then %s at %.3f" % (got, end, time.monotonic()))


def client(host, port, src, out, source, oob):
    try:
        s = socket.create_connection((host, port), source_address=(source, 0) if source else None)
    except OSError as e:
        print("cli connect %s" % what(e), flush=True)
        sys.exit(1)
    print("cli connected", flush=True)
    res = []
    t = threading.Thread(target=reader, args=(s, out, res))
    t.start()
    with open(src, "rb") as f:
        data = f.read()
    sent, end = 0, "ok"
    try:
        while sent < len(data):
            if oob and sent >= len(data) // 2:
                oob = False
                print("cli oob at %.3f" % time.monotonic(), flush=True)
                s.send(b"!", socket.MSG_OOB)
            sent += s.send(data[sent:sent + 65536])
        s.shutdown(socket.SHUT_WR)
    except OSError as e:
        end = what(e)
    print("cli sent %d then %s at %.3f" % (sent, end, time.monotonic()), flush=True)
    t.join()
    print(res[0], flush=True)
    s.close()


def main():
    role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "srv":
        server(host, port, sys.argv[4], "echo" in sys.argv[5:])
    else:
        client(host, port, sys.argv[4], sys.argv[5], sys.argv[6] if len(sys.argv) > 6 else "",
               "oob" in sys.argv[7:])


main()
