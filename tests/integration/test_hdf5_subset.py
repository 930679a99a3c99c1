#!/usr/bin/env python3
"""HDF5 row redirection and a job that reads only part of a file's rows (a
train split by index: torch Subset of the first 60%), 4 epochs, 2 workers.
With DLSHIM_REDIRECT=any the job's dataset is every row of the file, so the
split is not kept (documented); what must hold:
  * every sample the Dataset received is a real row with its own label
    (pairs), and no row twice within an epoch;
  * the job is told, on its stderr, that it reads part of the file and is
    served rows of the rest (once), and the coordinator's log says how many
    rows were never asked for;
  * a job that reads every row of the same file (and one with drop_last,
    which leaves out less than a batch) is not warned;
  * with drop_last and persistent workers, whose leases outlive an epoch,
    at most a lease of rows (64) per worker repeats within an epoch.
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
x = np.random.default_rng(3).standard_normal((n, 1024)).astype(np.float32)
x[:, 0] = np.arange(n)
with h5py.File(path, "w") as f:
    f.create_dataset("x", data=x, chunks=(8, 1024))
    f.create_dataset("y", data=(np.arange(n) * 7 + 3).astype(np.int64))
'''

TRAIN = r'''
import json, sys, h5py, torch
from torch.utils.data import DataLoader, Dataset, Subset
path, part, drop_last, persistent, out = (sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1",
                                         sys.argv[5])
class Rows(Dataset):
    def __init__(self):
        self.f = None
        with h5py.File(path, "r") as f:
            self.n = f["x"].shape[0]
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if self.f is None:
            self.f = h5py.File(path, "r")
        return i, int(self.f["x"][i][0]), int(self.f["y"][i])
ds = Rows()
if part < 1:
    ds = Subset(ds, range(int(part * len(ds))))
torch.manual_seed(0)
log = []
dl = DataLoader(ds, batch_size=16, shuffle=True, num_workers=2, drop_last=drop_last, persistent_workers=persistent)
for ep in range(4):
    got = []
    for i, x0, y in dl:
        got += [[int(a), int(b), int(c)] for a, b, c in zip(i, x0, y)]
    log.append(got)
json.dump(log, open(out, "w"))
'''

WARNING = b"read only part of this file's rows"


def main():
    env, root, h5, _ = T.hdf5_env("hdf5-subset", MAKE, "rows.h5", N)
    script = T.write_script(env.path("train.py"), TRAIN)
    for part, drop_last, persistent, label in ((0.6, 0, 0, "subset 60%"), (1.0, 0, 0, "every row"),
                                               (1.0, 1, 0, "drop_last"), (1.0, 1, 1, "drop_last, persistent workers")):
        T.section(label)
        out = env.path("log.json")
        p = env.run([T.PYTHON, script, h5, str(part), str(drop_last), str(persistent), out], timeout=300,
                    DLSHIM_ROOTS=root,
                    DLSHIM_REDIRECT="any", DLSHIM_CACHE="1M", DLSHIM_CHUNK="32")
        err = p.stderr.decode(errors="replace")
        if not T.check(p.returncode == 0, "%s: training exits 0" % label, err[-2000:]):
            continue
        want = int(part * N) - (int(part * N) % 16 if drop_last else 0)
        for ep, got in enumerate(json.load(open(out))):
            bad = [g for g in got if g[2] != 7 * g[1] + 3]
            rows = collections.Counter(g[1] for g in got)
            repeats = len(got) - len(rows)
            T.check(not bad and len(got) == want and repeats <= (128 if persistent else 0)
                    and all(0 <= r < N for r in rows),
                    "%s epoch %d: %d samples, each a real row with its own label, %s" % (
                        label, ep, want, "at most 128 repeated" if persistent else "none twice"),
                    "%d samples, %d distinct, bad %s" % (len(got), len(rows), bad[:3]))
            if persistent:
                T.info("%s epoch %d: %d rows repeated" % (label, ep, repeats))
            if part < 1:
                T.info("%s epoch %d: %d of %d served rows are outside the split" % (
                    label, ep, sum(1 for r in rows if r >= int(part * N)), len(rows)))
        log = open(os.path.join(env.runtime_dir, "dlshimd.log"), errors="replace").read() \
            if os.path.exists(os.path.join(env.runtime_dir, "dlshimd.log")) else ""
        if part < 1:
            T.check(err.count(WARNING.decode()) == 1, "%s: the job is told once that the split is not kept" % label,
                    err[-1500:])
            T.check("were never asked for" in log, "%s: the coordinator's log says how many rows were never asked"
                    % label, log[-1500:])
        else:
            T.check(WARNING.decode() not in err and "dlshim: warning" not in err, "%s: no warning" % label,
                    err[-1500:])
        env.stop_daemon(env.runtime_dir)
        env.new_runtime_dir()
    T.finish()


if __name__ == "__main__":
    main()
