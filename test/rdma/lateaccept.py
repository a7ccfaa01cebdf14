"""A server that accepts late: clients connect, write and close while the
server sleeps (longer than a librsock client waits for its hello's
answer); then it accepts and reads. Every stream must bring exactly its
own bytes, no more (no hand-shake bytes), no less. Usage:
lateaccept.py srv HOST PORT N DELAY | lateaccept.py cli HOST PORT N."""
import socket
import sys
import time

role, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if role == "srv":
    delay = float(sys.argv[5])
    lsn = socket.socket()
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind((host, port))
    lsn.listen(64)
    time.sleep(delay)
    whole = 0
    for i in range(n):
        c, _ = lsn.accept()
        got = b""
        while True:
            b = c.recv(4096)
            if not b:
                break
            got += b
        want = None
        if got.startswith(b"stream ") and b"." in got:
            want = got[: got.index(b".") + 1]
        ok = want is not None and got == want
        whole += ok
        if not ok:
            print("stream %d brought %r" % (i, got[:120]), flush=True)
        c.close()
    print("whole %d of %d" % (whole, n), flush=True)
else:
    ss = []
    for i in range(n):
        s = socket.create_connection((host, port))
        s.sendall(b"stream %d." % i)
        ss.append(s)
    for s in ss:
        s.close()
