#!/usr/bin/env bash
# `make fidelity` (bench/fidelity.py) at a small size: 3,000 Fashion-MNIST
# images, one epoch, exact and dir. It must run as written, learn (exact mode
# well above chance), write its CSV/JSON/table/plot, and carry the shim's
# randomness report for the redirect run (displacement > 0, exact 0). The
# accuracy gap is judged by the full-size `make fidelity`, not here: one small
# epoch is too noisy for a 1-point bound.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dl_setup fidelity
dl_require_build

OUT=$DL_TMP/out
"$DL_PY" "$DL_REPO/bench/fidelity.py" --train 3000 --epochs 1 --modes exact,dir --repeats 1 --max-drop 100 \
	--out "$OUT" --png "$OUT/fidelity.png" --work "$DL_TMP/work" >"$DL_TMP/log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && dl_ok "fidelity.py exits 0" || { dl_fail "fidelity.py exits 0 (got $rc)"; dl_show "$DL_TMP/log" 40; dl_finish; }
for f in fidelity.json fidelity.csv fidelity.md fidelity.png; do
	[ -s "$OUT/$f" ] && dl_ok "wrote $f" || dl_fail "wrote $f"
done
"$DL_PY" - "$OUT/fidelity.json" "$DL_REPO/bench" <<'PY' >"$DL_TMP/checks" 2>&1
import json, sys
res = json.load(open(sys.argv[1]))
sys.path.insert(0, sys.argv[2])
import fidelity
runs = {r["mode"]: r for r in res["runs"]}
def check(ok, msg):
    print(("ok " if ok else "FAIL ") + msg)
check(set(runs) == {"exact", "dir"}, "both modes ran: %s" % sorted(runs))
for m, r in runs.items():
    check(len(r["epochs"]) == 1 and r["epochs"][0]["samples"] == 3000,
          "%s: one epoch over all 3000 training images" % m)
    check(not r["warnings"], "%s: no shim warning (%s)" % (m, r["warnings"][:2]))
    check(len(r["order"]) >= 1 and r["order"][0], "%s: the shim's order report for the epoch" % m)
acc = runs["exact"]["epochs"][0]["test_acc"]
check(acc > 0.5, "exact: test accuracy %.1f%% after one epoch (chance is 10%%)" % (100 * acc))
acc = runs["dir"]["epochs"][0]["test_acc"]
check(acc > 0.5, "dir: test accuracy %.1f%% after one epoch" % (100 * acc))
check(runs["exact"]["order"][0]["displacement"] == 0, "exact: displacement 0")
check(runs["dir"]["order"][0]["displacement"] > 0.05 and runs["dir"]["redirects"] > 0,
      "dir: requests were redirected (displacement %.3f, %d redirects)"
      % (runs["dir"]["order"][0]["displacement"], runs["dir"]["redirects"]))
sm = res["summary"]["modes"]
check(set(sm) == {"exact", "dir"} and all(d["runs"] == 1 for d in sm.values()), "summary: one run per mode")
check(abs(sm["dir"]["vs_exact"] - 100 * (runs["dir"]["epochs"][0]["test_acc"] - runs["exact"]["epochs"][0]["test_acc"])) < 1e-6,
      "summary: dir against exact is the difference of their accuracies (one epoch)")
# The verdict: means of the last two epochs over runs, against exact and
# exact-reshuffled together; one bad final epoch alone does not fail it.
def run(mode, rep, accs):
    return {"mode": mode, "run": rep, "epochs": [{"test_acc": a / 100} for a in accs]}
fake = {"runs": [run("exact", 0, [86, 88]), run("exact-reshuffled", 0, [88, 88]), run("exact-reshuffled", 1, [87, 87]),
                 run("dsa", 0, [88, 86]), run("dsa", 1, [87, 88]), run("dsa", 2, [88, 87]),
                 run("dir", 0, [85, 86]), run("dir", 1, [86, 85])]}
s = fidelity.summarize(fake, 1.0)
d = s["modes"]
check(abs(s["baseline_late_acc"] - 87.33333) < 1e-3 and s["baseline_runs"] == 3, "verdict: baseline of the exact runs")
check(d["dsa"]["ok"] and abs(d["dsa"]["vs_exact"] - 0.0) < 1e-6 and d["dsa"]["final_acc"][0] == 86,
      "verdict: dsa's one low final epoch is averaged out (%+.2f)" % d["dsa"]["vs_exact"])
check(not d["dir"]["ok"] and abs(d["dir"]["vs_exact"] + 1.83333) < 1e-3,
      "verdict: dir 1.83 points below fails a 1-point bound (%+.2f)" % d["dir"]["vs_exact"])
check(fidelity.summarize(fake, 2.0)["modes"]["dir"]["ok"], "verdict: ... and passes a 2-point bound")
PY
while IFS= read -r line; do
	case $line in
	"ok "*) dl_ok "${line#ok }" ;;
	"FAIL "*) dl_fail "${line#FAIL }" ;;
	*) dl_fail "check script: $line" ;;
	esac
done <"$DL_TMP/checks"
dl_finish
