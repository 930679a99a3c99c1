#!/usr/bin/env bash
# The dlshim CLI (docs/interfaces.md): status exit codes 0/3, `run [--] CMD`
# routes through the shim, stats (human and --json), stop, idle exit.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dl_setup cli

DATA=$DL_TMP/data
dl_make_random_files "$DATA" 20 1000 200000 11
dl_manifest "$DATA" "$DL_TMP/manifest"
export DLSHIM_ROOTS=$DATA
# the status checks below must happen while the coordinator is still up
export DLSHIM_IDLE_EXIT=60
mapfile -t FILES < <(find "$DATA" -type f | sort)

dl_section "before any client: no coordinator"
dl_cli status >"$DL_TMP/st0" 2>&1
rc=$?
[ "$rc" -eq 3 ] && dl_ok "dlshim status exits 3 with no coordinator" || { dl_fail "dlshim status exits 3 with no coordinator (got $rc)"; dl_show "$DL_TMP/st0"; }
dl_cli stop >/dev/null 2>&1
rc=$?
[ "$rc" -eq 0 ] && dl_ok "dlshim stop exits 0 when none runs" || dl_fail "dlshim stop exits 0 when none runs (got $rc)"

dl_section "dlshim run -- cat FILE"
dl_cli run -- cat "${FILES[0]}" >"$DL_TMP/out0" 2>"$DL_TMP/err0"
rc=$?
[ "$rc" -eq 0 ] && dl_ok "run -- cat exits 0" || { dl_fail "run -- cat exits 0 (got $rc)"; dl_show "$DL_TMP/err0"; }
cmp -s "$DL_TMP/out0" "${FILES[0]}" && dl_ok "cat under dlshim run printed the file's exact bytes" || dl_fail "cat under dlshim run printed the file's exact bytes"
[ ! -s "$DL_TMP/err0" ] && dl_ok "no stderr output from a healthy run" || { dl_fail "no stderr output from a healthy run"; dl_show "$DL_TMP/err0"; }

dl_cli run cat "${FILES[1]}" >"$DL_TMP/out1" 2>"$DL_TMP/err1"
rc=$?
[ "$rc" -eq 0 ] && cmp -s "$DL_TMP/out1" "${FILES[1]}" && dl_ok "run CMD (without --) works and gives exact bytes" || { dl_fail "run CMD (without --) works and gives exact bytes (rc $rc)"; dl_show "$DL_TMP/err1"; }

dl_cli run -- sha256sum "${FILES[@]}" >"$DL_TMP/sums" 2>"$DL_TMP/err2"
rc=$?
[ "$rc" -eq 0 ] && cmp -s "$DL_TMP/sums" "$DL_TMP/manifest" && dl_ok "run -- sha256sum of all ${#FILES[@]} files matches the manifest" || { dl_fail "run -- sha256sum of all ${#FILES[@]} files matches the manifest (rc $rc)"; diff "$DL_TMP/sums" "$DL_TMP/manifest" | head; dl_show "$DL_TMP/err2"; }

pre=$(dl_cli run -- sh -c 'printf %s "$LD_PRELOAD"')
case $pre in
*libdlshim.so*) [ "$(readlink -f "${pre%%:*}")" = "$(readlink -f "$DL_LIB")" ] && dl_ok "run sets LD_PRELOAD to this build's library ($pre)" || dl_fail "run sets LD_PRELOAD to this build's library (got '$pre')" ;;
*) dl_fail "run sets LD_PRELOAD to this build's library (got '$pre')" ;;
esac
dl_cli run -- sh -c 'exit 7'
rc=$?
[ "$rc" -eq 7 ] && dl_ok "run propagates the command's exit status (7)" || dl_fail "run propagates the command's exit status (expected 7, got $rc)"

DLSHIM_JOB=cli-named-job dl_cli run -- cat "${FILES[2]}" >/dev/null 2>&1

dl_section "dlshim status / stats while the coordinator runs"
dl_cli status >"$DL_TMP/st1" 2>&1
rc=$?
[ "$rc" -eq 0 ] && dl_ok "dlshim status exits 0 while the coordinator runs" || { dl_fail "dlshim status exits 0 while the coordinator runs (got $rc)"; dl_show "$DL_TMP/st1"; }
[ -s "$DL_TMP/st1" ] && dl_ok "dlshim status prints a summary" || dl_fail "dlshim status prints a summary"

if dl_stats_json >"$DL_TMP/stats.json" 2>"$DL_TMP/stats.err"; then
	dl_ok "dlshim stats --json exits 0"
else
	dl_fail "dlshim stats --json exits 0"
	dl_show "$DL_TMP/stats.err"
fi
# schema + values, checked in one Python pass; prints one ok/FAIL line per check
"$DL_PY" - "$DL_TMP/stats.json" "${#FILES[@]}" <<'EOF' >"$DL_TMP/schema.out"
import json, sys, os
ok = lambda c, m: print(("ok " if c else "FAIL ") + m)
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    ok(False, "stats --json is valid JSON (%s)" % e)
    sys.exit(0)
ok(True, "stats --json is valid JSON")
nfiles = int(sys.argv[2])
d, c, jobs = j.get("daemon", {}), j.get("cache", {}), j.get("jobs", [])
ok(all(isinstance(d.get(k), int) for k in ("pid", "uptime_s", "sessions")) and "segment_id" in d,
   "daemon has pid, uptime_s, sessions, segment_id")
ok(all(isinstance(c.get(k), int) for k in ("capacity_bytes", "used_bytes", "items_resident", "items_pinned",
                                           "items_known", "loads", "evictions", "stale_reloads")),
   "cache has every documented integer field")
jf = ("requests", "hits", "misses", "waits", "passthrough", "bytes_from_cache", "bytes_from_disk",
      "bytes_passthrough", "epochs", "files_loaded", "evictions", "sessions")
ok(isinstance(jobs, list) and all(isinstance(x.get("job"), str) and isinstance(x.get("live"), bool)
                                  and all(isinstance(x.get(k), int) for k in jf) for x in jobs),
   "every job has name, live and every documented integer field")
reqs = sorted(x.get("requests", 0) for x in jobs if x.get("requests", 0) > 0)
ok(reqs.count(1) == 3, "three cat jobs (open(2)) with 1 routed open each: requests per job %s" % reqs)
ok(nfiles in reqs, "the sha256sum job (stdio fopen) has %d routed opens: requests per job %s" % (nfiles, reqs))
ok(any(x.get("job") == "cli-named-job" for x in jobs), "DLSHIM_JOB names the job: 'cli-named-job' listed")
ok(all(x.get("hits", 0) + x.get("misses", 0) + x.get("passthrough", 0) + x.get("waits", 0) >= x.get("requests", 0)
       for x in jobs), "hits + misses + waits + passthrough account for every request")
ok(sum(x.get("bytes_from_disk", 0) + x.get("bytes_from_cache", 0) + x.get("bytes_passthrough", 0) for x in jobs) > 0,
   "bytes served are accounted")
pid = d.get("pid")
try:
    env = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
    ok(not any(e.startswith(b"LD_PRELOAD=") and b"dlshim" in e for e in env),
       "the coordinator (pid %d) runs without the shim in LD_PRELOAD" % pid)
except Exception as e:
    ok(False, "daemon.pid %r is a live process (%s)" % (pid, e))
EOF
while IFS= read -r line; do
	case $line in
	ok\ *) dl_ok "${line#ok }" ;;
	*) dl_fail "${line#FAIL }" ;;
	esac
done <"$DL_TMP/schema.out"

# ended jobs stay listed with live false (all our clients have exited)
all_dead() { [ "$(dl_stat 'all(not x["live"] for x in j["jobs"]) and len(j["jobs"]) >= 3')" = true ]; }
dl_wait_until 10 all_dead && dl_ok "ended jobs stay listed with live false" || { dl_fail "ended jobs stay listed with live false"; dl_stats_json | head -c 2000; echo; }

dl_cli stats >"$DL_TMP/stats.txt" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q cli-named-job "$DL_TMP/stats.txt" && dl_ok "dlshim stats (human) exits 0 and lists the jobs" || { dl_fail "dlshim stats (human) exits 0 and lists the jobs (rc $rc)"; dl_show "$DL_TMP/stats.txt"; }

dl_section "DLSHIM_LOG=info: one summary line per job at exit; the order report"
DLSHIM_LOG=info DLSHIM_JOB=sumjob dl_shim /usr/bin/python3 -c '
import random, sys
files = sys.argv[1:]
rnd = random.Random(5)
for epoch in range(2):
    rnd.shuffle(files)
    for f in files:
        with open(f, "rb") as fh:
            fh.read()
' "${FILES[@]}" 2>"$DL_TMP/info_err"
lines=$(grep -c '^dlshim: job sumjob: ' "$DL_TMP/info_err")
[ "$lines" = 1 ] && dl_ok "exactly one summary line for the job" || { dl_fail "exactly one summary line for the job (got $lines)"; dl_show "$DL_TMP/info_err"; }
n=${#FILES[@]}
grep -q "^dlshim: job sumjob: $((2 * n)) opens, .* 2 epochs, " "$DL_TMP/info_err" && dl_ok "the summary counts $((2 * n)) opens and 2 epochs" || { dl_fail "the summary counts $((2 * n)) opens and 2 epochs"; dl_show "$DL_TMP/info_err"; }
[ "$(grep -vc '^dlshim: job ' "$DL_TMP/info_err")" = 0 ] && dl_ok "nothing else on stderr at info level" || { dl_fail "nothing else on stderr at info level"; dl_show "$DL_TMP/info_err"; }
dl_stats_json >"$DL_TMP/info.json"
$DL_PY - "$DL_TMP/info.json" "$n" <<'PY' && dl_ok "stats --json: each finished epoch has an order report (exact: displacement 0, all $n files)" || dl_fail "stats --json: each finished epoch has an order report"
import json, sys
doc = json.load(open(sys.argv[1])); n = int(sys.argv[2])
job = [j for j in doc["jobs"] if j["job"] == "sumjob"][0]
done = [e for e in job["per_epoch"] if e["complete"]]
assert len(done) == 2, done
for e in done:
    o = e["order"]
    assert o["files"] == n and o["displacement"] == 0, o
    assert 0 <= o["locality"] <= 1 and 0 <= o["locality_shuffle"] <= 1, o
assert "pair_repeat" not in done[0]["order"] and "pair_repeat" in done[1]["order"], done
PY
dl_cli stats --epochs >"$DL_TMP/info_epochs"
grep -q "order of the served files" "$DL_TMP/info_epochs" && dl_ok "stats --epochs prints the order report" || { dl_fail "stats --epochs prints the order report"; dl_show "$DL_TMP/info_epochs"; }

dl_section "dlshim stop"
DPID=$(dl_stat 'j["daemon"]["pid"]')
dl_info "coordinator pid $DPID"
dl_cli stop >"$DL_TMP/stop.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && dl_ok "dlshim stop exits 0" || { dl_fail "dlshim stop exits 0 (got $rc)"; dl_show "$DL_TMP/stop.out"; }
gone() { [ -n "$DPID" ] && ! kill -0 "$DPID" 2>/dev/null; }
dl_wait_until 10 gone && dl_ok "coordinator process exited after stop" || dl_fail "coordinator process $DPID exited after stop"
status3() { dl_cli status >/dev/null 2>&1; [ $? -eq 3 ]; }
dl_wait_until 5 status3 && dl_ok "dlshim status exits 3 after stop" || dl_fail "dlshim status exits 3 after stop"
dl_cli stop >/dev/null 2>&1 && dl_ok "a second stop exits 0" || dl_fail "a second stop exits 0"

dl_section "a client after stop starts a fresh coordinator; it exits when idle"
dl_new_runtime_dir
export DLSHIM_IDLE_EXIT=2
dl_cli run -- cat "${FILES[3]}" >"$DL_TMP/out3" 2>&1
cmp -s "$DL_TMP/out3" "${FILES[3]}" && dl_ok "run after stop gives exact bytes" || dl_fail "run after stop gives exact bytes"
DPID2=$(dl_stat 'j["daemon"]["pid"]' 2>/dev/null)
[ -n "$DPID2" ] && dl_ok "a new coordinator was started (pid $DPID2)" || dl_fail "a new coordinator was started"
DPID=$DPID2
dl_wait_until 20 gone && dl_ok "coordinator exits by itself after DLSHIM_IDLE_EXIT=2 with no clients" || dl_fail "coordinator exits by itself after DLSHIM_IDLE_EXIT=2 with no clients"
dl_wait_until 5 status3 && dl_ok "dlshim status exits 3 after idle exit" || dl_fail "dlshim status exits 3 after idle exit"

dl_finish
