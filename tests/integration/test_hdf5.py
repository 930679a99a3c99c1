#!/usr/bin/env python3
"""HDF5 rows through the shim, exact mode. Every check compares the bytes a
program received under the shim with the bytes the same program receives
without it:
  * h5py: single rows in shuffled order, row blocks, the whole dataset, and
    selections that are not whole rows (strided, fancy/point, partial
    columns, a big-endian dataset read into native memory) for contiguous,
    chunked and gzip-compressed datasets of several dtypes, 1-D and N-D;
  * the C API (tests/progs/h5_reader): the same shapes of reads, and a read
    through a closed dataset id fails as it does without the shim;
  * the cache really served rows (DLSHIM_STATS shows bytes from the cache);
  * a rewritten file is never served from its old rows;
  * a file replaced under dataset ids that stay open, past the shim's
    100 ms stat refresh: renamed over, the ids read the old file as they do
    without the shim; rewritten in place, they read the new bytes;
  * a process that never uses HDF5 works unchanged and never loads libhdf5;
  * a corrupt HDF5 file: the same clear error with and without the shim.
"""
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

MAKE = r'''
import sys, numpy as np, h5py
path, seed = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(seed)
n = 203
with h5py.File(path, "w") as f:
    f.create_dataset("x_contig", data=rng.standard_normal((n, 16)).astype(np.float32))
    f.create_dataset("x_chunk", data=rng.standard_normal((n, 8, 8)), chunks=(5, 8, 8))
    f.create_dataset("x_gzip", data=rng.integers(-30000, 30000, (n, 32)).astype(np.int16),
                     chunks=(16, 32), compression="gzip", shuffle=True)
    f.create_dataset("u8", data=rng.integers(0, 255, (n, 300)).astype(np.uint8), chunks=(64, 300))
    f.create_dataset("y", data=rng.integers(0, 10, n).astype(np.int64))
    f.create_dataset("big_endian", data=rng.standard_normal((n, 4)).astype(">f4"))
    f.create_dataset("grp/inner", data=np.arange(n * 3, dtype=np.uint32).reshape(n, 3), chunks=(50, 3))
'''

READ = r'''
import hashlib, json, sys, numpy as np, h5py
path, out = sys.argv[1], sys.argv[2]
res = {}
def h(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() + str(a.dtype) + str(a.shape)
with h5py.File(path, "r") as f:
    for name in ["x_contig", "x_chunk", "x_gzip", "u8", "y", "big_endian", "grp/inner"]:
        ds = f[name]
        n = ds.shape[0]
        order = np.random.default_rng(7).permutation(n)
        res[name + ":rows"] = [h(np.asarray(ds[int(i)])) for i in order]
        res[name + ":blocks"] = [h(ds[a:a + 9]) for a in range(0, n, 9)]
        res[name + ":all"] = h(ds[...])
        res[name + ":stride"] = h(ds[::3])
        res[name + ":fancy"] = h(ds[[1, 4, 9, 60]])
        if ds.ndim > 1:
            res[name + ":cols"] = h(ds[:, 1:3])
            res[name + ":row-part"] = h(ds[5, 1:])
        buf = np.empty((10,) + ds.shape[1:], dtype=ds.dtype)
        ds.read_direct(buf, np.s_[20:30])
        res[name + ":read_direct"] = h(buf)
json.dump(res, open(out, "w"))
'''

NO_HDF5 = r'''
import hashlib, os, sys
root = sys.argv[1]
out = []
for name in sorted(os.listdir(root)):
    with open(os.path.join(root, name), "rb") as f:
        out.append(name + " " + hashlib.sha256(f.read()).hexdigest())
maps = open("/proc/self/maps").read()
out.append("hdf5 loaded: %s" % ("hdf5" in maps))
print("\n".join(out))
'''

OPEN_ONLY = r'''
import sys, h5py
try:
    with h5py.File(sys.argv[1], "r") as f:
        print("rows", f[sys.argv[2]][3].tobytes().hex())
except Exception as e:
    print("error", type(e).__name__)
'''


# Keeps dataset ids open across a replacement of the file, reading the same
# rows before and 0.3 s after (past the shim's 100 ms stat refresh).
REPLACE = r'''
import json, os, subprocess, sys, time, h5py
path, how, make, out = sys.argv[1:5]
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
env["HDF5_USE_FILE_LOCKING"] = "FALSE"   # the writer replaces a file this process holds open
f = h5py.File(path, "r")
ds = {k: f[k] for k in ("x_contig", "x_chunk", "x_gzip", "y")}
rows = list(range(0, 203, 7))
res = {"before": {k: [d[i].tobytes().hex() for i in rows] for k, d in ds.items()}}
if how == "rename":
    subprocess.run([sys.executable, make, path + ".new", "2"], env=env, check=True)
    os.rename(path + ".new", path)
else:
    subprocess.run([sys.executable, make, path, "2"], env=env, check=True)
time.sleep(0.3)
res["after"] = {k: [d[i].tobytes().hex() for i in rows] for k, d in ds.items()}
fresh = ("import json, sys, h5py\n"
         "f = h5py.File(sys.argv[1], 'r')\n"
         "print(json.dumps({k: [f[k][i].tobytes().hex() for i in range(0, 203, 7)] for k in sys.argv[2:]}))")
res["fresh"] = json.loads(subprocess.run([sys.executable, "-c", fresh, path] + list(ds), env=env, check=True,
                                         capture_output=True).stdout)
json.dump(res, open(out, "w"))
'''


def sha(b):
    return hashlib.sha256(b).hexdigest()


def main():
    env, root, h5, make = T.hdf5_env("hdf5", MAKE, "train.h5", 1)
    stats_file = env.path("stats.json")

    T.section("h5py: exact bytes for every kind of read")
    read = T.write_script(env.path("read.py"), READ)
    env.run([T.PYTHON, read, h5, env.path("plain.json")], shim=False, check_rc=True)
    plain = json.load(open(env.path("plain.json")))
    for rep in range(2):  # cold (loads rows), then warm (from the cache)
        p = env.run([T.PYTHON, read, h5, env.path("shim.json")], timeout=240, DLSHIM_ROOTS=root,
                    DLSHIM_STATS=stats_file)
        if not T.check(p.returncode == 0, "run %d: h5py reader exits 0" % rep, p.stderr.decode(errors="replace")[-2000:]):
            continue
        T.check(b"dlshim: warning" not in p.stderr, "run %d: no shim warning" % rep,
                p.stderr.decode(errors="replace")[-1000:])
        got = json.load(open(env.path("shim.json")))
        bad = [k for k in plain if plain[k] != got.get(k)]
        T.check(not bad and len(got) == len(plain), "run %d: all %d reads byte-identical" % (rep, len(plain)),
                "differ: %s" % bad[:10])
        st = json.load(open(stats_file))
        T.info("run %d: hits %d misses %d from cache %d from disk %d" % (rep, st["hits"], st["misses"],
               st["bytes_from_cache"], st["bytes_from_disk"]))
        T.check(st["bytes_from_cache"] > 100000, "run %d: rows were served from the cache" % rep, json.dumps(st)[:400])
        if rep == 1:
            T.check(st["misses"] == 0, "run 1: every row chunk was already resident", json.dumps(st)[:400])

    T.section("C API: exact bytes")
    prog = os.path.join(T.BUILD, "progs", "h5_reader")
    for name in ["x_contig", "x_chunk", "x_gzip", "y", "grp/inner", "big_endian"]:
        for mode in ["rows", "blocks", "all", "all-mem", "stride", "points", "cols", "native-conv", "closed"]:
            if mode == "cols" and name == "y":
                continue
            a = env.run([prog, h5, name, mode], shim=False)
            b = env.run([prog, h5, name, mode], DLSHIM_ROOTS=root, DLSHIM_STATS=stats_file)
            if mode == "rows":
                st = json.load(open(stats_file))
                T.check(st["bytes_from_cache"] == len(a.stdout), "%s rows: every row from the cache" % name,
                        json.dumps(st)[:300])
            T.check(a.returncode == 0 and b.returncode == 0 and a.stdout == b.stdout and len(a.stdout) > 0,
                    "%s %s: same %d bytes" % (name, mode, len(a.stdout)),
                    "rc %d/%d, %s vs %s; %s" % (a.returncode, b.returncode, sha(a.stdout)[:12], sha(b.stdout)[:12],
                                                b.stderr.decode(errors="replace")[-500:]))

    T.section("a rewritten file is never served from its old rows")
    before = env.run([prog, h5, "x_gzip", "rows"], DLSHIM_ROOTS=root).stdout
    env.run([T.PYTHON, make, h5, "2"], shim=False, check_rc=True)
    fresh = env.run([prog, h5, "x_gzip", "rows"], shim=False).stdout
    after = env.run([prog, h5, "x_gzip", "rows"], DLSHIM_ROOTS=root).stdout
    T.check(before != fresh and after == fresh, "rows after the rewrite are the new ones")

    T.section("a file replaced under dataset ids that stay open")
    replace = T.write_script(env.path("replace.py"), REPLACE)
    for how in ("rename", "inplace"):
        res = {}
        for label, shim in (("plain", False), ("shim", True)):
            env.run([T.PYTHON, make, h5, "1"], shim=False, check_rc=True)
            out = env.path("replace-%s-%s.json" % (how, label))
            over = dict(DLSHIM_ROOTS=root) if shim else {}
            p = env.run([T.PYTHON, replace, h5, how, make, out], shim=shim, timeout=120, **over)
            T.check(p.returncode == 0, "%s, %s: reader exits 0" % (how, label), p.stderr.decode(errors="replace")[-1000:])
            res[label] = json.load(open(out)) if p.returncode == 0 else None
        if res["plain"] and res["shim"]:
            pl, sh = res["plain"], res["shim"]
            new = [k for k in pl["after"] if pl["after"][k] != pl["before"][k]]
            T.info("%s: without the shim, the open ids read new bytes for %s" % (how, new or "no dataset"))
            T.check(pl["before"] == sh["before"] and pl["fresh"] == sh["fresh"] and pl["fresh"] != pl["before"],
                    "%s: same bytes before; the new file differs" % how)
            if how == "rename":
                # The ids still read the file HDF5 has open (the old one, now
                # unnamed), never the new file the path names.
                bad = [k for k in pl["after"] if pl["after"][k] != sh["after"][k]]
                T.check(not bad, "rename: reads through the open ids are the old file's, as without the shim",
                        "differ: %s" % bad)
            else:
                # Rewritten in place: HDF5's own caches may still give old
                # bytes without the shim; with it, the rows are the file's as
                # it is on disk now (new mtime, new chunk identities).
                bad = [k for k in sh["after"] if sh["after"][k] != sh["fresh"][k]]
                T.check(not bad, "inplace: reads through the open ids 0.3 s later are the new file's", "old: %s" % bad)
    env.run([T.PYTHON, make, h5, "1"], shim=False, check_rc=True)

    T.section("a process that never uses HDF5")
    with open(os.path.join(root, "plain.bin"), "wb") as f:
        f.write(os.urandom(100000))
    noh5 = T.write_script(env.path("noh5.py"), NO_HDF5)
    a = env.run([T.PYTHON, noh5, root], shim=False)
    b = env.run([T.PYTHON, noh5, root], DLSHIM_ROOTS=root)
    T.check(a.returncode == 0 and a.stdout == b.stdout and b"hdf5 loaded: False" in b.stdout,
            "same bytes, libhdf5 never loaded", b.stdout.decode()[-300:] + b.stderr.decode(errors="replace")[-300:])
    lib = env.run(["ldd", T.LIB], shim=False).stdout
    T.check(b"hdf5" not in lib, "libdlshim.so does not link libhdf5")

    T.section("corrupt HDF5 files")
    opener = T.write_script(env.path("open.py"), OPEN_ONLY)
    with open(os.path.join(root, "garbage.h5"), "wb") as f:
        f.write(b"\x89HDF\r\n\x1a\n" + os.urandom(5000))
    # A valid file whose compressed chunks are overwritten with noise.
    broken = os.path.join(root, "broken.h5")
    env.run([T.PYTHON, make, broken, "3"], shim=False, check_rc=True)
    data = bytearray(open(broken, "rb").read())
    mid = len(data) // 2
    data[mid:mid + 20000] = os.urandom(min(20000, len(data) - mid))
    open(broken, "wb").write(bytes(data))
    for path, ds in ((os.path.join(root, "garbage.h5"), "x_gzip"), (broken, "x_gzip"), (broken, "y")):
        a = env.run([T.PYTHON, opener, path, ds], shim=False)
        b = env.run([T.PYTHON, opener, path, ds], DLSHIM_ROOTS=root)
        T.check(b.returncode == 0 and a.stdout == b.stdout,
                "%s %s: same outcome (%s)" % (os.path.basename(path), ds, a.stdout.decode().strip()[:40]),
                b.stdout.decode()[-200:] + b.stderr.decode(errors="replace")[-500:])
    T.finish()


if __name__ == "__main__":
    main()
