#!/usr/bin/python3
"""Plot and summarise bench/results/hdf5.json (written by bench_hdf5.sh).

    plot_hdf5.py RESULTS.json OUT.png OUT.md
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

VARIANTS = ["floor", "plain", "exact", "any"]
LABEL = {"floor": "floor: plain h5py, file in page cache, no throttle", "plain": "plain h5py", "exact": "shim exact",
         "any": "shim redirect (any)"}
SHORT = {"floor": "floor (no I/O)", "plain": "plain h5py", "exact": "shim exact", "any": "shim redirect (any)"}
STYLES = ["open", "held"]
STYLE_LABEL = {"open": "`f[\"x\"][i]`", "held": "held `x[i]`"}
STYLE_TICK = {"open": "f[name][i]", "held": "held x[i]"}


def main():
    res = json.load(open(sys.argv[1]))
    groups = sorted({(r["row_kb"], r.get("style", "open")) for r in res["runs"]},
                    key=lambda g: (g[0], STYLES.index(g[1])))
    fig, axes = plt.subplots(1, 2, figsize=(max(11, 2.8 * len(groups)), 4))
    w = 0.8 / len(VARIANTS)
    rows = []
    for si, (kb, style) in enumerate(groups):
        runs = {r["variant"]: r for r in res["runs"] if r["row_kb"] == kb and r.get("style", "open") == style}
        for vi, var in enumerate(VARIANTS):
            r = runs.get(var)
            if r is None:
                continue
            eps = r["job"]["epochs"]
            secs = [e["seconds"] for e in eps]
            mean = sum(secs) / len(secs)
            plain = runs.get("plain")
            base = [e["seconds"] for e in plain["job"]["epochs"]] if plain else []
            speedup = "%.1fx" % (sum(base) / len(base) / mean) if base else "-"
            per_epoch = r["device_bytes"] / max(1, len(eps)) / r["file_bytes"]
            ok = all(e["mismatched"] == 0 and e["distinct"] == r["rows"] for e in eps)
            x = si + (vi - (len(VARIANTS) - 1) / 2) * w
            axes[0].bar(x, sum(secs) / len(secs), w, color="C%d" % vi, label=SHORT[var] if si == 0 else None)
            axes[1].bar(x, per_epoch, w, color="C%d" % vi, label=SHORT[var] if si == 0 else None)
            cpu = "-" if r.get("cpu_s") is None else "%.1f" % r["cpu_s"]
            if r.get("coordinator_cpu_s") is not None:
                cpu += " (%.1f)" % r["coordinator_cpu_s"]
            rows.append("| %d KB | %s | %s | %s | %s | %.2f | %.2f | %s | %s |" % (
                kb, STYLE_LABEL[style], LABEL[var], " / ".join("%.1f" % s for s in secs), speedup,
                r["device_bytes"] / 2**20, per_epoch, cpu, "yes" if ok else "NO"))
    for ax, title in ((axes[0], "mean epoch time (s)"), (axes[1], "device bytes per epoch / file size")):
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(["%d KB rows\n%s" % (kb, STYLE_TICK[st]) for kb, st in groups], fontsize=8)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle("Random HDF5 rows, file 2x the cache, storage %d MB/s, %d IOPS"
                 % (res["bps"] // 2**20, res["iops"]))
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    with open(sys.argv[3], "w") as f:
        f.write("# HDF5 rows benchmark\n\n")
        f.write("`make bench-hdf5` (bench/bench_hdf5.sh): a shuffling DataLoader (2 workers) reads `x[i]` and\n"
                "`y[i]` of every row of a contiguous float32 dataset in an HDF5 file twice the size of the shim's\n"
                "cache, for %d epochs; storage throttled to %d MB/s and %d IOPS with cgroup v1 blkio, page cache\n"
                "held down by a memory cgroup, caches dropped before each run. Device bytes are the cgroup's.\n"
                "The floor run reads the same file already in the page cache with no throttle: the cost of the\n"
                "job's Python, h5py and DataLoader alone. Speedup is plain's mean epoch time over the variant's.\n"
                "CPU seconds are the whole run's (job, workers and coordinator: cpuacct group), the\n"
                "coordinator's own in parentheses; 2 cores give at most twice the wall time.\n"
                "Two jobs (bench/h5_job.py): `f[\"x\"][i]` looks each dataset up again for every read (h5py\n"
                "then builds a dataset object per read, most of the job's CPU per sample); held `x[i]` keeps the\n"
                "dataset objects it opened first.\n\n"
                % (res["epochs"], res["bps"] // 2**20, res["iops"]))
        f.write("![HDF5 rows](img/hdf5.png)\n\n")
        f.write("| rows | job reads | variant | epoch seconds | speedup vs plain | device MB "
                "| device bytes per epoch / file | CPU s (coordinator) | pairs and permutation ok |\n")
        f.write("|---|---|---|---|---|---|---|---|---|\n")
        f.write("\n".join(rows) + "\n")
        f.write("\nWhat bounds each variant, and the per-row profile: docs/benchmarks.md, \"HDF5 rows\".\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
