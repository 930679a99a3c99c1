#!/usr/bin/python3
"""A data-loading job for the benchmarks: a plain PyTorch DataLoader over an
ImageFolder whose loader returns the raw bytes of each file (open + read, as
torchvision's default loader does before decoding). No decoding, so the epoch
time is the I/O time the storage and the shim give.

    loader_job.py DATA EPOCHS WORKERS REPORT.json [COMPUTE_MS]
"""
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader
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


def main():
    data, epochs, workers, report = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    compute = float(sys.argv[5]) / 1000 if len(sys.argv) > 5 else 0.0
    torch.manual_seed(0)
    ds = datasets.ImageFolder(data, loader=raw)
    dl = DataLoader(ds, batch_size=32, shuffle=True, num_workers=workers, collate_fn=lambda b: b)
    out = {"epochs": []}
    for ep in range(epochs):
        d0 = device_read_bytes()
        t0 = time.monotonic()
        n = nbytes = 0
        for batch in dl:
            n += len(batch)
            nbytes += sum(b for b, _ in batch)
            if compute:
                time.sleep(compute)
        d1 = device_read_bytes()
        out["epochs"].append({"seconds": time.monotonic() - t0, "samples": n, "bytes": nbytes,
                              "device_bytes": None if d0 is None else d1 - d0})
        print("epoch %d: %.2f s, %d samples" % (ep, out["epochs"][-1]["seconds"], n), flush=True)
    json.dump(out, open(report, "w"))


if __name__ == "__main__":
    main()
