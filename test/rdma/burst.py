"""burst.py - small writes must reach the peer promptly when the writer then
waits where the library cannot see it (no socket call), and all of them
when it exits without closing the stream, as over kernel TCP. Guards any
holding back of small writes (doc/design.md, "Wire protocol": none is done).

srv HOST PORT N: take one stream, read until N bytes have come (printing
    "all N bytes at <CLOCK_MONOTONIC seconds>" and whether they are
    intact), answer "ok", then read to EOF.
cli HOST PORT N sleep: write N bytes as 100-byte writes, print "last write
    at <seconds>", sleep 3 s (clock_nanosleep: no socket call), read the
    answer, close.
cli HOST PORT N exit: the same writes on the raw descriptor (the socket
    object is detached: nothing closes it), then exit() at once.
"""
import os
import socket
import sys
import time

import echoes


def pattern(n):
    return bytes((i * 7 + i // 251) & 0xFF for i in range(n))


def main():
    role, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    want = pattern(n)
    if role == "srv":
        l = echoes.listener(host, port)
        c, _ = l.accept()
        got = echoes.read_exact(c, n)
        print("all %d bytes at %.6f" % (len(got), time.monotonic()), flush=True)
        print("intact" if got == want else "garbled", flush=True)
        try:  # an exited client may reset the stream
            c.sendall(b"ok")
            while c.recv(65536):
                pass
        except OSError as e:
            print("after the bytes: %s" % e, flush=True)
        c.close()
        return
    s = socket.create_connection((host, port))
    if sys.argv[5] == "exit":
        fd = s.detach()
        for i in range(0, n, 100):
            piece = want[i:i + 100]
            while piece:
                piece = piece[os.write(fd, piece):]
        sys.exit(0)  # exit(): no close() before it
    for i in range(0, n, 100):
        s.sendall(want[i:i + 100])
    print("last write at %.6f" % time.monotonic(), flush=True)
    time.sleep(3)
    print("answer %r" % echoes.read_exact(s, 2), flush=True)
    s.close()


main()
