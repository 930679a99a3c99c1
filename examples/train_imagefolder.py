#!/usr/bin/python3
"""A small but real PyTorch training job on an ImageFolder dataset.

    train_imagefolder.py --data DIR --epochs 2 --batch-size 32 --workers 2 \
        --compute-ms 20 --report job.json

It is an ordinary, unmodified training script: torchvision ImageFolder, a shuffling
DataLoader with worker processes, a small CNN, SGD. Nothing in it knows about
dlshim; run it under the shim with

    LD_PRELOAD=build/libdlshim.so DLSHIM_ROOTS=DIR train_imagefolder.py --data DIR ...

It runs on CPU with one intra-op thread and 32x32 inputs so that several jobs fit
on a small machine; --compute-ms adds a per-batch sleep to emulate a slower
(bigger) model without burning the CPU the data loading needs.

--report FILE writes JSON: per-epoch wall time, samples, mean loss, accuracy.
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torchvision import datasets, transforms


def fast_loader(size):
    """Like torchvision's default pil_loader (plain open()+read of the whole file,
    so the I/O pattern is the real one) but asks libjpeg to decode at reduced
    scale (draft mode): we only need size x size pixels, and full-size decoding
    would make these CPU-only demo jobs decode-bound instead of I/O-bound."""
    def load(path):
        with open(path, "rb") as f:
            img = Image.open(f)
            if img.format == "JPEG":
                img.draft("RGB", (size, size))
            return img.convert("RGB")
    return load


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
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    ap.add_argument("--compute-ms", type=float, default=0.0,
                    help="extra per-batch time (sleep) emulating a slower model")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default=None, help="label for progress lines (default: pid)")
    ap.add_argument("--progress-every", type=float, default=0.0,
                    help="also print a progress line every N seconds within an epoch (0: per epoch only)")
    ap.add_argument("--report", default=None, help="write a JSON report here")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    name = args.name or "job-%d" % os.getpid()

    size = args.image_size
    tf = transforms.Compose([
        transforms.Resize((size, size)),
        transforms.ToTensor(),
        transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
    ])
    ds = datasets.ImageFolder(args.data, transform=tf, loader=fast_loader(size))
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                     num_workers=args.workers, generator=gen, drop_last=False)
    model = SmallCNN(len(ds.classes), size)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    report = {
        "name": name, "pid": os.getpid(), "host": socket.gethostname(),
        "dlshim_preloaded": "libdlshim" in os.environ.get("LD_PRELOAD", ""),
        "args": vars(args), "dataset_files": len(ds), "classes": len(ds.classes),
        "start_unix": time.time(), "epochs": [],
    }
    print("[%s] %d files, %d classes, %d batches/epoch, workers=%d compute_ms=%g"
          % (name, len(ds), len(ds.classes), len(dl), args.workers, args.compute_ms), flush=True)

    t_start = time.monotonic()
    for epoch in range(1, args.epochs + 1):
        t0 = last = time.monotonic()
        seen = correct = 0
        loss_sum = 0.0
        for i, (x, y) in enumerate(dl, 1):
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            if args.compute_ms > 0:
                time.sleep(args.compute_ms / 1000.0)
            seen += len(y)
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            now = time.monotonic()
            if args.progress_every > 0 and now - last >= args.progress_every:
                last = now
                print("[%s] epoch %d/%d batch %d/%d loss %.3f %.0f img/s"
                      % (name, epoch, args.epochs, i, len(dl), loss_sum / seen, seen / (now - t0)),
                      flush=True)
        wall = time.monotonic() - t0
        ep = {"epoch": epoch, "wall_s": round(wall, 3), "samples": seen,
              "loss": round(loss_sum / max(seen, 1), 4), "accuracy": round(correct / max(seen, 1), 4),
              "samples_per_s": round(seen / wall, 1) if wall > 0 else None}
        report["epochs"].append(ep)
        print("[%s] epoch %d/%d done: %.2fs, %d samples, loss %.3f, acc %.3f"
              % (name, epoch, args.epochs, wall, seen, ep["loss"], ep["accuracy"]), flush=True)

    report["total_wall_s"] = round(time.monotonic() - t_start, 3)
    if args.report:
        tmp = args.report + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)
        os.replace(tmp, args.report)   # readers never see a half-written report
    return 0


if __name__ == "__main__":
    sys.exit(main())
