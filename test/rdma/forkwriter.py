"""forkwriter.py - a client that forks its writer right after connect() (as
Perl and C netcat-like clients do): the child writes a message and shuts
the write side, the parent reads the echo. The stream's handshake answer
is still awaited at the fork (connect() returns once the hello is sent);
exactly one of the two processes may take it.
srv HOST PORT N: echo N streams, one after the other, each to its EOF.
cli HOST PORT N: N streams; stream i forks after DELAYS[i % 4] seconds.
Prints "intact K of N"."""
import os
import socket
import sys
import time

from echoes import echo_to_eof, listener, read_to_eof

role, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if role == "srv":
    lsn = listener(host, port, 16)
    for _ in range(n):
        c, _ = lsn.accept()
        echo_to_eof(c)
    sys.exit(0)

DELAYS = (0, 0.03, 0.08, 0.2)  # before, around and after RSOCK_SETTLE_MS
intact = 0
for i in range(n):
    msg = os.urandom(300000 + i)
    s = socket.create_connection((host, port))
    time.sleep(DELAYS[i % len(DELAYS)])
    pid = os.fork()
    if pid == 0:
        s.sendall(msg)
        s.shutdown(socket.SHUT_WR)
        os._exit(0)
    got = read_to_eof(s)
    os.waitpid(pid, 0)
    s.close()
    if got == msg:
        intact += 1
    else:
        print("stream %d: %d bytes back of %d" % (i, len(got), len(msg)), flush=True)
print("intact %d of %d" % (intact, n), flush=True)
