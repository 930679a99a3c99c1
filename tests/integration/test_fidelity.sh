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
"$DL_PY" "$DL_REPO/bench/fidelity.py" --train 3000 --epochs 1 --modes exact,dir --max-drop 100 \
	--out "$OUT" --png "$OUT/fidelity.png" --work "$DL_TMP/work" >"$DL_TMP/log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && dl_ok "fidelity.py exits 0" || { dl_fail "fidelity.py exits 0 (got $rc)"; dl_show "$DL_TMP/log" 40; dl_finish; }
for f in fidelity.json fidelity.csv fidelity.md fidelity.png; do
	[ -s "$OUT/$f" ] && dl_ok "wrote $f" || dl_fail "wrote $f"
done
"$DL_PY" - "$OUT/fidelity.json" <<'PY' >"$DL_TMP/checks" 2>&1
import json, sys
res = json.load(open(sys.argv[1]))
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
PY
while IFS= read -r line; do
	case $line in
	"ok "*) dl_ok "${line#ok }" ;;
	"FAIL "*) dl_fail "${line#FAIL }" ;;
	*) dl_fail "check script: $line" ;;
	esac
done <"$DL_TMP/checks"
dl_finish
