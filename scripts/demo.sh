#!/usr/bin/env bash
# The README's first command (make demo): several real PyTorch training jobs
# on a generated ImageFolder dataset, started at different times and running
# at different speeds, first with plain reads and then under dlshim, on
# throttled storage when this machine allows it. Prints a side-by-side table.
#
#   DEMO_SMALL=1  a quick version (few files, one epoch) used by the tests
#   DEMO_OUT=DIR  where the dataset and reports go (default ./out/demo)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. bench/cgroup.sh
PY=/usr/bin/python3
BUILD=$ROOT/build
OUT=${DEMO_OUT:-$ROOT/out/demo}
if [ "${DEMO_SMALL:-0}" = 1 ]; then
	CLASSES=4 PER_CLASS=30 EPOCHS=1 STAGGER=1 COMPUTE="0 5 10"
else
	CLASSES=10 PER_CLASS=200 EPOCHS=2 STAGGER=4 COMPUTE="0 15 30"
fi
DATA=$OUT/data-$CLASSES-$PER_CLASS
mkdir -p "$OUT"
[ -x "$BUILD/libdlshim.so" ] || [ -f "$BUILD/libdlshim.so" ] || { echo "build first: make" >&2; exit 1; }

if [ ! -d "$DATA" ]; then
	echo "demo: generating $((CLASSES * PER_CLASS)) JPEG files of ~100 KB in $DATA"
	$PY examples/gen_imagefolder.py --out "$DATA" --classes "$CLASSES" --per-class "$PER_CLASS" --size 100 --seed 1
fi
DATASET_BYTES=$(du -sb "$DATA" | cut -f1)
CACHE=$((DATASET_BYTES + DATASET_BYTES / 4))
DEV=$(dev_of "$DATA")
THROTTLE=0
if throttle_available && [ "$(id -u)" = 0 ]; then
	THROTTLE=1
	BPS=$((50 * 1048576)) IOPS=300
	# The jobs' own memory and little else: the page cache cannot keep the dataset.
	PROC_MEM=${DEMO_PROC_MEM:-$((3 * 200 * 1048576))}
	echo "demo: storage throttled to 50 MB/s and 300 IOPS (a network disk) (blkio on $DEV), page cache held down by a memory cgroup"
else
	echo "demo: cgroup v1 blkio/memory not writable here: running on unthrottled storage (the page cache may hide I/O)"
fi

run_phase() { # NAME SHIM(0/1)
	local phase=$1 shim=$2 cg=dlshim-demo-$$-$1 rt=$OUT/rt-$1
	rm -rf "$rt" "$OUT/$phase"
	mkdir -p "$OUT/$phase"
	evict_dataset
	local pre=()
	if [ $THROTTLE = 1 ]; then
		local mem=$PROC_MEM
		[ "$shim" = 1 ] && mem=$((PROC_MEM + CACHE))
		cg_create "$cg" "$DEV" "$BPS" "$IOPS" "$mem"
		pre=(cg_run "$cg")
	fi
	local envs=(DEMO_PHASE=$phase)
	if [ "$shim" = 1 ]; then
		envs+=(LD_PRELOAD="$BUILD/libdlshim.so" DLSHIM_ROOTS="$DATA" DLSHIM_CACHE="$CACHE"
			DLSHIM_RUNTIME_DIR="$rt" DLSHIM_IDLE_EXIT=60)
	fi
	local before after i=0 pids=() t0 t1
	before=$(disk_read_bytes)
	t0=$(date +%s%N)
	for c in $COMPUTE; do
		i=$((i + 1))
		[ $i = 1 ] || sleep "$STAGGER"
		echo "demo: [$phase] starting job$i (extra compute ${c} ms/batch)"
		"${pre[@]}" env "${envs[@]}" $([ "$shim" = 1 ] && echo DLSHIM_STATS=$OUT/$phase/job$i.stats.json) \
			$PY examples/train_imagefolder.py --data "$DATA" --epochs "$EPOCHS" --workers 1 \
			--compute-ms "$c" --name "$phase/job$i" --report "$OUT/$phase/job$i.json" --progress-every 5 \
			>"$OUT/$phase/job$i.log" 2>&1 &
		pids+=($!)
	done
	# A progress line while the jobs run.
	while kill -0 "${pids[@]}" 2>/dev/null; do
		sleep 5
		local line=""
		for j in $(seq 1 $i); do
			line="$line job$j: $(tail -n 1 "$OUT/$phase/job$j.log" 2>/dev/null | sed -E 's/^\[[^]]*\] //; s/ loss [0-9.]+//; s/(done: [0-9.]+s).*/\1/' | cut -c1-36) |"
		done
		echo "demo: [$phase]$line"
	done
	local rc=0
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	t1=$(date +%s%N)
	after=$(disk_read_bytes)
	if [ "$shim" = 1 ]; then
		DLSHIM_RUNTIME_DIR=$rt "$BUILD/dlshim" stats --json >"$OUT/$phase/coordinator.json" 2>/dev/null || true
		DLSHIM_RUNTIME_DIR=$rt "$BUILD/dlshim" stop >/dev/null 2>&1 || true
	fi
	if [ $THROTTLE = 1 ]; then
		echo $(( $(cg_read_bytes "$cg" "$DEV") )) >"$OUT/$phase/device_bytes"
		cg_destroy "$cg"
	else
		echo $((after - before)) >"$OUT/$phase/device_bytes"
	fi
	echo $(( (t1 - t0) / 1000000 )) >"$OUT/$phase/wall_ms"
	[ $rc = 0 ] || { echo "demo: a job of phase $phase failed; see $OUT/$phase/*.log" >&2; exit 1; }
}

# Drop the dataset's pages from the page cache, and only those: Python and
# PyTorch stay cached (warmed once below), so the storage bytes of a phase
# are its dataset reads.
evict_dataset() {
	sync # dirty pages (a freshly generated dataset) cannot be dropped
	$PY - "$DATA" <<'PYEOF'
import os, sys
for d, _, files in os.walk(sys.argv[1]):
    for f in files:
        fd = os.open(os.path.join(d, f), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PYEOF
}

# Bytes read from the dataset's disk, machine-wide (used when not throttled).
disk_read_bytes() {
	local name
	name=$(basename "$(readlink -f /sys/dev/block/$DEV)")
	awk -v n="$name" '$3 == n { printf "%.0f\n", $6 * 512 }' /proc/diskstats
}

trap 'for p in plain dlshim; do cg_destroy dlshim-demo-$$-$p 2>/dev/null; done' EXIT
echo "demo: dataset $((DATASET_BYTES / 1048576)) MiB; 3 jobs x $EPOCHS epochs; dlshim cache $((CACHE / 1048576)) MiB"
$PY -c "import torch, torchvision, PIL.Image" # warm the libraries' page cache once
run_phase plain 0
run_phase dlshim 1
$PY scripts/demo_report.py "$OUT" "$DATASET_BYTES"
