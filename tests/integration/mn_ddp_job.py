#!/usr/bin/python3
"""One rank of a DistributedDataParallel job whose ranks run on different
nodes: torch.distributed over gloo (TCP between the nodes), a
DistributedSampler giving each rank its share of every epoch, a shuffling
DataLoader with worker processes, a small model trained on features of the
bytes received (gradients all-reduced every step, so the ranks move in
lockstep as real DDP does). Records, for each sample, the path asked for
and the sha256 of the bytes received.

usage: mn_ddp_job.py ROOT MANIFEST OUT EPOCHS
env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (as torchrun sets them)
OUT: JSON list per epoch of [relpath requested, sha256].
"""
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

root, manifest, out, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rels = [line.split()[0] for line in open(manifest)]
classes = sorted({r.split("/")[0] for r in rels})


class Files(Dataset):
    def __len__(self):
        return len(rels)

    def __getitem__(self, i):
        with open(f"{root}/{rels[i]}", "rb") as f:
            data = f.read()
        x = torch.tensor(list(data[:16].ljust(16, b"\0")), dtype=torch.float32) / 255.0
        return rels[i], hashlib.sha256(data).hexdigest(), x, classes.index(rels[i].split("/")[0])


dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
torch.manual_seed(0)
model = DistributedDataParallel(nn.Linear(16, len(classes)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sampler = DistributedSampler(Files(), shuffle=True, seed=1)
got = []
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    seen = []
    for rel, sha, x, y in DataLoader(Files(), batch_size=4, sampler=sampler, num_workers=2):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        seen += [[r, s] for r, s in zip(rel, sha)]
    got.append(seen)
    dist.barrier()
dist.destroy_process_group()
with open(out + ".tmp", "w") as f:
    json.dump(got, f)
os.rename(out + ".tmp", out)
