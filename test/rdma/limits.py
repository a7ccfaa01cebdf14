"""limits.py - the programs of test/rdma/limits.bats: what an application
sees when its peer dies or the process reaches a limit. Every line it
prints is the same over kernel TCP and over librsock when the two agree
(no addresses, ports or descriptor numbers; times only as "fast" (< 1 s)
or "slow"). Bytes are checked against a SHA-256 in the program.

kill HOST PORT CASE...: for each CASE ("VICTIM[:BYTES]/OP") start this program as
    `victim` (a process of its own, same environment) listening on PORT+i,
    connect to it, move bytes, block in OP and SIGKILL the victim from a
    thread 0.3 s later (the victim itself waits for ever); print what OP and
    the calls after it returned, and whether within a second of the kill.
    VICTIM: what the killed process does
      send      sends 200,000 bytes, which the survivor reads before it
                blocks: EOF expected (the victim read everything it got)
      sendrst   the survivor first sends BYTES (100,000) the victim never
                reads, then the victim sends 200,000 (a reset expected)
      spillrst  as sendrst, but the victim sends 2,000,000 bytes, which the
                survivor reads only after 1 s: the victim blocks in its send
                (librsock moves the unread bytes out of its ring, credited)
      unread    sends 200,000 bytes the survivor reads only after the kill
      unreadrst both: the survivor's BYTES (100,000) unread by the victim,
                the victim's 200,000 read by the survivor after the kill
      recv      reads the survivor's BYTES (200,000), answers one byte, waits
      norecv    never reads: the survivor writes until it blocks
    OP: what the survivor blocks in: read, write (norecv), poll or epoll
    (for input; for output with norecv). After a blocked read a write
    follows (sendrst, spillrst, unreadrst, recv), and a poll (sendrst,
    spillrst). Or, blocked in nothing, 0.5 s after the kill: soerr
    (getsockopt(SO_ERROR) twice, then poll, read and write) or pollsoerr
    (a poll first).
srv HOST PORT: an echo server for any number of streams at once (a thread
    each), up to its EOF.
many HOST PORT K BYTES: open K streams to srv, all at once, then send BYTES
    on each and read them back; print "K streams echoed intact" or what
    went wrong.
fds HOST PORT LIMIT BYTES: open 2 streams to srv, set RLIMIT_NOFILE's soft
    limit to LIMIT, open more until socket() or connect() fails (print
    "opened N then ERRNO at CALL", N counting the first 2), then echo BYTES
    on each stream opened.
acc HOST PORT LIMIT K [after]: RLIMIT_NOFILE to LIMIT (after listen() with
    "after"), listen, print "listening", accept K streams or until accept()
    fails ("accepted N then ERRNO"; the listener is then closed), then echo
    each accepted stream to its EOF; con (below) is its client.
con HOST PORT K BYTES: open up to K streams to acc (until a connect()
    fails), then print how many echoed BYTES intact.
"""
import errno
import hashlib
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import echoes

N = 200000
N_BIG = 2000000


def name(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) and e.errno else repr(e)


def pattern(n, seed):
    out = bytearray()
    h = hashlib.sha256(seed.encode()).digest()
    while len(out) < n:
        h = hashlib.sha256(h).digest()
        out += h * 64
    return bytes(out[:n])


def digest(b):
    return hashlib.sha256(b).hexdigest()[:16]


# ---- kill ---------------------------------------------------------------------

def victim(host, port, what, n):
    l = echoes.listener(host, port)
    print("ready", flush=True)
    c, _ = l.accept()
    if what in ("send", "unread"):
        c.sendall(pattern(N, "v"))
    elif what in ("sendrst", "unreadrst", "spillrst"):
        time.sleep(0.3)  # the survivor's bytes arrive first, never read
        c.sendall(pattern(N_BIG if what == "spillrst" else N, "v"))
    elif what == "recv":
        if echoes.read_exact(c, n) == pattern(n, "s"):
            c.sendall(b"k")
    time.sleep(60)


def readall(s):
    """Read to EOF or an error: (bytes, "EOF" or the errno's name)."""
    got = bytearray()
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return bytes(got), "EOF"
            got += d
    except OSError as e:
        return bytes(got), name(e)


def wait_in(s, op, out):
    """Block in op (poll or epoll) for input, or output when out; the events."""
    if op == "poll":
        p = select.poll()
        p.register(s, (select.POLLOUT if out else select.POLLIN) | select.POLLRDHUP)
        ev = p.poll(20000)
        m = ev[0][1] if ev else 0
        names = [(select.POLLIN, "IN"), (select.POLLOUT, "OUT"), (select.POLLERR, "ERR"),
                 (select.POLLHUP, "HUP"), (select.POLLRDHUP, "RDHUP")]
    else:
        e = select.epoll()
        e.register(s, (select.EPOLLOUT if out else select.EPOLLIN) | select.EPOLLRDHUP)
        ev = e.poll(20)
        e.close()
        m = ev[0][1] if ev else 0
        names = [(select.EPOLLIN, "IN"), (select.EPOLLOUT, "OUT"), (select.EPOLLERR, "ERR"),
                 (select.EPOLLHUP, "HUP"), (select.EPOLLRDHUP, "RDHUP")]
    return "|".join(n for b, n in names if m & b) or "nothing"


def soerr(s):
    """getsockopt(SO_ERROR): the errno's name, or 0."""
    e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    return errno.errorcode.get(e, str(e)) if e else "0"


def write_until_error(s, deadline):
    """Small writes every 50 ms until one fails or the deadline: its errno."""
    try:
        while time.monotonic() < deadline:
            s.send(b"x" * 100)
            time.sleep(0.05)
    except OSError as e:
        return name(e)
    return "no error"


def kill_case(host, port, case):
    what, op = case.split("/")
    what, _, n = what.partition(":")
    n = int(n) if n else N // 2 if what.endswith("rst") else N
    v = subprocess.Popen([sys.executable, __file__, "victim", host, str(port), what, str(n)],
                         stdout=subprocess.PIPE, close_fds=False)
    v.stdout.readline()
    s = socket.create_connection((host, port))
    out, said = [], []
    killed = []

    def kill_later(delay):
        time.sleep(delay)
        killed.append(time.monotonic())
        os.kill(v.pid, signal.SIGKILL)

    def since():
        d = time.monotonic() - killed[0]
        return "fast" if d < 1.0 else "slow (%.1f s)" % d

    if what in ("sendrst", "unreadrst", "spillrst"):
        s.sendall(pattern(n, "s"))
    if what == "spillrst":
        time.sleep(1.0)  # the victim blocks in its send meanwhile
    if what in ("send", "sendrst", "spillrst"):
        m = N_BIG if what == "spillrst" else N
        got = echoes.read_exact(s, m)
        said.append("read %s" % ("intact" if got == pattern(m, "v") else "garbled %d" % len(got)))
    elif what == "recv":
        s.sendall(pattern(n, "s"))
        said.append("answer %r" % echoes.read_exact(s, 1))
    t = threading.Thread(target=kill_later, args=(0.3 if not what.startswith("unread") else 0.8,))
    t.start()
    if op in ("soerr", "pollsoerr"):
        t.join()
        time.sleep(0.5)
        if op == "pollsoerr":
            said.append("poll %s" % wait_in(s, "poll", False))
        said.append("SO_ERROR %s then %s" % (soerr(s), soerr(s)))
        said.append("then poll %s" % wait_in(s, "poll", False))
        got, end = readall(s)
        said.append("then read %d bytes then %s" % (len(got), end))
        said.append("then write %s" % write_until_error(s, time.monotonic() + 2))
    elif what.startswith("unread"):
        t.join()
        time.sleep(0.3)
        got, end = readall(s)
        # (what a reset leaves of the bytes in flight depends on buffering)
        whole = got == pattern(N, "v")
        said.append("after the kill read %s then %s" % (
            "intact" if whole and end == "EOF" else "a prefix" if got == pattern(len(got), "v") else
            "%d garbled bytes" % len(got), end))
        said.append("then write %s" % write_until_error(s, time.monotonic() + 2))
    elif what == "norecv":
        data = pattern(1 << 20, "s")
        if op == "write":
            sent, end = 0, "ok"
            try:
                while True:  # blocks once the peer's buffers are full
                    sent += s.send(data)
            except OSError as e:
                end = name(e)
            said.append("blocked write returned %s %s" % (end, since()))
        else:
            s.setblocking(False)
            try:
                while True:
                    s.send(data)
            except BlockingIOError:
                pass
            ev = wait_in(s, op, True)
            said.append("%s returned %s %s" % (op, ev, since()))
            s.setblocking(True)
            said.append("then write %s" % write_until_error(s, time.monotonic() + 2))
    else:
        if op == "read":
            got, end = readall(s)
            said.append("blocked read returned %s after %d more bytes %s" % (end, len(got), since()))
        else:
            ev = wait_in(s, op, False)
            said.append("%s returned %s %s" % (op, ev, since()))
            got, end = readall(s)
            said.append("then read %d bytes then %s" % (len(got), end))
        if what in ("recv", "sendrst", "spillrst"):
            said.append("then write %s" % write_until_error(s, time.monotonic() + 2))
        if what in ("sendrst", "spillrst"):  # (the error told once: no POLLERR now)
            said.append("then poll %s" % wait_in(s, "poll", False))
    t.join()
    v.wait()
    s.close()
    print("%s: %s" % (case, "; ".join(said)), flush=True)


# ---- many streams, descriptors -------------------------------------------------

def serve(host, port):
    l = echoes.listener(host, port, 128)
    while True:
        c, _ = l.accept()
        threading.Thread(target=echoes.echo_to_eof, args=(c,), daemon=True).start()


def echo_each(streams, n):
    """Send n bytes on each stream (all first), then read each echo: the
    number intact."""
    ok = 0
    for i, s in enumerate(streams):
        s.sendall(pattern(n, "m%d" % i))
        s.shutdown(socket.SHUT_WR)
    for i, s in enumerate(streams):
        ok += echoes.read_to_eof(s) == pattern(n, "m%d" % i)
        s.close()
    return ok


def many(host, port, k, n):
    streams = [socket.create_connection((host, port)) for _ in range(k)]
    ok = echo_each(streams, n)
    print("%d streams echoed intact" % ok if ok == k else "only %d of %d streams echoed intact" % (ok, k),
          flush=True)


def limit(n):
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def fds(host, port, lim, n):
    streams, where = [socket.create_connection((host, port)) for _ in range(2)], "nothing"
    limit(lim)
    while True:
        try:
            s = socket.socket()
        except OSError as e:
            where = "%s at socket" % name(e)
            break
        try:
            s.connect((host, port))
        except OSError as e:
            where = "%s at connect" % name(e)
            s.close()
            break
        streams.append(s)
    print("opened %d then %s" % (len(streams), where), flush=True)
    print("%d echoed intact" % echo_each(streams, n), flush=True)


def acc(host, port, lim, k, after):
    if not after:
        limit(lim)
    l = echoes.listener(host, port, 512)
    if after:
        limit(lim)
    print("listening", flush=True)
    streams, end = [], "all"
    while len(streams) < k:
        try:
            streams.append(l.accept()[0])
        except OSError as e:
            end = name(e)
            break
    l.close()
    print("accepted %d then %s" % (len(streams), end), flush=True)
    for c in streams:
        echoes.echo_to_eof(c)


def con(host, port, k, n):
    streams = []
    try:  # (the server closes its listener at its limit)
        while len(streams) < k:
            streams.append(socket.create_connection((host, port)))
    except OSError:
        pass
    ok = 0
    for i, s in enumerate(streams):
        s.settimeout(30)  # (a loaded host: each stream's hand-shake, in turn)
        try:
            s.sendall(pattern(n, "m%d" % i))
            s.shutdown(socket.SHUT_WR)
            ok += echoes.read_to_eof(s) == pattern(n, "m%d" % i)
        except OSError:
            pass
        s.close()
    print("%d echoed intact" % ok, flush=True)


def main():
    role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    a = sys.argv[4:]
    if role == "kill":
        for i, case in enumerate(a):
            kill_case(host, port + i, case)
    elif role == "victim":
        victim(host, port, a[0], int(a[1]))
    elif role == "srv":
        serve(host, port)
    elif role == "many":
        many(host, port, int(a[0]), int(a[1]))
    elif role == "fds":
        fds(host, port, int(a[0]), int(a[1]))
    elif role == "acc":
        acc(host, port, int(a[0]), int(a[1]), "after" in a[2:])
    elif role == "con":
        con(host, port, int(a[0]), int(a[1]))


main()
