#!/usr/bin/env python3
"""Plots of `make bench-sampling` (bench/bench_sampling.c output).

usage: plot_sampling.py RESULTS_DIR IMG_DIR
  RESULTS_DIR/sampling_misses.csv -> IMG_DIR/sampling-isa-vs-dsa.png, sampling-policies.png
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def series(rows, **match):
    pts = [(int(r["cache_slots"]), int(r["misses"])) for r in rows
           if all(r[k] == v for k, v in match.items())]
    pts.sort()
    return [p[0] for p in pts], [p[1] for p in pts]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    res, img = sys.argv[1], sys.argv[2]
    rows = load(os.path.join(res, "sampling_misses.csv"))
    os.makedirs(img, exist_ok=True)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, group, title in zip(axes, ("overlap", "size"),
                                ("datasets overlapping partially", "datasets varying in size")):
        cases = []
        for r in rows:
            if r["group"] == group and r["case"] not in cases:
                cases.append(r["case"])
        for k, case in enumerate(cases):
            color = "C%d" % k
            for sampler, style in (("isa", "--"), ("dsa", "-")):
                x, y = series(rows, group=group, case=case, sampler=sampler, policy="refcnt")
                ax.plot(x, y, style, color=color, label="%s %s" % (sampler.upper(), case))
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlabel("cache size (items)")
        ax.set_ylabel("misses (one epoch of every job)")
        ax.set_title(title + " (RefCnt)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(img, "sampling-isa-vs-dsa.png"), dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    four = []
    for r in rows:
        if r["jobs"] == "4" and (r["group"], r["case"]) not in four:
            four.append((r["group"], r["case"]))
    for ax, (group, case) in zip(axes, four):
        for k, policy in enumerate(("refcnt", "lru", "fifo", "random")):
            x, y = series(rows, group=group, case=case, sampler="dsa", policy=policy)
            ax.plot(x, y, "-", color="C%d" % k, label="DSA + %s" % policy)
        x, y = series(rows, group=group, case=case, sampler="isa", policy="lru")
        ax.plot(x, y, ":", color="gray", label="ISA + lru")
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlabel("cache size (items)")
        ax.set_ylabel("misses")
        ax.set_title("4 jobs: %s" % case)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(img, "sampling-policies.png"), dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
