#!/usr/bin/env python3
"""What the coordinator reads for HDF5 rows. Exact mode, a contiguous
dataset larger than half the cache: every miss loads one small row chunk
(16 KiB of whole rows), and the coordinator must read about that much from
the file, not HDF5's 64 KiB sieve buffer around it (four times the I/O;
measured with the coordinator's /proc/PID/io rchar). The program gets the
file's bytes for every row (hashes against reads without the shim), and a
program may rewrite the file while the coordinator keeps it open (no HDF5
file lock held).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

N = 4000

MAKE = r'''
import sys, numpy as np, h5py
path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x = np.random.default_rng(seed).standard_normal((n, 1024)).astype(np.float32)
with h5py.File(path, "w") as f:
    f.create_dataset("x", data=x)
'''

READ = r'''
import hashlib, json, sys, h5py, numpy as np
path, k, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
f = h5py.File(path, "r")
rows = np.random.default_rng(7).permutation(f["x"].shape[0])[:k]
json.dump({str(int(i)): hashlib.sha1(f["x"][i].tobytes()).hexdigest() for i in rows}, open(out, "w"))
'''


def rchar(pid):
    for line in open("/proc/%d/io" % pid):
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar for %d" % pid)


def main():
    env, root, h5, make = T.hdf5_env("hdf5-io", MAKE, "rows.h5", N, 1)
    read = T.write_script(env.path("read.py"), READ)
    ref_out, out = env.path("ref.json"), env.path("out.json")
    env.run([T.PYTHON, read, h5, "500", ref_out], shim=False, check_rc=True, timeout=120)
    over = dict(DLSHIM_ROOTS=root, DLSHIM_REDIRECT="off", DLSHIM_CACHE=str(N * 4096 // 4),
                DLSHIM_STATS=env.path("stats.json"))
    # Start the coordinator first (one row read), so its reads are counted from here.
    env.run([T.PYTHON, read, h5, "1", env.path("one.json")], check_rc=True, timeout=120, **over)
    pids = [p for p in env.daemon_pids() if T.pid_alive(p)]
    if not T.check(len(pids) == 1, "one coordinator running", str(pids)):
        T.finish()
    before = rchar(pids[0])
    p = env.run([T.PYTHON, read, h5, "500", out], timeout=120, **over)
    T.check(p.returncode == 0, "reader exits 0", p.stderr.decode(errors="replace")[-1500:])
    ref, got = json.load(open(ref_out)), json.load(open(out))
    T.check(got == ref, "every row's bytes are the file's (%d rows)" % len(ref),
            str([k for k in ref if got.get(k) != ref[k]][:5]))
    read_bytes = rchar(pids[0]) - before
    loads = env.stats()["cache"]["loads"]
    T.info("coordinator: %d row chunk loads, %d bytes read" % (loads, read_bytes))
    T.check(loads >= 400, "misses loaded row chunks (%d)" % loads)
    # Each load is 16 KiB of rows; the file's metadata is read once.
    T.check(read_bytes <= loads * 16384 * 1.25 + (1 << 20),
            "the coordinator read the row chunks, not a 64 KiB sieve buffer around each (%.1f KiB per load)"
            % (read_bytes / max(1, loads) / 1024))

    T.section("a program rewrites the file while the coordinator has it open")
    p = env.run([T.PYTHON, make, h5, str(N), "2"], shim=False)
    T.check(p.returncode == 0, "the rewrite is not blocked by a lock", p.stderr.decode(errors="replace")[-600:])
    env.run([T.PYTHON, read, h5, "500", ref_out], shim=False, check_rc=True, timeout=120)
    p = env.run([T.PYTHON, read, h5, "500", out], timeout=120, **over)
    ref, got = json.load(open(ref_out)), json.load(open(out))
    T.check(p.returncode == 0 and got == ref, "after the rewrite every row is the new file's")
    T.finish()


if __name__ == "__main__":
    main()
