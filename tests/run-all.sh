#!/usr/bin/env bash
# The single test runner (`make test` calls it after building).
#
#   tests/run-all.sh                         unit, unit-asan, integration (in that order)
#   tests/run-all.sh --only unit|unit-asan|integration|valgrind
#   DLSHIM_TEST_VALGRIND=1 tests/run-all.sh  also the valgrind pass
#
# unit / unit-asan: every build[/asan]/tests/test_* cmocka binary; each
#   individual cmocka test is one result ("[  PASSED  ] N test(s)." and
#   "[  FAILED  ] N test(s)" are parsed). A binary that exits non-zero without
#   reporting a failed test (crash, sanitizer abort, timeout) counts one
#   failure more; a tests/unit/test_X.c without its binary is a failure.
# valgrind: every build/tests/test_* under valgrind; one result per binary.
# integration: every tests/integration/test_*.sh / test_*.py, one process and
#   one result each, with DLSHIM_BUILD set. Exit 77 means "not available" and
#   is still a failure: a skip never counts as a pass.
#
# Logs go to build/test-logs/. The last line is exactly "N passed, N failed";
# the exit status is 1 when anything failed.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${DLSHIM_BUILD:-$ROOT/build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
LOGS=$BUILD_DIR/test-logs
UNIT_TIMEOUT=${DLSHIM_UNIT_TIMEOUT:-300}
INTEGRATION_TIMEOUT=${DLSHIM_INTEGRATION_TIMEOUT:-300}
VALGRIND_TIMEOUT=${DLSHIM_VALGRIND_TIMEOUT:-600}
PY=/usr/bin/python3

PASSED=0
FAILED=0

usage() {
	echo "usage: $0 [--only unit|unit-asan|integration|valgrind]" >&2
	exit 2
}

ONLY=
while [ $# -gt 0 ]; do
	case $1 in
	--only)
		[ $# -ge 2 ] || usage
		ONLY=$2
		shift 2
		;;
	--only=*)
		ONLY=${1#--only=}
		shift
		;;
	-h | --help) usage ;;
	*) usage ;;
	esac
done
case $ONLY in '' | unit | unit-asan | integration | valgrind) ;; *) usage ;; esac

mkdir -p "$LOGS"

pass() {
	PASSED=$((PASSED + ${2:-1}))
	echo "PASS $1"
}

# fail NAME LOG [WHY] [COUNT]
fail() {
	local name=$1 log=$2 why=${3:-} n=${4:-1}
	FAILED=$((FAILED + n))
	if [ -n "$why" ]; then
		echo "FAIL $name ($why; see $log)"
	else
		echo "FAIL $name (see $log)"
	fi
}

tail_log() {
	[ -f "$1" ] || return 0
	echo "---- last lines of $1 ----"
	tail -n "${2:-40}" "$1" | sed 's/^/    /'
	echo "----"
}

# Run one cmocka binary; counts its individual tests. With a complete cmocka
# summary ("[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s)") per group,
# those numbers are used; when the binary died before printing one, the
# per-test verdict lines are counted and a test left without a verdict (the
# one that crashed) is a failure. Skipped tests are failures: a skip is
# never a pass.
run_cmocka() {
	local kind=$1 bin=$2 name log rc npass nfail nskip ngroups nsummaries why='' t
	name=$(basename "$bin")
	log=$LOGS/$kind/$name.log
	mkdir -p "$LOGS/$kind"
	{ (cd "$ROOT" && CMOCKA_MESSAGE_OUTPUT=STDOUT timeout -k 10 "$UNIT_TIMEOUT" "$bin") >"$log" 2>&1; } 2>/dev/null
	rc=$?
	ngroups=$(grep -c '^\[==========\] Running [0-9]* test(s)\.' "$log")
	nsummaries=$(grep -c '^\[==========\] [0-9]* test(s) run\.' "$log")
	if [ "$ngroups" -gt 0 ] && [ "$ngroups" -eq "$nsummaries" ]; then
		npass=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test(s)\..*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
		nfail=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
		nskip=$(sed -n 's/^\[  SKIPPED \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
	else
		npass=$(grep -c '^\[       OK \] ' "$log")
		nfail=$(sed -n 's/^\[  FAILED  \] \([A-Za-z_][A-Za-z_0-9]*\)$/\1/p' "$log" | sort -u | wc -l)
		nskip=$(sed -n 's/^\[  SKIPPED \] \([A-Za-z_][A-Za-z_0-9]*\)$/\1/p' "$log" | sort -u | wc -l)
	fi
	case $rc in
	0) ;;
	124 | 137) why="timeout after ${UNIT_TIMEOUT}s" ;;
	*) why="exit status $rc" ;;
	esac
	if [ "$npass" -gt 0 ]; then
		PASSED=$((PASSED + npass))
		echo "PASS $kind/$name ($npass test(s))"
	fi
	if [ "$rc" -eq 0 ] && [ "$nfail" -eq 0 ] && [ "$nskip" -eq 0 ] && [ "$npass" -eq 0 ]; then
		# exit 0 but nothing parsable: one result for the binary
		PASSED=$((PASSED + 1))
		echo "PASS $kind/$name"
	fi
	# one line per failed / skipped cmocka test
	while IFS= read -r t; do
		echo "FAIL $kind/$name/$t (see $log)"
	done < <(sed -n 's/^\[  FAILED  \] \([A-Za-z_][A-Za-z_0-9]*\)$/\1/p' "$log" | sort -u)
	while IFS= read -r t; do
		echo "FAIL $kind/$name/$t (skipped; see $log)"
	done < <(sed -n 's/^\[  SKIPPED \] \([A-Za-z_][A-Za-z_0-9]*\)$/\1/p' "$log" | sort -u)
	FAILED=$((FAILED + nfail + nskip))
	# a test that started but got no verdict: the binary died in it
	local last_run
	last_run=$(awk '/^\[ RUN      \] /{t=$4; next} /^\[ *(OK|FAILED|SKIPPED|ERROR) *\] /{if ($0 ~ t) t=""} END {print t}' "$log")
	if [ "$rc" -ne 0 ] && { [ "$nfail" -eq 0 ] || [ -n "$last_run" ]; }; then
		FAILED=$((FAILED + 1))
		echo "FAIL $kind/$name${last_run:+/$last_run} ($why, no cmocka verdict; see $log)"
	fi
	if [ "$rc" -ne 0 ] || [ "$nfail" -gt 0 ] || [ "$nskip" -gt 0 ]; then
		tail_log "$log"
	fi
}

run_unit_kind() {
	local kind=$1 dir=$2 bin src found=0 base
	echo "== $kind ($dir)"
	shopt -s nullglob
	# every unit test source must have been built
	for src in "$ROOT"/tests/unit/test_*.c; do
		base=$(basename "$src" .c)
		if [ ! -x "$dir/$base" ]; then
			mkdir -p "$LOGS/$kind"
			echo "$dir/$base was not built from $src" >"$LOGS/$kind/$base.log"
			fail "$kind/$base" "$LOGS/$kind/$base.log" "not built"
		fi
	done
	for bin in "$dir"/test_*; do
		[ -f "$bin" ] && [ -x "$bin" ] || continue
		found=1
		run_cmocka "$kind" "$bin"
	done
	shopt -u nullglob
	if [ "$found" -eq 0 ] && ! ls "$ROOT"/tests/unit/test_*.c >/dev/null 2>&1; then
		echo "FAIL $kind (no unit tests found in $dir or tests/unit)"
		FAILED=$((FAILED + 1))
	fi
}

run_valgrind() {
	local bin name log rc found=0
	echo "== valgrind"
	mkdir -p "$LOGS/valgrind"
	if ! command -v valgrind >/dev/null 2>&1; then
		echo "valgrind is not installed" >"$LOGS/valgrind/valgrind.log"
		fail valgrind "$LOGS/valgrind/valgrind.log" "not available"
		return
	fi
	shopt -s nullglob
	for bin in "$BUILD_DIR"/tests/test_*; do
		[ -f "$bin" ] && [ -x "$bin" ] || continue
		found=1
		name=$(basename "$bin")
		log=$LOGS/valgrind/$name.log
		{ (cd "$ROOT" && CMOCKA_MESSAGE_OUTPUT=STDOUT timeout -k 10 "$VALGRIND_TIMEOUT" \
			valgrind --error-exitcode=99 --leak-check=full -q "$bin") >"$log" 2>&1; } 2>/dev/null
		rc=$?
		if [ "$rc" -eq 0 ]; then
			pass "valgrind/$name"
		else
			case $rc in
			99) fail "valgrind/$name" "$log" "valgrind errors" ;;
			124 | 137) fail "valgrind/$name" "$log" "timeout after ${VALGRIND_TIMEOUT}s" ;;
			*) fail "valgrind/$name" "$log" "exit status $rc" ;;
			esac
			tail_log "$log"
		fi
	done
	shopt -u nullglob
	if [ "$found" -eq 0 ]; then
		echo "FAIL valgrind (no unit test binaries in $BUILD_DIR/tests)"
		FAILED=$((FAILED + 1))
	fi
}

run_integration() {
	local t name log rc found=0 start secs
	echo "== integration"
	mkdir -p "$LOGS/integration"
	shopt -s nullglob
	for t in "$ROOT"/tests/integration/test_*.sh "$ROOT"/tests/integration/test_*.py; do
		found=1
		name=$(basename "$t")
		log=$LOGS/integration/$name.log
		start=$(date +%s)
		if [[ $t == *.py ]]; then
			{ (cd "$ROOT" && DLSHIM_BUILD=$BUILD_DIR timeout -k 10 "$INTEGRATION_TIMEOUT" "$PY" "$t") </dev/null >"$log" 2>&1; } 2>/dev/null
		else
			{ (cd "$ROOT" && DLSHIM_BUILD=$BUILD_DIR timeout -k 10 "$INTEGRATION_TIMEOUT" bash "$t") </dev/null >"$log" 2>&1; } 2>/dev/null
		fi
		rc=$?
		secs=$(($(date +%s) - start))
		case $rc in
		0) pass "integration/$name (${secs}s)" ;;
		77) fail "integration/$name" "$log" "not available" ;;
		124 | 137) fail "integration/$name" "$log" "timeout after ${INTEGRATION_TIMEOUT}s" ;;
		*) fail "integration/$name" "$log" "exit status $rc, ${secs}s" ;;
		esac
		[ "$rc" -eq 0 ] || tail_log "$log" 60
	done
	shopt -u nullglob
	if [ "$found" -eq 0 ]; then
		echo "FAIL integration (no tests found in tests/integration)"
		FAILED=$((FAILED + 1))
	fi
}

case $ONLY in
unit) run_unit_kind unit "$BUILD_DIR/tests" ;;
unit-asan) run_unit_kind unit-asan "$BUILD_DIR/asan/tests" ;;
integration) run_integration ;;
valgrind) run_valgrind ;;
'')
	run_unit_kind unit "$BUILD_DIR/tests"
	run_unit_kind unit-asan "$BUILD_DIR/asan/tests"
	run_integration
	if [ "${DLSHIM_TEST_VALGRIND:-0}" = 1 ]; then
		run_valgrind
	fi
	;;
esac

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
