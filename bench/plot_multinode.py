#!/usr/bin/python3
"""Plot and summarise bench/results/multinode.json (bench_multinode.sh).

    plot_multinode.py RESULTS.json OUT.png OUT.md
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    res = json.load(open(sys.argv[1]))
    r = {x["name"]: x for x in res["runs"]}
    off, on = r["pf_off"], r["pf_on"]
    scale = [r[f"nodes{n}"] for n in (1, 2, 3)]
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    ax[0].bar(["prefetch off", f"prefetch {on['prefetch']}"], [off["remote_requests"], on["remote_requests"]],
              color=["#999", "#36c"])
    ax[0].set_ylabel("remote requests (3 nodes, 1 epoch)")
    ax[1].bar(["prefetch off", f"prefetch {on['prefetch']}"], [off["seconds"], on["seconds"]], color=["#999", "#36c"])
    ax[1].set_ylabel("epoch time, slowest node (s)")
    ax[2].plot([1, 2, 3], [s["files_per_s"] for s in scale], "o-", color="#36c")
    ax[2].set_xticks([1, 2, 3])
    ax[2].set_xlabel("nodes (one machine, TCP over veth)")
    ax[2].set_ylabel("files/s, whole cluster")
    ax[2].set_ylim(bottom=0)
    fig.suptitle(f"multi-node cache: {res['classes']}x{res['per_class']} files of ~{res['file_kb']} KB, redirect dir")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)
    base = scale[0]["files_per_s"]
    lines = [
        "| run | nodes | prefetch | epoch s | files/s (cluster) | vs 1 node | remote requests | prefetch received | prefetch hits |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for x in [off, on] + scale:
        lines.append(f"| {x['name']} | {x['nodes']} | {x['prefetch']} | {x['seconds']:.2f} | {x['files_per_s']:.0f} | "
                     f"{x['files_per_s'] / base:.2f}x | {x['remote_requests']} | {x['prefetch_received']} | "
                     f"{x['prefetch_hits']} |")
    lines.append("")
    lines.append(f"Prefetch cut remote requests {off['remote_requests'] / max(on['remote_requests'], 1):.1f}x "
                 f"({off['remote_requests']} -> {on['remote_requests']}); epoch time ratio off/on "
                 f"{off['seconds'] / on['seconds']:.2f}.")
    if res.get("ddp"):
        d = {x["name"]: x for x in res["ddp"]}
        lines += ["", "One DDP job, a rank on each of 3 nodes, one epoch:", "",
                  "| run | redirect | DLSHIM_JOB_SPAN | epoch s | samples/s | files repeated | claims | refused | remote requests |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for x in res["ddp"]:
            lines.append(f"| {x['name']} | {x['redirect']} | {x['span']} | {x['seconds']:.2f} | {x['samples_per_s']:.0f} | "
                         f"{x['repeats']} | {x['claims']} | {x['claims_refused']} | {x['remote_requests']} |")
        lines.append("")
        lines.append(f"Sharing the epoch (claims) vs each node alone: epoch time ratio "
                     f"{d['ddp_span']['seconds'] / d['ddp_alone']['seconds']:.2f}; vs exact "
                     f"{d['ddp_span']['seconds'] / d['ddp_exact']['seconds']:.2f}.")
    open(sys.argv[3], "w").write("\n".join(lines) + "\n")


main()
