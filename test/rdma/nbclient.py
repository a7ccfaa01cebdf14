"""nbclient.py - an event loop's client against a server that accepts late.

srv HOST PORT N DELAY: an iterative server: for each of N streams, sleep
    DELAY seconds once a connection is queued, accept, read to EOF, answer b"got <length> <crc32>" and
    close.
cli HOST PORT N MODE: N streams one after the other; MODE nb: each on a
    non-blocking socket, driven by select() as an event loop drives it
    (connect, write the message, shut the write side, read the answer to
    EOF); MODE block: the same with blocking calls. Prints "intact N of N"
    and the longest single call, in ms, on a line "longest call MS" (the
    waits for writability included, not the ones for the answer).
A non-blocking call must not stop for the server: kernel TCP takes the
client's bytes before the server accepts.
"""
import os
import select
import socket
import sys
import time
import zlib

from echoes import listener, read_to_eof

role, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


def message(i):
    return (b"stream %d: " % i) + os.urandom(3000).hex().encode()


def answer(m):
    return b"got %d %08x" % (len(m), zlib.crc32(m))


if role == "srv":
    lsn = listener(host, port, 64)
    for i in range(n):
        select.select([lsn], [], [], 60)  # a connection is queued
        time.sleep(float(sys.argv[5]))
        c, _ = lsn.accept()
        got = read_to_eof(c)
        c.sendall(answer(got))
        c.close()
    sys.exit(0)

mode = sys.argv[5]
longest = 0.0
intact = 0


def timed(f, *a):
    global longest
    t = time.monotonic()
    try:
        return f(*a)
    finally:
        longest = max(longest, time.monotonic() - t)


for i in range(n):
    m = message(i)
    s = socket.socket()
    if mode == "block":
        timed(s.connect, (host, port))
        timed(s.sendall, m)
        s.shutdown(socket.SHUT_WR)
        got = timed(read_to_eof, s)
    else:
        s.setblocking(False)
        rc = timed(s.connect_ex, (host, port))
        assert rc in (0, 115), rc  # EINPROGRESS
        timed(select.select, [], [s], [], 10)  # writable at once
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        off = 0
        while off < len(m):
            timed(select.select, [], [s], [], 10)
            try:
                off += timed(s.send, m[off:])
            except BlockingIOError:
                pass
        timed(s.shutdown, socket.SHUT_WR)
        got = b""
        while True:
            r, _, _ = select.select([s], [], [], 10)
            if not r:
                break
            try:
                d = timed(s.recv, 65536)
            except BlockingIOError:
                continue
            if not d:
                break
            got += d
    s.close()
    if got == answer(m):
        intact += 1
    else:
        print("stream %d: answer %r" % (i, got[:80]), flush=True)
print("intact %d of %d" % (intact, n), flush=True)
print("longest call %d" % int(longest * 1000), flush=True)
