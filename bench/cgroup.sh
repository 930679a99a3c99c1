# Throttled-storage helpers for the benchmarks (sourced by bench_*.sh).
#
# Storage is slow in real life; on this machine it is a fast virtual disk and
# the page cache hides re-reads. A run therefore happens inside
#   * a cgroup v1 blkio group throttling reads of the dataset's disk
#     (read_bps_device / read_iops_device), and
#   * a memory cgroup whose limit leaves little room for the page cache,
# with caches dropped before it. The coordinator is spawned by the job, so it
# is in the same groups (its shared-memory cache counts against the limit).

CG_BLKIO=/sys/fs/cgroup/blkio
CG_MEM=/sys/fs/cgroup/memory

# dev_of PATH: MAJ:MIN of the whole disk holding PATH.
dev_of() {
	local mm
	mm=$(stat -c '%d' "$1")
	local maj=$((mm >> 8)) min=$((mm & 255))
	# A partition's parent disk is what blkio throttles.
	local sys=/sys/dev/block/$maj:$min
	if [ -e "$sys/partition" ]; then
		cat "$(readlink -f "$sys/..")/dev"
	else
		echo "$maj:$min"
	fi
}

throttle_available() {
	[ -w "$CG_BLKIO" ] && [ -w "$CG_MEM" ] && [ -e "$CG_BLKIO/blkio.throttle.read_bps_device" ]
}

# cg_create NAME DEV BPS IOPS MEMLIMIT_BYTES
cg_create() {
	local name=$1 dev=$2 bps=$3 iops=$4 mem=$5
	mkdir -p "$CG_BLKIO/$name" "$CG_MEM/$name"
	echo "$dev $bps" >"$CG_BLKIO/$name/blkio.throttle.read_bps_device"
	echo "$dev $iops" >"$CG_BLKIO/$name/blkio.throttle.read_iops_device"
	echo "$mem" >"$CG_MEM/$name/memory.limit_in_bytes"
}

cg_destroy() {
	local name=$1 p
	for p in $(cat "$CG_BLKIO/$name/cgroup.procs" "$CG_MEM/$name/cgroup.procs" 2>/dev/null); do
		kill -9 "$p" 2>/dev/null
	done
	sleep 0.2
	rmdir "$CG_BLKIO/$name" "$CG_MEM/$name" 2>/dev/null || true
}

# cg_run NAME CMD...: run CMD inside the groups (the shell joins them first).
cg_run() {
	local name=$1
	shift
	sh -c 'echo $$ >"$1/cgroup.procs" && echo $$ >"$2/cgroup.procs" && shift 2 && exec "$@"' \
		sh "$CG_BLKIO/$name" "$CG_MEM/$name" "$@"
}

# cg_read_bytes NAME DEV: bytes read from DEV by the group so far.
cg_read_bytes() {
	awk -v d="$2" '$1 == d && $2 == "Read" { print $3; f = 1 } END { if (!f) print 0 }' \
		"$CG_BLKIO/$1/blkio.throttle.io_service_bytes_recursive"
}

drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
}
