"""Python I/O under the shim returns exactly what it returns without it.

A probe script exercises the ways Python programs read data -- open().read(),
partial reads and seeks, unbuffered reads, os.pread/readv/preadv, dup'd
descriptors, file objects and fds used after os.fork in the child, mmap,
shutil.copyfile (sendfile), numpy.load (also mmap_mode), PIL.Image.open
(...).tobytes(), threads, relative paths and dir_fd -- and prints a JSON
record of every result. It runs once without the shim and twice with it (cold
and warm cache); every record must be identical, and the plain reads must
match the sha256 of the files on disk.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T  # noqa: E402

PROBE = r'''
import concurrent.futures, hashlib, io, json, mmap, os, shutil, sys
root, scratch = sys.argv[1], sys.argv[2]
H = lambda b: hashlib.sha256(bytes(b)).hexdigest()
R = {}
files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)
bins = [p for p in files if p.endswith(".bin")]
big = max(bins, key=os.path.getsize)

def rec(name, fn):
    try:
        R[name] = fn()
    except Exception as e:
        R[name] = "EXC %s: %s" % (type(e).__name__, e)

# 1. whole-file reads
def read_all():
    out = {}
    for p in files:
        with open(p, "rb") as f:
            out[os.path.relpath(p, root)] = H(f.read())
    return out
rec("read_all", read_all)

# 2. partial reads + tell through a buffered file object
def partial(p):
    out = []
    with open(p, "rb") as f:
        for n in (1000, 1, 70000, 5, 16384, -1):
            b = f.read(n) if n >= 0 else f.read()
            out.append([len(b), H(b), f.tell()])
        out.append(len(f.read(10)))  # at EOF
    return out
rec("partial", lambda: {os.path.relpath(p, root): partial(p) for p in bins})

# 3. seeks (SEEK_SET / SEEK_CUR / SEEK_END), also past the end
def seeks(p):
    size = os.path.getsize(p)
    out = []
    with open(p, "rb") as f:
        for off in (0, size // 2, max(0, size - 1), size, size + 10, 16383, 16384, 1):
            f.seek(off)
            b = f.read(100)
            out.append([off, f.tell(), H(b)])
        f.seek(-min(size, 50), 2); out.append(H(f.read()))
        f.seek(0); f.read(10); f.seek(10, 1); out.append([f.tell(), H(f.read(20))])
    return out
rec("seeks", lambda: {os.path.relpath(p, root): seeks(p) for p in bins})

# 4. unbuffered file objects: read, readinto, interleaved with os.lseek
def unbuffered(p):
    out = []
    with open(p, "rb", buffering=0) as f:
        out.append(H(f.read(5000)))
        ba = bytearray(3000); n = f.readinto(ba); out.append([n, H(ba[:n])])
        out.append(os.lseek(f.fileno(), 0, os.SEEK_CUR))
        os.lseek(f.fileno(), 7, os.SEEK_SET)
        out.append(H(f.read(100)))
        out.append(H(f.readall()))
        out.append(f.tell())
    return out
rec("unbuffered", lambda: {os.path.relpath(p, root): unbuffered(p) for p in bins})

# 5. os.pread / os.readv / os.preadv
def positional(p):
    size = os.path.getsize(p)
    fd = os.open(p, os.O_RDONLY)
    try:
        out = []
        for off, n in ((0, 100), (1, 20000), (16383, 2), (16384, 70000), (max(0, size - 1), 10), (size, 10), (size + 5, 10)):
            out.append([off, H(os.pread(fd, n, off))])
        out.append(os.lseek(fd, 0, os.SEEK_CUR))          # pread does not move the offset
        bufs = [bytearray(100), bytearray(5000), bytearray(17000)]
        n = os.readv(fd, bufs); out.append([n] + [H(b) for b in bufs])
        out.append(os.lseek(fd, 0, os.SEEK_CUR))
        bufs = [bytearray(333), bytearray(40000)]
        n = os.preadv(fd, bufs, 1234); out.append([n] + [H(b) for b in bufs])
        out.append(H(os.read(fd, 1 << 22)))                   # rest, after readv's offset
        return out
    finally:
        os.close(fd)
rec("positional", lambda: {os.path.relpath(p, root): positional(p) for p in bins})

# 6. dup'd descriptors share one offset
def dups(p):
    fd = os.open(p, os.O_RDONLY)
    d = os.dup(fd)
    out = [H(os.read(fd, 1000)), H(os.read(d, 1000)), os.lseek(fd, 0, os.SEEK_CUR), os.lseek(d, 0, os.SEEK_CUR)]
    os.lseek(d, 5, os.SEEK_SET)
    out.append(H(os.read(fd, 10)))
    d2 = os.dup2(d, 77)
    import fcntl
    d3 = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
    os.close(fd)
    out.append(H(os.read(d2, 2000)))
    out.append(H(os.read(d3, 1 << 22)))
    out.append(os.lseek(d, 0, os.SEEK_CUR))
    for x in (d, d2, d3):
        os.close(x)
    # three independent opens of the same file, interleaved
    fds = [os.open(p, os.O_RDONLY) for _ in range(3)]
    got = [b"", b"", b""]
    for step in range(6):
        for i, x in enumerate(fds):
            got[i] += os.read(x, 777 * (i + 1))
    for x in fds:
        os.close(x)
    out.append([H(g) for g in got])
    return out
rec("dups", lambda: {os.path.relpath(p, root): dups(p) for p in bins})

# 7. fork: the child continues on inherited fds and file objects, and opens new files
def forked():
    p = big
    fd = os.open(p, os.O_RDONLY)
    first = os.read(fd, 1000)
    f = open(bins[0], "rb")
    fhead = f.read(10)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            c = {"inherited_fd": H(os.read(fd, 1000)), "inherited_file": H(f.read())}
            c["new_files"] = [H(open(q, "rb").read()) for q in files[:5]]
            c["pread_inherited"] = H(os.pread(fd, 5000, 3))
            os.write(w, json.dumps(c).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    out = {"child": json.loads(data.decode()) if data else None, "status": status,
           "first": H(first), "fhead": H(fhead),
           "parent_after": H(os.read(fd, 1000)), "parent_offset": os.lseek(fd, 0, os.SEEK_CUR)}
    os.close(fd)
    f.close()
    return out
rec("fork", forked)

# 8. mmap of a routed descriptor
def mm(p):
    if os.path.getsize(p) == 0:
        return "empty"
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return [H(m[:]), H(m[100:200])]
rec("mmap", lambda: {os.path.relpath(p, root): mm(p) for p in bins})

# 9. shutil.copyfile (sendfile / copy_file_range) to a place outside the root
def copies():
    out = {}
    for i, p in enumerate(bins):
        dst = os.path.join(scratch, "copy%d" % i)
        shutil.copyfile(p, dst)
        with open(dst, "rb") as f:
            out[os.path.relpath(p, root)] = H(f.read())
        os.unlink(dst)
    return out
rec("copyfile", copies)

# 10. numpy
def npy():
    import numpy as np
    out = {}
    for p in files:
        if p.endswith(".npy"):
            a = np.load(p)
            m = np.load(p, mmap_mode="r")
            out[os.path.relpath(p, root)] = [str(a.dtype), list(a.shape), H(a.tobytes()), H(np.asarray(m).tobytes())]
        elif p.endswith(".npz"):
            z = np.load(p)
            out[os.path.relpath(p, root)] = {k: H(z[k].tobytes()) for k in sorted(z.files)}
    out["fromfile"] = H(np.fromfile(big, dtype=np.uint8).tobytes())
    return out
rec("numpy", npy)

# 11. PIL
def pil():
    from PIL import Image
    out = {}
    for p in files:
        if p.endswith((".jpg", ".png")):
            with Image.open(p) as im:
                out[os.path.relpath(p, root)] = [im.format, im.mode, list(im.size), H(im.tobytes())]
    return out
rec("pil", pil)

# 12. text mode
def text():
    out = {}
    for p in files:
        if p.endswith(".txt"):
            with open(p, "r", encoding="utf-8") as f:
                lines = f.readlines()
            with open(p, "r", encoding="utf-8") as f:
                f.readline(); pos = f.tell(); f.readline(); f.seek(pos); again = f.readline()
            out[os.path.relpath(p, root)] = [len(lines), H("".join(lines).encode()), H(again.encode())]
    return out
rec("text", text)

# 13. threads
def threads():
    def one(p):
        with open(p, "rb") as f:
            return H(f.read())
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        res = list(ex.map(one, files * 3))
    return res
rec("threads", threads)

# 14. relative paths, odd spellings, dir_fd
def paths():
    out = []
    cwd = os.getcwd()
    os.chdir(root)
    try:
        rel = os.path.relpath(big, root)
        out.append(H(open(rel, "rb").read()))
        out.append(H(open("./" + rel, "rb").read()))
        out.append(H(open(os.path.join(root, ".", "sub", "..", rel), "rb").read()))
        out.append(H(open(root + "//" + rel, "rb").read()))
    finally:
        os.chdir(cwd)
    dfd = os.open(os.path.dirname(big), os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = os.open(os.path.basename(big), os.O_RDONLY, dir_fd=dfd)
        out.append(H(os.read(fd, 1 << 22)))
        os.close(fd)
    finally:
        os.close(dfd)
    import pathlib
    out.append(H(pathlib.Path(big).read_bytes()))
    return out
rec("paths", paths)

print(json.dumps(R, sort_keys=True))
'''


def main():
    env = T.Env("pyio")
    root = env.path("data")
    scratch = env.path("scratch")
    os.makedirs(scratch)
    os.makedirs(os.path.join(root, "sub"))

    T.section("dataset")
    # raw files around the 16 KiB block size, empty, ~1.5 MiB
    import random
    rnd = random.Random(5)
    for size in (0, 1, 999, 16383, 16384, 16385, 100000, 1500000):
        with open(os.path.join(root, "raw_%d.bin" % size), "wb") as f:
            f.write(rnd.randbytes(size))
    T.write_random_files(os.path.join(root, "sub"), 6, 2000, 80000, seed=6)
    import numpy as np
    arrays = {
        "f32.npy": np.random.default_rng(1).standard_normal((64, 33)).astype(np.float32),
        "i64.npy": np.arange(5000, dtype=np.int64).reshape(50, 100),
        "u8.npy": np.random.default_rng(2).integers(0, 255, size=(3, 64, 64), dtype=np.uint8),
        "rec.npy": np.array([(1, 2.5, b"ab"), (3, 4.5, b"cd")], dtype=[("a", "i4"), ("b", "f8"), ("c", "S2")]),
    }
    for name, a in arrays.items():
        np.save(os.path.join(root, "sub", name), a)
    np.savez(os.path.join(root, "sub", "pack.npz"), x=arrays["f32.npy"], y=arrays["i64.npy"])
    T.make_imagefolder(os.path.join(root, "img"), classes=2, per_class=4, seed=3)
    from PIL import Image
    Image.fromarray(arrays["u8.npy"][0], "L").save(os.path.join(root, "img", "gray.png"))
    with open(os.path.join(root, "notes.txt"), "w", encoding="utf-8") as f:
        for i in range(3000):
            f.write("line %d: %s\n" % (i, "é" * (i % 7)))
    man = T.manifest(root)
    T.info("%d files, %d bytes" % (len(man), T.tree_size(root)))

    probe = T.write_script(env.path("probe.py"), PROBE)

    def run_probe(label, shim, **over):
        p = env.run([T.PYTHON, probe, root, scratch], shim=shim, timeout=120,
                    DLSHIM_ROOTS=root, **over)
        ok = T.check(p.returncode == 0, "%s: probe exits 0" % label, p.stderr.decode(errors="replace")[-3000:])
        try:
            rec = json.loads(p.stdout)
        except ValueError:
            T.check(False, "%s: probe printed its JSON record" % label, p.stdout[-2000:])
            rec = {}
        return rec, p, ok

    T.section("baseline without the shim")
    base, _, _ = run_probe("no shim", shim=False)
    exc = {k: v for k, v in base.items() if isinstance(v, str) and v.startswith("EXC")}
    T.check(not exc, "baseline: every operation works without the shim", exc)
    want = {os.path.relpath(p, root): h for p, h in man.items()}
    T.check(base.get("read_all") == want, "(sanity) baseline whole-file reads match sha256 on disk")

    stats_files = []
    for label in ("shim, cold cache", "shim, warm cache"):
        T.section(label)
        sf = env.path("stats-%d.json" % len(stats_files))
        stats_files.append(sf)
        got, p, _ = run_probe(label, shim=True, DLSHIM_STATS=sf, DLSHIM_CACHE="256M")
        T.check(p.stderr == b"", "%s: nothing on stderr" % label, p.stderr.decode(errors="replace")[-2000:])
        T.check(got.get("read_all") == want, "%s: open().read() of every file == sha256 on disk" % label,
                {k: (v, want.get(k)) for k, v in (got.get("read_all") or {}).items() if want.get(k) != v})
        for key in sorted(base):
            same = got.get(key) == base[key]
            detail = None
            if not same:
                a, b = base[key], got.get(key)
                if isinstance(a, dict) and isinstance(b, dict):
                    detail = {k: {"without": a.get(k), "with": b.get(k)} for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
                else:
                    detail = {"without": a, "with": b}
                detail = json.dumps(detail, indent=1)[:3000]
            T.check(same, "%s: %s results identical to the run without the shim" % (label, key), detail)
        fork = got.get("fork") or {}
        T.check(isinstance(fork, dict) and fork.get("status") == 0 and fork.get("child"),
                "%s: forked child exited 0 and reported its reads" % label, fork)
        try:
            st = json.load(open(sf))
        except Exception as e:  # noqa: BLE001
            st = None
            T.check(False, "%s: DLSHIM_STATS file written" % label, str(e))
        if st is not None:
            T.check(st.get("requests", 0) >= len(man), "%s: the job's opens were routed (requests %s >= %d files)"
                    % (label, st.get("requests"), len(man)), st)
            if label.endswith("warm cache"):
                T.check(st.get("hits", 0) > 0, "%s: warm run hits the cache (hits %s)" % (label, st.get("hits")), st)
                T.check(st.get("bytes_from_cache", 0) > 0, "%s: bytes copied from the cache (%s)" % (label, st.get("bytes_from_cache")), st)

    T.section("numpy arrays equal what was saved")
    got_np = (base.get("numpy") or {})
    for name, a in arrays.items():
        rel = os.path.join("sub", name)
        T.check(got_np.get(rel, [None, None, None])[2] == T.sha256_bytes(a.tobytes()),
                "np.load(%s) returns the saved array" % rel)
    T.finish()


if __name__ == "__main__":
    main()
