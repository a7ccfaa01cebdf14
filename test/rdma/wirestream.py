"""wirestream.py - a stream both ways at once between the guests of a pair
(wire.bats): each end sends N bytes of its own (pseudo-random from SEED), in
64 KiB writes, then shuts down its writing side, while it reads the other
end's bytes to EOF.

wirestream.py srv ADDR PORT N SEED [PACE_MS]: take one stream on ADDR:PORT.
wirestream.py cli ADDR PORT N SEED [PACE_MS] [SRC]: connect (from SRC).
PACE_MS: a pause after each write (a paced stream that lasts a while).

Prints, one per line: "connected" (at once), "sent BYTES SHA256", "got BYTES SHA256", "stall S"
(the longest wait for the next bytes to arrive, in seconds), "took S".
"""
import hashlib
import random
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
