#!/usr/bin/python3
"""Summarise bench/bench_core.sh's raw outputs.

    core_report.py RAW_DIR RESULTS_JSON BENCHMARKS_MD META_JSON

Writes RESULTS_JSON (small: the summary, not every sample), replaces the "## Core"
section of BENCHMARKS_MD (appending it, or creating the file, when absent; the
rest of the file is left as it is) and prints the summary.
"""
import json
import os
import platform
import statistics
import sys
import time

# Budgets from DESIGN.md ("Performance budgets").
BUDGET_UNROUTED_NS = 50
BUDGET_OFB_US = 20
BUDGET_COPY_GBPS = 2.0   # "at memory bandwidth (several GB/s)": the floor we check


def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def load_lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def unrouted(raw):
    """Rounds alternate plain/shim, so each shim round is paired with the plain
    round just before it: the median of the paired differences cancels slow drift.
    The spread of the plain rounds says how fine a difference the machine resolves."""
    plain, shim = load_lines(raw + "/a_plain.jsonl"), load_lines(raw + "/a_shim.jsonl")
    out = {}
    for op in ("pread_ns", "read_devzero_ns", "lseek_ns", "open_close_ns"):
        p = [r[op] for r in plain]
        s = [r[op] for r in shim]
        out[op[:-3]] = {"plain_ns": round(statistics.median(p), 1), "shim_ns": round(statistics.median(s), 1),
                        "added_ns": round(statistics.median(b - a for a, b in zip(p, s)), 1),
                        "noise_ns": round(max(p) - min(p), 1)}
    return out


def warm(passes, key):
    """Median over the warm passes (2..n) of one metric."""
    vals = [p[key] for p in passes[1:]] or [passes[0][key]]
    return round(statistics.median(vals), 3)


def hits(raw):
    plain, shim = load(raw + "/b_plain.json"), load(raw + "/b_shim.json")
    res = {}
    for name, r in (("page_cache", plain), ("dlshim", shim)):
        ps = r["passes"]
        res[name] = {k: warm(ps, k) for k in ("ofb_p50_us", "ofb_p90_us", "ofb_p99_us", "read_gbps", "file_gbps")}
        res[name]["first_pass"] = {k: ps[0][k] for k in ("ofb_p50_us", "read_gbps", "file_gbps")}
    sums = {p["checksum"] for r in (plain, shim) for p in r["passes"]}
    res["bytes_identical"] = len(sums) == 1
    st = load(raw + "/b_stats.json")
    if st and st.get("jobs"):
        j = st["jobs"][0]
        res["dlshim_stats"] = {k: j.get(k) for k in ("requests", "hits", "misses", "passthrough")}
    res["files"] = plain["files"]
    return res


def two_jobs(raw, dataset):
    rows = load_lines(raw + "/c.jsonl")
    res = {}
    for r in rows:
        res.setdefault(r["variant"], {})["job%d_disk_bytes" % r["job"]] = r["disk_bytes"]
    for v in res.values():
        for k in list(v):
            v[k.replace("bytes", "x_dataset")] = round(v[k] / dataset, 3)
    sums = set()
    for v in ("plain", "shim"):
        for j in (1, 2):
            r = load(raw + "/c_%s_%d.json" % (v, j))
            if r:
                sums.add(r["passes"][0]["checksum"])
    res["bytes_identical"] = len(sums) == 1
    st = load(raw + "/c_stats.json")
    if st and st.get("jobs"):
        res["dlshim_jobs"] = [{k: j.get(k) for k in ("requests", "hits", "misses", "bytes_from_disk")}
                              for j in st["jobs"]]
    return res


def mb(b):
    return "%.1f MB" % (b / 1e6)


def markdown(r):
    m, a, b, c = r["meta"], r["unrouted"], r["cache_hits"], r["two_jobs"]
    ok = lambda cond: "met" if cond else "**not met**"
    L = []
    L.append("## Core: `make bench-core`")
    L.append("")
    L.append("Reproduce: `make bench-core` (about 1.5 minutes; `BENCH_CALLS`, `BENCH_ROUNDS`, `BENCH_PASSES`,")
    L.append("`BENCH_CORE_FILES`, `BENCH_WORK` override the defaults). Driver: `bench/bench_core.c`, run with and")
    L.append("without `LD_PRELOAD`; results: `bench/results/core.json`. Last run: %s, %s, %d cores, kernel %s."
             % (m["date"], m["cpu"], m["cores"], m["kernel"]))
    L.append("")
    L.append("**(a) Unrouted calls** (a 4 KB file outside `DLSHIM_ROOTS`; %d alternating plain/shim rounds, each"
             " the best of 3 x %d calls; medians, and the median of the paired differences; noise = spread of"
             " the plain rounds):" % (m["rounds"], m["calls"]))
    L.append("")
    L.append("| call | plain | with the shim | added | noise | budget (< %d ns added) |" % BUDGET_UNROUTED_NS)
    L.append("|---|---|---|---|---|---|")
    names = {"pread": "`pread` 1 byte", "read_devzero": "`read` 1 byte of /dev/zero",
             "lseek": "`lseek`", "open_close": "`open` + `close`"}
    for op, v in a.items():
        L.append("| %s | %.0f ns | %.0f ns | %+.0f ns | %.0f ns | %s |"
                 % (names[op], v["plain_ns"], v["shim_ns"], v["added_ns"], v["noise_ns"],
                    ok(v["added_ns"] < BUDGET_UNROUTED_NS)))
    L.append("")
    L.append("**(b) Routed cache hits** (%d files of 100 KB, read whole in a shuffled order; median of the warm"
             " passes; the baseline is the same loop on a warm page cache):" % b["files"])
    L.append("")
    L.append("| | page cache | dlshim hit | budget |")
    L.append("|---|---|---|---|")
    pc, sh = b["page_cache"], b["dlshim"]
    L.append("| open-to-first-byte (open + 4 KB), p50 / p90 / p99 | %.1f / %.1f / %.1f µs | %.1f / %.1f / %.1f µs | < %d µs: %s |"
             % (pc["ofb_p50_us"], pc["ofb_p90_us"], pc["ofb_p99_us"], sh["ofb_p50_us"], sh["ofb_p90_us"],
                sh["ofb_p99_us"], BUDGET_OFB_US, ok(sh["ofb_p50_us"] < BUDGET_OFB_US)))
    L.append("| copy bandwidth (bytes / time in `read`) | %.2f GB/s | %.2f GB/s | several GB/s: %s |"
             % (pc["read_gbps"], sh["read_gbps"], ok(sh["read_gbps"] >= BUDGET_COPY_GBPS)))
    L.append("| whole-file throughput (open to close) | %.2f GB/s | %.2f GB/s | |" % (pc["file_gbps"], sh["file_gbps"]))
    L.append("| first pass (shim: misses, loaded by the coordinator) | %.1f µs, %.2f GB/s | %.1f µs, %.2f GB/s | |"
             % (pc["first_pass"]["ofb_p50_us"], pc["first_pass"]["file_gbps"],
                sh["first_pass"]["ofb_p50_us"], sh["first_pass"]["file_gbps"]))
    L.append("")
    st = b.get("dlshim_stats")
    L.append("Every pass, with and without the shim, read identical bytes: %s%s."
             % ("yes" if b["bytes_identical"] else "**NO**",
                (" (coordinator: %d opens, %d hits, %d misses)" % (st["requests"], st["hits"], st["misses"])) if st else ""))
    L.append("")
    L.append("**(c) Two jobs, one after the other** (%s dataset, page cache dropped before each job, disk reads"
             " counted by %s on `%s`):" % (mb(m["dataset_bytes"]), m["disk_method"], m["device"] or "-"))
    L.append("")
    L.append("| | job 1 from disk | job 2 from disk |")
    L.append("|---|---|---|")
    for v, label in (("plain", "plain reads"), ("shim", "dlshim")):
        if v in c:
            L.append("| %s | %s (%.2fx dataset) | %s (%.2fx dataset) |"
                     % (label, mb(c[v]["job1_disk_bytes"]), c[v]["job1_disk_x_dataset"],
                        mb(c[v]["job2_disk_bytes"]), c[v]["job2_disk_x_dataset"]))
    L.append("")
    L.append("Dropping the page cache does not touch the shim's cache (shared memory owned by the coordinator),"
             " so the second job's files come from memory. All four jobs read identical bytes: %s."
             % ("yes" if c["bytes_identical"] else "**NO**"))
    L.append("")
    return "\n".join(L)


def update_md(path, section):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        lines = ["# Benchmarks", ""]
    start = next((i for i, l in enumerate(lines) if l.startswith("## Core")), None)
    if start is None:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", section.rstrip("\n")]
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = section.rstrip("\n").split("\n") + ([""] if end < len(lines) else [])
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")
    os.replace(tmp, path)


def main():
    raw, out_json, md, meta = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    meta.update(date=time.strftime("%Y-%m-%d"), cpu=cpu_model(), cores=os.cpu_count(),
                kernel=platform.release())
    r = {"meta": meta, "unrouted": unrouted(raw), "cache_hits": hits(raw),
         "two_jobs": two_jobs(raw, meta["dataset_bytes"])}
    tmp = out_json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(r, f, indent=1)
        f.write("\n")
    os.replace(tmp, out_json)
    section = markdown(r)
    update_md(md, section)
    print(section)
    print("results: %s; section \"Core\" of %s" % (out_json, md))
    if not (r["cache_hits"]["bytes_identical"] and r["two_jobs"]["bytes_identical"]):
        print("bench-core: ERROR: runs read different bytes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
