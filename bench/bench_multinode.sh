#!/usr/bin/env bash
# make bench-multinode: the multi-node cache on one machine. N coordinators,
# each in its own network namespace (veth pairs on a bridge, UCX over TCP),
# each holding 1/N of one class-per-directory dataset under the same root
# path; on every node a PyTorch DataLoader job reads the whole dataset for
# one epoch with DLSHIM_REDIRECT=dir, all nodes at once, caches cold.
#   1. prefetch: 3 nodes, DLSHIM_PREFETCH=0 (baseline) vs K: remote
#      requests (sum of the coordinators' counters), prefetch hits, epoch
#      time (slowest node);
#   2. scaling: 1, 2, 3 nodes with prefetch: files read per second by the
#      whole cluster (baseline: 1 node);
#   3. one DDP job with a rank per node: exact, redirect with the ranks
#      sharing the epoch (claims), and the same without claims (files
#      repeat: a cost reference): epoch time, claims, repeats.
# Every job's samples are checked (a permutation of the files, classes kept,
# bytes exact). One machine, 2 cores shared by all nodes, TCP over veth: the
# numbers show the protocol's request counts and overheads, not a network.
# Results: bench/results/multinode.json, docs/img/multinode.png, docs/bench-multinode.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
B=$ROOT/build
PY=/usr/bin/python3
CLASSES=${BENCH_CLASSES:-8}
PER_CLASS=${BENCH_PER_CLASS:-100}
FILE_KB=${BENCH_FILE_KB:-64}
K=${BENCH_PREFETCH:-16}
CACHE=${BENCH_CACHE:-128M}
WORKERS=${BENCH_WORKERS:-2}
OUT=bench/results
mkdir -p "$OUT" docs/img
fail() { echo "bench-multinode: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "network namespaces need root"
[ -x "$B/dlshimd" ] && [ -f "$B/dlshimd-peers.so" ] || fail "build first (make)"

T=$(mktemp -d /tmp/dlshim-bmn.XXXXXX)
chmod 755 "$T"
TAG=$$
BR=dlsbb$TAG
NETS=()
cleanup() {
	for f in "$T"/pid*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true; done
	sleep 0.2
	for ns in "${NETS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
	ip link del "$BR" 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT
ip link add "$BR" type bridge || fail "cannot create a bridge"
ip link set "$BR" up
for i in 0 1 2; do
	ns=dlsb${i}_$TAG
	ip netns add "$ns" || fail "cannot create network namespace $ns"
	NETS+=("$ns")
	ip link add "dlsw${i}_$TAG" type veth peer name eth0 netns "$ns" || fail "cannot create a veth pair"
	ip link set "dlsw${i}_$TAG" master "$BR" up
	ip -n "$ns" addr add "10.231.9.$((i + 1))/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
done

# The dataset once; each layout (N nodes) gets hard-linked parts.
$PY - "$T" "$CLASSES" "$PER_CLASS" "$FILE_KB" <<'PYEOF'
import hashlib, os, random, sys
t, ncls, per, kb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(3)
os.makedirs(f"{t}/all", exist_ok=True)
with open(f"{t}/manifest", "w") as m:
    for c in range(ncls):
        os.makedirs(f"{t}/all/class{c}", exist_ok=True)
        for k in range(per):
            rel = f"class{c}/img{k:04d}.bin"
            data = rnd.randbytes(rnd.randrange(kb * 512, kb * 1536))
            open(f"{t}/all/{rel}", "wb").write(data)
            m.write(f"{rel} {hashlib.sha256(data).hexdigest()} {len(data)} {rnd.randrange(1 << 30)}\n")
PYEOF
DS=$T/root
mkdir -p "$DS"
layout() { # N: parts/N/node$i with file j on node (hash mod N)
	local n=$1
	[ -d "$T/parts$n" ] && return 0
	$PY - "$T" "$n" <<'PYEOF'
import os, sys
t, n = sys.argv[1], int(sys.argv[2])
for line in open(f"{t}/manifest"):
    rel, sha, size, h = line.split()
    for i in range(n):
        os.makedirs(f"{t}/parts{n}/node{i}/{os.path.dirname(rel)}", exist_ok=True)
    os.link(f"{t}/all/{rel}", f"{t}/parts{n}/node{int(h) % n}/{rel}")
PYEOF
}
on_node() { # i N command...
	local i=$1 n=$2
	shift 2
	exec env DLSHIM_RUNTIME_DIR="$T/$RUN$i" DLSHIM_ROOTS="$DS" DLSHIM_PEERS="$PEERS" DLSHIM_NODE=$i \
		DLSHIM_CACHE=$CACHE DLSHIM_LOG=info DLSHIM_IDLE_EXIT=300 UCX_TLS=tcp DLSHIM_PREFETCH=$PREFETCH \
		ip netns exec "dlsb${i}_$TAG" unshare -m --propagation private \
		sh -c 'mount --bind "$0" "$1" && shift && exec "$@"' "$T/parts$n/node$i" "$DS" "$@"
}
ready() { # i n: node i sees n-1 peers up with files
	DLSHIM_RUNTIME_DIR="$T/$RUN$1" "$B/dlshim" stats --json 2>/dev/null | $PY -c '
import json, sys
d = json.load(sys.stdin)["peers"]
sys.exit(0 if sum(1 for n in d.get("nodes", []) if n.get("state") == "up" and n.get("files", 0) > 0) >= int(sys.argv[1]) else 1)' "$(($2 - 1))" 2>/dev/null
}
PORT=25000
start_cluster() { # name nodes prefetch: fresh coordinators, connected
	local name=$1 n=$2
	RUN=$name PREFETCH=$3 PEERS=
	layout "$n"
	PORT=$((PORT + 10))
	for i in $(seq 0 $((n - 1))); do PEERS+="${PEERS:+,}10.231.9.$((i + 1)):$((PORT + i))"; done
	for i in $(seq 0 $((n - 1))); do
		mkdir -p -m 700 "$T/$RUN$i"
		on_node $i "$n" "$B/dlshimd" --foreground >"$T/d_$name$i.out" 2>&1 &
		echo $! >"$T/pid$i"
		disown $! # killed on purpose after each run: no "Killed" line
	done
	if [ "$n" -gt 1 ]; then
		for i in $(seq 0 $((n - 1))); do
			for _ in $(seq 300); do ready $i "$n" && break; sleep 0.1; done
			ready $i "$n" || fail "$name: node $i did not see its peers"
		done
	else
		for _ in $(seq 100); do [ -S "$T/${RUN}0/sock" ] && break; sleep 0.1; done
	fi
}
# timed_jobs NAME N LAUNCHER: caches dropped, then on each node i the
# command `LAUNCHER NAME i N` at once; waits for all; T0/T1 bracket them.
timed_jobs() {
	local name=$1 n=$2 pids=() i p
	sync
	echo 3 >/proc/sys/vm/drop_caches || true
	T0=$(date +%s.%N)
	for i in $(seq 0 $((n - 1))); do
		"$3" "$name" "$i" "$n" >"$T/job_$name$i.out" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || fail "$name: a job failed ($(cat "$T"/job_$name*.out | tail -3))"; done
	T1=$(date +%s.%N)
}
loader_job() { # name i n: a DataLoader job reading the whole dataset, redirect dir
	on_node "$2" "$3" env LD_PRELOAD="$B/libdlshim.so" DLSHIM_REDIRECT=dir \
		$PY tests/integration/mn_torch_job.py "$DS" "$T/manifest" "$T/out_$1$2.json" "$WORKERS"
}
ddp_rank() { # name i n: rank i of a DDP job with a rank per node (DDP_REDIRECT, DDP_SPAN)
	on_node "$2" "$3" env LD_PRELOAD="$B/libdlshim.so" DLSHIM_REDIRECT="$DDP_REDIRECT" DLSHIM_JOB_SPAN="$DDP_SPAN" \
		TORCHELASTIC_RUN_ID="b$1" WORLD_SIZE="$3" LOCAL_WORLD_SIZE=1 RANK="$2" \
		MASTER_ADDR=10.231.9.1 MASTER_PORT=$((PORT + 50)) GLOO_SOCKET_IFNAME=eth0 \
		$PY tests/integration/mn_ddp_job.py "$DS" "$T/manifest" "$T/out_$1$2.json" 1
}
run() { # name nodes prefetch -> $T/res_<name>.json
	local name=$1 n=$2
	start_cluster "$name" "$n" "$3"
	timed_jobs "$name" "$n" loader_job
	B="$B" PYTHONPATH="$ROOT/tests/integration" $PY - "$T" "$name" "$n" "$3" "$T0" "$T1" <<'PYEOF'
import collections, json, sys
from mn_check import by_group, manifest, stats
t, name, n, k, t0, t1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
man = manifest(t)
by_class = by_group(man)
res = {"name": name, "nodes": n, "prefetch": k, "seconds": t1 - t0, "files": 0, "bytes": 0,
       "remote_requests": 0, "prefetch_received": 0, "prefetch_hits": 0, "remote_bytes": 0}
size = {rel: int(s) for rel, sha, s, h in man}
for i in range(n):
    got = json.load(open(f"{t}/out_{name}{i}.json"))
    served = collections.Counter(by_class[r.split("/")[0]].get(s) for r, s in got)
    if None in served or len(served) != len(man) or max(served.values()) != 1:
        sys.exit(f"{name}: node {i} did not get a permutation of the files with classes kept")
    res["files"] += len(got)
    res["bytes"] += sum(size[f] for f in served)
    if n > 1:
        st = stats(t, f"{name}{i}")["peers"]
        res["remote_requests"] += st["remote"]["requests"]
        res["remote_bytes"] += st["remote"]["bytes"]
        res["prefetch_received"] += st["prefetch"]["received"]
        res["prefetch_hits"] += st["prefetch"]["hits"]
res["files_per_s"] = res["files"] / res["seconds"]
json.dump(res, open(f"{t}/res_{name}.json", "w"))
print(json.dumps(res))
PYEOF
	for i in $(seq 0 $((n - 1))); do kill -9 "$(cat "$T/pid$i")" 2>/dev/null || true; done
	sleep 0.5
}
# 3. One DDP job with a rank on each of 3 nodes (gloo between the
# namespaces, DistributedSampler, one epoch): exact mode; redirect dir with
# the ranks sharing the epoch (claims); redirect dir with DLSHIM_JOB_SPAN=off
# (each node's part decides alone: fewer messages, but files repeat, so it
# is a cost reference, not a correct setting).
ddp() { # name redirect span -> $T/res_<name>.json
	local name=$1
	start_cluster "$name" 3 "$K"
	DDP_REDIRECT=$2 DDP_SPAN=$3 timed_jobs "$name" 3 ddp_rank
	B="$B" PYTHONPATH="$ROOT/tests/integration" $PY - "$T" "$name" "$2" "$3" "$T0" "$T1" <<'PYEOF'
import collections, json, sys
from mn_check import by_group, manifest, stats
t, name, mode, span, t0, t1 = sys.argv[1:7]
man = manifest(t)
by_class = by_group(man)
got = [s for i in range(3) for s in json.load(open(f"{t}/out_{name}{i}.json"))[0]]
served = collections.Counter(by_class[r.split("/")[0]].get(s) for r, s in got)
if None in served:
    sys.exit(f"{name}: a rank received bytes of no file of the class it asked for")
res = {"name": name, "redirect": mode, "span": span, "seconds": float(t1) - float(t0), "samples": len(got),
       "repeats": sum(c - 1 for c in served.values() if c > 1), "claims": 0, "claims_refused": 0,
       "remote_requests": 0}
# DistributedSampler pads the epoch to a multiple of the ranks: those
# extra samples are files served a second time, and nothing else may be.
if mode != "off" and span == "auto" and (res["repeats"] != len(got) - len(man) or len(served) != len(man)):
    sys.exit(f"{name}: the ranks' epoch is not every file once ({res['repeats']} repeats)")
for i in range(3):
    st = stats(t, f"{name}{i}")["peers"]
    res["claims"] += st["claims"]["asked_local"] + st["claims"]["asked_remote"]
    res["claims_refused"] += st["claims"]["refused"]
    res["remote_requests"] += st["remote"]["requests"]
res["samples_per_s"] = res["samples"] / res["seconds"]
json.dump(res, open(f"{t}/res_{name}.json", "w"))
print(json.dumps(res))
PYEOF
	for i in 0 1 2; do kill -9 "$(cat "$T/pid$i")" 2>/dev/null || true; done
	sleep 0.5
}
run pf_off 3 0
run pf_on 3 "$K"
run nodes1 1 "$K"
run nodes2 2 "$K"
run nodes3 3 "$K"
ddp ddp_exact off auto
ddp ddp_span dir auto
ddp ddp_alone dir off
$PY - "$T" "$OUT/multinode.json" "$CLASSES" "$PER_CLASS" "$FILE_KB" "$CACHE" <<'PYEOF'
import json, sys
t = sys.argv[1]
runs = [json.load(open(f"{t}/res_{n}.json")) for n in ["pf_off", "pf_on", "nodes1", "nodes2", "nodes3"]]
ddp = [json.load(open(f"{t}/res_{n}.json")) for n in ["ddp_exact", "ddp_span", "ddp_alone"]]
json.dump({"classes": int(sys.argv[3]), "per_class": int(sys.argv[4]), "file_kb": int(sys.argv[5]),
           "cache": sys.argv[6], "runs": runs, "ddp": ddp}, open(sys.argv[2], "w"), indent=1)
PYEOF
$PY bench/plot_multinode.py "$OUT/multinode.json" docs/img/multinode.png "$OUT/multinode.md"
cat "$OUT/multinode.md"
