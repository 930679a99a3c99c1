#!/usr/bin/python3
"""Side-by-side table of the demo's two phases (scripts/demo.sh).

    demo_report.py OUT_DIR DATASET_BYTES
"""
import glob
import json
import os
import sys


def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def phase(out, name):
    d = os.path.join(out, name)
    jobs = []
    for rep in sorted(glob.glob(os.path.join(d, "job*.json"))):
        if rep.endswith(".stats.json"):
            continue
        r = load(rep)
        st = load(rep[:-5] + ".stats.json")
        jobs.append((os.path.basename(rep)[:-5], r, st))
    dev = int(open(os.path.join(d, "device_bytes")).read())
    wall = int(open(os.path.join(d, "wall_ms")).read()) / 1000
    coord = load(os.path.join(d, "coordinator.json"))
    return jobs, dev, wall, coord


def mib(b):
    return "%.0f MiB" % (b / 1048576)


def main():
    out, ds = sys.argv[1], int(sys.argv[2])
    plain, shim = phase(out, "plain"), phase(out, "dlshim")
    print()
    print("%-8s | %-28s | %-28s" % ("", "plain reads", "with dlshim"))
    print("-" * 70)
    for (name, rp, _), (_, rs, st) in zip(plain[0], shim[0]):
        ep_p = " ".join("%.1fs" % e["wall_s"] for e in rp["epochs"])
        ep_s = " ".join("%.1fs" % e["wall_s"] for e in rs["epochs"])
        hit = ""
        if st and st.get("requests"):
            # a wait is an open served by a load another job had started
            hit = " (%d%% from cache)" % round(100 * (st["hits"] + st["waits"]) / st["requests"])
        print("%-8s | epochs %-21s | epochs %s%s" % (name, ep_p, ep_s, hit))
    print("-" * 70)
    print("%-8s | %-28s | %-28s" % ("wall", "%.1f s" % plain[2], "%.1f s" % shim[2]))
    print("%-8s | %-28s | %-28s" % ("storage", "%s (%.1fx dataset)" % (mib(plain[1]), plain[1] / ds),
                                   "%s (%.1fx dataset)" % (mib(shim[1]), shim[1] / ds)))
    coord = shim[3]
    if coord:
        jobs = coord.get("jobs", [])
        req = sum(j["requests"] for j in jobs)
        hits = sum(j["hits"] + j["waits"] for j in jobs)
        if req:
            print("%-8s | %-28s | %d of %d opens (%.0f%%)" % ("cache", "-", hits, req, 100.0 * hits / req))
    saved = plain[1] - shim[1]
    print()
    print("dlshim saved %s of storage reads (%.0f%%) and %.1f s of wall time (%.2fx faster overall)."
          % (mib(max(saved, 0)), 100.0 * saved / max(plain[1], 1), plain[2] - shim[2], plain[2] / max(shim[2], 1e-9)))
    print("(reports and logs: %s)" % out)


if __name__ == "__main__":
    main()
