"""echoall.py - datapath.bats' echo of a request larger than the rings: the
client writes all of it before it reads, the server echoes each piece as it
reads it, both with blocking calls. Kernel TCP's buffers (megabytes) take
that; each end's ring alone (256 KiB) would leave both blocked in a write,
each waiting for the other to read.

echoall.py srv ADDR PORT: echo one stream until its EOF, then close.
echoall.py cli ADDR PORT N: send N bytes at once, then read the echo to
    EOF; prints "N bytes echoed intact" when it came back right.
"""
import socket, sys
from echoes import echo_to_eof, listener
role, b, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "srv":
    l = listener(b, port)
    echo_to_eof(l.accept()[0])
else:
    n = int(sys.argv[4])
    m = bytes(i * 7 % 251 for i in range(n))
    s = socket.create_connection((b, port))
    s.sendall(m)
    s.shutdown(socket.SHUT_WR)
    got = bytearray()
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        got += d
    assert got == m, "echo differs: %d bytes back of %d" % (len(got), n)
    print("%d bytes echoed intact" % n, flush=True)
