"""epoll registrations of a stream that moved to kernel TCP under them (a
failover): DEL, ADD and MOD must keep answering as the kernel's own do.
The client echoes 200 KB through the server in 1,000-byte steps while an
epoll instance holds the stream (the failover comes meanwhile), then
deletes and adds the registration three times, changing it in between, and
prints each answer. Run over kernel TCP and over librsock, the outputs match.
Usage: epswitch.py srv HOST PORT | epswitch.py cli HOST PORT."""
import select
import socket
import sys

from echoes import echo_to_eof, listener

role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "srv":
    echo_to_eof(listener(host, port).accept()[0])
    sys.exit(0)


def say(what, fn):
    try:
        r = fn()
        print(what, "ok" if r is None else r, flush=True)
    except OSError as e:
        print(what, e.strerror, flush=True)


s = socket.create_connection((host, port))
ep = select.epoll()
ep.register(s.fileno(), select.EPOLLIN)
got = 0
for i in range(200):
    s.sendall(b"x" * 1000)
    while got < (i + 1) * 1000:
        ep.poll(5)
        got += len(s.recv(65536))
print("echoed", got, flush=True)
for _ in range(3):
    say("DEL", lambda: ep.unregister(s.fileno()))
    say("DEL again", lambda: ep.unregister(s.fileno()))
    say("MOD unregistered", lambda: ep.modify(s.fileno(), select.EPOLLIN))
    say("ADD", lambda: ep.register(s.fileno(), select.EPOLLIN | select.EPOLLOUT))
    say("ADD again", lambda: ep.register(s.fileno(), select.EPOLLIN))
    say("poll", lambda: ep.poll(1))
    say("MOD", lambda: ep.modify(s.fileno(), select.EPOLLIN))
    say("poll IN", lambda: ep.poll(0.2))
s.shutdown(socket.SHUT_WR)
say("poll at EOF", lambda: ep.poll(1))
print("rest", len(s.recv(100)))
