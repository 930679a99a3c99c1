#!/usr/bin/env python3
"""A man-in-the-middle "coordinator" for tests/integration/test_isolation.sh.

    relay_sock.py UPSTREAM_SOCK LOG LISTEN_SOCK...

Listens on every LISTEN_SOCK (SOCK_SEQPACKET, mode 0777) and relays each
accepted connection packet by packet, descriptors included, to UPSTREAM_SOCK
(a real dlshimd run by the same user as this relay, so it accepts the relay
as its own client). Everything a victim would leak is written to LOG:
    accepted uid U pid P on PATH      a connection reached us
    packet type T len N fds K         what the victim sent
    stolen fd: N bytes sha256 H       a descriptor the victim passed, read by us
LOG.ready is created once listening. Run by an unprivileged user, it shows
what a client that trusts a runtime directory it does not own gives away.
"""
import hashlib
import os
import select
import socket
import struct
import sys
import threading

upstream, logf = sys.argv[1], sys.argv[2]
paths = sys.argv[3:]
lock = threading.Lock()


def log(msg):
    with lock:
        with open(logf, "a") as f:
            f.write(msg + "\n")


def read_all(fd):
    chunks = []
    off = 0
    while True:
        b = os.pread(fd, 1 << 20, off)
        if not b:
            return b"".join(chunks)
        chunks.append(b)
        off += len(b)


def handle(c, path):
    pid, uid, _gid = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    log("accepted uid %d pid %d on %s" % (uid, pid, path))
    try:
        u = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        u.connect(upstream)
    except OSError as e:
        log("upstream unreachable: %s" % e)
        c.close()
        return
    try:
        while True:
            r, _, _ = select.select([c, u], [], [], 60)
            if not r:
                return
            for s in r:
                msg, fds, _fl, _a = socket.recv_fds(s, 300000, 16)
                if not msg:
                    return
                other = u if s is c else c
                if s is c:
                    t = struct.unpack_from("=IHHII", msg)[2] if len(msg) >= 16 else -1
                    log("packet type %d len %d fds %d" % (t, len(msg), len(fds)))
                    for fd in fds:
                        try:
                            data = read_all(fd)
                            log("stolen fd: %d bytes sha256 %s" % (len(data), hashlib.sha256(data).hexdigest()))
                        except OSError as e:
                            log("passed fd unreadable: %s" % e)
                if fds:
                    socket.send_fds(other, [msg], fds)
                else:
                    other.send(msg)
                for fd in fds:
                    os.close(fd)
    except OSError as e:
        log("relay error: %s" % e)
    finally:
        c.close()
        u.close()


def serve(srv, path):
    while True:
        c, _ = srv.accept()
        threading.Thread(target=handle, args=(c, path), daemon=True).start()


threads = []
for p in paths:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(p)
    os.chmod(p, 0o777)
    srv.listen(16)
    t = threading.Thread(target=serve, args=(srv, p), daemon=True)
    t.start()
    threads.append(t)
open(logf + ".ready", "w").close()
for t in threads:
    t.join()
