#!/usr/bin/env bash
# The README's demo (scripts/demo.sh) in its small form: three real training
# jobs without and with the shim. Checks the jobs trained on every sample,
# the shim phase served from the cache, and the table was printed.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dl_setup demo
out=$DL_TMP/demo
DEMO_SMALL=1 DEMO_OUT=$out "$DL_REPO/scripts/demo.sh" >"$DL_TMP/demo.log" 2>&1
rc=$?
[ $rc -eq 0 ] && dl_ok "demo exits 0" || { dl_fail "demo exits 0 (got $rc)"; tail -30 "$DL_TMP/demo.log"; }
grep -q "dlshim saved" "$DL_TMP/demo.log" && dl_ok "demo prints what the shim saved" || dl_fail "demo prints what the shim saved"
for phase in plain dlshim; do
	for j in 1 2 3; do
		n=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sum(e['samples'] for e in r['epochs']))" "$out/$phase/job$j.json" 2>/dev/null)
		[ "$n" = 120 ] && dl_ok "$phase job$j trained on all 120 samples" || dl_fail "$phase job$j trained on all 120 samples (got '$n')"
	done
done
hits=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(sum(j['hits']+j['waits'] for j in c['jobs']))" "$out/dlshim/coordinator.json" 2>/dev/null)
[ "${hits:-0}" -ge 200 ] && dl_ok "jobs 2 and 3 were served from the cache ($hits opens)" || dl_fail "jobs 2 and 3 were served from the cache (got '$hits' of 360 opens)"
dl_finish
