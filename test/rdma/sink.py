"""A bulk sink: the client writes COUNT megabytes in 1 MiB writes and
closes; the server reads to EOF and prints how many bytes it got and the
CPU time it used. Usage: sink.py srv HOST PORT | sink.py cli HOST PORT COUNT."""
import os
import socket
import sys

from echoes import listener, read_to_eof

role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "cli":
    s = socket.create_connection((host, port))
    block = b"x" * (1 << 20)
    for _ in range(int(sys.argv[4])):
        s.sendall(block)
    s.close()
    sys.exit(0)
c, _ = listener(host, port).accept()
got = len(read_to_eof(c))
t = os.times()
print("got %d cpu %.2f" % (got, t.user + t.system), flush=True)
