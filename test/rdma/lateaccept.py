"""A server that accepts late: clients connect, write and close while the
server sleeps (longer than a librsock client waits for its hello's
answer); then it accepts and reads. Every stream must bring exactly its
own bytes, no more (no hand-shake bytes), no less. Usage:
lateaccept.py srv HOST PORT N DELAY | lateaccept.py cli HOST PORT N."""
import socket
import sys
import time

from echoes import listener, read_to_eof

role, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if role == "cli":
    ss = []
    for i in range(n):
        ss.append(socket.create_connection((host, port)))
        ss[-1].sendall(b"stream %d." % i)
    for s in ss:
        s.close()
    sys.exit(0)
lsn = listener(host, port, 64)
time.sleep(float(sys.argv[5]))
bad = 0
for i in range(n):
    # stream 0 ends when the client closes them all: the others are
    # accepted after their client's FIN
    c, _ = lsn.accept()
    g = read_to_eof(c)
    c.close()
    if not (g.startswith(b"stream ") and g.endswith(b".") and g.count(b".") == 1):
        bad += 1
        print("stream %d brought %r" % (i, g[:120]), flush=True)
print("whole %d of %d" % (n - bad, n), flush=True)
