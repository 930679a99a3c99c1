#!/usr/bin/python3
"""Which order reads a chunk of small files fastest here? (issue: physical
chunks are cut in inode order or directory order, whichever reads faster.)

    bench_order.py DATASET_DIR [CHUNK]

For every class directory, files are read in chunks of CHUNK files (as the
coordinator's loader does: all of a chunk's files started together with
WILLNEED, then read), with the page cache dropped before each order.
Prints seconds per order; results go to bench/results/order.json.
"""
import json
import os
import random
import sys
import time


def drop():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def read_chunks(paths, chunk):
    total = 0
    for i in range(0, len(paths), chunk):
        fds = [os.open(p, os.O_RDONLY) for p in paths[i:i + chunk]]
        for fd in fds:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        for fd in fds:
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                total += len(b)
            os.close(fd)
    return total


def main():
    root = sys.argv[1]
    chunk = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    dirs = sorted(os.path.join(root, d) for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    orders = {}
    for d in dirs:
        entries = list(os.scandir(d))
        orders.setdefault("readdir", []).extend(e.path for e in entries)
        orders.setdefault("inode", []).extend(e.path for e in sorted(entries, key=lambda e: e.inode()))
        orders.setdefault("name", []).extend(sorted(e.path for e in entries))
        rnd = [e.path for e in entries]
        random.Random(1).shuffle(rnd)
        orders.setdefault("random", []).extend(rnd)
    res = {}
    for rep in range(2):
        for name in ("inode", "readdir", "name", "random"):
            drop()
            t = time.monotonic()
            n = read_chunks(orders[name], chunk)
            dt = time.monotonic() - t
            res.setdefault(name, []).append(dt)
            print("%-8s %.2f s  (%.0f MB/s)" % (name, dt, n / dt / 1e6), flush=True)
    os.makedirs("bench/results", exist_ok=True)
    json.dump({"dataset": root, "chunk": chunk, "seconds": res}, open("bench/results/order.json", "w"), indent=1)


if __name__ == "__main__":
    main()
