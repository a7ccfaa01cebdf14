"""subproc.py - forkexec.bats' server that runs children while it holds an
RDMA stream, and its client.

subproc.py srv ADDR PORT: accept one stream; five times read exactly 100000
    bytes, run `true` with subprocess (vfork; the child closes every
    descriptor from 3), send the bytes back in upper case; then run
    `head -c 6 | tr a-z A-Z` with the stream as its stdin and stdout, send
    "end", close. (test/progs/spawnvm.c does the same with clone(CLONE_VM).)
subproc.py cli ADDR PORT: the other end; prints
    "5 echoes, the child's answer, EOF" when all of it came back right.
"""
import socket, subprocess, sys
from echoes import listener, read_exact
role, b, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "srv":
    l = listener(b, port)
    c, _ = l.accept()
    for i in range(5):
        d = read_exact(c, 100000)
        subprocess.run(["true"])
        c.sendall(d.upper())
    subprocess.run(["sh", "-c", "head -c 6 | tr a-z A-Z"], stdin=c, stdout=c)
    c.sendall(b"end")
    c.close()
else:
    s = socket.create_connection((b, port))
    for i in range(5):
        m = (b"message %d " % i) * 10000
        m = m[:100000]
        s.sendall(m)
        assert read_exact(s, len(m)) == m.upper(), "echo %d differs" % i
    s.sendall(b"child\n")
    got = read_exact(s, 9)
    assert got == b"CHILD\nend", "the child's answer differs: %r" % got
    assert s.recv(10) == b""
    print("5 echoes, the child's answer, EOF", flush=True)
