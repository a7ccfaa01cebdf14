"""closewrite.py - streams closed right after a large write: every byte must
reach the peer, the last ones too, when the writer exits right after its
last close.

    closewrite.py serve ADDR PORT N         accept N streams, each read to
                                            EOF in a thread of its own: a
                                            header (length, SHA-256), then
                                            the payload; prints "intact K of
                                            N" and a line for each stream
                                            that is not
    closewrite.py client ADDR PORT N SIZE PAR
                                            N streams, PAR at a time (a
                                            thread each): connect, write the
                                            header and SIZE bytes of the
                                            stream's own pattern, close at
                                            once (every fourth with SO_LINGER
                                            {1, 5}: a lingering close); the
                                            last batch is closed by the main
                                            thread, one stream after the
                                            other, and the process calls
                                            exit() right after (libc's, not
                                            Python's finalisation first)
"""
import ctypes
import hashlib
import random
import socket
import struct
import sys
import threading

from echoes import listener, read_exact, read_to_eof

HDR = struct.Struct("!Q32s")


def check(c, i, results):
    hdr = read_exact(c, HDR.size)
    body = read_to_eof(c)
    c.close()
    if len(hdr) < HDR.size:
        results[i] = "stream %d: EOF in the header (%d bytes)" % (i, len(hdr))
        return
    n, digest = HDR.unpack(hdr)
    if len(body) != n:
        results[i] = "stream %d: %d of %d bytes" % (i, len(body), n)
    elif hashlib.sha256(body).digest() != digest:
        results[i] = "stream %d: %d bytes, checksum differs" % (i, n)
    else:
        results[i] = None


def serve(addr, port, n):
    lsn = listener(addr, port, 64)
    results = [False] * n
    threads = []
    for i in range(n):
        c, _ = lsn.accept()
        th = threading.Thread(target=check, args=(c, i, results))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    for r in results:
        if r:
            print(r, flush=True)
    print("intact %d of %d" % (sum(r is None for r in results), n), flush=True)


def write_close(addr, port, i, size, keep=None):
    payload = random.Random(i).randbytes(size)
    s = socket.create_connection((addr, port))
    if i % 4 == 3:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 5))
    s.sendall(HDR.pack(size, hashlib.sha256(payload).digest()))
    s.sendall(payload)
    if keep is None:
        s.close()
    else:
        keep.append(s)


def client(addr, port, n, size, par):
    for base in range(0, n, par):
        last = base + par >= n
        kept = []
        threads = [threading.Thread(target=write_close,
                                    args=(addr, port, i, size, kept if last else None))
                   for i in range(base, min(n, base + par))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    # The last batch: closed one after the other, then exit() at once
    for s in kept:
        s.close()
    ctypes.CDLL(None).exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
               int(sys.argv[6]))
