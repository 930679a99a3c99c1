#!/usr/bin/python3
"""A data-loading job for the benchmarks: a plain PyTorch DataLoader over an
ImageFolder whose loader returns the raw bytes of each file (open + read, as
torchvision's default loader does before decoding). No decoding, so the epoch
time is the I/O time the storage and the shim give.

    loader_job.py DATA EPOCHS WORKERS REPORT.json [COMPUTE_MS]

Optional environment, for the multi-job benchmark (bench_sampling_e2e.sh):
  BENCH_SEED       torch seed of the job's shuffle (default 0)
  BENCH_LIST       file of absolute paths: the job's dataset is those files
  BENCH_ORDER      "shared": instead of the DataLoader's shuffle, epoch e reads
                   one seeded permutation of every file under DATA (the same
                   in every job), keeping only its own files
  BENCH_READY, BENCH_GO, BENCH_DELAY
                   create READY once imported, wait for GO to exist, then
                   sleep DELAY seconds (start times measured from GO)
"""
import json
import os
import random
import resource
import sys
import time

import torch
from torch.utils.data import DataLoader, Sampler
from torchvision import datasets


def raw(path):
    with open(path, "rb") as f:
        return len(f.read())


def device_read_bytes():
    """Bytes this process's blkio cgroup has read from BENCH_DEV (MAJ:MIN)."""
    dev = os.environ.get("BENCH_DEV")
    if not dev:
        return None
    for line in open("/proc/self/cgroup"):
        _, ctrl, path = line.rstrip("\n").split(":", 2)
        if "blkio" in ctrl.split(","):
            f = "/sys/fs/cgroup/blkio%s/blkio.throttle.io_service_bytes_recursive" % path
            for row in open(f):
                parts = row.split()
                if len(parts) == 3 and parts[0] == dev and parts[1] == "Read":
                    return int(parts[2])
            return 0
    return None


def own_read_bytes():
    """Bytes read from block devices by this process and its reaped workers."""
    return 512 * (resource.getrusage(resource.RUSAGE_SELF).ru_inblock
                  + resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock)


class SharedOrder(Sampler):
    """Every job's epoch e follows the same permutation of all files under the
    root (the lockstep baseline's one order), restricted to the job's files."""

    def __init__(self, ds, root):
        self.idx = {p: i for i, (p, _) in enumerate(ds.samples)}
        self.universe = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
        self.epoch = 0

    def __iter__(self):
        perm = list(self.universe)
        random.Random(1000 + self.epoch).shuffle(perm)
        self.epoch += 1
        return iter([self.idx[p] for p in perm if p in self.idx])

    def __len__(self):
        return len(self.idx)


def main():
    data, epochs, workers, report = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    compute = float(sys.argv[5]) / 1000 if len(sys.argv) > 5 else 0.0
    torch.manual_seed(int(os.environ.get("BENCH_SEED", "0")))
    ds = datasets.ImageFolder(data, loader=raw)
    if os.environ.get("BENCH_LIST"):
        keep = set(open(os.environ["BENCH_LIST"]).read().split())
        ds.samples = [s for s in ds.samples if s[0] in keep]
        ds.imgs = ds.samples
    if os.environ.get("BENCH_ORDER") == "shared":
        dl = DataLoader(ds, batch_size=32, sampler=SharedOrder(ds, data), num_workers=workers,
                        collate_fn=lambda b: b)
    else:
        dl = DataLoader(ds, batch_size=32, shuffle=True, num_workers=workers, collate_fn=lambda b: b)
    if os.environ.get("BENCH_READY"):
        open(os.environ["BENCH_READY"], "w").close()
        while not os.path.exists(os.environ["BENCH_GO"]):
            time.sleep(0.01)
        go = os.stat(os.environ["BENCH_GO"]).st_mtime
        time.sleep(max(0.0, go + float(os.environ.get("BENCH_DELAY", "0")) - time.time()))
    out = {"epochs": [], "files": len(ds), "start": time.time()}
    for ep in range(epochs):
        d0, o0 = device_read_bytes(), own_read_bytes()
        t0 = time.monotonic()
        n = nbytes = 0
        for batch in dl:
            n += len(batch)
            nbytes += sum(b for b, _ in batch)
            if compute:
                time.sleep(compute)
        d1, o1 = device_read_bytes(), own_read_bytes()
        out["epochs"].append({"seconds": time.monotonic() - t0, "samples": n, "bytes": nbytes,
                              "device_bytes": None if d0 is None else d1 - d0,
                              "own_read_bytes": o1 - o0})
        print("epoch %d: %.2f s, %d samples" % (ep, out["epochs"][-1]["seconds"], n), flush=True)
    out["end"] = time.time()
    json.dump(out, open(report, "w"))


if __name__ == "__main__":
    main()
