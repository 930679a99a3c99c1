#!/usr/bin/env bash
# make bench-core: micro-benchmarks of the shim's core paths, each against the
# plain system measured in the same run.
#
#   (a) unrouted calls: ns per intercepted call on a file outside DLSHIM_ROOTS
#       (pread, read, lseek, open+close), with and without LD_PRELOAD;
#   (b) routed cache hits: open-to-first-byte latency and copy bandwidth of
#       whole ~100 KB files once they are cached, vs. the warm page cache;
#   (c) two jobs, one after the other, page cache dropped before each: bytes
#       read from the disk per job without and with the shim (with it, the
#       second job should read ~0: its files are in the shared cache).
#
# Results: bench/results/core.json and the "Core" section of docs/benchmarks.md.
# Knobs: BENCH_WORK (dataset dir, default /var/tmp/dlshim-bench), BENCH_CALLS,
# BENCH_ROUNDS, BENCH_PASSES, BENCH_CORE_FILES; BENCH_CORE_RESULTS and BENCH_CORE_MD
# redirect the outputs (tests).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=/usr/bin/python3
BUILD=$ROOT/build
LIB=$BUILD/libdlshim.so
BIN=$BUILD/bench_core
WORK=${BENCH_WORK:-/var/tmp/dlshim-bench}
FILES=${BENCH_CORE_FILES:-300}
CALLS=${BENCH_CALLS:-1000000}   # calls per repetition in (a)
ROUNDS=${BENCH_ROUNDS:-3}       # (a): alternating plain/shim rounds
PASSES=${BENCH_PASSES:-4}       # (b): pass 1 warms, the rest are hits
DATA=$WORK/core-$FILES
UNROUTED=$WORK/core-unrouted.bin
OUT=bench/results

for f in "$LIB" "$BUILD/dlshimd" "$BUILD/dlshim"; do
	[ -e "$f" ] || { echo "bench-core: $f missing: run make first" >&2; exit 1; }
done
# The Makefile's bench-core target only builds the shim; build the driver here
# (again whenever its source is newer).
if [ ! -x "$BIN" ] || [ bench/bench_core.c -nt "$BIN" ]; then
	cc -O2 -std=gnu11 -Wall -Wextra -Werror -pthread -o "$BIN" bench/bench_core.c
fi

mkdir -p "$WORK" "$OUT"
TMP=$(mktemp -d /tmp/dlshim-bench-core.XXXXXX)
RT=$TMP/rt            # private coordinator: never touch the user's default one
CG=""                 # blkio cgroup of part (c), when we made one
cleanup() {
	DLSHIM_RUNTIME_DIR=$RT "$BUILD/dlshim" stop >/dev/null 2>&1 || true
	if [ -n "$CG" ] && [ -d "$CG" ]; then
		# Anything left in the group (a coordinator that outlived stop) goes
		# back to our own group so that the directory can be removed.
		local p
		for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do
			echo "$p" >"$(dirname "$CG")/cgroup.procs" 2>/dev/null || true
		done
		rmdir "$CG" 2>/dev/null || echo "bench-core: could not remove cgroup $CG" >&2
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- dataset: random bytes (content does not matter here), 3 label dirs ----
if [ ! -d "$DATA" ]; then
	echo "bench-core: generating $FILES files of 100 KB in $DATA"
	rm -rf "$DATA.tmp"
	for ((i = 0; i < FILES; i++)); do
		d=$DATA.tmp/class$((i % 3))
		mkdir -p "$d"
		head -c 102400 /dev/urandom >"$d/$i.bin"
	done
	mv "$DATA.tmp" "$DATA" # only a complete dataset ever has the final name
fi
[ -e "$UNROUTED" ] || head -c 4096 /dev/urandom >"$UNROUTED"
DATASET_BYTES=$(du -sb --apparent-size "$DATA" | cut -f1)

# Every shim run: this build's library, the dataset as the only root, a cache
# that holds it all, a private runtime dir; the coordinator stays up between
# the two jobs of (c) (idle exit 60 s) and is stopped explicitly.
SHIM_ENV=(LD_PRELOAD="$LIB" DLSHIM_ROOTS="$DATA" DLSHIM_CACHE=256M DLSHIM_RUNTIME_DIR="$RT"
	DLSHIM_IDLE_EXIT=60 DLSHIM_REDIRECT=off)
shim() { env "${SHIM_ENV[@]}" "$@"; }
stop_coordinator() { DLSHIM_RUNTIME_DIR=$RT "$BUILD/dlshim" stop >/dev/null 2>&1 || true; }

# ---- (a) unrouted calls ------------------------------------------------------
# Alternate plain and shim rounds so that drift (other load, frequency) hits
# both alike; the report pairs each shim round with the plain one before it.
echo "bench-core: (a) unrouted calls, $ROUNDS rounds of ${CALLS} calls per op"
for ((r = 1; r <= ROUNDS; r++)); do
	"$BIN" unrouted "$UNROUTED" "$CALLS" 3 >>"$TMP/a_plain.jsonl"
	shim "$BIN" unrouted "$UNROUTED" "$CALLS" 3 >>"$TMP/a_shim.jsonl"
done
# Design rule: a process that never touches a root never connects anywhere.
if DLSHIM_RUNTIME_DIR=$RT "$BUILD/dlshim" status >/dev/null 2>&1; then
	echo "bench-core: warning: unrouted calls started a coordinator" >&2
fi

# ---- (b) cache hits vs warm page cache --------------------------------------
echo "bench-core: (b) whole-file reads of $FILES files, $PASSES passes (pass 1 warms)"
"$BIN" files "$DATA" "$PASSES" 1 >"$TMP/b_plain.json"
stop_coordinator
shim "$BIN" files "$DATA" "$PASSES" 1 >"$TMP/b_shim.json"
DLSHIM_RUNTIME_DIR=$RT "$BUILD/dlshim" stats --json >"$TMP/b_stats.json" 2>/dev/null || echo null >"$TMP/b_stats.json"
stop_coordinator

# ---- (c) two jobs, caches dropped before each, bytes from the disk -----------
dev_of() { # MAJ:MIN of the whole disk holding $1 (blkio and diskstats count whole disks too)
	local d maj min sys
	d=$(stat -c '%d' "$1")
	maj=$((d >> 8)) min=$((d & 255))
	sys=/sys/dev/block/$maj:$min
	[ -e "$sys" ] || { echo ""; return; } # tmpfs, overlay...: no block device
	if [ -e "$sys/partition" ]; then cat "$(readlink -f "$sys/..")/dev"; else echo "$maj:$min"; fi
}
DEV=$(dev_of "$DATA")
DEVNAME=""
[ -n "$DEV" ] && DEVNAME=$(basename "$(readlink -f "/sys/dev/block/$DEV")")

# Prefer a blkio cgroup of our own: it counts only our processes (and the
# coordinator, which the first job spawns inside it); /proc/diskstats counts
# the whole machine.
METHOD=none
if [ -n "$DEV" ]; then
	METHOD=diskstats
	MYBLK=$(awk -F: '$2 == "blkio" { print $3 }' /proc/self/cgroup)
	if [ -n "$MYBLK" ] && [ -w "/sys/fs/cgroup/blkio$MYBLK" ] &&
		mkdir "/sys/fs/cgroup/blkio${MYBLK%/}/dlshim-bench-core-$$" 2>/dev/null; then
		CG=/sys/fs/cgroup/blkio${MYBLK%/}/dlshim-bench-core-$$
		METHOD=blkio-cgroup
	fi
fi
read_bytes() {
	case $METHOD in
	blkio-cgroup) awk -v d="$DEV" '$1 == d && $2 == "Read" { s += $3 } END { printf "%.0f\n", s }' \
		"$CG/blkio.throttle.io_service_bytes_recursive" ;;
	diskstats) awk -v n="$DEVNAME" '$3 == n { printf "%.0f\n", $6 * 512 }' /proc/diskstats ;;
	*) echo 0 ;;
	esac
}
DROP=fadvise
drop_caches() {
	sync
	if echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then DROP=drop_caches; fi
	"$BIN" evict "$DATA" # also works unprivileged
	# Re-read the programs themselves so only dataset reads are counted.
	cat "$BIN" "$LIB" "$BUILD/dlshimd" >/dev/null
	"$BIN" unrouted "$UNROUTED" 1 1 >/dev/null
	shim "$BIN" unrouted "$UNROUTED" 1 1 >/dev/null
	ldd "$BUILD/dlshimd" 2>/dev/null | awk '$3 ~ /^\// { print $3 }' | xargs -r cat >/dev/null
}
run_job() { # plain|shim JOB: one job reading every file once, in its own order
	local variant=$1 job=$2 before after pre=() envs=()
	[ "$variant" = shim ] && envs=("${SHIM_ENV[@]}")
	# Run inside the accounting cgroup (the shell joins it, then execs).
	[ -n "$CG" ] && pre=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG")
	drop_caches
	before=$(read_bytes)
	"${pre[@]}" env "${envs[@]}" "$BIN" files "$DATA" 1 "$job" >"$TMP/c_${variant}_$job.json"
	after=$(read_bytes)
	echo "{\"variant\":\"$variant\",\"job\":$job,\"disk_bytes\":$((after - before))}" >>"$TMP/c.jsonl"
}
echo "bench-core: (c) two jobs after dropped caches, disk reads via $METHOD${DEV:+ on $DEV}"
stop_coordinator
run_job plain 1
run_job plain 2
run_job shim 1 # loads the dataset into the shared cache
run_job shim 2 # a different job (own job id), same files: should be all hits
DLSHIM_RUNTIME_DIR=$RT "$BUILD/dlshim" stats --json >"$TMP/c_stats.json" 2>/dev/null || echo null >"$TMP/c_stats.json"
stop_coordinator

# ---- report --------------------------------------------------------------------
$PY bench/core_report.py "$TMP" "${BENCH_CORE_RESULTS:-$OUT/core.json}" "${BENCH_CORE_MD:-docs/benchmarks.md}" \
	"{\"dataset_bytes\":$DATASET_BYTES,\"files\":$FILES,\"calls\":$CALLS,\"rounds\":$ROUNDS,\"passes\":$PASSES,\"device\":\"$DEV\",\"disk_method\":\"$METHOD\",\"cache_drop\":\"$DROP\"}"
