#!/usr/bin/env bash
# A TensorFlow-style multi-threaded C reader (tests/progs/threaded_reader.c)
# under the shim: 8 threads open/fstat/read/close files of the dataset; every
# byte it receives must be the file's byte on disk (sha256 vs sha256sum), cold
# and warm cache, through pread, read+lseek, readv/preadv, open and openat, and
# through glibc's fortified entry points (__open_2, __openat_2, __read_chk,
# __pread_chk, __open64_2, __openat64_2, __pread64_chk).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dl_setup threaded

DATA=$DL_TMP/data
# sizes around the 16 KiB block size, empty files, files up to 1 MiB
dl_make_random_files "$DATA/a" 60 0 300000 21
dl_make_random_files "$DATA/b" 20 16380 16390 22
dl_make_random_files "$DATA/c" 4 900000 1100000 23
: >"$DATA/empty.bin"
head -c 16384 /dev/urandom >"$DATA/exact_block.bin"
dl_manifest "$DATA" "$DL_TMP/manifest"
find "$DATA" -type f | sort >"$DL_TMP/list"
NFILES=$(wc -l <"$DL_TMP/list")
TOTAL=$(find "$DATA" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
export DLSHIM_ROOTS=$DATA
export DLSHIM_CACHE=256M
# stats are summed over the runs of one coordinator: keep it up between runs
export DLSHIM_IDLE_EXIT=60
dl_info "$NFILES files, $TOTAL bytes"

dl_section "build the reader: plain, fortified, fortified with 64-bit offsets"
dl_check "plain build" dl_build_reader reader_plain -O2 -U_FORTIFY_SOURCE
dl_check "fortified build (-O2 -D_FORTIFY_SOURCE=2)" dl_build_reader reader_fort -O2 -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2
dl_check "fortified 64-bit-offset build (-D_FILE_OFFSET_BITS=64)" dl_build_reader reader_fort64 -O2 -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2 -D_FILE_OFFSET_BITS=64
syms() { nm -D "$DL_TMP/$1" | awk '$1 == "U" {sub(/@.*/, "", $2); print $2}'; }
for s in __open_2 __openat_2 __read_chk __pread_chk; do
	syms reader_fort | grep -qx "$s" && dl_ok "reader_fort references $s" || dl_fail "reader_fort references $s"
done
for s in __open64_2 __openat64_2 __read_chk __pread64_chk; do
	syms reader_fort64 | grep -qx "$s" && dl_ok "reader_fort64 references $s" || dl_fail "reader_fort64 references $s"
done
syms reader_plain | grep -q '_chk$\|_2$' && dl_fail "reader_plain uses no fortified symbol" || dl_ok "reader_plain uses no fortified symbol"
# the shim must export the fortified wrappers it relies on for these programs
for s in open read pread __open_2 __openat_2 __read_chk __pread_chk __open64_2 __openat64_2 __pread64_chk; do
	nm -D --defined-only "$DL_LIB" | awk '{sub(/@.*/, "", $3); print $3}' | grep -qx "$s" &&
		dl_ok "libdlshim.so exports $s" || dl_fail "libdlshim.so exports $s"
done

# run_case NAME BINARY EXTRA_ARGS...: run the reader under the shim over the
# list, check every line against the manifest and that stderr is clean.
run_case() {
	local name=$1 bin=$2 rc probs
	shift 2
	DLSHIM_STATS=$DL_TMP/$name.stats dl_shim timeout 60 "$DL_TMP/$bin" -t 8 "$@" <"$DL_TMP/list" >"$DL_TMP/$name.out" 2>"$DL_TMP/$name.err"
	rc=$?
	[ "$rc" -eq 0 ] && dl_ok "$name: reader exits 0" || { dl_fail "$name: reader exits 0 (got $rc)"; dl_show "$DL_TMP/$name.err"; }
	if probs=$(dl_check_hashes "$DL_TMP/$name.out" "$DL_TMP/manifest" "${REPS:-1}"); then
		dl_ok "$name: all $NFILES files x ${REPS:-1} have the sha256 of the file on disk"
	else
		dl_fail "$name: all $NFILES files x ${REPS:-1} have the sha256 of the file on disk"
		printf '%s\n' "$probs" | head -n 15 | sed 's/^/        | /'
	fi
	[ ! -s "$DL_TMP/$name.err" ] && dl_ok "$name: nothing on stderr (no warnings)" || { dl_fail "$name: nothing on stderr (no warnings)"; dl_show "$DL_TMP/$name.err"; }
}

jobsum() { dl_stat "sum(x[\"$1\"] for x in j[\"jobs\"])"; }
# jobstat NAME FIELD: a field of the DLSHIM_STATS file written by run NAME
jobstat() { dl_json "j[\"$2\"]" <"$DL_TMP/$1.stats" 2>/dev/null; }
# all_from_cache NAME: a warm run copied at least the whole dataset out of the cache
all_from_cache() {
	local b
	b=$(jobstat "$1" bytes_from_cache)
	[ "${b:-0}" -ge "$TOTAL" ] && dl_ok "$1: read()/pread() served from the cache (bytes_from_cache $b >= $TOTAL)" ||
		dl_fail "$1: read()/pread() served from the cache (bytes_from_cache '${b}' < dataset $TOTAL)"
}

dl_section "pread in 64 KiB chunks: cold, then warm cache"
run_case cold_pread reader_plain -m pread -c 65536
misses_cold=$(jobsum misses)
requests_cold=$(jobsum requests)
[ "${requests_cold:-0}" -eq "$NFILES" ] && dl_ok "cold run: coordinator counted $NFILES routed opens" || dl_fail "cold run: coordinator counted $NFILES routed opens (got '${requests_cold}')"
[ "${misses_cold:-0}" -gt 0 ] && dl_ok "cold run loaded files (misses = $misses_cold)" || dl_fail "cold run loaded files (misses = '${misses_cold}')"
run_case warm_pread reader_plain -m pread -c 65536
hits_warm=$(jobsum hits)
misses_warm=$(jobsum misses)
[ "${hits_warm:-0}" -gt 0 ] && dl_ok "warm run served from the cache (hits = $hits_warm)" || dl_fail "warm run served from the cache (hits = '${hits_warm}')"
[ "${misses_warm:-0}" -eq "${misses_cold:-x}" ] && dl_ok "warm run loaded nothing new (misses stay $misses_cold)" || dl_fail "warm run loaded nothing new (misses $misses_cold -> $misses_warm)"
all_from_cache warm_pread
r=$(jobstat warm_pread requests)
[ "${r:-x}" = "$NFILES" ] && dl_ok "DLSHIM_STATS file of the warm run: requests == $NFILES opens" || dl_fail "DLSHIM_STATS file of the warm run: requests == $NFILES opens (got '${r}')"

dl_section "small and odd chunk sizes, read+lseek, readv/preadv, openat"
run_case pread_4k reader_plain -m pread -c 4096
run_case pread_odd reader_plain -m pread -c 1021
run_case read_lseek reader_plain -m read -c 4096
run_case read_64k_openat reader_plain -m read -c 65536 -o openat
run_case vec reader_plain -m vec -c 8192
run_case vec_openat reader_plain -m vec -c 333 -o openat
REPS=3 run_case read_3reps reader_plain -m read -c 16384 -r 3

dl_section "fortified binaries (__open_2 / __read_chk / __pread_chk ...)"
run_case fort_pread reader_fort -m pread -c 4096
run_case fort_read reader_fort -m read -c 7000
run_case fort_openat_read reader_fort -m read -c 65536 -o openat
run_case fort_vec reader_fort -m vec -c 4096
run_case fort64_pread reader_fort64 -m pread -c 4096 -o openat
run_case fort64_read reader_fort64 -m read -c 65536
req_now=$(jobsum requests)
dl_info "routed opens so far: $req_now"
# every run above routed every file: a wrapper that is missing (e.g. __open_2
# not interposed) shows up as fewer routed opens than files opened
RUNS=17 # 2 + 6 + 3 (3 reps) + 4 + 2
EXPECT=$((NFILES * RUNS))
[ "${req_now:-0}" -eq "$EXPECT" ] && dl_ok "every open of every variant was routed ($EXPECT opens)" || dl_fail "every open of every variant was routed (expected $EXPECT, coordinator counted '${req_now}')"

dl_section "the fortified reader alone routes its opens (fresh coordinator)"
dl_new_runtime_dir
run_case fort_alone reader_fort -m read -c 4096
r=$(jobsum requests)
[ "${r:-0}" -eq "$NFILES" ] && dl_ok "__open_2 opens routed: $NFILES requests" || dl_fail "__open_2 opens routed: expected $NFILES requests, got '${r}'"
run_case fort_alone_warm_read reader_fort -m read -c 4096
h=$(jobstat fort_alone_warm_read hits)
[ "${h:-0}" -eq "$NFILES" ] && dl_ok "warm __open_2 opens are cache hits ($h)" || dl_fail "warm __open_2 opens are cache hits (expected $NFILES, got '${h}')"
all_from_cache fort_alone_warm_read
run_case fort_alone_warm_pread reader_fort -m pread -c 4096
all_from_cache fort_alone_warm_pread
dl_new_runtime_dir
run_case fort64_alone reader_fort64 -m pread -c 4096 -o openat
r=$(jobsum requests)
[ "${r:-0}" -eq "$NFILES" ] && dl_ok "__openat64_2 opens routed: $NFILES requests" || dl_fail "__openat64_2 opens routed: expected $NFILES requests, got '${r}'"
run_case fort64_alone_warm reader_fort64 -m pread -c 4096 -o openat
all_from_cache fort64_alone_warm

dl_finish
