#!/usr/bin/env python3
"""Files under a root that are not ordinary data files pass through: a FIFO,
a unix socket, a character device, procfs files bound under the root (size 0
but with content), symlinks to files outside the root (procfs included), a
dangling symlink and a directory. Each case runs plain and under the shim
(exact, then redirect any) with a time limit, and what the program observed
(results, errno, sha256 of the bytes) must be identical. Last, a scanned
file replaced by a FIFO must not hang the coordinator that opens it.
Needs root for the bind mounts (the test machine is).
"""
import json
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

CHILD = r'''
import errno, hashlib, json, os, sys
res = []
for p in sys.argv[1:]:
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK if p.endswith("fifo-nowriter") else os.O_RDONLY)
    except OSError as e:
        res.append([os.path.basename(p), "open", errno.errorcode.get(e.errno)])
        continue
    out = b""
    try:
        while len(out) < (1 << 20):
            b = os.read(fd, 65536)
            if not b:
                break
            out += b
        res.append([os.path.basename(p), "read", hashlib.sha256(out).hexdigest(), len(out)])
    except OSError as e:
        res.append([os.path.basename(p), "read", errno.errorcode.get(e.errno)])
    os.close(fd)
print(json.dumps(res))
'''


def mount_bind(src, dst):
    return subprocess.run(["mount", "--bind", src, dst], capture_output=True).returncode == 0


def umount(path):
    subprocess.run(["umount", "-l", path], capture_output=True)


def main():
    env = T.Env("special-files")
    script = T.write_script(env.path("child.py"), CHILD)
    root = env.path("root")
    os.makedirs(os.path.join(root, "sub"))
    outside = env.path("outside")
    os.makedirs(outside)
    with open(os.path.join(outside, "target.bin"), "wb") as f:
        f.write(os.urandom(30000))
    with open(os.path.join(root, "plain.bin"), "wb") as f:
        f.write(os.urandom(20000))
    os.mkfifo(os.path.join(root, "fifo-nowriter"))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(os.path.join(root, "sock"))
    os.mknod(os.path.join(root, "null"), 0o666 | 0o020000, os.makedev(1, 3))
    os.symlink(os.path.join(outside, "target.bin"), os.path.join(root, "link-outside"))
    os.symlink("/proc/sys/kernel/ostype", os.path.join(root, "link-proc"))
    os.symlink(os.path.join(outside, "missing"), os.path.join(root, "link-dangling"))
    # procfs files bound under the root: regular, size 0, with content
    for name in ("ostype", "osrelease"):
        open(os.path.join(root, name), "w").close()
    pdir = os.path.join(root, "kernel")
    os.makedirs(pdir)
    mounts = [os.path.join(root, "ostype"), os.path.join(root, "osrelease"), pdir]
    ok = (mount_bind("/proc/sys/kernel/ostype", mounts[0]) and mount_bind("/proc/sys/kernel/osrelease", mounts[1])
          and mount_bind("/proc/sys/kernel", pdir))
    if not ok:
        print("not available: bind mounts need root")
        for m in mounts:
            umount(m)
        sys.exit(T.EXIT_NOT_AVAILABLE)
    try:
        st = os.stat(mounts[0])
        T.check(st.st_size == 0 and len(open(mounts[0], "rb").read()) > 0,
                "precondition: the bound procfs file reports size 0 and has content")
        paths = [os.path.join(root, n) for n in ("plain.bin", "fifo-nowriter", "sock", "null", "link-outside",
                                                  "link-proc", "link-dangling", "ostype", "osrelease", "sub")]
        paths += [os.path.join(pdir, n) for n in ("hostname", "ostype", "pid_max")]
        plain = env.run([T.PYTHON, script] + paths, shim=False, timeout=20)
        expect = json.loads(plain.stdout)
        for mode in ("off", "any"):
            T.section("special files, redirect %s" % mode)
            env.new_runtime_dir()
            try:
                p = env.run([T.PYTHON, script] + paths, timeout=20, DLSHIM_ROOTS=root, DLSHIM_REDIRECT=mode,
                            DLSHIM_CACHE="16M")
            except subprocess.TimeoutExpired:
                T.check(False, "the program finished (no hang)")
                continue
            T.check(p.returncode == 0, "the program exits 0", p.stderr.decode(errors="replace")[-1000:])
            got = json.loads(p.stdout or b"[]")
            for e, g in zip(expect, got):
                T.check(e == g, "%s: same result and bytes as without the shim" % e[0], "plain %s\nshim  %s" % (e, g))
            T.check(len(got) == len(expect), "every path reported")
            # Twice in one process: a second read must not come from a cache.
            p = env.run([T.PYTHON, script] + paths[7:9] * 2, timeout=20, DLSHIM_ROOTS=root, DLSHIM_REDIRECT=mode)
            again = json.loads(p.stdout or b"[]")
            T.check(again == expect[7:9] * 2, "procfs files read twice: same bytes each time", again)

        T.section("a scanned file replaced by a FIFO, opened by the coordinator")
        fr = env.path("fifo-root")
        os.makedirs(fr)
        names = ["f%02d.bin" % i for i in range(16)]
        for n in names:
            with open(os.path.join(fr, n), "wb") as f:
                f.write(os.urandom(8000))
        manifest = {n: T.sha256_file(os.path.join(fr, n)) for n in names}
        env.new_runtime_dir()
        over = dict(DLSHIM_ROOTS=fr, DLSHIM_REDIRECT="any", DLSHIM_CACHE="16M", DLSHIM_CHUNK="16",
                    DLSHIM_JOB="fifo-job")
        # The first open declares the dataset (scan); then a file becomes a FIFO.
        reader = T.write_script(env.path("fifo_reader.py"), r'''
import hashlib, os, sys, time
root, names, marker = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
print(hashlib.sha256(open(os.path.join(root, names[0]), "rb").read()).hexdigest(), flush=True)
open(marker, "w").close()
while os.path.exists(marker):
    time.sleep(0.02)
for n in names[1:]:
    print(hashlib.sha256(open(os.path.join(root, n), "rb").read()).hexdigest(), flush=True)
''')
        marker = env.path("marker")
        victim = os.path.join(fr, names[-1])
        proc = env.popen([T.PYTHON, reader, fr, ",".join(names[:-1]), marker], **over)
        T.wait_until(lambda: os.path.exists(marker), timeout=20)
        os.unlink(victim)
        os.mkfifo(victim)
        os.unlink(marker)
        try:
            out, err = proc.communicate(timeout=30)
            hung = False
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            hung = True
        T.check(not hung, "the program finished (the coordinator did not block on the FIFO)")
        got = out.decode().split()
        T.check(len(got) == len(names) - 1 and set(got) <= set(manifest.values()) and len(set(got)) == len(got),
                "every byte served is one whole dataset file, each once", (got, err.decode(errors="replace")[-800:]))
        st = env.try_stats()
        T.check(st is not None, "the coordinator still answers")
    finally:
        for m in mounts:
            umount(m)
        sock.close()
    T.finish()


if __name__ == "__main__":
    main()
