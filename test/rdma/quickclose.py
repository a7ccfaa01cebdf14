"""Clients that connect, write and close at once: every byte must reach the
server (the server's side of a stream can still be in set-up when the
client has written and closed). Usage: quickclose.py srv HOST PORT N |
quickclose.py cli HOST PORT N. The server prints how many streams brought
their whole message."""
import socket
import sys

role, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
MSG = b"0123456789"
if role == "srv":
    lsn = socket.socket()
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind((host, port))
    lsn.listen(64)
    whole = 0
    for i in range(n):
        c, _ = lsn.accept()
        got = b""
        while True:
            b = c.recv(64)
            if not b:
                break
            got += b
        whole += got == MSG
        if got != MSG:
            print("stream %d brought %r" % (i, got), flush=True)
        c.close()
    print("whole %d of %d" % (whole, n), flush=True)
else:
    for i in range(n):
        s = socket.create_connection((host, port))
        s.sendall(MSG)
        s.close()
