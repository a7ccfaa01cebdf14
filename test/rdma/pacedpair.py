"""pacedpair.py - a stream that must live through a fault of its path
(test/rdma/faults.bats): both ends write paced, seeded random bytes to each
other at once, check every byte they read, then end the stream as TCP does.

srv HOST PORT N SECONDS: take one stream; cli HOST PORT N SECONDS: connect.
Each end writes N bytes in 16 KiB writes spread over SECONDS, reads the
peer's N bytes, and prints "intact N max-gap S" (S: the longest wait for a
read, the pause the fault caused) or "corrupt at OFFSET" / "short N"; exit
status 0 only when intact and the stream then ended cleanly (EOF)."""
import random
import socket
import sys
import threading
import time

from echoes import listener


def data(seed, n):
    return random.Random(seed).randbytes(n)


def writer(s, buf, secs, err):
    try:
        start, off, step = time.monotonic(), 0, 16384
        while off < len(buf):
            s.sendall(buf[off:off + step])
            off += step
            due = start + secs * off / len(buf)
            if due > time.monotonic():
                time.sleep(due - time.monotonic())
    except OSError as e:
        err.append("write: %s" % e)


def main():
    role, host, port, n, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    if role == "srv":
        s, _ = listener(host, port).accept()
    else:
        s = socket.create_connection((host, port))
    mine, theirs = data(role, n), data("cli" if role == "srv" else "srv", n)
    err = []
    w = threading.Thread(target=writer, args=(s, mine, secs, err))
    w.start()
    got, gap, last = 0, 0.0, time.monotonic()
    while got < n:
        try:
            d = s.recv(min(65536, n - got))
        except OSError as e:
            print("read: %s after %d" % (e, got), flush=True)
            return 1
        now = time.monotonic()
        gap, last = max(gap, now - last), now
        if not d:
            print("short %d" % got, flush=True)
            return 1
        if d != theirs[got:got + len(d)]:
            k = next(i for i in range(len(d)) if d[i] != theirs[got + i])
            print("corrupt at %d" % (got + k), flush=True)
            return 1
        got += len(d)
    w.join()
    if err:
        print(err[0], flush=True)
        return 1
    s.shutdown(socket.SHUT_WR)
    end = s.recv(1)
    s.close()
    print("intact %d max-gap %.2f%s" % (got, gap, "" if not end else " (bytes after the end)"), flush=True)
    return 0 if not end else 1


sys.exit(main())
