#!/usr/bin/env python3
"""Every open flag under a root: the program sees exactly what it sees
without the shim. Each case runs twice on identical fresh copies of a small
root, once plain and once under the shim, and compares what the program
observed (return values, errno, sha256 of every byte read) and the files'
contents afterwards. Only plain read-only opens may reach the coordinator:
for every other flag the test checks that no coordinator was started at all.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

CHILD = r'''
import hashlib, json, mmap, os, sys, errno
case, root = sys.argv[1], sys.argv[2]
data = os.path.join(root, "data.bin")
res = []
def note(what, fn):
    try:
        v = fn()
        if isinstance(v, (bytes, bytearray)):
            v = "sha256:" + hashlib.sha256(v).hexdigest() + ":%d" % len(v)
        res.append([what, "ok", v])
    except OSError as e:
        res.append([what, "errno", errno.errorcode.get(e.errno, str(e.errno))])
def read_all(fd):
    out = b""
    while True:
        b = os.read(fd, 65536)
        if not b:
            return out
        out += b
def opener(flags, path=data, mode=0o644):
    fd = os.open(path, flags, mode)
    fds.append(fd)
    return fd
fds = []
R = os.O_RDONLY
if case == "rdonly":
    fd = opener(R); note("read", lambda: read_all(fd))
elif case == "rdonly_cloexec_noatime_nofollow":
    fd = opener(R | os.O_CLOEXEC | os.O_NOATIME | os.O_NOFOLLOW); note("read", lambda: read_all(fd))
elif case == "rdonly_nonblock":
    fd = opener(R | os.O_NONBLOCK); note("read", lambda: read_all(fd))
elif case == "rdonly_append":
    fd = opener(R | os.O_APPEND)
    note("getfl", lambda: os.get_blocking(fd))
    note("read", lambda: read_all(fd))
    w = os.open(data, os.O_WRONLY | os.O_APPEND); os.write(w, b"tail" * 1000); os.close(w)
    note("read after append", lambda: read_all(fd))
    note("pread all", lambda: os.pread(fd, 1 << 20, 0))
elif case == "rdonly_creat_new":
    fd = opener(R | os.O_CREAT, os.path.join(root, "new.bin"))
    note("read empty", lambda: read_all(fd))
    w = os.open(os.path.join(root, "new.bin"), os.O_WRONLY); os.write(w, b"x" * 5000); os.close(w)
    note("read after write", lambda: os.pread(fd, 1 << 20, 0))
elif case == "rdonly_creat_existing":
    fd = opener(R | os.O_CREAT); note("read", lambda: read_all(fd))
elif case == "rdonly_excl_creat":
    note("open", lambda: opener(R | os.O_CREAT | os.O_EXCL) and None)
elif case == "rdonly_trunc":
    fd = opener(R | os.O_TRUNC)
    note("read", lambda: read_all(fd))
    note("size", lambda: os.fstat(fd).st_size)
elif case == "wronly":
    fd = opener(os.O_WRONLY)
    note("write", lambda: os.write(fd, b"W" * 3000))
    note("read", lambda: os.read(fd, 10))
elif case == "rdwr":
    fd = opener(os.O_RDWR)
    note("read head", lambda: os.read(fd, 4096))
    note("write", lambda: os.write(fd, b"Z" * 5000))
    note("pread all", lambda: os.pread(fd, 1 << 20, 0))
elif case == "rdwr_append":
    fd = opener(os.O_RDWR | os.O_APPEND)
    note("write", lambda: os.write(fd, b"A" * 100))
    note("pread all", lambda: os.pread(fd, 1 << 20, 0))
elif case == "direct":
    try:
        fd = opener(R | os.O_DIRECT)
        buf = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT wants
        note("readv", lambda: os.readv(fd, [buf]))
        note("bytes", lambda: bytes(buf[:os.fstat(fd).st_size]))
    except OSError as e:
        res.append(["open", "errno", errno.errorcode.get(e.errno)])
elif case == "path":
    fd = opener(os.O_PATH)
    note("read", lambda: os.read(fd, 10))
    note("fstat size", lambda: os.fstat(fd).st_size)
elif case == "directory_on_file":
    note("open", lambda: opener(R | os.O_DIRECTORY) and None)
elif case == "directory":
    fd = opener(R | os.O_DIRECTORY, root)
    note("read", lambda: os.read(fd, 10))
elif case == "tmpfile":
    fd = opener(os.O_RDWR | os.O_TMPFILE, root)
    note("write", lambda: os.write(fd, b"T" * 7000))
    note("pread", lambda: os.pread(fd, 1 << 20, 0))
elif case == "dsync_sync":
    fd = opener(R | os.O_DSYNC | os.O_SYNC); note("read", lambda: read_all(fd))
else:
    sys.exit("unknown case " + case)
for fd in fds:
    os.close(fd)
print(json.dumps(res))
'''

# case -> may the open reach the coordinator?
CASES = {
    "rdonly": True,
    "rdonly_cloexec_noatime_nofollow": True,
    "rdonly_nonblock": True,
    "dsync_sync": True,
    "rdonly_append": False,
    "rdonly_creat_new": False,
    "rdonly_creat_existing": False,
    "rdonly_excl_creat": False,
    "rdonly_trunc": False,
    "wronly": False,
    "rdwr": False,
    "rdwr_append": False,
    "direct": False,
    "path": False,
    "directory_on_file": False,
    "directory": False,
    "tmpfile": False,
}


def fresh_root(env, name, seed_file):
    root = env.path(name)
    os.makedirs(root)
    shutil.copyfile(seed_file, os.path.join(root, "data.bin"))
    return root


def tree_hashes(root):
    return {os.path.relpath(p, root): T.sha256_file(p) for p in T.list_files(root)}


def main():
    env = T.Env("open-flags")
    script = T.write_script(env.path("child.py"), CHILD)
    seed = env.path("seed.bin")
    with open(seed, "wb") as f:
        f.write(os.urandom(3 * 4096))
    for case, may_route in CASES.items():
        T.section(case)
        plain = fresh_root(env, case + "-plain", seed)
        shimmed = fresh_root(env, case + "-shim", seed)
        p0 = env.run([T.PYTHON, script, case, plain], shim=False)
        rt = env.new_runtime_dir()
        # A first plain read-only open of the root in the same process would
        # start the coordinator; the case's own open is the only one here.
        p1 = env.run([T.PYTHON, script, case, shimmed], DLSHIM_ROOTS=shimmed, DLSHIM_CACHE="16M")
        ok = T.check(p0.returncode == 0 and p1.returncode == 0, "both runs exit 0",
                     (p0.stderr + p1.stderr).decode(errors="replace")[-1500:])
        if not ok:
            continue
        r0 = json.loads(p0.stdout)
        r1 = json.loads(p1.stdout)
        T.check(r0 == r1, "same results and bytes as without the shim", "plain %s\nshim  %s" % (r0, r1))
        T.check(tree_hashes(plain) == tree_hashes(shimmed), "same files on disk afterwards")
        T.check(b"dlshim" not in p1.stderr, "no shim message", p1.stderr.decode(errors="replace")[-500:])
        started = os.path.exists(os.path.join(rt, "dlshimd.log"))
        if may_route:
            T.check(started, "a plain read-only open is routed (the check can tell)")
        else:
            T.check(not started, "passed through: no coordinator was started")
    T.finish()


if __name__ == "__main__":
    main()
