#!/usr/bin/env python3
"""shmpair.py - the two ends of an echo stream for test/bats/shm.bats (the
same-host path). Each end prints the transport rsock_fd_transport() reports
for its stream (-2 without the library), and the client whether its bytes
came back intact and how long connect() took.

  shmpair.py server DIR HOST [fork|forknow] (writes DIR/port, echoes one
                                    stream, exits; fork: 0.2 s after accept()
                                    a forked child echoes, the parent closing
                                    its copy at once, as inetd does; forknow:
                                    the same without the 0.2 s)
  shmpair.py client HOST PORT NBYTES"""
import ctypes
import os
import socket
import sys
import time


def transport(fd):
    try:
        f = ctypes.CDLL(None).rsock_fd_transport
    except AttributeError:
        return -2
    return f(fd)


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def server(d, host, fork=False):
    ls = socket.socket(family(host), socket.SOCK_STREAM)
    ls.bind((host, 0))
    ls.listen(4)
    with open(os.path.join(d, "port.tmp"), "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(os.path.join(d, "port.tmp"), os.path.join(d, "port"))
    s, _ = ls.accept()
    if fork:
        if fork == "fork":
            time.sleep(0.2)  # set up by the library's thread, the bytes in the rings
        pid = os.fork()
        if pid:
            s.close()
            os.waitpid(pid, 0)
            return
    n = 0
    while True:
        b = s.recv(65536)
        if n == 0:
            print("server transport", transport(s.fileno()), flush=True)
        if not b:
            break
        s.sendall(b)
        n += len(b)
    print("server echoed", n, flush=True)
    s.close()


def client(host, port, nbytes):
    s = socket.socket(family(host), socket.SOCK_STREAM)
    t0 = time.monotonic()
    s.connect((host, port))
    ms = (time.monotonic() - t0) * 1000
    data = bytes((i * 7 + 3) & 0xFF for i in range(nbytes))
    s.sendall(data)
    print("client transport", transport(s.fileno()), flush=True)
    s.shutdown(socket.SHUT_WR)
    got = bytearray()
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    print("client intact", int(bytes(got) == data), flush=True)
    print("client connect_ms %.1f" % ms, flush=True)


if sys.argv[1] == "server":
    server(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
else:
    client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
