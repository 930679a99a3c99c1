#!/usr/bin/env bash
# make bench-hdf5: random-row reads of an HDF5 file larger than the cache,
# plain h5py vs the shim in exact mode vs the shim with row redirection
# (DLSHIM_REDIRECT=any), for small and large rows. Storage throttled with
# blkio, page cache held down by a memory cgroup, caches dropped before each
# run (bench/cgroup.sh). The "floor" variant is plain h5py with the file in
# the page cache and no throttle: what the job's own Python, h5py and
# DataLoader cost with no I/O at all, which no cache can beat. Results: bench/results/hdf5.json,
# docs/img/hdf5.png, docs/bench-hdf5.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. bench/cgroup.sh
PY=/usr/bin/python3
BUILD=$ROOT/build
# The data lives on its own loop-mounted ext4 image unless BENCH_WORK is
# given: the throttled device then carries only dataset reads, not the
# interpreter's and libraries' page faults under the memory limit.
IMG=${BENCH_IMG:-/var/tmp/dlshim-bench-hdf5.ext4}
WORK=${BENCH_WORK:-}
FILE_MB=${BENCH_FILE_MB:-384}
ROW_KB=${BENCH_ROW_KB:-"4 64"}
EPOCHS=${BENCH_EPOCHS:-2}
WORKERS=${BENCH_WORKERS:-2}
PROFILE=${BENCH_PROFILE:-"slow:52428800:2000"}
VARIANTS=${BENCH_VARIANTS:-"floor plain exact any"}
# How the job reads (bench/h5_job.py): "open" looks the dataset up per read,
# "held" keeps its dataset objects (less of the job's own CPU per sample).
STYLES=${BENCH_STYLES:-"open held"}
PROC_MEM=${BENCH_PROC_MEM:-314572800}
OUT=bench/results
mkdir -p "$OUT" docs/img

if ! throttle_available; then
	echo "bench-hdf5: cgroup v1 blkio/memory controllers are not writable here;" >&2
	echo "a benchmark without throttled storage would measure the page cache, not I/O: not running." >&2
	exit 1
fi
IFS=: read -r pname bps iops <<<"$PROFILE"
loopdev=
if [ -z "$WORK" ]; then
	WORK=/mnt/dlshim-bench-hdf5
	[ -f "$IMG" ] || { truncate -s $((FILE_MB * 4 + 256))M "$IMG" && mkfs.ext4 -q -F "$IMG"; }
	mkdir -p "$WORK"
	loopdev=$(losetup -f --show "$IMG")
	mount "$loopdev" "$WORK"
	trap 'umount "$WORK"; losetup -d "$loopdev"' EXIT
fi
mkdir -p "$WORK"
results=$OUT/hdf5.json
echo "{\"profile\": \"$pname\", \"bps\": $bps, \"iops\": $iops, \"epochs\": $EPOCHS, \"runs\": [" >"$results.tmp"
first=1
for kb in $ROW_KB; do
	data=$WORK/rows-${kb}k
	file=$data/rows.h5
	rows=$((FILE_MB * 1024 / kb))
	if [ ! -f "$file" ]; then
		mkdir -p "$data"
		echo "generating $rows rows of $kb KB in $file"
		$PY - "$file" "$rows" "$((kb * 256))" <<'PYEOF'
import sys, numpy as np, h5py
path, n, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with h5py.File(path, "w") as f:
    x = f.create_dataset("x", (n, cols), dtype=np.float32)   # contiguous: plain h5py reads just the row
    for a in range(0, n, 1024):
        b = min(n, a + 1024)
        blk = np.random.default_rng(a).standard_normal((b - a, cols)).astype(np.float32)
        blk[:, 0] = np.arange(a, b)
        x[a:b] = blk
    f.create_dataset("y", data=(np.arange(n) % 1000).astype(np.int64))
PYEOF
	fi
	fbytes=$(stat -c %s "$file")
	cache=$((fbytes / 2))
	dev=$(dev_of "$file")
	for style in $STYLES; do
		for var in $VARIANTS; do
			cg=dlshim-bench-h5-$$-$kb-$style-$var
			rt=$(mktemp -d /tmp/dlshim-bench-rt.XXXXXX)
			rep=$(mktemp /tmp/dlshim-bench-rep.XXXXXX)
			stats=$rt.stats.json
			mem=$PROC_MEM
			[ "$var" = plain ] || mem=$((PROC_MEM + cache))
			if [ "$var" = floor ]; then
				cat "$file" >/dev/null # in the page cache, charged outside the job's group
				cg_create "$cg" "$dev" $((1 << 40)) $((1 << 30)) $((PROC_MEM + fbytes * 2))
			else
				drop_caches
				cg_create "$cg" "$dev" "$bps" "$iops" "$mem"
			fi
			trap 'cg_destroy "$cg"; rm -rf "$rt"; [ -z "$loopdev" ] || { umount "$WORK"; losetup -d "$loopdev"; }' EXIT
			env_args=(BENCH_ROW_KB="$kb")
			if [ "$var" = exact ] || [ "$var" = any ]; then
				env_args+=(LD_PRELOAD="$BUILD/libdlshim.so" DLSHIM_ROOTS="$data" DLSHIM_CACHE="$cache"
					DLSHIM_RUNTIME_DIR="$rt" DLSHIM_STATS="$stats" DLSHIM_IDLE_EXIT=60
					DLSHIM_REDIRECT=$([ "$var" = any ] && echo any || echo off))
			fi
			echo "== $kb KB rows ($rows rows, $fbytes bytes, cache $cache), job style $style: $var"
			t0=$(date +%s%N)
			cg_run "$cg" env "${env_args[@]}" $PY bench/h5_job.py "$file" "$EPOCHS" "$WORKERS" "$rep" "$style"
			t1=$(date +%s%N)
			total=$(cg_read_bytes "$cg" "$dev")
			cpu=$(cg_cpu_seconds "$cg")
			coord_cpu=$(coordinator_cpu_seconds "$cg")
			[ "$var" = plain ] || [ "$var" = floor ] || DLSHIM_RUNTIME_DIR=$rt "$BUILD/dlshim" stop >/dev/null 2>&1 || true
			cg_destroy "$cg"
			trap '[ -z "$loopdev" ] || { umount "$WORK"; losetup -d "$loopdev"; }' EXIT
			[ $first = 1 ] || echo "," >>"$results.tmp"
			first=0
			shim_stats=null
			[ -s "$stats" ] && shim_stats=$(cat "$stats")
			printf '{"row_kb": %s, "style": "%s", "rows": %s, "file_bytes": %s, "cache_bytes": %s, "variant": "%s", "wall_s": %s, "device_bytes": %s, "cpu_s": %s, "coordinator_cpu_s": %s, "job": %s, "shim": %s}\n' \
				"$kb" "$style" "$rows" "$fbytes" "$cache" "$var" "$(( (t1 - t0) / 1000000000 )).$(printf %03d $(( (t1 - t0) / 1000000 % 1000 )))" \
				"$total" "$cpu" "$coord_cpu" "$(cat "$rep")" "$shim_stats" >>"$results.tmp"
			rm -rf "$rt" "$rep" "$stats"
		done
	done
done
echo "]}" >>"$results.tmp"
mv "$results.tmp" "$results"
$PY bench/plot_hdf5.py "$results" docs/img/hdf5.png docs/bench-hdf5.md
echo "results: $results, docs/img/hdf5.png, docs/bench-hdf5.md"
