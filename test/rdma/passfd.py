"""passfd.py - transport.bats' server that hands each accepted connection to
a worker process over a Unix socket (SCM_RIGHTS), as Node's cluster module
does, and its client.

passfd.py srv ADDR PORT N: fork a worker first (it holds no listener and
    no stream of its own), then accept N streams; each one goes to the
    worker with socket.send_fds at once and is closed here. The worker
    reads 100000 bytes from each, answers them in upper case and closes.
    Prints "worker: N echoed" when done.
passfd.py cli ADDR PORT N: N connections one after the other, each sends
    100000 bytes at once and checks the answer and the EOF; prints
    "N answers, EOF" when all came back right.
"""
import os, socket, sys
from echoes import listener, read_exact
role, b, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if role == "srv":
    l = listener(b, port)
    here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        l.close()
        here.close()
        for i in range(n):
            _, fds, _, _ = socket.recv_fds(there, 16, 1)
            c = socket.socket(fileno=fds[0])
            d = read_exact(c, 100000)
            c.sendall(d.upper())
            c.close()
        print("worker: %d echoed" % n, flush=True)
        os._exit(0)
    there.close()
    for i in range(n):
        c, _ = l.accept()
        socket.send_fds(here, [b"c"], [c.fileno()])
        c.close()
    _, st = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(st))
else:
    for i in range(n):
        s = socket.create_connection((b, port))
        m = ((b"message %d " % i) * 10000)[:100000]
        s.sendall(m)
        got = read_exact(s, len(m))
        assert got == m.upper(), "answer %d differs: %r..." % (i, got[:40])
        assert s.recv(10) == b"", "no EOF after answer %d" % i
        s.close()
    print("%d answers, EOF" % n, flush=True)
