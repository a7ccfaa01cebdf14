"""forkexit.py - a client that forks and exits without closing its stream
(exit(): the descriptor is detached, nothing closes it, as in a C program
that returns from main or a shell's `( ... ) & exit`): the child goes on
with the stream, as it does over kernel TCP.

forkexit.py HOST PORT SRC: connect (from SRC), send "hello" and read the
echo; fork; the parent exits at once; the child, a second later, sends
"child!" and reads the echo, then prints "child got b'child!'" (or the
error) and closes. The parent waits for nothing.
"""
import os
import sys
import time
import socket

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import echoes  # noqa: E402

host, port, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port), source_address=(src, 0))
s.sendall(b"hello")
print("parent got", s.recv(5), flush=True)
if os.fork() == 0:
    time.sleep(1)
    try:
        s.sendall(b"child!")
        print("child got", echoes.read_exact(s, 6), flush=True)
    except OSError as e:
        print("child error", e, flush=True)
    s.close()
    os._exit(0)
s.detach()
sys.exit(0)
