"""An epoll registration made while the stream is on RDMA must wake for the
TCP bytes that come after the stream is handed over to kernel TCP (a
splice from a pipe into a non-blocking stream hands it over, as haproxy's
splice-auto does). The server registers the stream (level- or edge-
triggered), reads the client's hello, splices one byte to it, then waits
in epoll for the client's next message, which comes 0.3 s later.
Usage: hoepoll.py srv HOST PORT lt|et | hoepoll.py cli HOST PORT."""
import os
import select
import socket
import sys
import time

role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "srv":
    mode = sys.argv[4]
    lsn = socket.socket()
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind((host, port))
    lsn.listen(4)
    c, _ = lsn.accept()
    c.setblocking(False)
    ep = select.epoll()
    ep.register(c.fileno(), select.EPOLLIN | (select.EPOLLET if mode == "et" else 0))
    got = b""
    while len(got) < 5:
        if ep.poll(10):
            try:
                got += c.recv(5 - len(got))
            except BlockingIOError:
                pass
        else:
            sys.exit("no hello in 10 s")
    r, w = os.pipe()
    os.write(w, b"x")
    os.splice(r, c.fileno(), 1)  # into a non-blocking stream: handed to TCP
    t0 = time.monotonic()
    evs = ep.poll(5)
    dt = time.monotonic() - t0
    data = c.recv(16) if evs else b""
    print("%s: woke after %.2f s with %r" % (mode, dt, data), flush=True)
    c.setblocking(True)
    c.sendall(b"pong")
    c.close()
    sys.exit(0 if evs and data == b"ping" else 1)
else:
    s = socket.create_connection((host, port))
    s.sendall(b"hello")
    assert s.recv(1) == b"x"
    time.sleep(0.3)
    s.sendall(b"ping")
    got = b""
    while len(got) < 4:
        b = s.recv(4 - len(got))
        if not b:
            break
        got += b
    print("answer %r" % got, flush=True)
    s.close()
