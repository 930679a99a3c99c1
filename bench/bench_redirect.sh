#!/usr/bin/env bash
# make bench-redirect: plain PyTorch DataLoader vs the shim in exact mode vs
# the shim with dir redirect, on the same generated ImageFolder (~100 KB
# JPEGs, dataset twice the cache), storage throttled with blkio and the page
# cache held down by a memory cgroup, caches dropped before each run.
# Results: bench/results/redirect.json, docs/img/redirect.png, docs/bench-redirect.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. bench/cgroup.sh
PY=/usr/bin/python3
BUILD=$ROOT/build
WORK=${BENCH_WORK:-/var/tmp/dlshim-bench}
FILES=${BENCH_FILES:-3000}
CLASSES=${BENCH_CLASSES:-10}
EPOCHS=${BENCH_EPOCHS:-3}
WORKERS=${BENCH_WORKERS:-2}
PROFILES=${BENCH_PROFILES:-"network:209715200:500 slow:52428800:500"}
VARIANTS=${BENCH_VARIANTS:-"plain exact dir-perfile dir"}
# The data lives on its own ext4 file system on a loop device (direct I/O to
# its backing file), as a user's data disk would: the machine's own disk is
# not open to containers, so extent reads could not be measured on it.
# BENCH_DISK=root keeps the data on the root file system instead.
DISK=${BENCH_DISK:-loop}
DATA=$WORK/imagefolder-$FILES
OUT=bench/results
mkdir -p "$OUT" docs/img "$WORK"

cg= rt= LOOP=
cleanup() {
	[ -z "$cg" ] || cg_destroy "$cg"
	[ -z "$rt" ] || rm -rf "$rt"
	[ -z "$LOOP" ] || { umount -l "$MNT"; losetup -d "$LOOP"; }
}
trap cleanup EXIT

if ! throttle_available; then
	echo "bench-redirect: cgroup v1 blkio/memory controllers are not writable here;" >&2
	echo "a benchmark without throttled storage would measure the page cache, not I/O: not running." >&2
	exit 1
fi
imagefolder_once "$DATA" "$FILES" "$CLASSES"
if [ "$DISK" = loop ]; then
	loop_disk_copy "$DATA" "$WORK"
	DATA=$LOOP_DATA
fi
DATASET_BYTES=$(du -sb "$DATA" | cut -f1)
CACHE=$((DATASET_BYTES / 2))
DEV=$(dev_of "$DATA")
# Room for the processes (python + torch, workers) and little else, so the
# page cache cannot hold the dataset; shim runs get the shim's cache on top
# (it is shared memory charged to the same group).
PROC_MEM=${BENCH_PROC_MEM:-314572800}
echo "dataset $DATASET_BYTES bytes on $DEV; shim cache $CACHE bytes; memory for the processes $PROC_MEM bytes"

results=$OUT/redirect.json
echo "{\"dataset_bytes\": $DATASET_BYTES, \"files\": $FILES, \"cache_bytes\": $CACHE, \"process_memory\": $PROC_MEM, \"runs\": [" >"$results.tmp"
first=1
for prof in $PROFILES; do
	IFS=: read -r pname bps iops <<<"$prof"
	for var in $VARIANTS; do
		cg=dlshim-bench-$$-$pname-$var
		rt=$(mktemp -d /tmp/dlshim-bench-rt.XXXXXX)
		rep=$(mktemp /tmp/dlshim-bench-rep.XXXXXX)
		stats=$rt.stats.json
		drop_caches
		mem=$PROC_MEM
		[ "$var" = plain ] || mem=$((PROC_MEM + CACHE))
		cg_create "$cg" "$DEV" "$bps" "$iops" "$mem"
		env_args=(BENCH_DEV="$DEV")
		case $var in
		plain) ;;
		exact | dir | dir-perfile)
			env_args+=(LD_PRELOAD="$BUILD/libdlshim.so" DLSHIM_ROOTS="$DATA" DLSHIM_CACHE="$CACHE"
				DLSHIM_RUNTIME_DIR="$rt" DLSHIM_STATS="$stats" DLSHIM_IDLE_EXIT=60
				DLSHIM_REDIRECT=$([ "$var" = exact ] && echo off || echo dir)
				DLSHIM_EXTENT_READS=$([ "$var" = dir-perfile ] && echo off || echo auto))
			;;
		esac
		echo "== $pname ($((bps / 1048576)) MB/s, $iops IOPS): $var"
		t0=$(date +%s%N)
		cg_run "$cg" env "${env_args[@]}" $PY bench/loader_job.py "$DATA" "$EPOCHS" "$WORKERS" "$rep"
		t1=$(date +%s%N)
		total=$(cg_read_bytes "$cg" "$DEV")
		[ "$var" = plain ] || DLSHIM_RUNTIME_DIR=$rt "$BUILD/dlshim" stop >/dev/null 2>&1 || true
		cg_destroy "$cg"
		cg=
		[ $first = 1 ] || echo "," >>"$results.tmp"
		first=0
		shim_stats=null
		[ -s "$stats" ] && shim_stats=$(cat "$stats")
		printf '{"profile": "%s", "bps": %s, "iops": %s, "variant": "%s", "wall_s": %s, "device_bytes": %s, "job": %s, "shim": %s}\n' \
			"$pname" "$bps" "$iops" "$var" "$(( (t1 - t0) / 1000000000 )).$(printf %03d $(( (t1 - t0) / 1000000 % 1000 )))" "$total" "$(cat "$rep")" "$shim_stats" >>"$results.tmp"
		rm -rf "$rt" "$rep" "$stats"
		rt=
	done
done
echo "]}" >>"$results.tmp"
mv "$results.tmp" "$results"
$PY bench/plot_redirect.py "$results" docs/img/redirect.png docs/bench-redirect.md
echo "results: $results, docs/img/redirect.png, docs/bench-redirect.md"
