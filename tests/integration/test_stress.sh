#!/usr/bin/env bash
# Concurrency, fork, exec and signals under the shim (DESIGN "Interposition
# rules" 2, 3, 6), with every byte checked by tests/progs/stress_reader.c
# (self-describing files: any byte at any offset is verified on the spot).
#  (a) 64 threads, half on the same 8 files in the same order, half each on
#      their own, with read() in odd chunk sizes, pread() at random offsets
#      (past EOF too), lseek()+read(), readv()/preadv(): no wrong byte, offsets
#      as the kernel keeps them; the same with a cache so small that slots are
#      evicted under the readers; the same in redirect mode `any` (each served
#      file must be a whole, self-consistent file of the size fstat reports)
#  (b) a process forks 20 times while 8 threads loop open/read/close under the
#      shim; each child reads an inherited routed descriptor and 3 files, or
#      execs a reader with the same environment (shim loaded) or through
#      `env -i` (no shim); no child hangs (20 s each), no wrong byte
#  (c) SIGALRM every 150 us from an interval timer, handler WITHOUT SA_RESTART,
#      while open/read/pread/close loop over routed files: the set of outcomes
#      (full, short at EOF, EINTR, ...) under the shim is a subset of the set
#      without it, no wrong byte, no hang; also with a handler that itself
#      opens, preads and closes routed files (async-signal-safe calls)
#  (d) exec from a shimmed process: with `env -i` the child runs without the
#      shim and reads correct bytes; with the environment kept it is shimmed
# Throughout: the same coordinator serves everything, nothing on stderr.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dl_setup stress

SR=$DL_TMP/stress_reader
if ! cc -std=gnu11 -O2 -D_GNU_SOURCE -pthread -Wall -Werror -o "$SR" "$DL_REPO/tests/progs/stress_reader.c" -lpthread; then
	dl_fail "build tests/progs/stress_reader.c"
	dl_finish
fi
DATA=$DL_TMP/data
mkdir -p "$DATA/a" "$DATA/b"
"$SR" gen "$DATA/a" 48 24 300000 1 && "$SR" gen "$DATA/b" 48 24 120000 2 ||
	{ dl_fail "generate the data set"; dl_finish; }
dl_manifest "$DATA" "$DL_TMP/manifest"
# the biggest file last: the fork test's inherited descriptor
mapfile -t FILES < <(find "$DATA" -type f -printf '%s %p\n' | sort -n | cut -d' ' -f2-)
NF=${#FILES[@]}
dl_info "$NF files, $(du -sh "$DATA" | cut -f1)"
export DLSHIM_ROOTS=$DATA
export DLSHIM_CACHE=64M

# run_ok NAME TIMEOUT CMD...: run with a timeout; output in $DL_TMP/NAME.{out,err}
run_ok() {
	local name=$1 t=$2 rc
	shift 2
	timeout -k 5 "$t" "$@" >"$DL_TMP/$name.out" 2>"$DL_TMP/$name.err"
	rc=$?
	case $rc in
	0) dl_ok "$name: exits 0" ;;
	124 | 137) dl_fail "$name: finished within ${t}s (killed: hang)" ;;
	*) dl_fail "$name: exits 0 (got $rc)" ;;
	esac
	if grep -q '^ERROR\|^HANG' "$DL_TMP/$name.err"; then
		dl_fail "$name: no wrong byte, no error"
		grep '^ERROR\|^HANG' "$DL_TMP/$name.err" | head -n 8 | sed 's/^/        | /'
	else
		dl_ok "$name: no wrong byte, no error"
	fi
	if grep -q 'dlshim' "$DL_TMP/$name.err"; then
		dl_fail "$name: no dlshim message on stderr"
		grep 'dlshim' "$DL_TMP/$name.err" | head -n 3 | sed 's/^/        | /'
	else
		dl_ok "$name: no dlshim message on stderr"
	fi
	dl_show "$DL_TMP/$name.out" 4
	return "$rc"
}
stat_of() { dl_stat "$1" 2>/dev/null; }

#####################################################################
dl_section "(a) 64 threads on the same and on different files"
run_ok threads 120 env LD_PRELOAD="$DL_LIB" "$SR" threads -t 64 -i 20 "${FILES[@]}"
DPID=$(stat_of 'j["daemon"]["pid"]')
REQ=$(stat_of 'sum(x["requests"] for x in j["jobs"])')
BC=$(stat_of 'sum(x["bytes_from_cache"] for x in j["jobs"])')
[ "${REQ:-0}" -ge 1280 ] && dl_ok "every open was routed (requests $REQ >= 1280)" || dl_fail "every open was routed (requests '$REQ', expected >= 1280)"
[ "${BC:-0}" -gt 0 ] && dl_ok "reads were served from the cache ($BC bytes)" || dl_fail "reads were served from the cache (bytes_from_cache '$BC')"

dl_info "again with a 2 MiB cache: slots are evicted and reused under the readers"
dl_new_runtime_dir
DLSHIM_CACHE=2M run_ok threads_small_cache 120 env LD_PRELOAD="$DL_LIB" "$SR" threads -t 64 -i 20 "${FILES[@]}"
EV=$(stat_of 'j["cache"]["evictions"]')
[ "${EV:-0}" -gt 0 ] && dl_ok "evictions happened during the run ($EV)" || dl_fail "evictions happened during the run (got '$EV')"

dl_info "again in redirect mode any (-R: any whole, self-consistent file of fstat's size)"
dl_new_runtime_dir
DLSHIM_REDIRECT=any run_ok threads_redirect 120 env LD_PRELOAD="$DL_LIB" "$SR" threads -R -t 64 -i 20 "${FILES[@]}"
RD=$(stat_of 'sum(x.get("redirects", 0) for x in j["jobs"])')
dl_info "redirects: $RD"

#####################################################################
dl_section "(b) fork 20 times while 8 threads are inside the shim"
dl_new_runtime_dir
run_ok fork 180 env LD_PRELOAD="$DL_LIB" "$SR" fork -t 8 -f 20 "${FILES[@]}"
grep -q '^forks 20 hangs 0 failed_children 0 ' "$DL_TMP/fork.out" && dl_ok "20 children, none hung or failed" ||
	dl_fail "20 children, none hung or failed ($(grep '^forks' "$DL_TMP/fork.out"))"
n=$(grep -c '^verified 3 shim=no$' "$DL_TMP/fork.out")
[ "$n" -eq 5 ] && dl_ok "5 children exec'd through env -i ran without the shim and read correct bytes" ||
	dl_fail "5 children exec'd through env -i ran without the shim and read correct bytes (got $n)"
n=$(grep -c '^verified 3 shim=yes$' "$DL_TMP/fork.out")
[ "$n" -eq 5 ] && dl_ok "5 children exec'd with the environment kept ran under the shim and read correct bytes" ||
	dl_fail "5 children exec'd with the environment kept ran under the shim and read correct bytes (got $n)"
DPID_F=$(stat_of 'j["daemon"]["pid"]')
PINNED=$(stat_of 'j["cache"]["items_pinned"]')
dl_wait_until 10 test "$(stat_of 'j["cache"]["items_pinned"]')" = 0 && dl_ok "no pins left after the parent and children exited" ||
	dl_fail "no pins left after the parent and children exited (items_pinned '$(stat_of 'j["cache"]["items_pinned"]')')"
[ -n "$DPID_F" ] && dl_ok "one coordinator served the forking process (pid $DPID_F)" || dl_fail "a coordinator served the forking process"
: "$PINNED"

#####################################################################
dl_section "(c) SIGALRM every 150 us, handler without SA_RESTART"
dl_new_runtime_dir
run_ok signals_plain 60 "$SR" signals -d 3 -u 150 "${FILES[@]}"
run_ok signals_shim 60 env LD_PRELOAD="$DL_LIB" "$SR" signals -d 3 -u 150 "${FILES[@]}"
plain=$(sed -n 's/^outcomes: //p' "$DL_TMP/signals_plain.out" | tr ' ' '\n' | sort)
shim=$(sed -n 's/^outcomes: //p' "$DL_TMP/signals_shim.out" | tr ' ' '\n' | sort)
extra=$(comm -13 <(printf '%s\n' "$plain") <(printf '%s\n' "$shim"))
if [ -n "$shim" ] && [ -z "$extra" ]; then
	dl_ok "every outcome under the shim is one seen without it ($(echo $shim))"
else
	dl_fail "every outcome under the shim is one seen without it (extra under the shim: $(echo $extra))"
fi
sigs=$(sed -n 's/^signals \([0-9]*\) .*/\1/p' "$DL_TMP/signals_shim.out")
[ "${sigs:-0}" -ge 1000 ] && dl_ok "the reads were interrupted often ($sigs signals)" || dl_fail "the reads were interrupted often (only '${sigs}' signals)"
files=$(sed -n 's/^signals [0-9]* files \([0-9]*\) .*/\1/p' "$DL_TMP/signals_shim.out")
[ "${files:-0}" -ge 100 ] && dl_ok "progress under signals ($files files)" || dl_fail "progress under signals (only '${files}' files)"
BC=$(stat_of 'sum(x["bytes_from_cache"] for x in j["jobs"])')
[ "${BC:-0}" -gt 0 ] && dl_ok "the interrupted reads were routed ($BC bytes from the cache)" || dl_fail "the interrupted reads were routed (bytes_from_cache '$BC')"
dl_info "a handler that opens, preads and closes routed files itself"
run_ok signals_handler_io 60 env LD_PRELOAD="$DL_LIB" "$SR" signals -H -d 3 -u 150 "${FILES[@]}"

#####################################################################
dl_section "(d) exec from a shimmed process"
dl_new_runtime_dir
run_ok exec_keep 60 env LD_PRELOAD="$DL_LIB" "$SR" verify "${FILES[@]:0:10}"
grep -q '^verified 10 shim=yes$' "$DL_TMP/exec_keep.out" && dl_ok "a shimmed reader reads 10 files correctly" || dl_fail "a shimmed reader reads 10 files correctly"
run_ok exec_clean 60 env LD_PRELOAD="$DL_LIB" /bin/sh -c '"$0" verify "$1" >/dev/null && exec env -i "$0" verify "$@"' "$SR" "${FILES[@]:0:10}"
grep -q '^verified 10 shim=no$' "$DL_TMP/exec_clean.out" && dl_ok "a shimmed shell execs env -i: the reader runs without the shim, correct bytes" ||
	dl_fail "a shimmed shell execs env -i: the reader runs without the shim, correct bytes"

dl_finish
