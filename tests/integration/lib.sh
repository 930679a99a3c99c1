# Common setup for dlshim shell integration tests. Source it, then:
#
#   dl_setup NAME          fresh temp dir ($DL_TMP), fresh runtime dir, DLSHIM_IDLE_EXIT=5,
#                          clean DLSHIM_* environment, cleanup trap (dlshim stop + rm)
#   dl_new_runtime_dir     another fresh runtime dir (= a new coordinator), exported
#   dl_shim CMD...         run CMD with LD_PRELOAD=$DLSHIM_BUILD/libdlshim.so
#   dl_cli ARGS...         run build/dlshim
#   dl_stats_json          `dlshim stats --json`
#   dl_stat EXPR           evaluate a Python expression on the stats JSON (bound to j)
#   dl_make_imagefolder DIR [CLASSES PER_CLASS]   real JPEGs via PIL
#   dl_make_random_files DIR N MIN MAX [SEED]
#   dl_manifest DIR OUT    "sha256  path" of every file under DIR, sorted
#   dl_check_hashes OUT MANIFEST [REPS]           reader output vs manifest
#   dl_daemon_pids [RUNDIR]                       live dlshimd pids serving RUNDIR
#   dl_wait_until TIMEOUT_S CMD...                poll CMD (0.1 s) until it succeeds
#   DL_BG_PIDS+=($!)     background processes to SIGKILL in cleanup
#   dl_ok / dl_fail MSG, dl_check MSG CMD..., dl_section TITLE, dl_finish
#
# Exit status: 0 all checks passed, 1 some failed, 77 the build is missing
# (the runner counts 77 as a failure too, printed as "not available").

set -u

DL_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DL_REPO=$(cd "$DL_HERE/../.." && pwd)
DLSHIM_BUILD=$(cd "${DLSHIM_BUILD:-$DL_REPO/build}" 2>/dev/null && pwd || echo "${DLSHIM_BUILD:-$DL_REPO/build}")
export DLSHIM_BUILD
DL_PY=/usr/bin/python3
DL_TESTLIB="$DL_HERE/dlshim_testlib.py"
DL_LIB="$DLSHIM_BUILD/libdlshim.so"
DL_CLI="$DLSHIM_BUILD/dlshim"
DL_DAEMON="$DLSHIM_BUILD/dlshimd"
DL_FAILS=0
DL_CHECKS=0
DL_RUNTIME_DIRS=()
DL_EXTRA_DIRS=()
DL_BG_PIDS=() # background processes a test started; killed (by pid) in cleanup
DL_TMP=

dl_require_build() {
	local f
	for f in "$DL_LIB" "$DL_CLI" "$DL_DAEMON"; do
		if [ ! -e "$f" ]; then
			echo "not available: $f missing (run make)"
			exit 77
		fi
	done
}

dl_section() { printf '\n== %s\n' "$*"; }
dl_info() { printf '  .. %s\n' "$*"; }
dl_ok() { DL_CHECKS=$((DL_CHECKS + 1)); printf '  ok: %s\n' "$*"; }
dl_fail() { DL_CHECKS=$((DL_CHECKS + 1)); DL_FAILS=$((DL_FAILS + 1)); printf '  FAIL: %s\n' "$*"; }

# dl_check MSG CMD...: ok when CMD exits 0.
dl_check() {
	local msg=$1
	shift
	if "$@"; then dl_ok "$msg"; else dl_fail "$msg"; fi
}

# dl_show FILE [N]: indent the first N lines of a file into the test output.
dl_show() {
	[ -f "$1" ] || return 0
	head -n "${2:-20}" "$1" | sed 's/^/        | /'
}

dl_finish() {
	echo
	if [ "$DL_FAILS" -gt 0 ]; then
		echo "$DL_FAILS of $DL_CHECKS check(s) failed"
		exit 1
	fi
	echo "all $DL_CHECKS checks passed"
	exit 0
}

dl_new_runtime_dir() {
	DLSHIM_RUNTIME_DIR=$(mktemp -d "$DL_TMP/rt.XXXXXX")
	export DLSHIM_RUNTIME_DIR
	DL_RUNTIME_DIRS+=("$DLSHIM_RUNTIME_DIR")
}

dl_setup() {
	dl_require_build
	local v
	for v in $(env | sed -n 's/^\(DLSHIM_[A-Z_0-9]*\)=.*/\1/p'); do
		[ "$v" = DLSHIM_BUILD ] || unset "$v"
	done
	unset LD_PRELOAD
	DL_TMP=$(mktemp -d "/tmp/dlshim-${1:-test}.XXXXXX")
	export DLSHIM_IDLE_EXIT=5
	export PYTHONDONTWRITEBYTECODE=1
	dl_new_runtime_dir
	trap 'dl__exit_trap' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	dl_info "build $DLSHIM_BUILD, tmp $DL_TMP, runtime dir $DLSHIM_RUNTIME_DIR"
}

dl__exit_trap() {
	local rc=$?
	dl_cleanup
	exit "$rc"
}

# Stop the coordinators of every runtime dir this test used, make sure they are
# gone (SIGKILL after 5 s, only processes serving our runtime dirs), remove files.
dl_cleanup() {
	local d pids i p
	for p in "${DL_BG_PIDS[@]}"; do
		# only if it is still one of ours (its environment names our temp dir),
		# never a stranger that reused the pid
		if [ -n "$DL_TMP" ] && tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qF "$DL_TMP"; then
			kill -9 "$p" 2>/dev/null
		fi
	done
	for d in "${DL_RUNTIME_DIRS[@]}"; do
		[ -d "$d" ] || continue
		DLSHIM_RUNTIME_DIR=$d timeout 10 "$DL_CLI" stop >/dev/null 2>&1
		for i in $(seq 50); do
			pids=$(dl_daemon_pids "$d")
			[ -z "$pids" ] && break
			sleep 0.1
		done
		pids=$(dl_daemon_pids "$d")
		# shellcheck disable=SC2086
		[ -n "$pids" ] && kill -9 $pids 2>/dev/null
	done
	for d in "$DL_TMP" "${DL_EXTRA_DIRS[@]}"; do
		[ -n "$d" ] && [ -d "$d" ] && chmod -R u+rwX "$d" 2>/dev/null && rm -rf "$d"
	done
	return 0
}

dl_shim() { LD_PRELOAD="$DL_LIB" "$@"; }
dl_cli() { "$DL_CLI" "$@"; }
dl_stats_json() { env -u LD_PRELOAD "$DL_CLI" stats --json; }

# dl_json EXPR < json
dl_json() { "$DL_PY" "$DL_TESTLIB" json "$1"; }

# dl_stat EXPR: evaluate EXPR (Python, stats JSON bound to j) on `dlshim stats --json`.
dl_stat() {
	local out
	out=$(dl_stats_json) || return 1
	printf '%s' "$out" | dl_json "$1"
}

dl_make_imagefolder() { "$DL_PY" "$DL_TESTLIB" imagefolder "$@"; }
dl_make_random_files() { "$DL_PY" "$DL_TESTLIB" random-files "$@"; }

dl_manifest() {
	find "$1" -type f -print0 | sort -z | xargs -0 sha256sum >"$2"
}

dl_check_hashes() { "$DL_PY" "$DL_TESTLIB" check-hashes "$@"; }

dl_daemon_pids() { "$DL_PY" "$DL_TESTLIB" daemon-pids "${1:-$DLSHIM_RUNTIME_DIR}"; }

dl_wait_until() {
	local timeout=$1 i n
	shift
	n=$(awk -v t="$timeout" 'BEGIN { printf "%d", t * 10 }')
	for ((i = 0; i < n; i++)); do
		"$@" && return 0
		sleep 0.1
	done
	"$@"
}

# dl_warnings FILE: number of "dlshim: warning:" lines in FILE.
dl_warnings() { grep -c '^dlshim: warning: ' "$1" 2>/dev/null || true; }

# dl_build_reader NAME [CFLAGS...]: compile tests/progs/threaded_reader.c into
# $DL_TMP/NAME (the tests build their own variants so the flags are known).
dl_build_reader() {
	local name=$1
	shift
	cc -std=gnu11 -D_GNU_SOURCE -pthread "$@" -o "$DL_TMP/$name" "$DL_REPO/tests/progs/threaded_reader.c" -lpthread
}
