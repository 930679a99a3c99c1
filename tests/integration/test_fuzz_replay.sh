#!/usr/bin/env bash
# Replays the fuzzing corpora (tests/fuzz/corpus) plus deterministic
# mutations through the protocol decoder, the configuration parser and the
# checks on coordinator-to-coordinator messages,
# built with ASan/UBSan by `make test` (the long runs are `make fuzz`).
B=${DLSHIM_BUILD:-$(dirname "$0")/../../build}
root=$(cd "$(dirname "$0")/../.." && pwd)
rc=0
for t in proto config peer; do
	bin=$B/asan/fuzz/replay_$t
	if [ ! -x "$bin" ]; then echo "FAIL: $bin missing (make test builds it)"; rc=1; continue; fi
	if "$bin" -m 20000 "$root/tests/fuzz/corpus/$t"; then echo "  ok: replay_$t"; else echo "  FAIL: replay_$t"; rc=1; fi
done
exit $rc
