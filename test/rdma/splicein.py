"""splice() from a pipe into a non-blocking stream that still holds unread
bytes of its peer: the first splice hands the stream to TCP with those bytes
as its prefix, and every later one must send through the kernel socket,
taking from the pipe only what the socket takes. The server splices 4 MiB
of a known sequence into the stream while the client sleeps (the socket
fills, splice says EAGAIN), then reads the client's bytes it left unread;
the client reads the 4 MiB and checks them byte for byte.
Usage: splicein.py srv HOST PORT | splicein.py cli HOST PORT."""
import os
import select
import socket
import sys
import time

N = 4 << 20
HELLO = 100_000
role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
seq = bytes(range(251)) * (N // 251 + 300)
if role == "srv":
    lsn = socket.socket()
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind((host, port))
    lsn.listen(4)
    c, _ = lsn.accept()
    select.select([c], [], [], 30)
    time.sleep(0.3)  # the client's bytes arrive, and stay unread
    c.setblocking(False)
    r, w = os.pipe()
    sent = queued = eagain = 0
    while sent < N:
        if not queued:
            queued = os.write(w, seq[sent:sent + min(65536, N - sent)])
        try:
            n = os.splice(r, c.fileno(), queued)
        except BlockingIOError:
            eagain += 1
            select.select([], [c], [], 30)
            continue
        sent += n
        queued -= n
    c.setblocking(True)
    got = b""
    while len(got) < HELLO:
        b = c.recv(HELLO - len(got))
        if not b:
            break
        got += b
    c.shutdown(socket.SHUT_WR)
    print("spliced", sent, "eagain", "yes" if eagain else "no",
          "unread bytes intact", got == seq[:HELLO], flush=True)
    c.recv(1)
else:
    c = socket.create_connection((host, port))
    c.sendall(seq[:HELLO])
    time.sleep(1.5)  # the server's socket fills meanwhile
    got = bytearray()
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        got += b
    msg = "received %d intact %s" % (len(got), got == seq[:N])
    if got != seq[:N]:
        bad = next((i for i in range(min(len(got), N)) if got[i] != seq[i]), min(len(got), N))
        msg += ", first difference at %d" % bad
    print(msg, flush=True)
    c.close()
