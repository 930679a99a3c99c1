#!/usr/bin/python3
"""Distributed data-parallel (DDP) training on an ImageFolder dataset, CPU only.

    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
        examples/ddp_train.py --data DIR --epochs 2

(`torchrun` is the same launcher; Debian's python3-torch has no `torchrun`
script, so it is run as the module torch.distributed.run.) examples/ddp_run.sh
runs it under dlshim.

An ordinary DDP script: torch.distributed with the gloo backend, a
DistributedSampler that gives each rank a disjoint shard of the dataset every
epoch, a DataLoader with worker processes, a small CNN wrapped in
DistributedDataParallel. Nothing in it knows about dlshim. Under the shim all
ranks (and their DataLoader workers) form one dlshim job, named
ddp-<TORCHELASTIC_RUN_ID>, whose epoch is shared across ranks.

--record DIR writes DIR/rank<R>.json per rank: the dataset indices, paths and
SHA-256 of the raw bytes of every sample the rank consumed, the dlshim job name
it ran in, and per-epoch loss/time -- enough to check that the ranks read
disjoint shards covering the dataset and that every byte was right.
"""
import argparse
import hashlib
import io
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torch.nn.parallel import DistributedDataParallel as DDP
from torchvision import datasets, transforms


class RecordingImageFolder(datasets.ImageFolder):
    """ImageFolder whose samples also carry their index and the SHA-256 of the
    file's raw bytes. The file is read with one plain open()+read(), as
    torchvision's default loader does."""

    def __init__(self, root, size, transform):
        super().__init__(root, transform=transform)
        self.size = size

    def __getitem__(self, index):
        path, target = self.samples[index]
        with open(path, "rb") as f:
            raw = f.read()
        img = Image.open(io.BytesIO(raw))
        if img.format == "JPEG":
            img.draft("RGB", (self.size, self.size))   # decode at reduced scale: CPU-cheap
        x = self.transform(img.convert("RGB"))
        return x, target, index, hashlib.sha256(raw).hexdigest()


class SmallCNN(nn.Module):
    def __init__(self, nclasses, size):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * (size // 4) * (size // 4), nclasses)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="ImageFolder root (root/<class>/<file>)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--workers", type=int, default=1, help="DataLoader worker processes per rank")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--record", default=None, help="directory for per-rank JSON records")
    args = ap.parse_args()

    # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    size = args.image_size
    tf = transforms.Compose([
        transforms.Resize((size, size)),
        transforms.ToTensor(),
        transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    ])
    ds = RecordingImageFolder(args.data, size, tf)
    sampler = torch.utils.data.distributed.DistributedSampler(ds, num_replicas=world, rank=rank,
                                                              shuffle=True, seed=args.seed)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, sampler=sampler,
                                     num_workers=args.workers)
    model = DDP(SmallCNN(len(ds.classes), size))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    rec = {"rank": rank, "world_size": world, "pid": os.getpid(),
           "dlshim_job": os.environ.get("DLSHIM_JOB"),
           "torchelastic_run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
           "dataset_files": len(ds), "epochs": []}
    if rank == 0:
        print("[ddp] world %d, %d files, %d classes, %d batches/epoch/rank"
              % (world, len(ds), len(ds.classes), len(dl)), flush=True)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)          # a new shuffle, the same for every rank
        t0 = time.monotonic()
        seen, loss_sum = [], 0.0
        for x, y, idx, sha in dl:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()               # gradients are all-reduced across ranks here
            opt.step()
            loss_sum += loss.item() * len(y)
            seen += [(int(i), ds.samples[int(i)][0], h) for i, h in zip(idx, sha)]
        wall = time.monotonic() - t0
        # every rank's sample count, summed across ranks: a collective all ranks join
        total = torch.tensor([len(seen)])
        dist.all_reduce(total)
        ep = {"epoch": epoch, "wall_s": round(wall, 3), "samples": len(seen),
              "samples_all_ranks": int(total.item()), "loss": round(loss_sum / max(len(seen), 1), 4),
              "indices": [s[0] for s in seen], "paths": [s[1] for s in seen],
              "sha256": [s[2] for s in seen]}
        rec["epochs"].append(ep)
        print("[ddp rank %d] epoch %d: %d samples (%d on all ranks), loss %.3f, %.2fs"
              % (rank, epoch, len(seen), ep["samples_all_ranks"], ep["loss"], wall), flush=True)

    if args.record:
        os.makedirs(args.record, exist_ok=True)
        out = os.path.join(args.record, "rank%d.json" % rank)
        with open(out + ".tmp", "w") as f:
            json.dump(rec, f)
        os.replace(out + ".tmp", out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
