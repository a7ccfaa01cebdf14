"""wirestream.py - a stream both ways at once between the guests of a pair
(wire.bats): each end sends N bytes of its own (pseudo-random from SEED), in
64 KiB writes, then shuts down its writing side, while it reads the other
end's bytes to EOF.

wirestream.py srv ADDR PORT N SEED [PACE_MS]: take one stream on ADDR:PORT.
wirestream.py cli ADDR PORT N SEED [PACE_MS] [SRC]: connect (from SRC).
PACE_MS: a pause after each write (a paced stream that lasts a while).
WIRESTREAM_EVENTS=1 in the environment: one thread, a non-blocking socket
and epoll (selectors), as an event-driven server runs, instead of a writing
thread and a blocking reader.

Prints, one per line: "connected" (at once), "sent BYTES SHA256", "got BYTES SHA256", "stall S"
(the longest wait for the next bytes to arrive, in seconds), "took S".
"""
import hashlib
import os
import random
import selectors
import socket
import sys
import threading
import time

role, addr, port, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
pace = float(sys.argv[6]) / 1000 if len(sys.argv) > 6 else 0.0
data = random.Random(seed).randbytes(n)
family = socket.AF_INET6 if ":" in addr else socket.AF_INET
if role == "srv":
    l = socket.socket(family)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, port))
    l.listen(1)
    s = l.accept()[0]
    l.close()
else:
    s = socket.socket(family)
    if len(sys.argv) > 7:
        s.bind((sys.argv[7], 0))
    s.connect((addr, port))

print("connected", flush=True)
t0 = time.monotonic()
sent = {}


def send():
    for off in range(0, n, 65536):
        s.sendall(data[off:off + 65536])
        if pace:
            time.sleep(pace)
    s.shutdown(socket.SHUT_WR)
    sent["sha"] = hashlib.sha256(data).hexdigest()




def events():
    """Both ways in one thread: epoll says when to read and when a write fits."""
    s.setblocking(False)
    sel = selectors.DefaultSelector()
    h, got, stall, last = hashlib.sha256(), 0, 0.0, time.monotonic()
    off, chunk_end, next_at, eof, shut, mask = 0, 0, 0.0, False, False, 0
    while not (eof and shut):
        now = time.monotonic()
        want_write = not shut and (off < chunk_end or now >= next_at)
        m = (0 if eof else selectors.EVENT_READ) | (selectors.EVENT_WRITE if want_write else 0)
        if m != mask:
            if mask and m:
                sel.modify(s, m)
            elif m:
                sel.register(s, m)
            else:
                sel.unregister(s)
            mask = m
        timeout = None if want_write else max(0.0, next_at - now)
        ready = sel.select(timeout) if mask else (time.sleep(timeout), [])[1]
        for _, ev in ready:
            if ev & selectors.EVENT_READ:
                try:
                    b = s.recv(1 << 20)
                except BlockingIOError:
                    continue
                now = time.monotonic()
                stall = max(stall, now - last)
                last = now
                eof = not b
                h.update(b)
                got += len(b)
            if ev & selectors.EVENT_WRITE:
                if off >= chunk_end:
                    if off >= n:
                        s.shutdown(socket.SHUT_WR)
                        shut = True
                        sent["sha"] = hashlib.sha256(data).hexdigest()
                        continue
                    chunk_end = min(n, off + 65536)
                try:
                    off += s.send(data[off:chunk_end])
                except BlockingIOError:
                    pass
                if off >= chunk_end:
                    next_at = time.monotonic() + pace
    return h, got, stall


if os.environ.get("WIRESTREAM_EVENTS") == "1":
    h, got, stall = events()
else:
    w = threading.Thread(target=send)
    w.start()
    h, got, stall, last = hashlib.sha256(), 0, 0.0, time.monotonic()
    while True:
        b = s.recv(1 << 20)
        now = time.monotonic()
        stall = max(stall, now - last)
        last = now
        if not b:
            break
        h.update(b)
        got += len(b)
    w.join()
s.close()
print("sent %d %s" % (n, sent["sha"]))
print("got %d %s" % (got, h.hexdigest()))
print("stall %.2f" % stall)
print("took %.2f" % (time.monotonic() - t0))
