#!/usr/bin/env python3
"""HDF5 row redirection with leases of decided rows: processes of one job
take rows the coordinator decided for their connection without asking
(include/dlshim/rows.h). A worker that exits, cleanly with os._exit (as
DataLoader workers do) or killed by SIGKILL, while its lease still holds
rows must neither lose them nor let them be served twice. Checked from what
the processes received: one job (a parent and two forked workers) reads
every row of an epoch, split over a first worker that ends mid-epoch and a
second one that reads the rest; the union is a permutation of the rows and
every label is its input's. Fails without the coordinator settling a lease
when its connection ends (rows lost, then others served twice).
"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

N = 600

MAKE = r'''
import sys, numpy as np, h5py
path, n = sys.argv[1], int(sys.argv[2])
x = np.zeros((n, 256), dtype=np.float32)
x[:, 0] = np.arange(n)                 # the row's identity
with h5py.File(path, "w") as f:
    f.create_dataset("x", data=x, chunks=(8, 256))
    f.create_dataset("y", data=(np.arange(n) * 7 + 3).astype(np.int64))   # y = 7 * x[0] + 3
'''

# One job, as a DataLoader makes it: the parent reads the first sample, then
# forked children read the rest of a fixed shuffled order, each sample
# written as soon as it is read. The first child ends mid-epoch as told (its
# lease still holding rows); the second reads the rest.
DRIVE = r'''
import os, signal, sys, h5py, numpy as np
path, out, how, n, split = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
order = np.random.default_rng(9).permutation(n)
def read(f, lo, hi, o):
    x, y = f["x"], f["y"]
    for i in order[lo:hi]:
        o.write("%d %d %d\n" % (i, int(x[int(i)][0]), int(y[int(i)])))
        o.flush()
with h5py.File(path, "r") as f, open(out + ".0", "w") as o:
    read(f, 0, 1, o)
def child(k, lo, hi, end):
    pid = os.fork()
    if pid == 0:
        with h5py.File(path, "r") as f, open(out + "." + str(k), "w") as o:
            read(f, lo, hi, o)
        if end == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    return st
st1 = child(1, 1, split, how)
st2 = child(2, split, n, "exit")
print("status", st1, st2)
'''


def main():
    env, root, h5, _ = T.hdf5_env("hdf5-lease", MAKE, "rows.h5", N)
    script = T.write_script(env.path("drive.py"), DRIVE)
    for how in tuple(os.environ.get("LEASE_HOW", "exit kill").split()):
        T.section("first process ends with %s mid-epoch" % how)
        common = dict(DLSHIM_ROOTS=root, DLSHIM_REDIRECT="any", DLSHIM_CACHE="4M", DLSHIM_CHUNK="64",
                      DLSHIM_JOB="lease-" + how)
        out = env.path("got-" + how)
        p = env.run([T.PYTHON, script, h5, out, how, str(N), "150"], timeout=120, **common)
        T.check(p.returncode == 0, "%s: driver exits 0" % how, p.stderr.decode(errors="replace")[-1500:])
        st = p.stdout.decode().split()
        T.check(len(st) == 3 and st[1] == ("9" if how == "kill" else "0") and st[2] == "0",
                "%s: the first child ended as told (%s)" % (how, " ".join(st)))
        T.check(b"dlshim: warning" not in p.stderr, "%s: no shim warning" % how,
                p.stderr.decode(errors="replace")[-800:])
        got = []
        for k in range(3):
            if os.path.exists(out + ".%d" % k):
                got += [tuple(int(v) for v in line.split()) for line in open(out + ".%d" % k)]
        T.check(len(got) == N, "%s: %d samples read" % (how, N), str(len(got)))
        bad = [g for g in got if g[2] != 7 * g[1] + 3]
        T.check(not bad, "%s: every label matches its input row" % how, str(bad[:5]))
        rows = collections.Counter(g[1] for g in got)
        twice = [r for r, c in rows.items() if c > 1]
        T.check(not twice, "%s: no row served twice in the epoch" % how, str(twice[:10]))
        T.check(set(rows) == set(range(N)), "%s: no row lost (the epoch is a permutation)" % how,
                "missing %s" % sorted(set(range(N)) - set(rows))[:10])
        moved = sum(1 for g in got if g[0] != g[1])
        T.check(moved > N // 4, "%s: rows were redirected (%d of %d)" % (how, moved, N))
        env.stop_daemon(env.runtime_dir)
        env.new_runtime_dir()
    T.finish()


if __name__ == "__main__":
    main()
