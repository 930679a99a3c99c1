#!/usr/bin/env bash
# Crash reports.
#  (a) shim, DLSHIM_LOG=debug: a host dying of SIGSEGV, SIGBUS or SIGABRT
#      prints a backtrace naming the faulting function on stderr, and its
#      exit status is exactly the one it has without the shim
#  (b) shim, default log level: no backtrace, same exit status
#  (c) a program with its own SIGSEGV handler keeps it (debug or not)
#  (d) coordinator: SIGSEGV, SIGBUS, SIGABRT leave a backtrace in
#      dlshimd.log; the next client gets a new coordinator and correct bytes
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dl_setup crash-reports

PROBE=$DLSHIM_BUILD/progs/crash_probe
[ -x "$PROBE" ] || { echo "not available: $PROBE missing (run make)"; exit 77; }
DATA=$DL_TMP/data
dl_make_random_files "$DATA" 8 1000 20000 61
dl_manifest "$DATA" "$DL_TMP/manifest"
FILE=$(find "$DATA" -type f | sort | head -n 1)
export DLSHIM_ROOTS=$DATA

# status NAME ARGS...: run the probe, print its exit status; stderr to $DL_TMP/NAME.err
status() {
	local name=$1
	shift
	"$@" >"$DL_TMP/$name.out" 2>"$DL_TMP/$name.err"
	echo $?
}

dl_section "(a)/(b) fatal signals in the host"
for how in segv bus abort; do
	plain=$(status "$how-plain" "$PROBE" "$how" "$FILE")
	dbg=$(status "$how-debug" env LD_PRELOAD="$DL_LIB" DLSHIM_LOG=debug "$PROBE" "$how" "$FILE")
	quiet=$(status "$how-quiet" env LD_PRELOAD="$DL_LIB" "$PROBE" "$how" "$FILE")
	dl_info "$how: exit plain $plain, debug $dbg, default $quiet"
	dl_check "$how: the probe died of a signal (exit $plain > 128)" [ "$plain" -gt 128 ]
	dl_check "$how: same exit status with the shim in debug" [ "$dbg" -eq "$plain" ]
	dl_check "$how: same exit status with the shim at the default level" [ "$quiet" -eq "$plain" ]
	dl_check "$how: the probe read its file before dying" grep -qx 'read ok' "$DL_TMP/$how-debug.out"
	if grep -q "fatal signal $((plain - 128))" "$DL_TMP/$how-debug.err" &&
		grep -q 'probe_fault' "$DL_TMP/$how-debug.err"; then
		dl_ok "$how: debug prints a backtrace naming probe_fault"
	else
		dl_fail "$how: debug prints a backtrace naming probe_fault"
		dl_show "$DL_TMP/$how-debug.err"
	fi
	if grep -q 'backtrace' "$DL_TMP/$how-quiet.err"; then
		dl_fail "$how: no backtrace at the default log level"
		dl_show "$DL_TMP/$how-quiet.err"
	else
		dl_ok "$how: no backtrace at the default log level"
	fi
done

dl_section "(c) the program's own handler is kept"
rc=$(status handled env LD_PRELOAD="$DL_LIB" DLSHIM_LOG=debug "$PROBE" handled "$FILE")
dl_check "its handler ran (exit $rc = 42)" [ "$rc" -eq 42 ]
dl_check "its message is there" grep -q 'own handler ran' "$DL_TMP/handled.err"
if grep -q 'backtrace' "$DL_TMP/handled.err"; then
	dl_fail "no shim backtrace over the program's handler"
else
	dl_ok "no shim backtrace over the program's handler"
fi

dl_section "(d) fatal signals in the coordinator"
dl_build_reader reader -O2 || { dl_fail "build tests/progs/threaded_reader.c"; dl_finish; }
find "$DATA" -type f | sort >"$DL_TMP/list"
for sig in SEGV BUS ABRT; do
	dl_new_runtime_dir
	env LD_PRELOAD="$DL_LIB" "$DL_TMP/reader" -t 2 <"$DL_TMP/list" >"$DL_TMP/r1.out" 2>/dev/null
	pid=$(dl_daemon_pids)
	if [ -z "$pid" ]; then
		dl_fail "SIG$sig: a coordinator runs"
		continue
	fi
	kill -s "$sig" "$pid"
	dl_wait_until 10 sh -c "[ ! -e /proc/$pid ] || grep -q '^State:.*Z' /proc/$pid/status" ||
		dl_fail "SIG$sig: the coordinator ended"
	num=$(kill -l "$sig")
	if grep -q "fatal signal $num; backtrace" "$DLSHIM_RUNTIME_DIR/dlshimd.log" &&
		grep -q '  #0 ' "$DLSHIM_RUNTIME_DIR/dlshimd.log"; then
		dl_ok "SIG$sig: dlshimd.log has the signal and a backtrace"
	else
		dl_fail "SIG$sig: dlshimd.log has the signal and a backtrace"
		dl_show "$DLSHIM_RUNTIME_DIR/dlshimd.log"
	fi
	env LD_PRELOAD="$DL_LIB" "$DL_TMP/reader" -t 2 <"$DL_TMP/list" >"$DL_TMP/r2.out" 2>"$DL_TMP/r2.err"
	if probs=$(dl_check_hashes "$DL_TMP/r2.out" "$DL_TMP/manifest"); then
		dl_ok "SIG$sig: the next reader gets correct bytes"
	else
		dl_fail "SIG$sig: the next reader gets correct bytes"
		printf '%s\n' "$probs" | head -n 5
	fi
	dl_check "SIG$sig: a new coordinator serves it" [ -n "$(dl_daemon_pids)" ] && [ "$(dl_daemon_pids)" != "$pid" ]
done
dl_finish
