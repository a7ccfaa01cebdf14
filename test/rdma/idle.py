"""Idle blocked readers must not wake: N connections, each served by a
thread blocked in recv() on a silent client; the server counts its
threads' voluntary context switches over SECS seconds (kernel TCP: about
none). Usage: idle.py srv HOST PORT N SECS | idle.py cli HOST PORT N."""
import os
import socket
import sys
import threading
import time


def switches():
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/status" % tid) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return total


def cpu():
    f = open("/proc/self/stat").read().split(")")[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


role, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if role == "srv":
    secs = float(sys.argv[5])
    lsn = socket.socket()
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind((host, port))
    lsn.listen(256)
    got = []

    def serve(c):
        got.append(c.recv(1))  # blocks until the client closes: b""
        c.close()

    threads = []
    for i in range(n):
        c, _ = lsn.accept()
        c.recv(1)  # its first byte: the stream is in use
        t = threading.Thread(target=serve, args=(c,))
        t.start()
        threads.append(t)
    time.sleep(0.5)  # every thread is asleep in its recv()
    s0, c0 = switches(), cpu()
    time.sleep(secs)
    s1, c1 = switches(), cpu()
    print("%d readers, %.1f s: %d wake-ups, %.3f s cpu" % (n, secs, s1 - s0 - 1, c1 - c0), flush=True)
    with open("idle.ready", "w") as f:
        f.write("done\n")
    for t in threads:
        t.join()
    print("eofs %d of %d" % (sum(1 for g in got if g == b""), n), flush=True)
else:
    ss = []
    for i in range(n):
        s = socket.create_connection((host, port))
        s.sendall(b"x")
        ss.append(s)
    while not os.path.exists("idle.ready"):
        time.sleep(0.1)
    for s in ss:
        s.close()
