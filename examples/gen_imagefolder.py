#!/usr/bin/python3
"""Generate a synthetic ImageFolder dataset of real JPEG files.

    gen_imagefolder.py --out DIR --classes 10 --per-class 150 --size 100 --seed 0

produces DIR/class000/00000.jpg ... with nothing else in the tree, so it can be
used directly as a torchvision ImageFolder root and as a DLSHIM_ROOTS entry.

Each class has its own pattern (base colour plus oriented stripes of a class-specific
frequency) so a small CNN can learn to tell the classes apart; every image adds
random noise, a random crop offset and a brightness change, which also keeps the
JPEGs large (noise does not compress) and all files distinct.

Speed: the per-class patterns are computed once; per image we only take a crop,
add noise with numpy and encode. JPEG size is steered towards --size KB by
calibrating the image side length once, before the real run.
"""
import argparse
import io
import os
import sys
import time
from multiprocessing import Pool

import numpy as np
from PIL import Image

QUALITY = 90     # high enough that the noise survives, i.e. files stay large
NOISE = 28.0     # noise standard deviation (0..255 scale)
MARGIN = 16      # pixels of slack in the base pattern for random crop offsets


def class_pattern(cls, nclasses, side, seed):
    """Base image (float32 HxWx3) of class `cls`: colour + stripes, deterministic."""
    rng = np.random.default_rng([seed, cls, 7])
    n = side + MARGIN
    y, x = np.mgrid[0:n, 0:n].astype(np.float32)
    angle = np.pi * cls / max(nclasses, 1)           # orientation differs per class
    freq = 2 * np.pi * (2 + cls % 5) / 64.0           # and so does the frequency
    stripes = np.sin(freq * (x * np.cos(angle) + y * np.sin(angle)))
    colour = rng.uniform(40, 215, size=3).astype(np.float32)
    img = colour[None, None, :] + 50.0 * stripes[..., None] * rng.uniform(0.5, 1.0, size=3)
    return img.astype(np.float32)


def render(base, side, rng):
    """One image: random crop of the class pattern + brightness jitter + noise."""
    oy, ox = rng.integers(0, MARGIN + 1, size=2)
    img = base[oy:oy + side, ox:ox + side] * rng.uniform(0.8, 1.2)
    img = img + rng.normal(0.0, NOISE, size=img.shape).astype(np.float32)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def jpeg_bytes(im):
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=QUALITY)
    return buf.getvalue()


def calibrate_side(target_bytes, nclasses, seed):
    """Find the square side whose JPEGs are about target_bytes (size ~ pixels)."""
    side = 256
    rng = np.random.default_rng([seed, 99])
    for _ in range(4):
        base = class_pattern(0, nclasses, side, seed)
        avg = np.mean([len(jpeg_bytes(render(base, side, rng))) for _ in range(3)])
        new = int(round(side * (target_bytes / avg) ** 0.5))
        new = max(16, min(new, 4096))
        if abs(new - side) <= 2:
            return new
        side = new
    return side


def make_class(task):
    """Write all images of one class (runs in a worker process)."""
    out, cls, nclasses, per_class, side, seed = task
    cdir = os.path.join(out, "class%03d" % cls)
    os.makedirs(cdir, exist_ok=True)
    base = class_pattern(cls, nclasses, side, seed)
    rng = np.random.default_rng([seed, cls, 1])
    total = 0
    for i in range(per_class):
        data = jpeg_bytes(render(base, side, rng))
        path = os.path.join(cdir, "%05d.jpg" % i)
        with open(path, "wb") as f:
            f.write(data)
        total += len(data)
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="dataset root to create (ImageFolder layout)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=150)
    ap.add_argument("--size", type=float, default=100.0, help="target JPEG size in KB (approximate)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    args = ap.parse_args()
    if args.classes < 1 or args.per_class < 1 or args.size <= 0:
        ap.error("--classes, --per-class and --size must be positive")

    t0 = time.time()
    side = calibrate_side(args.size * 1000, args.classes, args.seed)
    os.makedirs(args.out, exist_ok=True)
    tasks = [(args.out, c, args.classes, args.per_class, side, args.seed) for c in range(args.classes)]
    if args.jobs > 1 and args.classes > 1:
        with Pool(min(args.jobs, args.classes)) as pool:
            sizes = pool.map(make_class, tasks)
    else:
        sizes = [make_class(t) for t in tasks]
    n = args.classes * args.per_class
    total = sum(sizes)
    print("gen_imagefolder: %d files (%dx%d px), %.1f MB, avg %.1f KB, %.1fs -> %s"
          % (n, side, side, total / 1e6, total / n / 1e3, time.time() - t0, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
