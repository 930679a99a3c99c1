#!/usr/bin/python3
"""A PyTorch training job's data loading over a multi-node dataset: a
Dataset of every file of the cluster (the manifest's paths under ROOT),
a shuffling DataLoader with worker processes, one epoch. Records, for each
sample, the path asked for and the sha256 of the bytes received.

usage: mn_torch_job.py ROOT MANIFEST OUT [WORKERS] [DELAY_S]
OUT: JSON list of [relpath requested, sha256 or "ERR:<errno name>"].
"""
import errno
import hashlib
import json
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

root, manifest, out = sys.argv[1:4]
workers = int(sys.argv[4]) if len(sys.argv) > 4 else 2
delay = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
rels = [line.split()[0] for line in open(manifest)]


class Files(Dataset):
    def __len__(self):
        return len(rels)

    def __getitem__(self, i):
        time.sleep(delay)  # a slower job, so that a node can die mid-epoch
        try:
            with open(f"{root}/{rels[i]}", "rb") as f:
                return rels[i], hashlib.sha256(f.read()).hexdigest()
        except OSError as e:
            return rels[i], "ERR:" + errno.errorcode.get(e.errno, str(e.errno))


torch.manual_seed(1)
got = [list(s) for s in DataLoader(Files(), batch_size=None, shuffle=True, num_workers=workers)]
with open(out, "w") as f:
    json.dump(got, f)
