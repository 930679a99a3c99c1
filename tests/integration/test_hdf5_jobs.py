#!/usr/bin/env python3
"""Two jobs reading rows of one HDF5 file at the same time share the cache.
Checked from what each program received (a hash of every row it got, against
the file's rows read without the shim) and from the coordinator's counters:
  * exact mode: a second job reading the file after the first finds its rows
    already in the cache (almost nothing from disk);
  * redirect mode (DLSHIM_REDIRECT=any), cache half the file, two jobs at
    once for 2 epochs: each epoch of each job is a permutation with matching
    labels and exact bytes, and the two jobs together read far less than
    twice what one job alone reads (they are served the same row chunks:
    a chunk still needed by either job is kept for it).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

N = 4000
ROW = 4096

MAKE = r'''
import sys, numpy as np, h5py
path, n = sys.argv[1], int(sys.argv[2])
x = np.random.default_rng(9).standard_normal((n, 1024)).astype(np.float32)
x[:, 0] = np.arange(n)
with h5py.File(path, "w") as f:
    f.create_dataset("x", data=x)
    f.create_dataset("y", data=(np.arange(n) * 3 + 1).astype(np.int64))
'''

# Every row read in a shuffled order, `epochs` times: the row identity the
# program got, a hash of its bytes, and whether its label matched.
READ = r'''
import hashlib, json, sys, h5py, numpy as np
path, epochs, seed, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
f = h5py.File(path, "r")
n = f["x"].shape[0]
rng = np.random.default_rng(seed)
log = []
for ep in range(epochs):
    got = []
    for i in rng.permutation(n):
        x = f["x"][i]
        y = int(f["y"][i])
        got.append([int(x[0]), hashlib.sha1(x.tobytes()).hexdigest(), y == 3 * int(x[0]) + 1])
    log.append(got)
json.dump(log, open(out, "w"))
'''


def check_log(label, log, ref, epochs):
    T.check(len(log) == epochs, "%s: %d epochs read" % (label, epochs))
    for ep, got in enumerate(log):
        rows = [g[0] for g in got]
        T.check(sorted(rows) == list(range(N)), "%s epoch %d: a permutation of the %d rows" % (label, ep, N),
                "%d samples, %d distinct" % (len(rows), len(set(rows))))
        bad = [g for g in got if not (0 <= g[0] < N) or g[1] != ref[g[0]]]
        T.check(not bad, "%s epoch %d: every row's bytes are the file's" % (label, ep), str(bad[:3]))
        T.check(all(g[2] for g in got), "%s epoch %d: every label matches its row" % (label, ep))


def job_stats(env, name):
    for j in env.stats()["jobs"]:
        if j["job"] == name:
            return j
    raise RuntimeError("no job %s in the coordinator's stats" % name)


def main():
    env, root, h5, _ = T.hdf5_env("hdf5-jobs", MAKE, "rows.h5", N)
    read = T.write_script(env.path("read.py"), READ)
    ref_out = env.path("ref.json")
    env.run([T.PYTHON, read, h5, "1", "0", ref_out], shim=False, check_rc=True, timeout=300)
    ref = {g[0]: g[1] for g in json.load(open(ref_out))[0]}
    T.check(len(ref) == N, "reference: every row read without the shim")
    fbytes = N * ROW

    T.section("exact mode: a second job finds the first job's rows in the cache")
    for name, seed in (("first", 1), ("second", 2)):
        out = env.path("exact-%s.json" % name)
        p = env.run([T.PYTHON, read, h5, "1", str(seed), out], timeout=300, DLSHIM_ROOTS=root,
                    DLSHIM_REDIRECT="off", DLSHIM_CACHE=str(4 * fbytes), DLSHIM_JOB=name)
        if not T.check(p.returncode == 0, "exact %s: exits 0" % name, p.stderr.decode(errors="replace")[-1500:]):
            continue
        check_log("exact " + name, json.load(open(out)), ref, 1)
        st = job_stats(env, name)
        T.info("exact %s: %d bytes from disk, %d from cache" % (name, st["bytes_from_disk"], st["bytes_from_cache"]))
        if name == "first":
            T.check(st["bytes_from_disk"] >= fbytes, "exact first: loaded the rows (%d bytes)" % st["bytes_from_disk"])
        else:
            T.check(st["bytes_from_disk"] < fbytes // 20,
                    "exact second: the first job's rows served from the cache (%d bytes from disk)"
                    % st["bytes_from_disk"])
            T.check(st["bytes_from_cache"] >= fbytes, "exact second: every row from the cache")
    env.stop_daemon(env.runtime_dir)
    env.new_runtime_dir()

    T.section("redirect mode: two jobs at once, cache half the file, 2 epochs")
    procs = []
    for name, seed in (("a", 3), ("b", 4)):
        out = env.path("any-%s.json" % name)
        procs.append((name, out, env.popen([T.PYTHON, read, h5, "2", str(seed), out], DLSHIM_ROOTS=root,
                                           DLSHIM_REDIRECT="any", DLSHIM_CACHE=str(fbytes // 2), DLSHIM_JOB=name)))
    disk = 0
    for name, out, p in procs:
        _, err = p.communicate(timeout=300)
        if not T.check(p.returncode == 0, "any %s: exits 0" % name, err.decode(errors="replace")[-1500:]):
            continue
        T.check(b"dlshim: warning" not in err, "any %s: no shim warning" % name, err.decode(errors="replace")[-800:])
        log = json.load(open(out))
        check_log("any " + name, log, ref, 2)
        st = job_stats(env, name)
        disk += st["bytes_from_disk"]
        T.info("any %s: %d bytes from disk, %d from cache, %d row index hits" %
               (name, st["bytes_from_disk"], st["bytes_from_cache"], st.get("row_index_hits", 0)))
    cache = env.stats()["cache"]
    T.info("both jobs: %d bytes from disk (file %d), cache loads %d, evictions %d, waste %d" %
           (disk, fbytes, cache["loads"], cache["evictions"], cache["waste_bytes"]))
    # One job alone reads the file once and then half of it (the other half
    # is still cached): 1.5 files. Two jobs not sharing would read 3.
    T.check(disk <= 2.25 * fbytes, "the two jobs shared row chunks: %.2f files from disk for both (one alone: "
            "about 1.5)" % (disk / fbytes))
    T.finish()


if __name__ == "__main__":
    main()
