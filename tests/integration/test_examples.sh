#!/usr/bin/env bash
# The user-facing examples and CLI outputs, small sizes:
#   * examples/threaded_reader.c: builds with strict warnings, runs 2 epochs
#     under `dlshim run`; its per-file digests and its combined checksum match
#     sha256 computed here from the files on disk; the second epoch hits.
#   * dlshim stats --prometheus: exposition-format syntax (HELP/TYPE, one
#     contiguous family each, `name{labels} value`), values equal to
#     stats --json; up 0 and exit 3 without a coordinator; --from on a
#     cut-short JSON keeps only complete jobs/epochs with exact values.
#   * dlshim stats (human): redirects/epochs/io eff columns; --epochs tables.
#   * dlshim top --count 2: two plain-text frames (no ANSI when not a tty)
#     showing a running job's opens/s and cache MB/s.
#   * examples/multi_job.sh, K=2: both jobs train on every sample with the
#     same loss as a run without the shim; the second is served from cache.
#   * examples/ddp_run.sh, 2 ranks x 1 epoch: exits 0, the ranks consumed
#     disjoint halves covering the dataset with the right bytes, and the
#     coordinator lists exactly one job, ddp-<TORCHELASTIC_RUN_ID>.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dl_setup examples
EX=$DL_REPO/examples
export DLSHIM_IDLE_EXIT=60 # stats are read after the clients exit; cleanup stops it

# py_checks SCRIPT ARGS...: run a Python check script (stdin) that prints
# "ok MSG" / "FAIL MSG" lines; each becomes one check.
py_checks() {
	local line out
	out=$("$DL_PY" - "$@" 2>&1)
	[ -n "$out" ] || { dl_fail "python checks produced no output"; return; }
	while IFS= read -r line; do
		case $line in
		ok\ *) dl_ok "${line#ok }" ;;
		FAIL\ *) dl_fail "${line#FAIL }" ;;
		*) dl_fail "python: $line" ;;
		esac
	done <<<"$out"
}

DATA=$DL_TMP/files
dl_make_random_files "$DATA/a" 40 0 200000 31
dl_make_random_files "$DATA/b" 8 1000000 1200000 32
dl_manifest "$DATA" "$DL_TMP/manifest"
find "$DATA" -type f | sort >"$DL_TMP/list"
NFILES=$(wc -l <"$DL_TMP/list")
TOTAL=$(find "$DATA" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
dl_info "$NFILES files, $TOTAL bytes"

dl_section "examples/threaded_reader.c"
TR=$DL_TMP/threaded_reader
dl_check "builds with -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes" \
	cc -O2 -pthread -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -o "$TR" "$EX/threaded_reader.c"
DLSHIM_ROOTS=$DATA DLSHIM_JOB=reader dl_cli run -- "$TR" -t 4 -e 2 -c 65536 -v <"$DL_TMP/list" >"$DL_TMP/tr.out" 2>"$DL_TMP/tr.err"
rc=$?
[ $rc -eq 0 ] && dl_ok "reader exits 0 under dlshim run" || { dl_fail "reader exits 0 under dlshim run (got $rc)"; dl_show "$DL_TMP/tr.err"; }
[ ! -s "$DL_TMP/tr.err" ] && dl_ok "reader: nothing on stderr" || { dl_fail "reader: nothing on stderr"; dl_show "$DL_TMP/tr.err"; }
grep -E '^[0-9a-f]{64}  /' "$DL_TMP/tr.out" >"$DL_TMP/tr.files"
if probs=$(dl_check_hashes "$DL_TMP/tr.files" "$DL_TMP/manifest"); then
	dl_ok "reader -v: every file's sha256 equals sha256sum of the file on disk"
else
	dl_fail "reader -v: every file's sha256 equals sha256sum of the file on disk"
	printf '%s\n' "$probs" | head -n 10 | sed 's/^/        | /'
fi
py_checks "$DL_TMP/tr.out" "$DL_TMP/list" "$TOTAL" <<'EOF'
import hashlib, re, sys
out = open(sys.argv[1]).read()
paths = [l.rstrip("\n") for l in open(sys.argv[2]) if l.strip()]
total = int(sys.argv[3])
def ok(c, m): print(("ok " if c else "FAIL ") + m)
text = "".join("%s  %s\n" % (hashlib.sha256(open(p, "rb").read()).hexdigest(), p) for p in paths)
want = hashlib.sha256(text.encode()).hexdigest()
m = re.search(r"^checksum ([0-9a-f]{64})$", out, re.M)
ok(m is not None and m.group(1) == want,
   "reader checksum = sha256 of the sha256sum listing computed here (%s vs %s)" % (m and m.group(1), want))
eps = re.findall(r"^epoch (\d+): (\d+) files, (\d+) bytes", out, re.M)
ok([e[0] for e in eps] == ["1", "2"], "reader printed two epoch lines")
ok(all(int(e[1]) == len(paths) and int(e[2]) == total for e in eps),
   "each epoch read all %d files and %d bytes: %s" % (len(paths), total, eps))
EOF
dl_stats_json >"$DL_TMP/stats.json"
py_checks "$DL_TMP/stats.json" "$NFILES" <<'EOF'
import json, sys
def ok(c, m): print(("ok " if c else "FAIL ") + m)
n = int(sys.argv[2])
j = {x["job"]: x for x in json.load(open(sys.argv[1]))["jobs"]}
r = j.get("reader", {})
ok(r.get("requests") == 2 * n, "coordinator: job 'reader' made %d routed opens (got %s)" % (2 * n, r.get("requests")))
ok(r.get("hits", 0) >= n, "coordinator: the second epoch hit the cache (hits %s >= %d)" % (r.get("hits"), n))
EOF

dl_section "dlshim stats --prometheus"
dl_stats_json >"$DL_TMP/s1.json"
dl_cli stats --prometheus >"$DL_TMP/prom.txt" 2>"$DL_TMP/prom.err"
rc=$?
[ $rc -eq 0 ] && dl_ok "stats --prometheus exits 0" || { dl_fail "stats --prometheus exits 0 (got $rc)"; dl_show "$DL_TMP/prom.err"; }
dl_stats_json >"$DL_TMP/s2.json"
cat >"$DL_TMP/promcheck.py" <<'EOF'
import json, re, sys
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(r"^(%s)(\{%s(?:,%s)*\})? (-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]Inf|NaN)$" % (NAME, LABEL, LABEL))
LABELS = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

def parse(text):
    """Strict text-format parse: returns ({(name, labels): value}, problems)."""
    samples, types, probs, done, cur = {}, {}, [], set(), None
    for i, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        if line.startswith("#"):
            m = re.match(r"^# (HELP|TYPE) (%s) (.+)$" % NAME, line)
            if not m:
                probs.append("line %d: bad comment %r" % (i, line))
                continue
            if m.group(1) == "TYPE":
                if m.group(3) not in ("counter", "gauge"):
                    probs.append("line %d: bad type %r" % (i, line))
                if m.group(2) in types:
                    probs.append("line %d: second TYPE for %s" % (i, m.group(2)))
                types[m.group(2)] = m.group(3)
            continue
        m = SAMPLE.match(line)
        if not m:
            probs.append("line %d: not `name{labels} value`: %r" % (i, line))
            continue
        name = m.group(1)
        if name not in types:
            probs.append("line %d: %s has no TYPE line before it" % (i, name))
        if name != cur:
            if name in done:
                probs.append("line %d: family %s is not contiguous" % (i, name))
            if cur:
                done.add(cur)
            cur = name
        if types.get(name) == "counter" and not name.endswith("_total"):
            probs.append("line %d: counter %s does not end in _total" % (i, name))
        labels = tuple(sorted(LABELS.findall(m.group(2) or "")))
        if (name, labels) in samples:
            probs.append("line %d: duplicate sample %s%s" % (i, name, labels))
        samples[(name, labels)] = float(m.group(3))
    return samples, probs

JOB = {"requests": "dlshim_job_requests_total", "hits": "dlshim_job_hits_total",
       "misses": "dlshim_job_misses_total", "bytes_from_cache": "dlshim_job_bytes_from_cache_total",
       "bytes_from_disk": "dlshim_job_bytes_from_disk_total", "redirects": "dlshim_job_redirects_total",
       "epochs": "dlshim_job_epochs", "waits": "dlshim_job_waits_total", "io_efficiency": "dlshim_job_io_efficiency"}
CACHE = {"capacity_bytes": "dlshim_cache_capacity_bytes", "used_bytes": "dlshim_cache_used_bytes",
         "items_resident": "dlshim_cache_items_resident", "evictions": "dlshim_cache_evictions_total",
         "waste_bytes": "dlshim_cache_waste_bytes_total", "loads": "dlshim_cache_loads_total"}
EPOCH = {"requests": "dlshim_job_epoch_requests_total", "bytes_from_disk": "dlshim_job_epoch_bytes_from_disk_total",
         "waste_bytes": "dlshim_job_epoch_waste_bytes_total", "bytes_consumed": "dlshim_job_epoch_bytes_consumed_total"}

def compare(samples, j, only_jobs=None):
    """Problems where the samples disagree with the JSON document j."""
    probs = []
    def want(name, labels, v):
        got = samples.get((name, labels))
        if got is None or abs(got - float(v)) > 1e-9 * max(1.0, abs(float(v))):
            probs.append("%s%s = %s, JSON says %s" % (name, dict(labels), got, v))
    for k, name in CACHE.items():
        want(name, (), j["cache"][k])
    jobs = [x for x in j["jobs"] if only_jobs is None or x["job"] in only_jobs]
    for x in jobs:
        lab = (("job", x["job"]),)
        for k, name in JOB.items():
            want(name, lab, x[k])
        want("dlshim_job_live", lab, 1 if x["live"] else 0)
        for e in x["per_epoch"]:
            el = tuple(sorted([("epoch", str(e["epoch"])), ("job", x["job"])]))
            for k, name in EPOCH.items():
                want(name, el, e[k])
    names = {dict(l).get("job") for (n, l) in samples if n == "dlshim_job_requests_total"}
    exp = {x["job"] for x in jobs}
    if names != exp:
        probs.append("jobs in the exposition %s != JSON %s" % (sorted(names), sorted(exp)))
    nep = sum(len(x["per_epoch"]) for x in jobs)
    got_ep = sum(1 for (n, l) in samples if n == "dlshim_job_epoch_requests_total")
    if got_ep != nep:
        probs.append("%d per-epoch samples, JSON has %d epochs" % (got_ep, nep))
    return probs
EOF
py_checks "$DL_TMP/promcheck.py" "$DL_TMP/prom.txt" "$DL_TMP/s1.json" "$DL_TMP/s2.json" <<'EOF'
import json, sys
sys.path.insert(0, ".")
exec(open(sys.argv[1]).read())
def ok(c, m, probs=()):
    print(("ok " if c else "FAIL ") + m + ("" if c else ": " + "; ".join(list(probs)[:5])))
text = open(sys.argv[2]).read()
samples, probs = parse(text)
ok(not probs and len(samples) > 20, "every line is a HELP/TYPE comment or `name{labels} value` (%d samples)" % len(samples), probs)
ok(samples.get(("dlshim_coordinator_up", ())) == 1.0, "dlshim_coordinator_up 1")
j1, j2 = json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
strip = lambda j: {k: v for k, v in j.items() if k != "daemon"}
ok(strip(j1) == strip(j2), "the coordinator was idle during the check (JSON before == after)")
p = compare(samples, j2)
ok(not p, "every job, epoch and cache metric equals stats --json (%d jobs)" % len(j2["jobs"]), p)
ok(any(n == "dlshim_job_hits_total" and v > 0 for (n, l), v in samples.items()), "a job has hits > 0 in the exposition")
EOF

dl_section "stats --from a cut-short JSON (the coordinator caps its reply)"
py_checks "$DL_TMP/promcheck.py" "$DL_TMP/s2.json" "$DL_CLI" "$DL_TMP" <<'EOF'
import json, subprocess, sys
exec(open(sys.argv[1]).read())
def ok(c, m, probs=()):
    print(("ok " if c else "FAIL ") + m + ("" if c else ": " + "; ".join(list(probs)[:5])))
full_text = open(sys.argv[2]).read()
full = json.loads(full_text)
cli, tmp = sys.argv[3], sys.argv[4]
# cut inside the cache object, inside a job's counters, inside per_epoch, at the end
i_job = full_text.index('"job":"reader"') + 40
i_ep = full_text.index('"per_epoch":[') + 30
cuts = sorted({i_job, i_ep, len(full_text) - 8, len(full_text) // 2, full_text.index('"cache"') + 300})
bad = []
for cut in cuts:
    path = "%s/cut%d.json" % (tmp, cut)
    open(path, "w").write(full_text[:cut])
    p = subprocess.run([cli, "stats", "--from", path, "--prometheus"], capture_output=True, text=True)
    samples, probs = parse(p.stdout)
    if p.returncode != 0 or probs or "ends early" not in p.stderr:
        bad.append("cut %d: rc %d, %s, stderr %r" % (cut, p.returncode, probs[:2], p.stderr[:120]))
        continue
    # what is shown must be exact: jobs (and epochs) listed are complete ones of the full document
    jobs = {dict(l)["job"] for (n, l) in samples if n == "dlshim_job_requests_total"}
    for x in full["jobs"]:
        if x["job"] in jobs:
            for k, name in JOB.items():
                if samples.get((name, (("job", x["job"]),))) != float(x[k]):
                    bad.append("cut %d: %s of %s wrong" % (cut, name, x["job"]))
    for (n, l), v in samples.items():
        if n == "dlshim_job_epoch_requests_total":
            d = dict(l)
            e = [e for x in full["jobs"] if x["job"] == d["job"] for e in x["per_epoch"] if str(e["epoch"]) == d["epoch"]]
            if not e or float(e[0]["requests"]) != v:
                bad.append("cut %d: epoch sample %s wrong" % (cut, d))
ok(not bad, "%d cut points: valid exposition, a warning, and only exact values" % len(cuts), bad)
p = subprocess.run([cli, "stats", "--from", sys.argv[2], "--prometheus"], capture_output=True, text=True)
samples, probs = parse(p.stdout)
ok(p.returncode == 0 and not probs and not p.stderr and not compare(samples, full),
   "--from the full JSON: same exposition as the live coordinator, no warning", probs + compare(samples, full))
open(tmp + "/garbage.json", "w").write('{"daemon": nope}')
p = subprocess.run([cli, "stats", "--from", tmp + "/garbage.json"], capture_output=True, text=True)
ok(p.returncode == 1 and "could not parse" in p.stderr, "--from non-JSON: exit 1 with a message (rc %d)" % p.returncode)
EOF

dl_section "dlshim stats (human) and --epochs"
dl_cli stats >"$DL_TMP/human.txt" 2>&1
dl_cli stats --epochs >"$DL_TMP/human_ep.txt" 2>&1
rc=$?
py_checks "$DL_TMP/human.txt" "$DL_TMP/human_ep.txt" "$DL_TMP/s2.json" "$rc" <<'EOF'
import json, sys
def ok(c, m): print(("ok " if c else "FAIL ") + m)
h, he = open(sys.argv[1]).read().splitlines(), open(sys.argv[2]).read().splitlines()
j = json.load(open(sys.argv[3]))
hdr = h[0].split() if h else []
ok(hdr[:1] == ["job"] and "redirects" in hdr and "epochs" in hdr and h[0].rstrip().endswith("io eff"),
   "header has redirects, epochs and io eff columns: %r" % (h[:1],))
rows = {l.split()[0]: l.split() for l in h[1:] if l.strip()}
good = True
for x in j["jobs"]:
    r = rows.get(x["job"])
    eff = "%.2f" % x["io_efficiency"] if x["bytes_from_disk"] else "-"
    if not r or r[2] != str(x["requests"]) or r[3] != str(x["hits"]) or r[-3] != str(x["redirects"]) \
            or r[-2] != str(x["epochs"]) or r[-1] != eff:
        good = False
        print("FAIL row of %s: %r (JSON requests %d hits %d redirects %d epochs %d eff %s)"
              % (x["job"], r, x["requests"], x["hits"], x["redirects"], x["epochs"], eff))
ok(good and len(rows) == len(j["jobs"]), "one row per job with requests, hits, redirects, epochs, io eff as in JSON")
ok(sys.argv[4] == "0" and he[:len(h)] == h, "stats --epochs exits 0 and starts with the same table")
for x in j["jobs"]:
    try:
        k = he.index("epochs of %s:" % x["job"])
    except ValueError:
        ok(False, "--epochs has a table for %s" % x["job"])
        continue
    body = []
    for l in he[k + 2:]:
        if not l.strip():
            break
        body.append(l.split())
    want = [str(e["epoch"]) for e in x["per_epoch"]]
    ok([b[0] for b in body] == want and all(b[2] == str(e["requests"]) for b, e in zip(body, x["per_epoch"])),
       "--epochs table of %s: epochs %s with their requests" % (x["job"], want))
EOF

dl_section "dlshim top --count 2"
touch "$DL_TMP/go"
DLSHIM_ROOTS=$DATA DLSHIM_JOB=top-job dl_cli run -- sh -c 'while [ -e "$1" ]; do "$2" -t 2 -s 0 <"$3" >/dev/null || exit 1; done' sh \
	"$DL_TMP/go" "$TR" "$DL_TMP/list" 2>"$DL_TMP/loop.err" &
LOOP=$!
DL_BG_PIDS+=($LOOP)
sleep 0.3
dl_cli top --interval 0.5 --count 2 >"$DL_TMP/top.txt" 2>"$DL_TMP/top.err"
rc=$?
rm -f "$DL_TMP/go"
wait $LOOP
lrc=$?
DL_BG_PIDS=() # reaped
[ $rc -eq 0 ] && dl_ok "top --count 2 exits 0" || { dl_fail "top --count 2 exits 0 (got $rc)"; dl_show "$DL_TMP/top.err"; }
[ $lrc -eq 0 ] && dl_ok "the reader loop behind top succeeded" || { dl_fail "the reader loop behind top succeeded (rc $lrc)"; dl_show "$DL_TMP/loop.err"; }
py_checks "$DL_TMP/top.txt" <<'EOF'
import sys
def ok(c, m): print(("ok " if c else "FAIL ") + m)
t = open(sys.argv[1]).read()
frames = [l for l in t.splitlines() if l.startswith("dlshim top ")]
ok(len(frames) == 2, "two frames (got %d)" % len(frames))
ok("\x1b" not in t, "no ANSI escapes when stdout is not a tty")
rows = [l.split() for l in t.splitlines() if l.startswith("top-job ")]
ok(len(rows) >= 1, "the running job top-job is shown (%d rows)" % len(rows))
ok(any(float(r[2]) > 0 and r[3].endswith("%") and float(r[4]) > 0 for r in rows),
   "top-job has opens/s > 0, a hit rate and cache MB/s > 0: %s" % rows)
EOF
dl_show "$DL_TMP/top.txt" 12

dl_section "no coordinator: stats --prometheus and top"
dl_new_runtime_dir
dl_cli stats --prometheus >"$DL_TMP/prom0.txt" 2>/dev/null
rc=$?
[ $rc -eq 3 ] && grep -qx 'dlshim_coordinator_up 0' "$DL_TMP/prom0.txt" && dl_ok "stats --prometheus: exit 3 and dlshim_coordinator_up 0" ||
	{ dl_fail "stats --prometheus: exit 3 and dlshim_coordinator_up 0 (rc $rc)"; dl_show "$DL_TMP/prom0.txt"; }
dl_cli top --count 1 --interval 0.1 >/dev/null 2>&1
rc=$?
[ $rc -eq 3 ] && dl_ok "top exits 3 without a coordinator" || dl_fail "top exits 3 without a coordinator (got $rc)"
dl_cli top --count x >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] && dl_ok "top --count x is a usage error (2)" || dl_fail "top --count x is a usage error (got $rc)"

dl_section "examples/multi_job.sh, K=2"
IMG=$DL_TMP/img
dl_make_imagefolder "$IMG" 2 16
dl_manifest "$IMG" "$DL_TMP/img.manifest"
NIMG=$(wc -l <"$DL_TMP/img.manifest")
"$DL_PY" "$EX/train_imagefolder.py" --data "$IMG" --epochs 1 --workers 1 --report "$DL_TMP/plain.json" >"$DL_TMP/plain.log" 2>&1 ||
	{ dl_fail "reference run without the shim"; dl_show "$DL_TMP/plain.log"; }
dl_new_runtime_dir
timeout 120 "$EX/multi_job.sh" -k 2 -s 1 -c 5 -e 1 -w 1 -o "$DL_TMP/mj" -p mj "$IMG" >"$DL_TMP/mj.log" 2>&1
rc=$?
[ $rc -eq 0 ] && dl_ok "multi_job.sh exits 0" || { dl_fail "multi_job.sh exits 0 (got $rc)"; tail -n 30 "$DL_TMP/mj.log"; }
grep -q '^mj-2 ' "$DL_TMP/mj.log" && grep -q 'redirects' "$DL_TMP/mj.log" && dl_ok "multi_job.sh prints dlshim stats" || dl_fail "multi_job.sh prints dlshim stats"
dl_stats_json >"$DL_TMP/mj.json"
py_checks "$DL_TMP/mj" "$DL_TMP/mj.json" "$DL_TMP/plain.json" "$NIMG" "$IMG" <<'EOF'
import json, os, sys
def ok(c, m): print(("ok " if c else "FAIL ") + m)
out, n, img = sys.argv[1], int(sys.argv[4]), sys.argv[5]
plain = json.load(open(sys.argv[3]))["epochs"][0]
size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(img) for f in fs)
jobs = {x["job"]: x for x in json.load(open(sys.argv[2]))["jobs"]}
for k in (1, 2):
    try:
        r = json.load(open("%s/mj-%d.json" % (out, k)))
    except Exception as e:
        ok(False, "mj-%d wrote its report (%s)" % (k, e))
        continue
    ep = r["epochs"][0]
    ok(r["dlshim_preloaded"] and ep["samples"] == n, "mj-%d ran under the shim and trained on all %d samples (got %d)" % (k, n, ep["samples"]))
    # same seed, same order, same model: identical loss/accuracy iff every decoded image was identical
    ok((ep["loss"], ep["accuracy"]) == (plain["loss"], plain["accuracy"]),
       "mj-%d loss/accuracy %s equal the run without the shim %s" % (k, (ep["loss"], ep["accuracy"]), (plain["loss"], plain["accuracy"])))
    x = jobs.get("mj-%d" % k, {})
    ok(x.get("requests") == n, "coordinator: mj-%d made %d routed opens (got %s)" % (k, n, x.get("requests")))
    ok(x.get("bytes_from_cache") == size, "coordinator: mj-%d copied the whole dataset out of the cache (%s of %d bytes)" % (k, x.get("bytes_from_cache"), size))
ok(sum(x.get("hits", 0) for x in jobs.values()) > 0, "coordinator stats show hits > 0 (%s)" % {k: v.get("hits") for k, v in jobs.items()})
ok(jobs.get("mj-2", {}).get("bytes_from_disk", -1) < size, "mj-2 read less than the dataset from disk (%s < %d)" % (jobs.get("mj-2", {}).get("bytes_from_disk"), size))
EOF

dl_section "examples/ddp_run.sh, 2 ranks x 1 epoch"
dl_new_runtime_dir
timeout 150 "$EX/ddp_run.sh" -n 2 "$IMG" --epochs 1 --workers 1 --batch-size 8 --record "$DL_TMP/ddp" >"$DL_TMP/ddp.log" 2>&1
rc=$?
[ $rc -eq 0 ] && dl_ok "ddp_run.sh exits 0" || { dl_fail "ddp_run.sh exits 0 (got $rc)"; tail -n 30 "$DL_TMP/ddp.log"; }
! grep -q '^dlshim: warning' "$DL_TMP/ddp.log" && dl_ok "no dlshim warning during the DDP run" || { dl_fail "no dlshim warning during the DDP run"; grep '^dlshim: warning' "$DL_TMP/ddp.log" | head -5; }
dl_stats_json >"$DL_TMP/ddp.json"
py_checks "$DL_TMP/ddp" "$DL_TMP/ddp.json" "$DL_TMP/img.manifest" <<'EOF'
import json, sys
def ok(c, m): print(("ok " if c else "FAIL ") + m)
man = dict(reversed(l.rstrip("\n").split("  ", 1)) for l in open(sys.argv[3]) if l.strip())
n = len(man)
recs = []
for r in (0, 1):
    try:
        recs.append(json.load(open("%s/rank%d.json" % (sys.argv[1], r))))
    except Exception as e:
        ok(False, "rank %d wrote its record (%s)" % (r, e))
if len(recs) == 2:
    a, b = (set(x["epochs"][0]["indices"]) for x in recs)
    ok(len(a) == len(b) == n // 2, "each rank consumed %d distinct samples (%d, %d)" % (n // 2, len(a), len(b)))
    ok(not a & b, "the ranks' samples are disjoint (%d shared)" % len(a & b))
    ok(a | b == set(range(n)), "together they cover all %d samples" % n)
    bad = [p for x in recs for p, h in zip(x["epochs"][0]["paths"], x["epochs"][0]["sha256"]) if man.get(p) != h]
    ok(not bad and sum(len(x["epochs"][0]["paths"]) for x in recs) == n,
       "every sample's bytes (sha256 in the rank) equal the file on disk (%d wrong)" % len(bad))
    names = {x["dlshim_job"] for x in recs}
    rid = recs[0]["torchelastic_run_id"]
    ok(names == {"ddp-%s" % rid}, "both ranks ran in job ddp-<TORCHELASTIC_RUN_ID> (%s, run id %s)" % (names, rid))
jobs = json.load(open(sys.argv[2]))["jobs"]
ok(len(jobs) == 1 and jobs[0]["job"].startswith("ddp-"), "stats --json lists exactly one job, named ddp-*: %s" % [x["job"] for x in jobs])
if len(jobs) == 1 and recs:
    ok(jobs[0]["job"] == recs[0]["dlshim_job"], "that job is the ranks' job")
    ok(jobs[0]["requests"] == n, "the job made %d routed opens for %d files (one epoch across both ranks)" % (jobs[0]["requests"], n))
EOF

dl_finish
