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
# CPU accounting, where the controller is there: a run's CPU seconds (the
# job, its workers and the coordinator together) tell a CPU-bound run from
# one that waits.
CG_CPU=/sys/fs/cgroup/cpuacct

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
	[ ! -w "$CG_CPU" ] || mkdir -p "$CG_CPU/$name"
}

cg_destroy() {
	local name=$1 p
	for p in $(cat "$CG_BLKIO/$name/cgroup.procs" "$CG_MEM/$name/cgroup.procs" 2>/dev/null); do
		kill -9 "$p" 2>/dev/null
	done
	sleep 0.2
	rmdir "$CG_BLKIO/$name" "$CG_MEM/$name" 2>/dev/null || true
	[ ! -d "$CG_CPU/$name" ] || rmdir "$CG_CPU/$name" 2>/dev/null || true
}

# cg_run NAME CMD...: run CMD inside the groups (the shell joins them first).
cg_run() {
	local name=$1
	shift
	sh -c 'echo $$ >"$1/cgroup.procs" && echo $$ >"$2/cgroup.procs" &&
		{ [ ! -d "$3" ] || echo $$ >"$3/cgroup.procs"; } && shift 3 && exec "$@"' \
		sh "$CG_BLKIO/$name" "$CG_MEM/$name" "$CG_CPU/$name" "$@"
}

# coordinator_cpu_seconds NAME: CPU seconds of the group's coordinator
# (dlshimd, still running after the job), "null" when there is none.
coordinator_cpu_seconds() {
	local p
	for p in $(cat "$CG_MEM/$1/cgroup.procs" 2>/dev/null); do
		if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = dlshimd ]; then
			awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$p/stat"
			return
		fi
	done
	echo null
}

# cg_cpu_seconds NAME: CPU seconds used by the group so far ("null" without
# the cpuacct controller).
cg_cpu_seconds() {
	if [ -r "$CG_CPU/$1/cpuacct.usage" ]; then
		awk '{ printf "%.3f", $1 / 1e9 }' "$CG_CPU/$1/cpuacct.usage"
	else
		echo null
	fi
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

# imagefolder_once DIR FILES CLASSES: generate the benchmarks' ImageFolder of
# ~100 KB JPEG files (seeded) unless DIR already holds it.
imagefolder_once() {
	[ -d "$1" ] && return 0
	echo "generating $2 JPEG files of ~100 KB in $1"
	$PY examples/gen_imagefolder.py --out "$1" --classes "$3" --per-class $(($2 / $3)) --size 100 --seed 7
}

# loop_disk_copy DIR WORK: copy DIR onto a fresh ext4 file system on a loop
# device backed by WORK/disk.img with direct I/O (the host's page cache is
# not in the way, and the benchmark owns the device it throttles), mounted at
# WORK/mnt. Sets LOOP, MNT (the caller's cleanup: umount -l "$MNT";
# losetup -d "$LOOP") and LOOP_DATA, the copy of DIR.
loop_disk_copy() {
	local img=$2/disk.img
	MNT=$2/mnt
	mkdir -p "$MNT"
	rm -f "$img"
	truncate -s $((($(du -sb "$1" | cut -f1) * 3 / 2 >> 20) + 257))M "$img" # whole MiB: loop wants whole sectors
	mkfs.ext4 -q -F "$img"
	LOOP=$(losetup -f --show --direct-io=on "$img")
	mount "$LOOP" "$MNT"
	cp -a "$1" "$MNT/"
	LOOP_DATA=$MNT/$(basename "$1")
	sync
}
