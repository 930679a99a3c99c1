#!/usr/bin/env python3
"""HDF5 row redirection under a real PyTorch DataLoader: an h5py Dataset
(file opened lazily in each worker, num_workers 2), 3 epochs, cache smaller
than the inputs. Checked from what the Dataset received:
  * every (x, y) pair matches (y is a function of x in the file), so inputs
    and labels were redirected together;
  * each epoch is a permutation of the rows (every row exactly once);
  * rows really were redirected (redirect mode) or never (exact mode);
  * in redirect mode, the other datasets of a sample read the row mapped
    for the first one through the shared index, not by asking again;
  * the row chunks resident when an epoch ends are served first in the
    next one and kept until then (holds): every later epoch reads at least
    half a cache less than a whole pass;
  * with a cache too small for any row chunk, rows are still mapped and
    read by the program itself, and the pairs still hold.
"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

N = 600

MAKE = r'''
import sys, numpy as np, h5py
path, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(5)
x = rng.standard_normal((n, 1024)).astype(np.float32)
x[:, 0] = np.arange(n)                 # the row's identity, exact in float32
with h5py.File(path, "w") as f:
    f.create_dataset("x", data=x, chunks=(8, 1024))
    f.create_dataset("y", data=(np.arange(n) * 7 + 3).astype(np.int64))   # y = 7 * x[0] + 3
    f.create_dataset("w", data=np.arange(n, dtype=np.int32), chunks=(100,))  # another per-row dataset
'''

TRAIN = r'''
import json, sys, h5py, torch
from torch.utils.data import DataLoader, Dataset
path, workers, epochs, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
class Rows(Dataset):
    def __init__(self):
        self.f = None
        with h5py.File(path, "r") as f:
            self.n = f["x"].shape[0]
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if self.f is None:               # opened in each worker, not inherited
            self.f = h5py.File(path, "r")
        x = self.f["x"][i]
        y = self.f["y"][i]
        w = self.f["w"][i]
        return i, int(x[0]), float(x[1:].sum()), int(y), int(w)
torch.manual_seed(0)
log = []
for ep in range(epochs):
    got = []
    for i, x0, s, y, w in DataLoader(Rows(), batch_size=16, shuffle=True, num_workers=workers):
        got += [[int(a), int(b), float(c), int(d), int(e)] for a, b, c, d, e in zip(i, x0, s, y, w)]
    log.append(got)
json.dump(log, open(out, "w"))
'''


def run(env, h5, root, mode, workers, label, cache):
    out = env.path("log-%s-%d.json" % (mode, workers))
    stats_file = env.path("stats-%s-%d.json" % (mode, workers))
    script = T.write_script(env.path("train.py"), TRAIN)
    # The plain run gives the reference sum of each row's other values.
    p = env.run([T.PYTHON, script, h5, str(workers), "3", out], timeout=300, DLSHIM_ROOTS=root,
                DLSHIM_REDIRECT=mode, DLSHIM_CACHE=cache, DLSHIM_CHUNK="32", DLSHIM_STATS=stats_file)
    if not T.check(p.returncode == 0, "%s: training exits 0" % label, p.stderr.decode(errors="replace")[-2000:]):
        return
    T.check(b"dlshim: warning" not in p.stderr, "%s: no shim warning" % label, p.stderr.decode(errors="replace")[-800:])
    return json.load(open(out)), json.load(open(stats_file))


def main():
    env, root, h5, _ = T.hdf5_env("hdf5-redirect", MAKE, "rows.h5", N)
    ref_out = env.path("ref.json")
    env.run([T.PYTHON, T.write_script(env.path("train.py"), TRAIN), h5, "0", "1", ref_out], shim=False,
            check_rc=True)
    ref = {x0: s for _, x0, s, _, _ in json.load(open(ref_out))[0]}
    for mode, workers, cache in (("any", 2, "1M"), ("any", 0, "1M"), ("off", 2, "1M"), ("any", 2, "64K")):
        label = "%s/w%d/%s" % (mode, workers, cache)
        T.section("DLSHIM_REDIRECT=%s num_workers=%d cache %s" % (mode, workers, cache))
        r = run(env, h5, root, mode, workers, label, cache)
        if r is None:
            continue
        log, st = r
        moved_all = 0
        for ep, got in enumerate(log):
            bad = [g for g in got if g[3] != 7 * g[1] + 3 or g[4] != g[1] or abs(ref.get(g[1], 1e30) - g[2]) > 1e-3]
            T.check(not bad, "%s epoch %d: every label and side value matches its input row" % (label, ep),
                    str(bad[:5]))
            rows = collections.Counter(g[1] for g in got)
            T.check(len(got) == N and len(rows) == N and set(rows) == set(range(N)),
                    "%s epoch %d: a permutation of the %d rows" % (label, ep, N),
                    "%d samples, %d distinct" % (len(got), len(rows)))
            moved = sum(1 for g in got if g[0] != g[1])
            moved_all += moved
            T.info("%s epoch %d: %d of %d rows redirected" % (label, ep, moved, len(got)))
            if mode == "off":
                T.check(moved == 0, "%s epoch %d: exact mode serves every row as itself" % (label, ep))
            elif cache != "64K":
                T.check(moved > N // 4, "%s epoch %d: rows were redirected" % (label, ep))
        T.info("%s stats: hits %d misses %d from disk %d from cache %d" % (label, st["hits"], st["misses"],
               st["bytes_from_disk"], st["bytes_from_cache"]))
        x_bytes = N * 1024 * 4
        if mode == "any" and cache != "64K":
            # y and w of a sample read the row mapped for x from the shared
            # index, without a message (workers that end with os._exit may
            # not report their last batch of 64).
            # Each redirected sample is three row reads served another row
            # (x, y and w), counted by the job's processes in batches of 64.
            T.check(3 * moved_all - 3 * 64 * 3 * max(workers, 1) <= st["redirects"] <= 3 * moved_all,
                    "%s: the stats count the row reads served another row (%d for %d redirected samples)"
                    % (label, st["redirects"], moved_all))
            T.check(st.get("row_index_hits", 0) >= 2 * N * 3 - 2 * 64 * 3 * max(workers, 1),
                    "%s: labels and side values read through the index without asking (%d)"
                    % (label, st.get("row_index_hits", 0)))
            # Whole row chunks, each loaded about once per epoch.
            T.check(st["bytes_from_disk"] < 3 * x_bytes * 1.5, "%s: disk bytes close to one pass per epoch (%d)"
                    % (label, st["bytes_from_disk"]))
            # Epochs 2 and 3 start with what the cache (1 MiB) held: each
            # reads at least half a cache less than the first (before holds,
            # load-ahead evicted those chunks first: 7.3 MB here).
            # Every row chunk counts as consumed once per epoch when its
            # last row is served (I/O efficiency in the stats); the chunks
            # of rows still out in a reader's last lease are counted only
            # when its connection ends, after the job wrote these stats.
            lease = 64 * 1024 * 4 * max(workers, 1)
            T.check(3 * x_bytes - lease <= st["bytes_consumed"] <= 3 * x_bytes * 1.05,
                    "%s: the job consumed every row chunk of x once per epoch (%d bytes)"
                    % (label, st["bytes_consumed"]))
            T.check(st["bytes_from_disk"] <= 3 * x_bytes - 2 * (1 << 19),
                    "%s: later epochs reuse the rows resident at the epoch's end (%d bytes from disk, at most %d)"
                    % (label, st["bytes_from_disk"], 3 * x_bytes - 2 * (1 << 19)))
            # The row mapping's epochs are the job's: statistics per epoch
            # (the third is still running: nothing asked for a fourth).
            pe = st["per_epoch"]
            T.check([e["epoch"] for e in pe] == [0, 1, 2] and [e["complete"] for e in pe] == [True, True, False]
                    and st["epochs"] == 2, "%s: three epochs in the stats, two complete" % label,
                    json.dumps(pe)[:600] + " epochs %s" % st["epochs"])
            T.check(sum(e["bytes_from_disk"] for e in pe) == st["bytes_from_disk"]
                    and sum(e["requests"] for e in pe) == st["requests"],
                    "%s: the epochs add up to the job's totals" % label)
            if len(pe) == 3:
                T.check(all(0 < e["bytes_from_disk"] <= pe[0]["bytes_from_disk"] - (1 << 19) for e in pe[1:]),
                        "%s: each later epoch reads at least half a cache less than the first (%s)"
                        % (label, [e["bytes_from_disk"] for e in pe]))
        env.stop_daemon(env.runtime_dir)
        env.new_runtime_dir()
    T.finish()


if __name__ == "__main__":
    main()
