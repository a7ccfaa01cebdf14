"""echoes.py - the echo both ends of test/rdma's Python tests share
(they put test/rdma on PYTHONPATH).

listener(host, port): a listening socket.
read_exact(s, n): n bytes from s, fewer only at EOF.
serve_one(l, msg): take one stream, read exactly len(msg) bytes, print
    "intact" (or "garbled: ...") on a line of its own, send them back, close.
echo_to_eof(c): send back whatever comes on c, as it comes, until its EOF;
    then close c.
echo_clients(host, port, msg, count, bind=None): count times connect (after
    binding to bind if given), send msg and read the echo to EOF, which must
    be msg; then print "<count> echoes intact".
"""
import socket


def listener(host, port, backlog=4):
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((host, port))
    l.listen(backlog)
    return l


def read_to_eof(s):
    got = bytearray()
    while True:
        d = s.recv(65536)
        if not d:
            return bytes(got)
        got += d


def read_exact(s, n):
    got = bytearray()
    while len(got) < n:
        d = s.recv(n - len(got))
        if not d:
            break
        got += d
    return bytes(got)


def echo_to_eof(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()


def serve_one(l, msg):
    c, _ = l.accept()
    got = read_exact(c, len(msg))
    print("intact" if got == msg else "garbled: %r" % bytes(got[:60]), flush=True)
    c.sendall(got)
    c.close()


def serve(host, port, msg, count):
    """Listen on host:port and serve count clients one after the other
    (serve_one)."""
    l = listener(host, port)
    for _ in range(count):
        serve_one(l, msg)


def echo_clients(host, port, msg, count, bind=None):
    for _ in range(count):
        s = socket.socket()
        if bind:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(bind)
        s.connect((host, port))
        s.sendall(msg)
        got = bytearray()
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
        assert got == msg, "echo differs"
        s.close()
    print("%d echoes intact" % count, flush=True)
