#!/usr/bin/env bash
# Run examples/ddp_train.py as a torchrun DDP job (gloo, CPU) under dlshim.
#
#   examples/ddp_run.sh [-n NPROC] DATA [ddp_train.py options...]
#   examples/ddp_run.sh -n 2 /data/train --epochs 2 --record /tmp/ddp-records
#
# DATA is an ImageFolder root; it becomes DLSHIM_ROOTS unless that is already
# set. Every other DLSHIM_* variable (DLSHIM_CACHE, DLSHIM_REDIRECT, ...) is
# passed through. After the run, `build/dlshim stats` shows one job named
# ddp-<TORCHELASTIC_RUN_ID> that holds every rank and DataLoader worker.
#
# How it is launched, and why:
#   * torchrun is `python3 -m torch.distributed.run` (Debian's python3-torch
#     ships no torchrun script). Each rank is started through
#     `build/dlshim run --` (torchrun --no_python), so only the ranks carry the
#     shim. If the launcher itself were preloaded (`dlshim run -- torchrun ...`)
#     the ranks would still form one job, but the job would be named after the
#     launcher (job-<pid>-<hex>): the launcher's shim names the job before
#     torchrun has a run id to give.
#   * torch 1.13 on Python 3.11 fails in torchrun's --redirects/--tee parsing
#     ("AttributeError: 'NoneType' object has no attribute 'get'"); the small
#     launcher below patches that parsing when it is broken, then runs torchrun
#     unchanged.
#
# Environment: PYTHON (default /usr/bin/python3), DLSHIM_BUILD (default the
# repository's build/). --standalone runs a local rendezvous on a free port.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${DLSHIM_BUILD:-$ROOT/build}
PY=${PYTHON:-/usr/bin/python3}
NPROC=2

usage() {
	sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
while [ $# -gt 0 ]; do
	case $1 in
	-n) [ $# -ge 2 ] || usage; NPROC=$2; shift 2 ;;
	-h | --help) usage ;;
	*) break ;;
	esac
done
[ $# -ge 1 ] || usage
DATA=$(cd "$1" && pwd)
shift
[ -x "$BUILD/dlshim" ] && [ -f "$BUILD/libdlshim.so" ] || { echo "ddp_run: build dlshim first (make)" >&2; exit 1; }
export DLSHIM_ROOTS=${DLSHIM_ROOTS:-$DATA}

# torchrun, with the Python 3.11 / torch 1.13 Std.from_str("0") bug patched when present
LAUNCHER='
import sys
from torch.distributed.elastic.multiprocessing import api
if api.Std.from_str("0") is None:
    _from_str = api.Std.from_str
    api.Std.from_str = classmethod(lambda cls, vm: cls.NONE if _from_str(vm) is None else _from_str(vm))
from torch.distributed.run import main
sys.argv[0] = "torchrun"
main()
'
echo "ddp_run: $NPROC ranks on $DATA (DLSHIM_ROOTS=$DLSHIM_ROOTS)"
rc=0
env -u LD_PRELOAD OMP_NUM_THREADS=1 "$PY" -c "$LAUNCHER" --standalone --nproc_per_node="$NPROC" --no_python \
	"$BUILD/dlshim" run -- "$PY" "$HERE/ddp_train.py" --data "$DATA" "$@" || rc=$?
echo "ddp_run: torchrun exited $rc"
"$BUILD/dlshim" stats || true
exit "$rc"
