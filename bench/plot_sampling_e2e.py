#!/usr/bin/python3
"""Plot and tabulate bench_sampling_e2e.sh's results.

    plot_sampling_e2e.py RESULTS.json OUT.png OUT.md
"""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

ORDER = ["plain", "plain-lowmem", "lockstep", "dir", "dsa"]
REFS = ["plain", "plain-lowmem", "lockstep"]
NAMES = {"plain": "plain PyTorch", "plain-lowmem": "plain PyTorch, less memory",
         "lockstep": "lockstep (shared order, exact)",
         "dir": "shim dir (chunk)", "dsa": "shim dsa"}


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def job_epochs(job):
    rep = job["report"] or {"epochs": []}
    return [e["seconds"] for e in rep["epochs"]]


def main():
    res = json.load(open(sys.argv[1]))
    scens = []
    for r in res["runs"]:
        if r["scenario"] not in scens:
            scens.append(r["scenario"])
    union = {"same": res["dataset_bytes"], "overlap": res["dataset_bytes"]}
    md = []
    fig, axes = plt.subplots(len(scens), 2, figsize=(11, 3.6 * len(scens)), squeeze=False)
    for row, scen in enumerate(scens):
        runs = {r["variant"]: r for r in res["runs"] if r["scenario"] == scen}
        vars_ = [v for v in ORDER if v in runs]
        njobs = len(next(iter(runs.values()))["jobs"])
        base = {v: [mean(job_epochs(j)) for j in runs[v]["jobs"]] for v in vars_}
        md.append("### %s (%d jobs)\n" % (scen, njobs))
        head = "| variant | " + " | ".join(
            "job %d (+%ss, %s ms/batch): epoch times (s)" % (k, j["start_s"], j["compute_ms"])
            for k, j in enumerate(runs[vars_[0]]["jobs"])) + " | mean epoch (s) | speed-up vs " + " / ".join(
            r for r in REFS if r in runs) + " | last job done (s) | device bytes / dataset | device bytes vs " + " / ".join(
            r for r in REFS if r in runs) + " |"
        md.append(head)
        md.append("|" + "---|" * (head.count("|") - 1))
        for v in vars_:
            r = runs[v]
            cells = []
            for j in r["jobs"]:
                cells.append(" / ".join("%.1f" % x for x in job_epochs(j)) or "failed")
            m = mean(base[v])

            def ratio(ref):
                if ref not in base:
                    return "-"
                return "%.2fx" % (mean(base[ref]) / m)

            def dev(ref):
                if ref not in runs or not r["device_bytes"]:
                    return "-"
                return "%.2f" % (r["device_bytes"] / float(runs[ref]["device_bytes"]))
            md.append("| %s%s | %s | %.1f | %s | %.1f | %.2f | %s |" % (
                NAMES[v], "" if r["ok"] else " (FAILED)", " | ".join(cells), m,
                " / ".join(ratio(x) for x in REFS if x in runs), r["wall_s"],
                r["device_bytes"] / float(union[scen]), " / ".join(dev(x) for x in REFS if x in runs)))
        md.append("")
        # Per job: the shim's disk bytes charged to the job whose request
        # loaded them. Plain PyTorch's jobs share one blkio group and their
        # rusage block counts added up to more than the group's total, so
        # they are not shown.
        md.append("Device bytes per job (over the job's dataset x epochs): bytes the coordinator loaded for "
                  "the job's requests; all jobs: the blkio group's total over what all jobs read.\n")
        md.append("| variant | " + " | ".join("job %d" % k for k in range(njobs)) + " | all jobs (blkio) |")
        md.append("|" + "---|" * (njobs + 2))
        for v in vars_:
            cells = []
            for j in runs[v]["jobs"]:
                rep = j["report"] or {"epochs": [], "files": 0}
                want = sum(e["bytes"] for e in rep["epochs"]) or 1
                if v.startswith("plain"):
                    cells.append("-")
                    continue
                got = (j["shim"] or {}).get("bytes_from_disk", 0)
                cells.append("%.2f" % (got / float(want)))
            want = sum(sum(e["bytes"] for e in (j["report"] or {"epochs": []})["epochs"]) for j in runs[v]["jobs"]) or 1
            md.append("| %s | %s | %.2f |" % (NAMES[v], " | ".join(cells), runs[v]["device_bytes"] / float(want)))
        md.append("")
        ax = axes[row][0]
        w = 0.8 / len(vars_)
        for i, v in enumerate(vars_):
            ax.bar([k + i * w for k in range(njobs)], base[v], w, label=NAMES[v])
        ax.set_xticks([k + 0.4 - w / 2 for k in range(njobs)])
        ax.set_xticklabels(["job %d\n+%ss, %s ms" % (k, j["start_s"], j["compute_ms"])
                            for k, j in enumerate(runs[vars_[0]]["jobs"])])
        ax.set_ylabel("mean epoch time (s)")
        ax.set_title("%s: %d jobs, per-job epoch time" % (scen, njobs))
        ax.set_ylim(0, max(max(b) for b in base.values()) * 1.4)
        ax.legend(fontsize=7, ncol=2, loc="upper left")
        ax = axes[row][1]
        ax.bar(range(len(vars_)), [runs[v]["device_bytes"] / 1e6 for v in vars_],
               color=["C%d" % i for i in range(len(vars_))])
        ax.set_xticks(range(len(vars_)))
        ax.set_xticklabels([v.replace("-", "\n") for v in vars_])
        ax.set_ylabel("MB read from the device (all jobs)")
        ax.set_title("%s: device bytes (dataset %d MB)" % (scen, union[scen] / 1e6))
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=80)
    open(sys.argv[3], "w").write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
