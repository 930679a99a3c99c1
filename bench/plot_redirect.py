#!/usr/bin/python3
"""Plot and summarise bench/results/redirect.json (written by bench_redirect.sh).

    plot_redirect.py RESULTS.json OUT.png OUT.md
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    res = json.load(open(sys.argv[1]))
    ds = res["dataset_bytes"]
    profiles = []
    for r in res["runs"]:
        if r["profile"] not in profiles:
            profiles.append(r["profile"])
    variants = ["plain", "exact", "dir-perfile", "dir"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    rows = []
    for pi, prof in enumerate(profiles):
        runs = {r["variant"]: r for r in res["runs"] if r["profile"] == prof}
        for vi, var in enumerate(variants):
            r = runs.get(var)
            if r is None:
                continue
            eps = r["job"]["epochs"]
            secs = [e["seconds"] for e in eps]
            dev = [e["device_bytes"] or 0 for e in eps]
            x = [pi * (len(variants) + 1) + vi]
            axes[0].bar(x, [sum(secs) / len(secs)], color="C%d" % vi, label=var if pi == 0 else None)
            axes[1].bar(x, [sum(dev) / len(dev) / ds], color="C%d" % vi, label=var if pi == 0 else None)
            consumed = sum(e["bytes"] for e in eps)
            rows.append((prof, r["bps"] // 1048576, r["iops"], var, secs, dev, consumed / max(1, sum(dev))))
    ticks = [pi * (len(variants) + 1) + 1 for pi in range(len(profiles))]
    for ax, title in ((axes[0], "mean epoch time (s)"), (axes[1], "device bytes per epoch / dataset")):
        ax.set_xticks(ticks)
        ax.set_xticklabels(profiles)
        ax.set_title(title)
        ax.legend()
    axes[1].axhline(1.0, color="grey", lw=0.8, ls="--")
    fig.suptitle("dataset %.0f MB, cache %.0f MB, %d files" % (ds / 1e6, res["cache_bytes"] / 1e6, res["files"]))
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100)

    base = {}
    for prof, mbs, iops, var, secs, dev, eff in rows:
        if var == "plain":
            base[prof] = sum(secs) / len(secs)
    with open(sys.argv[3], "w") as f:
        f.write("| profile | variant | epoch times (s) | mean speed-up vs plain | device MB per epoch | "
                "device bytes / dataset | I/O efficiency | limit (s) |\n|---|---|---|---|---|---|---|---|\n")
        for prof, mbs, iops, var, secs, dev, eff in rows:
            mean = sum(secs) / len(secs)
            limit = max(d / (mbs * 1048576) for d in dev) if dev else 0
            f.write("| %s (%d MB/s, %d IOPS) | %s | %s | %.2fx | %s | %s | %.2f | %.1f |\n" % (
                prof, mbs, iops, var, " / ".join("%.1f" % s for s in secs),
                base.get(prof, mean) / mean, " / ".join("%.0f" % (d / 1e6) for d in dev),
                " / ".join("%.2f" % (d / ds) for d in dev), eff, limit))


if __name__ == "__main__":
    main()
