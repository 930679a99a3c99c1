#!/usr/bin/env bash
# A coordinator in a memory cgroup whose limit is below DLSHIM_CACHE caps
# its cache below the limit instead of being OOM-killed, and says so: the
# client prints one warning naming the memory cgroup, the coordinator's log
# names both sizes. Checked with a cgroup v1 memory group of 96 MiB, a cache
# of 1 GiB asked for and a dataset (~190 MB) read twice; every byte read
# must be the file's (sha256), the coordinator must still be the same live
# process afterwards and the group must have seen no OOM kill.
# Needs root and a writable cgroup v1 memory hierarchy (or cgroup v2).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dl_setup cache-pressure

LIMIT=$((96 << 20))
if [ -w /sys/fs/cgroup/memory ]; then
	CG=/sys/fs/cgroup/memory/dlshim-pressure-$$
	LIMIT_FILE=memory.limit_in_bytes
elif [ -w /sys/fs/cgroup/cgroup.subtree_control ]; then
	CG=/sys/fs/cgroup/dlshim-pressure-$$
	LIMIT_FILE=memory.max
else
	echo "not available: no writable memory cgroup hierarchy"
	exit 77
fi
mkdir "$CG" || { echo "not available: cannot create $CG"; exit 77; }
DL_CG_DIR=$CG
cg_cleanup() {
	# the coordinator of this test lives in the group: stop it, then remove
	local rc=$?
	dl_cleanup
	rmdir "$DL_CG_DIR" 2>/dev/null || true
	exit "$rc"
}
trap cg_cleanup EXIT
echo "$LIMIT" >"$CG/$LIMIT_FILE"

DATA=$DL_TMP/data
dl_make_random_files "$DATA" 120 1000000 2200000 41
dl_manifest "$DATA" "$DL_TMP/manifest"
find "$DATA" -type f | sort >"$DL_TMP/list"
dl_build_reader reader -O2 || { dl_fail "build tests/progs/threaded_reader.c"; dl_finish; }

# Everything below runs inside the group: the reader, and so the
# coordinator it spawns.
in_group() { bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$CG" "$@"; }

dl_section "a 1 GiB cache asked for under a 96 MiB memory limit"
in_group env LD_PRELOAD="$DL_LIB" DLSHIM_ROOTS="$DATA" DLSHIM_CACHE=1G \
	"$DL_TMP/reader" -t 4 -m read -c 65536 -r 2 <"$DL_TMP/list" >"$DL_TMP/out" 2>"$DL_TMP/err"
rc=$?
dl_check "the reader exits 0" [ "$rc" -eq 0 ]
if probs=$(dl_check_hashes "$DL_TMP/out" "$DL_TMP/manifest" 2); then
	dl_ok "every file read twice with the sha256 of the file on disk"
else
	dl_fail "every file read twice with the sha256 of the file on disk"
	printf '%s\n' "$probs" | head -n 10 | sed 's/^/        | /'
fi
if grep -q 'memory cgroup limit' "$DL_TMP/err"; then
	dl_ok "the client warns that the cache was capped for the memory cgroup"
else
	dl_fail "the client warns that the cache was capped for the memory cgroup"
	dl_show "$DL_TMP/err"
fi
dl_check "exactly one shim warning" [ "$(dl_warnings "$DL_TMP/err")" -eq 1 ]
if grep -q 'lost the coordinator' "$DL_TMP/err"; then
	dl_fail "the coordinator was never lost"
	dl_show "$DL_TMP/err"
else
	dl_ok "the coordinator was never lost"
fi
dl_check "the coordinator is still running" [ -n "$(dl_daemon_pids)" ]
CAP=$(dl_stat 'j["cache"]["capacity_bytes"]' 2>/dev/null || echo 0)
dl_info "cache capacity $CAP bytes"
dl_check "the cache capacity is below the limit" [ "${CAP:-0}" -gt 0 ] && [ "${CAP:-0}" -lt "$LIMIT" ]
if grep -q 'does not fit the memory cgroup limit' "$DLSHIM_RUNTIME_DIR/dlshimd.log"; then
	dl_ok "the coordinator's log names the cap and the limit"
else
	dl_fail "the coordinator's log names the cap and the limit"
	dl_show "$DLSHIM_RUNTIME_DIR/dlshimd.log"
fi
if [ -f "$CG/memory.oom_control" ]; then
	KILLS=$(awk '$1 == "oom_kill" {print $2}' "$CG/memory.oom_control")
else
	KILLS=$(awk '$1 == "oom_kill" {print $2}' "$CG/memory.events")
fi
dl_check "no OOM kill in the group (oom_kill ${KILLS:-?})" [ "${KILLS:-1}" -eq 0 ]

dl_section "without a limit the cache is what DLSHIM_CACHE asks"
dl_new_runtime_dir
env LD_PRELOAD="$DL_LIB" DLSHIM_ROOTS="$DATA" DLSHIM_CACHE=256M \
	"$DL_TMP/reader" -t 2 -m read -c 65536 -r 1 <"$DL_TMP/list" >"$DL_TMP/out2" 2>"$DL_TMP/err2"
dl_check "no warning outside the group" [ "$(dl_warnings "$DL_TMP/err2")" -eq 0 ]
CAP=$(dl_stat 'j["cache"]["capacity_bytes"]' 2>/dev/null || echo 0)
dl_check "capacity close to 256 MiB ($CAP)" [ "${CAP:-0}" -gt $((200 << 20)) ]
dl_finish
