#!/usr/bin/env python3
"""Hostile clients against the coordinator (DESIGN "Protocol": a malformed
message drops that client only; "Interposition rules" 4: never hung).

A fake client speaks to the coordinator's SOCK_SEQPACKET socket
($DLSHIM_RUNTIME_DIR/sock) directly, with packets packed by hand from the
layouts of include/dlshim/proto.h (sizes and constants are checked against
the header by compiling a tiny C probe). It sends, each on a fresh
connection unless noted:
  garbage bytes; a truncated header; a wrong magic; a wrong version; an
  unknown type; valid headers with lying lengths (longer / shorter than the
  packet); an OPEN, a STATS and a RELEASE before HELLO; a HELLO with an
  unterminated job name; a second HELLO; a STOP from a client session; an
  OPEN on a control connection; an oversized packet (> DLSHIM_MSG_MAX); many
  descriptors attached (beyond what a request carries, and to messages that
  carry none; the coordinator must not leak them); a RELEASE of a pin the
  session does not hold (another session's real pin, a made-up one, a double
  release); an OPEN whose NEED_FD is answered with the descriptor of another
  file; 100 idle connections; an OPEN whose NEED_FD is never answered while a
  real client opens the same file (the real client must not hang).
After each: the same coordinator process is alive (no crash, no respawn), a
real client (a subprocess reading files under the shim, some of them new so
they are loaded) gets the sha256 of every file on disk with nothing on
stderr, and `dlshim stats --json` works. Where the protocol says the
connection must be dropped, the coordinator must close it.
"""
import json
import os
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T  # noqa: E402

env = T.Env("hostile")
DATA = env.path("data")
T.write_random_files(DATA, 24, 1000, 90000, seed=71)
env.base["DLSHIM_ROOTS"] = DATA
env.base["DLSHIM_CACHE"] = "64M"

# ---------------------------------------------------------------- layouts from proto.h

T.section("protocol layout (checked against include/dlshim/proto.h)")
PROBE_C = r"""
#include <stdio.h>
#include <stddef.h>
#include "dlshim/proto.h"
int main(void) {
  printf("{\"hdr\":%zu,\"hello\":%zu,\"hello_job\":%zu,\"hello_job_len\":%zu,\"hello_ok\":%zu,"
         "\"open\":%zu,\"open_r\":%zu,\"release\":%zu,\"dataset\":%zu,\"magic\":%u,\"version\":%u,"
         "\"max\":%u,\"types\":[%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d],"
         "\"need_fd\":%d,\"hit\":%d,\"pass\":%d,\"control\":%u,\"client\":%u}\n",
         sizeof(struct dlshim_msg_hdr), sizeof(struct dlshim_msg_hello),
         offsetof(struct dlshim_msg_hello, job), sizeof(((struct dlshim_msg_hello *)0)->job),
         sizeof(struct dlshim_msg_hello_ok), sizeof(struct dlshim_msg_open),
         sizeof(struct dlshim_msg_open_r), sizeof(struct dlshim_msg_release),
         sizeof(struct dlshim_msg_dataset), DLSHIM_PROTO_MAGIC, DLSHIM_PROTO_VERSION, DLSHIM_MSG_MAX,
         DLSHIM_MSG_HELLO, DLSHIM_MSG_HELLO_OK, DLSHIM_MSG_OPEN, DLSHIM_MSG_OPEN_R, DLSHIM_MSG_LOADFD,
         DLSHIM_MSG_RELEASE, DLSHIM_MSG_STATS, DLSHIM_MSG_TEXT, DLSHIM_MSG_STOP, DLSHIM_MSG_ERROR,
         DLSHIM_MSG_DATASET, DLSHIM_MSG_TYPE_MAX, DLSHIM_OPEN_R_NEED_FD, DLSHIM_OPEN_R_HIT,
         DLSHIM_OPEN_R_PASS, DLSHIM_HELLO_CONTROL, DLSHIM_HELLO_CLIENT);
  return 0;
}
"""
with open(env.path("probe.c"), "w") as f:
    f.write(PROBE_C)
p = subprocess.run(["cc", "-I", os.path.join(T.REPO, "include"), "-o", env.path("probe"), env.path("probe.c")],
                   capture_output=True)
if p.returncode != 0:
    T.check(False, "compile the proto.h layout probe", p.stderr.decode(errors="replace"))
    T.finish()
L = json.loads(subprocess.run([env.path("probe")], capture_output=True, check=True).stdout)
(HELLO, HELLO_OK, OPEN, OPEN_R, LOADFD, RELEASE, STATS, TEXT, STOP, ERROR, DATASET, TYPE_MAX) = L["types"]

HDR_FMT = "=IHHII"                 # magic, version, type, len, seq
HELLO_FMT = "=IIQ%dsII" % L["hello_job_len"]   # pid, kind, session, job, job_owner, pad
HELLO_OK_FMT = "=IIQQ"             # daemon_pid, flags, segment_id, shm_len
OPEN_FMT = "=QQQqq"                # dev, ino, size, mtime_ns, ctime_ns
OPEN_R_FMT = "=IIIIQQ"             # status, item, slot, flags, gen, size
RELEASE_FMT = "=IIQQQQQQqII"       # item, slot, gen, bytes_cache, bytes_pass, dev, ino, size, mtime_ns, flags, pad
DATASET_FMT = "=IIII"              # redirect, sampler, chunk, pad
layout_ok = (struct.calcsize(HDR_FMT) == L["hdr"] and struct.calcsize(HELLO_FMT) == L["hello"]
             and struct.calcsize("=IIQ") == L["hello_job"] and struct.calcsize(HELLO_OK_FMT) == L["hello_ok"]
             and struct.calcsize(OPEN_FMT) == L["open"] and struct.calcsize(OPEN_R_FMT) == L["open_r"]
             and struct.calcsize(RELEASE_FMT) == L["release"] and struct.calcsize(DATASET_FMT) == L["dataset"])
T.check(layout_ok, "Python struct layouts match sizeof() in proto.h", L)
if not layout_ok:
    T.finish()
MAGIC, VERSION, MSG_MAX = L["magic"], L["version"], L["max"]
HDR = L["hdr"]


def hdr(t, n, seq=1, magic=None, version=None):
    return struct.pack(HDR_FMT, MAGIC if magic is None else magic, VERSION if version is None else version,
                       t, n, seq)


def pkt(t, payload=b"", seq=1):
    return hdr(t, len(payload), seq) + payload


def hello_payload(job=b"hostile", kind=None, session=0x5EED, terminated=True):
    n = L["hello_job_len"]
    j = job.ljust(n, b"\0")[:n] if terminated else (job * n)[:n]
    return struct.pack(HELLO_FMT, os.getpid(), L["client"] if kind is None else kind, session, j, 0, 0)


def file_id(path):
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def open_payload(path):
    return struct.pack(OPEN_FMT, *file_id(path))


def release_payload(slot, gen, bytes_cache=0, bytes_pass=0, flags=0):
    return struct.pack(RELEASE_FMT, 0, slot, gen, bytes_cache, bytes_pass, 0, 0, 0, 0, flags, 0)


SOCK = os.path.join(env.runtime_dir, "sock")


def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(SOCK)
    return s


def recv_msg(s, timeout=10):
    """(type, payload, fds) of the next packet; None at EOF/reset/timeout."""
    s.settimeout(timeout)
    try:
        msg, fds, _flags, _addr = socket.recv_fds(s, MSG_MAX + HDR + 64, 8)
    except (ConnectionResetError, socket.timeout, OSError):
        return None
    if not msg:
        for fd in fds:
            os.close(fd)
        return None
    magic, ver, t, n, seq = struct.unpack_from(HDR_FMT, msg)
    return t, msg[HDR:], fds


def dropped(s, timeout=10):
    """The coordinator closed this connection (EOF or reset) without replying."""
    s.settimeout(timeout)
    try:
        while True:
            d = s.recv(MSG_MAX + HDR)
            if not d:
                return True
            # any reply to a malformed request is unexpected, but a close must follow
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def still_open(s, wait=0.3):
    """Nothing arrives and the connection is not closed within `wait` s."""
    s.settimeout(wait)
    try:
        d = s.recv(MSG_MAX + HDR)
        return False if not d else "data"
    except socket.timeout:
        return True
    except OSError:
        return False


def client_hello(s, session=0x5EED, job=b"hostile"):
    """HELLO as a shim would; returns the HELLO_OK reply tuple or None."""
    s.send(pkt(HELLO, hello_payload(job=job, session=session)))
    r = recv_msg(s)
    if r is None or r[0] != HELLO_OK:
        return None
    for fd in r[2]:
        os.close(fd)   # the segment descriptor
    return struct.unpack(HELLO_OK_FMT, r[1])


def send_with_fds(s, data, fds):
    socket.send_fds(s, [data], fds)


# ---------------------------------------------------------------- the real client

READER = env.path("reader.py")
T.write_script(READER, r"""
import hashlib, os, sys
out = []
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    chunks = []
    while True:
        b = os.read(fd, 7000)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    out.append("%s  %s" % (hashlib.sha256(b"".join(chunks)).hexdigest(), p))
print("\n".join(out))
""")
_fresh = [0]


def new_files(n=3):
    """A few files nobody read yet: the real client's opens of them are misses (loads)."""
    _fresh[0] += 1
    d = os.path.join(DATA, "fresh%03d" % _fresh[0])
    return T.write_random_files(d, n, 2000, 60000, seed=1000 + _fresh[0])


def real_client(files, timeout=60):
    try:
        p = env.run([T.PYTHON, READER] + files, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timed out after %d s" % timeout
    return p, None


DAEMON_PID = None


def daemon_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return -1


def verify(tag):
    """The coordinator survived, a real client reads correct bytes, stats work."""
    alive = T.pid_alive(DAEMON_PID)
    T.check(alive, "%s: coordinator pid %d still alive" % (tag, DAEMON_PID))
    files = sorted(T.list_files(DATA))[:24] + new_files()
    p, why = real_client(files)
    if p is None:
        T.check(False, "%s: a real client reads its files" % tag, why)
        return
    want = {f: T.sha256_file(f) for f in files}
    got = {}
    for line in p.stdout.decode().splitlines():
        h, f = line.split("  ", 1)
        got[f] = h
    T.check(p.returncode == 0 and got == want,
            "%s: a real client under the shim gets the sha256 of all %d files (3 new)" % (tag, len(files)),
            "rc %d, wrong: %s\n%s" % (p.returncode, [f for f in want if got.get(f) != want[f]][:5],
                                      p.stderr.decode(errors="replace")))
    T.check(p.stderr == b"", "%s: nothing on the real client's stderr" % tag, p.stderr.decode(errors="replace"))
    st = env.try_stats()
    T.check(st is not None and st["daemon"]["pid"] == DAEMON_PID,
            "%s: dlshim stats --json works and names the same coordinator" % tag,
            None if st is None else "pid %s" % st["daemon"]["pid"])
    if st is not None:
        # the new files were routed through this coordinator (a respawned one would have 0 requests)
        req = sum(j["requests"] for j in st["jobs"])
        T.check(req > 0, "%s: the real clients' opens were routed (requests %d)" % (tag, req))


# ---------------------------------------------------------------- start the coordinator

T.section("coordinator started by a real client")
p, why = real_client(sorted(T.list_files(DATA)))
T.check(p is not None and p.returncode == 0, "first real client runs", why or (p.stderr.decode() if p else None))
st = env.try_stats()
T.check(st is not None, "dlshim stats --json works", None)
if st is None or not T.pid_alive(st["daemon"]["pid"]):
    T.finish()
DAEMON_PID = st["daemon"]["pid"]
T.check(os.path.exists(SOCK), "socket %s exists" % SOCK)
T.info("coordinator pid %d, %d fds" % (DAEMON_PID, daemon_fds(DAEMON_PID)))

# ---------------------------------------------------------------- malformed packets

T.section("malformed packets: each drops that client only")
cases = [
    ("garbage bytes", os.urandom(97)),
    ("garbage of exactly a header's size", os.urandom(HDR)),
    ("truncated header", pkt(STATS)[:HDR - 5]),
    ("one byte", b"\x44"),
    ("wrong magic", hdr(STATS, 0, magic=0xDEADBEEF)),
    ("wrong version", hdr(STATS, 0, version=VERSION + 1)),
    ("version 0", hdr(HELLO, L["hello"], version=0) + hello_payload()),
    ("unknown type 0", hdr(0, 0)),
    ("unknown type TYPE_MAX", hdr(TYPE_MAX, 0)),
    ("unknown type 0xffff", hdr(0xFFFF, 0)),
    ("HELLO header claiming more payload than sent", hdr(HELLO, L["hello"]) + hello_payload()[:20]),
    ("HELLO header claiming less payload than sent", hdr(HELLO, 10) + hello_payload()),
    ("HELLO header claiming 4 GiB", hdr(HELLO, 0xFFFFFFFF) + hello_payload()),
    ("HELLO with a payload one byte short", pkt(HELLO, hello_payload()[:-1])),
    ("HELLO with a payload one byte long", pkt(HELLO, hello_payload() + b"\0")),
    ("HELLO with an unterminated job name", pkt(HELLO, hello_payload(job=b"J", terminated=False))),
    ("OPEN before HELLO", pkt(OPEN, open_payload(T.list_files(DATA)[0]))),
    ("STATS before HELLO", pkt(STATS)),
    ("RELEASE before HELLO", pkt(RELEASE, release_payload(0, 2))),
    ("LOADFD before HELLO", pkt(LOADFD)),
    ("DATASET before HELLO", pkt(DATASET, struct.pack(DATASET_FMT, 0, 0, 0, 0) + b"/\0\0")),
    ("reply types sent to the coordinator (HELLO_OK)", pkt(HELLO_OK, struct.pack(HELLO_OK_FMT, 1, 0, 2, 3))),
    ("reply types sent to the coordinator (TEXT)", pkt(TEXT, b"hi")),
    ("empty packet", b""),
]
for name, data in cases:
    s = connect()
    try:
        s.send(data)
    except OSError as e:
        T.check(False, "%s: sent" % name, repr(e))
        s.close()
        continue
    if data == b"":
        # a zero-length SEQPACKET datagram reads as EOF on the other side
        T.check(dropped(s), "%s: connection closed by the coordinator" % name)
    else:
        T.check(dropped(s), "%s: connection dropped by the coordinator" % name)
    s.close()
verify("after the malformed packets")

T.section("valid session, then a malformed packet: dropped, and its session ends")
s = connect()
ok = client_hello(s, session=0xA1)
T.check(ok is not None and ok[0] == DAEMON_PID, "HELLO gets HELLO_OK from the coordinator", ok)
s.send(pkt(STATS))
r = recv_msg(s)
T.check(r is not None and r[0] == TEXT and isinstance(json.loads(r[1]), dict),
        "STATS on the session answers JSON", r)
s.send(hdr(OPEN, L["open"]) + b"\x01\x02")  # lying length inside a session
T.check(dropped(s), "a lying OPEN inside a session drops it")
s.close()
s = connect()
client_hello(s, session=0xA2)
s.send(pkt(HELLO, hello_payload(session=0xA2)))
T.check(dropped(s), "a second HELLO on a connection drops it")
s.close()
s = connect()
client_hello(s, session=0xA3)
s.send(pkt(STOP))
T.check(dropped(s), "STOP from a client (not control) session drops it")
s.close()
T.check(T.pid_alive(DAEMON_PID), "... and does not stop the coordinator")
s = connect()
s.send(pkt(HELLO, hello_payload(kind=L["control"])))
r = recv_msg(s)
T.check(r is not None and r[0] == HELLO_OK, "a control HELLO is answered")
s.send(pkt(OPEN, open_payload(T.list_files(DATA)[0])))
T.check(dropped(s), "OPEN on a control connection drops it")
s.close()
s = connect()
client_hello(s, session=0xA4)
s.send(pkt(DATASET, struct.pack(DATASET_FMT, 0, 0, 0, 0) + b"/nonexistent"))  # no NULs at all
T.check(dropped(s), "DATASET with unterminated roots drops it")
s.close()
s = connect()
client_hello(s, session=0xA5)
s.send(pkt(DATASET, struct.pack(DATASET_FMT, 7, 0, 0, 0) + b"/\0\0"))
T.check(dropped(s), "DATASET with redirect mode 7 drops it")
s.close()
verify("after malformed packets inside sessions")

# ---------------------------------------------------------------- oversized

T.section("oversized packets")
s = connect()
try:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
except OSError:
    pass
big = hdr(DATASET, MSG_MAX + 4096) + b"A" * (MSG_MAX + 4096)
try:
    s.send(big)
    sent = True
except OSError as e:
    sent = False
    T.info("a %d-byte packet cannot be sent (%s); sending the largest the socket takes" % (len(big), e))
if not sent:
    big = hdr(DATASET, 150000) + b"A" * 150000
    try:
        s.send(big)
        sent = True
    except OSError as e:
        T.info("a 150 KB packet cannot be sent either (%s)" % e)
T.check(sent and dropped(s), "a %d-byte packet (declared payload %d > DLSHIM_MSG_MAX %d or truncated) drops the client"
        % (len(big), struct.unpack_from(HDR_FMT, big)[3], MSG_MAX))
s.close()
s = connect()
client_hello(s, session=0xB1)
s.send(pkt(TEXT, b"x" * 60000))
T.check(dropped(s), "a 60 KB TEXT inside a session drops it")
s.close()
# the other side of the limit: a large but legitimate request is not "oversized"
LONG_ROOTS = ",".join([DATA] + ["/nonexistent/%s/%02d" % ("r" * 100, i) for i in range(12)])
s = connect()
client_hello(s, session=0xB2, job=b"long-roots")
s.send(pkt(DATASET, struct.pack(DATASET_FMT, 0, 0, 0, 0) + LONG_ROOTS.encode() + b"\0\0"))
r = recv_msg(s)
T.check(r is not None and r[0] == TEXT,
        "a valid DATASET of %d bytes (13 roots, within what DLSHIM_ROOTS allows) is answered, not dropped" % (len(LONG_ROOTS) + 18),
        "the coordinator receives requests into a buffer of header + 1024 bytes (engine/daemon/server.c receive())")
s.close()
lr_files = new_files(2)
try:
    p = env.run([T.PYTHON, READER] + lr_files, timeout=60, DLSHIM_ROOTS=LONG_ROOTS, DLSHIM_JOB="long-roots-job")
except subprocess.TimeoutExpired:
    p = None
T.check(p is not None and p.returncode == 0 and
        [l.split()[0] for l in p.stdout.decode().splitlines()] == [T.sha256_file(f) for f in lr_files],
        "a real client with a %d-byte DLSHIM_ROOTS reads correct bytes" % len(LONG_ROOTS))
st = env.try_stats()
lj = [j for j in (st or {}).get("jobs", []) if j["job"] == "long-roots-job"]
T.check(p is not None and p.stderr == b"" and lj and lj[0]["requests"] == 2,
        "... and is served by the coordinator (no warning, 2 requests for its job)",
        "stderr %r, job %s" % (p.stderr.decode(errors="replace") if p else None, lj))
verify("after oversized packets")

# ---------------------------------------------------------------- descriptors

T.section("descriptors attached")
base_fds = daemon_fds(DAEMON_PID)
T.info("coordinator holds %d descriptors" % base_fds)
target = sorted(T.list_files(DATA))[5]


def attach_many(n, data, session):
    fds = [os.open(target, os.O_RDONLY) for _ in range(n)]
    s = connect()
    if session is not None:
        client_hello(s, session=session)
    try:
        send_with_fds(s, data, fds)
        err = None
    except OSError as e:
        err = e
    for fd in fds:
        os.close(fd)
    return s, err


for n in (16, 64, 250):
    s, err = attach_many(n, pkt(STATS), None)
    T.check(err is None and dropped(s), "STATS before HELLO with %d descriptors: dropped" % n, err)
    s.close()
    s, err = attach_many(n, pkt(OPEN, open_payload(target)), 0xC000 + n)
    T.check(err is None and dropped(s), "OPEN with %d descriptors (control data truncated): dropped" % n, err)
    s.close()
# within what a packet may carry: the extra ones are closed, the session goes on
for n in (2, 4):
    s, err = attach_many(n, pkt(OPEN, open_payload(target)), 0xC100 + n)
    r = recv_msg(s) if err is None else None
    T.check(r is not None and r[0] == OPEN_R, "OPEN with %d descriptors is answered (OPEN_R)" % n, err)
    if r is not None:
        for fd in r[2]:
            os.close(fd)
    s.send(pkt(STATS))
    r = recv_msg(s)
    T.check(r is not None and r[0] == TEXT, "... and the session goes on")
    s.close()
for n in (1, 4):
    s, err = attach_many(n, pkt(STATS), 0xC200 + n)
    r = recv_msg(s) if err is None else None
    T.check(r is not None and r[0] == TEXT and not r[2],
            "STATS with %d descriptors attached is answered (descriptors ignored)" % n)
    s.close()
# repeat to make a leak visible
for i in range(40):
    s, err = attach_many(8, pkt(OPEN, open_payload(target)), 0xD000 + i)
    dropped(s, timeout=5)
    s.close()
    s, err = attach_many(3, pkt(RELEASE, release_payload(0xFFFFFFFF, 0)), 0xD100 + i)
    s.close()
ok = T.wait_until(lambda: daemon_fds(DAEMON_PID) <= base_fds, timeout=10)
T.check(ok, "no descriptor leaked in the coordinator (%d before, %d after ~600 passed in)"
        % (base_fds, daemon_fds(DAEMON_PID)))
verify("after descriptor floods")

# ---------------------------------------------------------------- pins

T.section("RELEASE of pins the session does not hold")


def pinned():
    st = env.try_stats()
    return None if st is None else st["cache"]["items_pinned"]


holder_file = sorted(T.list_files(DATA))[7]
T.check(T.wait_until(lambda: pinned() == 0, timeout=10), "no pins before (items_pinned %s)" % pinned())
a = connect()
client_hello(a, session=0xE1, job=b"holder")
fd = os.open(holder_file, os.O_RDONLY)
send_with_fds(a, pkt(OPEN, open_payload(holder_file)), [fd])
r = recv_msg(a)
os.close(fd)
status = slot = gen = None
if r is not None and r[0] == OPEN_R:
    status, _item, slot, _flags, gen, size = struct.unpack(OPEN_R_FMT, r[1])
    for x in r[2]:
        os.close(x)
T.check(status == L["hit"], "session A opens a file and holds a pin (slot %s gen %s)" % (slot, gen), r)
T.check(pinned() == 1, "items_pinned is 1 (got %s)" % pinned())
if status == L["hit"]:
    b = connect()
    client_hello(b, session=0xE2, job=b"thief")
    b.send(pkt(RELEASE, release_payload(slot, gen)))
    b.send(pkt(RELEASE, release_payload(slot, gen)))
    b.send(pkt(RELEASE, release_payload(slot, gen + 2)))
    b.send(pkt(RELEASE, release_payload(slot + 1, gen)))
    b.send(pkt(RELEASE, release_payload(0xFFFFFFFE, 1 << 63)))
    b.send(pkt(STATS))
    r = recv_msg(b)
    T.check(r is not None and r[0] == TEXT, "session B's RELEASEs of pins it does not hold keep its connection")
    T.check(pinned() == 1, "A's pin survives B's releases (items_pinned %s)" % pinned())
    b.close()
    time.sleep(0.3)
    T.check(pinned() == 1, "B's disconnect does not drop A's pin (items_pinned %s)" % pinned())
    a.send(pkt(RELEASE, release_payload(slot, gen)))
    a.send(pkt(RELEASE, release_payload(slot, gen)))  # double release
    a.send(pkt(STATS))
    r = recv_msg(a)
    T.check(r is not None and r[0] == TEXT, "A's own release and a double release keep A's connection")
    T.check(T.wait_until(lambda: pinned() == 0, timeout=5), "A's release drops the pin once (items_pinned %s)" % pinned())
    st = env.try_stats()
    T.check(st is not None and st["cache"]["items_pinned"] >= 0 and st["cache"]["items_pinned"] < 1 << 31,
            "pin counts did not underflow")
a.close()
verify("after foreign releases")

# ---------------------------------------------------------------- wrong descriptor for LOADFD

T.section("NEED_FD answered with the descriptor of another file")
victim = new_files(1)[0]
other = sorted(T.list_files(DATA))[0]
s = connect()
client_hello(s, session=0xF1, job=b"liar")
s.send(pkt(OPEN, open_payload(victim)))
r = recv_msg(s)
st_ = struct.unpack(OPEN_R_FMT, r[1])[0] if r and r[0] == OPEN_R else None
T.check(st_ == L["need_fd"], "an OPEN without a descriptor of a new file gets NEED_FD (status %s)" % st_)
if st_ == L["need_fd"]:
    fd = os.open(other, os.O_RDONLY)
    send_with_fds(s, pkt(LOADFD), [fd])
    os.close(fd)
    r = recv_msg(s)
    st2 = struct.unpack(OPEN_R_FMT, r[1])[0] if r and r[0] == OPEN_R else None
    T.check(st2 == L["pass"], "... a LOADFD with another file's descriptor is refused (PASS, not HIT: got %s)" % st2)
s.close()
p, why = real_client([victim])
T.check(p is not None and p.returncode == 0 and p.stdout.decode().split()[0] == T.sha256_file(victim),
        "the victim file then reads correctly under the shim", why)
verify("after a lying LOADFD")

# ---------------------------------------------------------------- idle connections

T.section("100 idle connections (some mid-HELLO)")
idle = []
try:
    for i in range(100):
        c = connect()
        if i % 3 == 0:
            c.send(pkt(HELLO, hello_payload(session=0x1D1E00 + i)))
        idle.append(c)
except OSError as e:
    T.check(False, "opened 100 connections", repr(e))
verify("with 100 idle connections open")
for c in idle:
    c.close()

# ---------------------------------------------------------------- stalled loader

T.section("an OPEN whose NEED_FD is never answered (client stalled mid-open)")
stalled = new_files(1)[0]
s = connect()
client_hello(s, session=0xF2, job=b"staller")
s.send(pkt(OPEN, open_payload(stalled)))
r = recv_msg(s)
st_ = struct.unpack(OPEN_R_FMT, r[1])[0] if r and r[0] == OPEN_R else None
T.check(st_ == L["need_fd"], "the stalled client got NEED_FD and now sends nothing")
t0 = time.monotonic()
p, why = real_client([stalled], timeout=15)
dt = time.monotonic() - t0
T.check(p is not None and p.returncode == 0 and p.stdout.decode().split()[0] == T.sha256_file(stalled),
        "a real client opening the same file gets correct bytes", why)
T.check(dt < 10, "... without waiting for the stalled client (took %.1f s; limit 10 s)" % dt,
        "the coordinator makes every opener of an item wait (DLSHIM_OPEN_WAIT) until the client that was sent "
        "NEED_FD answers; a stopped or hostile client blocks the others until the shim's 120 s socket timeout")
s.close()
verify("after the stalled client left")

T.section("coordinator log")
log = os.path.join(env.runtime_dir, "dlshimd.log")
text = open(log, errors="replace").read() if os.path.exists(log) else ""
T.check("malformed" in text, "the coordinator logged the malformed messages")
T.check("released a pin it does not hold" in text, "the coordinator logged the foreign releases")
T.finish()
