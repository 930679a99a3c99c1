#!/usr/bin/env python3
"""Dataset files that change during a run are never served with old or
torn bytes. Each case reads through the shim and compares the sha256 of what
the program got with the sha256 of the file as it is on disk:
  * exact mode: a file rewritten in place (same inode, same size) with its
    mtime put back, so only ctime tells the versions apart;
  * exact mode: rewritten in place with a new size and mtime;
  * redirect (dir): every file rewritten in place between two jobs; the
    second job's bytes must all be current contents, never the first's;
  * a file deleted and a new one created that reuses its inode number,
    with the same size and mtime;
  * a file rewritten while the coordinator loads it (a test pause between
    the loader's reads makes the overlap certain): the program gets the new
    bytes, never a mix.
"""
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

READER = r'''
import hashlib, sys
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        print(hashlib.sha256(f.read()).hexdigest() + "  " + p, flush=True)
'''


def rand_bytes(n, seed):
    return random.Random(seed).randbytes(n)


def rewrite_in_place(path, data, keep_mtime):
    """New content in the same inode; optionally put the old mtime back."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate(len(data))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def read_all(env, script, paths, **over):
    p = env.run([T.PYTHON, script] + paths, timeout=120, **over)
    out = {}
    for line in p.stdout.decode().splitlines():
        h, path = line.split("  ", 1)
        out.setdefault(path, []).append(h)
    return p, out


def exact_cases(env, script):
    root = env.path("exact")
    os.makedirs(root)
    a = os.path.join(root, "a.bin")
    with open(a, "wb") as f:
        f.write(rand_bytes(100000, 1))
    over = dict(DLSHIM_ROOTS=root, DLSHIM_CACHE="64M")

    T.section("exact: rewritten in place, same size, mtime put back")
    p, got = read_all(env, script, [a, a], **over)
    T.check(p.returncode == 0 and got.get(a) == [T.sha256_file(a)] * 2, "first version read (and cached)",
            p.stderr.decode(errors="replace")[-1500:])
    old = T.sha256_file(a)
    rewrite_in_place(a, rand_bytes(100000, 2), keep_mtime=True)
    new = T.sha256_file(a)
    p, got = read_all(env, script, [a, a], **over)
    T.check(got.get(a) == [new, new], "second version read, not the cached first one",
            "old %s new %s got %s" % (old, new, got.get(a)))

    T.section("exact: rewritten in place, new size and mtime")
    rewrite_in_place(a, rand_bytes(150000, 3), keep_mtime=False)
    new = T.sha256_file(a)
    p, got = read_all(env, script, [a], **over)
    T.check(got.get(a) == [new], "third version read", got.get(a))

    T.section("exact: inode number reused by a new file of the same size and mtime")
    b = os.path.join(root, "b.bin")
    with open(b, "wb") as f:
        f.write(rand_bytes(80000, 4))
    p, got = read_all(env, script, [b], **over)
    T.check(got.get(b) == [T.sha256_file(b)], "old file read (and cached)")
    st = os.stat(b)
    reused = False
    for attempt in range(20):
        os.unlink(b)
        with open(b, "wb") as f:
            f.write(rand_bytes(80000, 100 + attempt))
        os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
        if os.stat(b).st_ino == st.st_ino:
            reused = True
            break
    if not T.check(reused, "the file system reused the inode number (precondition)"):
        return
    new = T.sha256_file(b)
    p, got = read_all(env, script, [b, b], **over)
    T.check(got.get(b) == [new, new], "the new file's bytes, not the old entry's", got.get(b))


def redirect_case(env, script):
    T.section("redirect dir: files rewritten in place between two jobs")
    root = env.path("redir")
    cls = os.path.join(root, "c0")
    os.makedirs(cls)
    paths = []
    for i in range(24):
        q = os.path.join(cls, "f%02d.bin" % i)
        with open(q, "wb") as f:
            f.write(rand_bytes(20000, 1000 + i))
        paths.append(q)
    over = dict(DLSHIM_ROOTS=root, DLSHIM_CACHE="64M", DLSHIM_REDIRECT="dir")
    old = {T.sha256_file(q) for q in paths}
    p, got = read_all(env, script, paths, DLSHIM_JOB="first", **over)
    served = [h for hs in got.values() for h in hs]
    T.check(p.returncode == 0 and len(served) == 24 and set(served) <= old, "first job reads current bytes",
            p.stderr.decode(errors="replace")[-1500:])
    for i, q in enumerate(paths):
        rewrite_in_place(q, rand_bytes(20000, 2000 + i), keep_mtime=True)
    new = {T.sha256_file(q) for q in paths}
    p, got = read_all(env, script, paths, DLSHIM_JOB="second", **over)
    served = [h for hs in got.values() for h in hs]
    stale = [h for h in served if h in old]
    wrong = [h for h in served if h not in new]
    T.check(p.returncode == 0 and len(served) == 24, "second job read every file",
            p.stderr.decode(errors="replace")[-1500:])
    T.check(not stale and not wrong, "second job got only current bytes",
            "%d stale, %d unknown of %d" % (len(stale), len(wrong), len(served)))


def torn_load_case(env, script):
    T.section("a file rewritten while the coordinator loads it")
    rt = env.new_runtime_dir()
    root = env.path("torn")
    os.makedirs(root)
    big = os.path.join(root, "big.bin")
    size = 12 << 20  # several preadv calls of the loader
    with open(big, "wb") as f:
        f.write(b"\x01" * size)
    log = os.path.join(rt, "dlshimd.log")
    done = {}

    def writer():
        # Wait for the loader's pause (reported in the coordinator's log),
        # then rewrite the whole file while it is half loaded.
        done["paused"] = T.wait_until(
            lambda: os.path.exists(log) and b"test pause" in open(log, "rb").read(), timeout=30)
        rewrite_in_place(big, b"\x02" * size, keep_mtime=False)
        done["written"] = True

    t = threading.Thread(target=writer)
    t.start()
    p, got = read_all(env, script, [big], DLSHIM_ROOTS=root, DLSHIM_CACHE="64M", DLSHIM_LOG="debug",
                      DLSHIM_TEST_LOAD_PAUSE_MS="1500")
    t.join()
    T.check(done.get("paused"), "the loader paused mid-file (precondition)", open(log, "rb").read()[-1500:]
            if os.path.exists(log) else "no log")
    v2 = T.sha256_bytes(b"\x02" * size)
    T.check(got.get(big) == [v2], "the program got the new version, not a mix",
            "got %s expected %s" % (got.get(big), v2))
    p, got = read_all(env, script, [big], DLSHIM_ROOTS=root, DLSHIM_CACHE="64M")
    T.check(got.get(big) == [v2], "a later read gets the new version too", got.get(big))


def main():
    env = T.Env("file-changes")
    script = T.write_script(env.path("reader.py"), READER)
    exact_cases(env, script)
    redirect_case(env, script)
    torn_load_case(env, script)
    T.finish()


if __name__ == "__main__":
    main()
