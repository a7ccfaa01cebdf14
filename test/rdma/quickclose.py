"""Clients that connect, write and close at once: every byte must reach the
server (the server's side of a stream can still be in set-up when the
client has written and closed). Usage: quickclose.py srv HOST PORT N |
quickclose.py cli HOST PORT N. The server prints how many streams brought
their whole message."""
import socket
import sys

from echoes import listener, read_to_eof

role, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
MSG = b"0123456789"
if role == "srv":
    lsn = listener(host, port, 64)
    whole = 0
    for i in range(n):
        c, _ = lsn.accept()
        got = read_to_eof(c)
        c.close()
        whole += got == MSG
        if got != MSG:
            print("stream %d brought %r" % (i, got), flush=True)
    print("whole %d of %d" % (whole, n), flush=True)
else:
    for i in range(n):
        s = socket.create_connection((host, port))
        s.sendall(MSG)
        s.close()
