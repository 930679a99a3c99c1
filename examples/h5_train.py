#!/usr/bin/python3
"""A small surrogate-model training job on an HDF5 file, the shape of the
scientific workloads in the SOLAR paper: each row of dataset `x` is an input
field, the same row of `y` its target, read one row at a time by an h5py
Dataset in DataLoader workers.

    h5_train.py --make data/fields.h5 --rows 4096 --side 64     # create a file
    LD_PRELOAD=build/libdlshim.so DLSHIM_ROOTS=data DLSHIM_REDIRECT=any \\
        h5_train.py --data data/fields.h5 --epochs 3 --workers 2 --report job.json

Nothing in the training part knows about dlshim. The file is opened lazily in
each worker (h5py handles must not cross fork). --report FILE writes JSON:
per-epoch wall time, samples, mean loss, distinct rows seen (every row once
per epoch) and the number of samples whose target is not the blur of its
input (always 0: inputs and targets are redirected together).
"""
import argparse
import json
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


def make(path, rows, side, seed=0):
    """Inputs: smooth random fields; targets: a fixed blur of the input (what
    a surrogate learns), stored chunked and compressed like real data."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 1, side, side)).astype(np.float32)
    k = np.ones(3, dtype=np.float32) / 3
    y = np.apply_along_axis(lambda v: np.convolve(v, k, mode="same"), 3, x)
    y = np.apply_along_axis(lambda v: np.convolve(v, k, mode="same"), 2, y).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(16, 1, side, side))
        f.create_dataset("y", data=y, chunks=(16, 1, side, side), compression="gzip")
        f.create_dataset("id", data=np.arange(rows, dtype=np.int64))


class Fields(Dataset):
    def __init__(self, path):
        self.path, self.f = path, None
        with h5py.File(path, "r") as f:
            self.n = f["x"].shape[0]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.f is None:  # opened in each worker; the dataset objects kept (h5py builds one per lookup)
            self.f = h5py.File(self.path, "r")
            self.x, self.y, self.id = self.f["x"], self.f["y"], self.f["id"]
        return torch.from_numpy(self.x[i]), torch.from_numpy(self.y[i]), int(self.id[i])


class Surrogate(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1))

    def forward(self, x):
        return self.net(x)


def train(args):
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    ds = Fields(args.data)
    model = Surrogate()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    report = {"epochs": []}
    box = torch.ones(1, 1, 3, 3) / 9
    for ep in range(args.epochs):
        t0 = time.time()
        seen, loss_sum, mismatched, rows = 0, 0.0, 0, set()
        for x, y, rid in DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers):
            # A target belongs to its input when blurring the input gives it.
            blur = nn.functional.conv2d(x, box, padding=1)
            mismatched += int(((blur - y).abs().flatten(1).amax(1) > 1e-4).sum())
            rows.update(rid.tolist())
            pred = model(x)
            loss = nn.functional.mse_loss(pred, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(x)
            loss_sum += float(loss) * len(x)
        e = {"epoch": ep, "seconds": time.time() - t0, "samples": seen, "loss": loss_sum / max(1, seen),
             "distinct_rows": len(rows), "mismatched": mismatched}
        report["epochs"].append(e)
        print("epoch %d: %d samples (%d distinct), loss %.4f, %d mismatched, %.2f s"
              % (ep, seen, len(rows), e["loss"], mismatched, e["seconds"]), flush=True)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make", help="create an HDF5 file at this path and exit")
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--side", type=int, default=64)
    ap.add_argument("--data", help="the HDF5 file to train on")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report")
    args = ap.parse_args()
    if args.make:
        make(args.make, args.rows, args.side, args.seed)
    elif args.data:
        train(args)
    else:
        ap.error("give --make PATH or --data PATH")


if __name__ == "__main__":
    main()
