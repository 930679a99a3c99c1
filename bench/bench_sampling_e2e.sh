#!/usr/bin/env bash
# make bench-sampling-e2e: several concurrent data-loading jobs on throttled
# storage (one device, one blkio throttle shared by all of them), per variant:
#   plain     PyTorch, no shim, every job its own shuffle, with the same
#             memory as the shim runs;
#   plain-lowmem  the same with the memory of the shim runs less the shim's
#             cache (bench-redirect's setting for plain PyTorch);
#   lockstep  the shim in exact mode and every job reading the same seeded
#             permutation (bench/loader_job.py BENCH_ORDER=shared), refcnt
#             eviction: a file one job read is a cache hit for the others
#             while they are less than the cache behind. No job waits for
#             another (CoorDL's coordinated prep would also make them wait);
#   dir       the shim, DLSHIM_REDIRECT=dir with the chunk sampler;
#   dsa       the shim, DLSHIM_REDIRECT=dir with DLSHIM_SAMPLER=dsa.
# Scenarios:
#   same      4 jobs on one ImageFolder (3000 ~100 KB JPEGs), different
#             speeds (sleep per batch of 32) and start times; cache = half
#             the dataset;
#   overlap   2 jobs whose datasets are each 2/3 of the files, sharing half
#             of them (DLSHIM_FILELIST / BENCH_LIST); cache = half a job's
#             dataset.
# Memory: the jobs' processes peaked at 570 MB for four (main + 2 workers
# each; 150 MiB a job got shim runs OOM-killed); the memory cgroup gives each
# job 170 MiB, plus the shim's cache in every variant but plain-lowmem. What
# the processes leave is page cache. OOM kills are recorded (a run with one
# is not "ok").
# Results: bench/results/sampling_e2e.json, docs/img/sampling-e2e.png,
# bench/results/sampling_e2e.md (tables for docs/bench-sampling.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. bench/cgroup.sh
PY=/usr/bin/python3
BUILD=${BENCH_BUILD:-$ROOT/build}
WORK=${BENCH_WORK:-/var/tmp/dlshim-bench-e2e}
FILES=${BENCH_FILES:-3000}
CLASSES=10
EPOCHS=${BENCH_EPOCHS:-4}
WORKERS=${BENCH_WORKERS:-2}
PROFILE=${BENCH_PROFILE:-network:209715200:500}
VARIANTS=${BENCH_VARIANTS:-"plain plain-lowmem lockstep dir dsa"}
SCENARIOS=${BENCH_SCENARIOS:-"same overlap"}
PROC_MEM=${BENCH_PROC_MEM:-178257920}
# per job: compute (ms of sleep per batch of 32) and start offset (s)
SAME_COMPUTE=(0 20 40 80)
SAME_START=(0 3 6 9)
OVERLAP_COMPUTE=(0 40)
OVERLAP_START=(0 3)
DATA=$WORK/imagefolder-$FILES
OUT=bench/results
mkdir -p "$OUT" docs/img "$WORK"
IFS=: read -r pname bps iops <<<"$PROFILE"

cg= rt= LOOP= MNT=$WORK/mnt
cleanup() {
	[ -z "$cg" ] || cg_destroy "$cg"
	[ -z "$rt" ] || rm -rf "$rt"
	[ -z "$LOOP" ] || { umount -l "$MNT"; losetup -d "$LOOP"; }
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! throttle_available; then
	echo "bench-sampling-e2e: cgroup v1 blkio/memory controllers are not writable here;" >&2
	echo "a benchmark without throttled storage would measure the page cache, not I/O: not running." >&2
	exit 1
fi
imagefolder_once "$DATA" "$FILES" "$CLASSES"
# The data on its own ext4 file system on a loop device, as in bench-redirect.
loop_disk_copy "$DATA" "$WORK"
DATA=$LOOP_DATA
DEV=$(dev_of "$DATA")
DATASET_BYTES=$(du -sb "$DATA" | cut -f1)

# The overlap scenario's datasets: in every class, job 0 has the first two
# thirds of the files (by name), job 1 the last two thirds.
per=$((FILES / CLASSES))
: >"$WORK/list0"
: >"$WORK/list1"
for c in "$DATA"/*/; do
	ls "$c" | sort | awk -v d="${c%/}" -v p="$per" \
		-v l0="$WORK/list0" -v l1="$WORK/list1" \
		'{ if (NR <= 2 * p / 3) print d "/" $0 >>l0; if (NR > p / 3) print d "/" $0 >>l1 }'
done
LIST_BYTES=$(tr '\n' '\0' <"$WORK/list0" | du -cb --files0-from=- | tail -1 | cut -f1)
echo "dataset $DATASET_BYTES bytes ($FILES files) on $DEV; overlap lists $(wc -l <"$WORK/list0") and $(wc -l <"$WORK/list1") files"

# run_variant SCENARIO VARIANT: all jobs of the scenario at once; appends a
# JSON record to $results.tmp.
run_variant() {
	local scen=$1 var=$2 n cache k
	local -a compute start pids
	if [ "$scen" = same ]; then
		compute=("${SAME_COMPUTE[@]}") start=("${SAME_START[@]}") cache=$((DATASET_BYTES / 2))
	else
		compute=("${OVERLAP_COMPUTE[@]}") start=("${OVERLAP_START[@]}") cache=$((LIST_BYTES / 2))
	fi
	n=${#compute[@]}
	cg=dlshim-e2e-$$-$scen-$var
	rt=$(mktemp -d /tmp/dlshim-e2e-rt.XXXXXX)
	drop_caches
	local mem=$((n * PROC_MEM + cache))
	[ "$var" != plain-lowmem ] || mem=$((n * PROC_MEM))
	cg_create "$cg" "$DEV" "$bps" "$iops" "$mem"
	echo "== $scen: $var ($n jobs, cache $cache bytes, memory $mem bytes)"
	for ((k = 0; k < n; k++)); do
		local -a env_args=(BENCH_DEV="$DEV" BENCH_SEED=$((k + 1)) BENCH_READY="$rt/ready$k"
			BENCH_GO="$rt/go" BENCH_DELAY="${start[k]}")
		[ "$scen" = same ] || env_args+=(BENCH_LIST="$WORK/list$k")
		if [ "${var#plain}" = "$var" ]; then
			env_args+=(LD_PRELOAD="$BUILD/libdlshim.so" DLSHIM_ROOTS="$DATA" DLSHIM_CACHE="$cache"
				DLSHIM_RUNTIME_DIR="$rt" DLSHIM_STATS="$rt/stats$k.json" DLSHIM_IDLE_EXIT=60
				DLSHIM_JOB="e2e-$scen-$var-$k")
			[ "$scen" = same ] || env_args+=(DLSHIM_FILELIST="$WORK/list$k")
		fi
		case $var in
		plain | plain-lowmem) ;;
		lockstep) env_args+=(DLSHIM_REDIRECT=off BENCH_ORDER=shared) ;;
		dir) env_args+=(DLSHIM_REDIRECT=dir DLSHIM_SAMPLER=chunk) ;;
		dsa) env_args+=(DLSHIM_REDIRECT=dir DLSHIM_SAMPLER=dsa) ;;
		esac
		cg_run "$cg" timeout 600 env "${env_args[@]}" $PY bench/loader_job.py "$DATA" "$EPOCHS" "$WORKERS" \
			"$rt/rep$k.json" "${compute[k]}" >"$rt/log$k" 2>&1 &
		pids[k]=$!
	done
	# Start times count from "go", once every job has imported torch.
	local waited=0
	while [ "$(ls "$rt"/ready* 2>/dev/null | wc -l)" -lt "$n" ] && [ $waited -lt 1200 ]; do
		sleep 0.1
		waited=$((waited + 1))
	done
	touch "$rt/go"
	local t0 t1 rc=0
	t0=$(date +%s%N)
	for ((k = 0; k < n; k++)); do
		wait "${pids[k]}" || { rc=1; echo "job $k failed:"; tail -5 "$rt/log$k"; }
	done
	t1=$(date +%s%N)
	local total ooms
	total=$(cg_read_bytes "$cg" "$DEV")
	ooms=$(awk '$1 == "oom_kill" { print $2; f = 1 } END { if (!f) print 0 }' "$CG_MEM/$cg/memory.oom_control")
	[ "$ooms" = 0 ] || { rc=1; echo "   $ooms processes OOM-killed"; }
	[ "${var#plain}" != "$var" ] || DLSHIM_RUNTIME_DIR=$rt "$BUILD/dlshim" stop >/dev/null 2>&1 || true
	cg_destroy "$cg"
	cg=
	[ $first = 1 ] || echo "," >>"$results.tmp"
	first=0
	printf '{"scenario": "%s", "variant": "%s", "ok": %s, "oom_kills": %s, "memory_limit": %s, "cache_bytes": %s, "wall_s": %s, "device_bytes": %s, "jobs": [' \
		"$scen" "$var" "$([ $rc = 0 ] && echo true || echo false)" "$ooms" "$mem" "$cache" \
		"$(((t1 - t0) / 1000000000)).$(printf %03d $(((t1 - t0) / 1000000 % 1000)))" "$total" >>"$results.tmp"
	for ((k = 0; k < n; k++)); do
		[ $k = 0 ] || echo "," >>"$results.tmp"
		printf '{"compute_ms": %s, "start_s": %s, "report": %s, "shim": %s}' "${compute[k]}" "${start[k]}" \
			"$(cat "$rt/rep$k.json" 2>/dev/null || echo null)" "$(cat "$rt/stats$k.json" 2>/dev/null || echo null)" >>"$results.tmp"
	done
	echo "]}" >>"$results.tmp"
	echo "   wall $(((t1 - t0) / 1000000)) ms, device $total bytes"
	rm -rf "$rt"
	rt=
}

results=$OUT/sampling_e2e.json
printf '{"profile": "%s", "bps": %s, "iops": %s, "dataset_bytes": %s, "files": %s, "overlap_job_bytes": %s, "epochs": %s, "workers": %s, "process_memory_per_job": %s, "runs": [\n' \
	"$pname" "$bps" "$iops" "$DATASET_BYTES" "$FILES" "$LIST_BYTES" "$EPOCHS" "$WORKERS" "$PROC_MEM" >"$results.tmp"
first=1
for scen in $SCENARIOS; do
	for var in $VARIANTS; do
		run_variant "$scen" "$var"
	done
done
echo "]}" >>"$results.tmp"
mv "$results.tmp" "$results"
$PY bench/plot_sampling_e2e.py "$results" docs/img/sampling-e2e.png "$OUT/sampling_e2e.md"
echo "results: $results, docs/img/sampling-e2e.png, $OUT/sampling_e2e.md"
