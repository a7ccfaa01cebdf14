"""passfd.py - forkexec.bats' server that hands each accepted connection to
a worker process over a Unix socket (SCM_RIGHTS), as Node's cluster module
does, and its client.

passfd.py srv ADDR PORT N: fork a worker first (it holds no listener and
    no stream of its own), then accept N streams; each one goes to the
    worker at once and is closed here: the even ones with socket.send_fds
    (sendmsg), the odd ones with sendmmsg called through ctypes. The worker
    reads 100000 bytes from each, answers them in upper case and closes.
    Prints "worker: N echoed" when done.
passfd.py cli ADDR PORT N: N connections one after the other, each sends
    100000 bytes at once and checks the answer and the EOF; prints
    "N answers, EOF" when all came back right.
"""
import ctypes, os, socket, struct, sys
from echoes import listener, read_exact


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(Iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", Msghdr), ("len", ctypes.c_uint)]


def send_fd_mmsg(sock, fd):
    """One byte and fd in SCM_RIGHTS, through libc's sendmmsg (the
    preloaded library's, when there is one)."""
    libc = ctypes.CDLL(None, use_errno=True)
    data = ctypes.create_string_buffer(b"c", 1)
    iov = Iovec(ctypes.cast(data, ctypes.c_void_p), 1)
    cmsg = struct.pack("=Qii", socket.CMSG_LEN(4), socket.SOL_SOCKET, socket.SCM_RIGHTS)
    cmsg += struct.pack("=i", fd)
    ctl = ctypes.create_string_buffer(cmsg.ljust(socket.CMSG_SPACE(4), b"\0"), socket.CMSG_SPACE(4))
    m = Mmsghdr(Msghdr(None, 0, ctypes.pointer(iov), 1, ctypes.cast(ctl, ctypes.c_void_p),
                       socket.CMSG_SPACE(4), 0), 0)
    n = libc.sendmmsg(sock.fileno(), ctypes.byref(m), 1, 0)
    assert n == 1 and m.len == 1, "sendmmsg: %d, errno %d" % (n, ctypes.get_errno())

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
        if i % 2:
            send_fd_mmsg(here, c.fileno())
        else:
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
