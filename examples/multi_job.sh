#!/usr/bin/env bash
# Several training jobs on one dataset under dlshim, started at different
# times and running at different speeds (the setting dlshim is made for:
# hyper-parameter sweeps, several users on one node).
#
#   examples/multi_job.sh [options] DATA
#     -k K          number of jobs (default 3)
#     -s SECONDS    start job i at i*SECONDS (default 3)
#     -c MS         job i adds i*MS ms of compute per batch (default 15)
#     -e EPOCHS     epochs per job (default 2)
#     -w WORKERS    DataLoader workers per job (default 2)
#     -o DIR        per-job logs and JSON reports (default ./out/multi_job)
#     -p PREFIX     dlshim job names PREFIX-1 .. PREFIX-K (default multi)
#
# DATA is an ImageFolder root; if it does not exist a small one is generated
# there with examples/gen_imagefolder.py. DLSHIM_ROOTS defaults to DATA; every
# other DLSHIM_* variable (DLSHIM_CACHE, DLSHIM_REDIRECT=dir, ...) is passed
# through. Each job runs as `build/dlshim run -- python3
# examples/train_imagefolder.py ...` with DLSHIM_JOB=PREFIX-i; at the end the
# script prints each job's epochs and `dlshim stats`. The first job loads files
# from storage; later jobs (and later epochs) find them in the cache.
#
# Exit status: 0 if every job succeeded, 1 otherwise.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${DLSHIM_BUILD:-$ROOT/build}
PY=${PYTHON:-/usr/bin/python3}
K=3 STAGGER=3 COMPUTE=15 EPOCHS=2 WORKERS=2 OUT=$PWD/out/multi_job PREFIX=multi

usage() {
	sed -n '6,13p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
while getopts "k:s:c:e:w:o:p:h" opt; do
	case $opt in
	k) K=$OPTARG ;;
	s) STAGGER=$OPTARG ;;
	c) COMPUTE=$OPTARG ;;
	e) EPOCHS=$OPTARG ;;
	w) WORKERS=$OPTARG ;;
	o) OUT=$OPTARG ;;
	p) PREFIX=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
DATA=$1
[ -x "$BUILD/dlshim" ] && [ -f "$BUILD/libdlshim.so" ] || { echo "multi_job: build dlshim first (make)" >&2; exit 1; }

if [ ! -d "$DATA" ]; then
	echo "multi_job: generating a small ImageFolder in $DATA"
	"$PY" "$HERE/gen_imagefolder.py" --out "$DATA" --classes 4 --per-class 50 --size 20 --seed 1 || exit 1
fi
DATA=$(cd "$DATA" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export DLSHIM_ROOTS=${DLSHIM_ROOTS:-$DATA}
# keep the coordinator up between staggered starts and for the final stats
export DLSHIM_IDLE_EXIT=${DLSHIM_IDLE_EXIT:-60}

pids=()
for i in $(seq 1 "$K"); do
	delay=$(awk -v i="$i" -v s="$STAGGER" 'BEGIN { print (i - 1) * s }')
	ms=$(awk -v i="$i" -v c="$COMPUTE" 'BEGIN { print (i - 1) * c }')
	name=$PREFIX-$i
	echo "multi_job: $name starts after ${delay}s, --compute-ms $ms (log $OUT/$name.log)"
	(
		sleep "$delay"
		exec env DLSHIM_JOB="$name" "$BUILD/dlshim" run -- "$PY" "$HERE/train_imagefolder.py" --data "$DATA" \
			--epochs "$EPOCHS" --workers "$WORKERS" --compute-ms "$ms" --name "$name" \
			--report "$OUT/$name.json"
	) >"$OUT/$name.log" 2>&1 &
	pids+=($!)
done

rc=0
for i in $(seq 1 "$K"); do
	name=$PREFIX-$i
	if wait "${pids[$((i - 1))]}"; then
		echo "multi_job: $name done"
	else
		echo "multi_job: $name FAILED; last lines of $OUT/$name.log:"
		tail -n 15 "$OUT/$name.log" | sed 's/^/    /'
		rc=1
	fi
done

echo
grep -h "epoch .* done" "$OUT"/"$PREFIX"-*.log
echo
"$BUILD/dlshim" stats || rc=1
exit "$rc"
