#!/usr/bin/python3
"""One benchmark job for bench_hdf5.sh: a shuffling DataLoader over an h5py
Dataset that reads x[i] and y[i] (file opened lazily in each worker).

    h5_job.py FILE EPOCHS WORKERS REPORT.json [open|held]

open (default): each read looks its dataset up again, `self.f["x"][i]`, as
much h5py code does; h5py then builds a dataset object per read (about 65
us of the job's CPU per sample). held: the Dataset keeps the two dataset
objects it opened first, as h5py's documentation advises.

REPORT: per-epoch seconds and samples, and how many (x, y) pairs did not
match (x[i, 0] holds i, y[i] = i % 1000: must stay 0 in every mode).
"""
import json
import sys
import time

import h5py
import torch
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __init__(self, path):
        self.path, self.f = path, None
        with h5py.File(path, "r") as f:
            self.n = f["x"].shape[0]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.f is None:
            self.f = h5py.File(self.path, "r")
        x = self.f["x"][i]
        return int(x[0]), int(self.f["y"][i])


class HeldRows(Rows):
    def __getitem__(self, i):
        if self.f is None:
            self.f = h5py.File(self.path, "r")
            self.x, self.y = self.f["x"], self.f["y"]
        x = self.x[i]
        return int(x[0]), int(self.y[i])


def main():
    path, epochs, workers, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    style = sys.argv[5] if len(sys.argv) > 5 else "open"
    if style not in ("open", "held"):
        raise SystemExit("h5_job.py: style must be open or held, not %r" % style)
    torch.manual_seed(0)
    ds = Rows(path) if style == "open" else HeldRows(path)
    rep = {"style": style, "epochs": []}
    for ep in range(epochs):
        t0 = time.time()
        n = bad = 0
        rows = set()
        for x0, y in DataLoader(ds, batch_size=32, shuffle=True, num_workers=workers):
            n += len(x0)
            bad += int(((x0 % 1000) != y).sum())
            rows.update(x0.tolist())
        rep["epochs"].append({"epoch": ep, "seconds": time.time() - t0, "samples": n, "distinct": len(rows),
                              "mismatched": bad})
    json.dump(rep, open(out, "w"))


if __name__ == "__main__":
    main()
