#!/usr/bin/env bash
# Three coordinators, each in its own network namespace (veth pairs on a
# bridge) with its own part of one dataset bind-mounted at the same root
# path, form one cache over UCX (TCP here). A reader on each node reads the
# whole dataset: every byte is checked against the original files; the
# remote request counters must match the files each node does not hold.
# Then one node is killed while the others read again: they must finish
# with correct bytes for everything not homed on the dead node, and report
# that node as unreachable. Then, with fresh coordinators, a PyTorch job on
# each node reads the cluster's dataset in DLSHIM_REDIRECT=dir, with
# prefetch off and on: each job must receive every file exactly once, each
# from the class directory it asked for, byte for byte; prefetch must cut
# the remote requests (the coordinators' counters) and score hits.
# Fails (never skips) without namespaces.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" # the checks import mn_check
REPO=$(cd "$HERE/../.." && pwd)
B=${DLSHIM_BUILD:-$REPO/build}
export B
PY=/usr/bin/python3
N=3
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "network namespaces need root"
command -v ip >/dev/null || fail "ip (iproute2) is missing"
command -v unshare >/dev/null || fail "unshare (util-linux) is missing"
[ -x "$B/dlshimd" ] && [ -f "$B/libdlshim.so" ] || fail "build first (make)"

T=$(mktemp -d /tmp/dlshim-mn.XXXXXX)
chmod 755 "$T"
TAG=$$
BR=dlsbr$TAG
NETS=()
cleanup() {
	for f in "$T"/pid*; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
	done
	sleep 0.2
	for ns in "${NETS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
	ip link del "$BR" 2>/dev/null || true
	if [ "${KEEP:-0}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT

# ---- network: one bridge, one veth pair per node ----
ip link add "$BR" type bridge || fail "cannot create a bridge (ip link add type bridge)"
ip link set "$BR" up
PEERS=
for i in $(seq 0 $((N - 1))); do
	ns=dlsn${i}_$TAG
	ip netns add "$ns" || fail "cannot create network namespace $ns (ip netns add)"
	NETS+=("$ns")
	ip link add "dlsv${i}_$TAG" type veth peer name eth0 netns "$ns" || fail "cannot create a veth pair"
	ip link set "dlsv${i}_$TAG" master "$BR" up
	ip -n "$ns" addr add "10.231.7.$((i + 1))/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
	PEERS+="${PEERS:+,}10.231.7.$((i + 1)):$((24000 + i))"
done
ip -n "dlsn0_$TAG" link show eth0 | grep -q "state UP\|LOWER_UP" || fail "the veth in namespace dlsn0_$TAG is not up"

# ---- dataset: 4 class directories, each file homed on one node ----
ROOT=$T/root
mkdir -p "$ROOT"
$PY - "$T" $N <<'PYEOF'
import hashlib, os, random, sys
t, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(7)
sizes = [0, 1, 16384, 16385, 200000]
with open(f"{t}/manifest", "w") as m:
    for c in range(4):
        for k in range(30):
            rel = f"class{c}/img{k:03d}.bin"
            home = rnd.randrange(n)
            size = sizes[k] if k < len(sizes) else rnd.randrange(1, 150000)
            data = rnd.randbytes(size)
            d = f"{t}/parts/node{home}/class{c}"
            os.makedirs(d, exist_ok=True)
            for i in range(n):
                os.makedirs(f"{t}/parts/node{i}/class{c}", exist_ok=True)
            open(f"{d}/img{k:03d}.bin", "wb").write(data)
            m.write(f"{rel} {hashlib.sha256(data).hexdigest()} {size} {home}\n")
PYEOF
TOTAL=$(wc -l <"$T/manifest")

# Run a command on node i: its network namespace, its own mount namespace
# with its dataset part at the shared root path, its own coordinator. It
# execs (always called in the background), so $! is the program's own pid.
on_node() {
	local i=$1
	shift
	exec env DLSHIM_RUNTIME_DIR="$T/$RUNP$i" DLSHIM_ROOTS="$ROOT" DLSHIM_PEERS="$PEERS" DLSHIM_NODE=$i \
		DLSHIM_CACHE=${CACHE:-3M} DLSHIM_LOG=info DLSHIM_IDLE_EXIT=300 UCX_TLS=tcp DLSHIM_PREFETCH=${PREFETCH:-8} \
		ip netns exec "dlsn${i}_$TAG" unshare -m --propagation private \
		sh -c 'mount --bind "$0" "$1" && shift && exec "$@"' "$T/parts/node$i" "$ROOT" "$@"
}
RUNP=run
start_node() {
	mkdir -p -m 700 "$T/$RUNP$1"
	on_node "$1" "$B/dlshimd" --foreground >"$T/daemon$RUNP$1.out" 2>&1 &
	echo $! >"$T/pid$1"
	disown $! # killing it on purpose later is not worth a "Killed" line
}
stats() { DLSHIM_RUNTIME_DIR="$T/$RUNP$1" "$B/dlshim" stats --json 2>/dev/null; }
# peers_up I K: node I sees K peers up with their file lists
peers_up() {
	stats "$1" | $PY -c '
import json, sys
d = json.load(sys.stdin)["peers"]
up = [n for n in d.get("nodes", []) if n.get("state") == "up" and n.get("files", 0) > 0]
sys.exit(0 if len(up) >= int(sys.argv[1]) else 1)' "$2" 2>/dev/null
}
wait_for() { # seconds, command...
	local s=$1
	shift
	for _ in $(seq $((s * 10))); do "$@" && return 0; sleep 0.1; done
	return 1
}

# fresh_cluster NAME PORT-BASE: three new coordinators (empty caches) with
# runtime directories NAME0..2, listening on PORT-BASE+i, connected.
fresh_cluster() {
	RUNP=$1 PEERS=
	for i in 0 1 2; do PEERS+="${PEERS:+,}10.231.7.$((i + 1)):$(($2 + i))"; done
	for i in 0 1 2; do start_node $i; done
	for i in 0 1 2; do
		wait_for 15 peers_up $i 2 || { cat "$T/$RUNP"*/dlshimd.log; fail "$1: node $i does not see both peers"; }
	done
}
# outputs_of NAME NODES...: wait for each node's job to write out_NAME_i.json.
outputs_of() {
	local name=$1 i
	shift
	for i in "$@"; do
		for _ in $(seq 1800); do [ -s "$T/out_${name}_$i.json" ] && break; sleep 0.1; done
		[ -s "$T/out_${name}_$i.json" ] || { cat "$T/job_${name}_$i.out"; fail "$name: the job on node $i did not finish"; }
	done
}

# MN_ONLY=redirect runs only phases 3-5, MN_ONLY=ddp only phase 5 (for development).
if [ "${MN_ONLY:-all}" = all ]; then
# ---- a bad DLSHIM_NODE: a clear error, and the node serves local data ----
mkdir -p "$T/solo" && head -c 50000 /dev/urandom >"$T/solo/f.bin" && mkdir -p -m 700 "$T/runbad"
env DLSHIM_RUNTIME_DIR="$T/runbad" DLSHIM_ROOTS="$T/solo" DLSHIM_PEERS=127.0.0.1:24990,127.0.0.1:24991 \
	DLSHIM_NODE=5 DLSHIM_IDLE_EXIT=300 "$B/dlshimd" --foreground >/dev/null 2>&1 &
echo $! >"$T/pidbad"
wait_for 10 test -S "$T/runbad/sock" || fail "coordinator with a bad DLSHIM_NODE did not start"
got=$(env DLSHIM_RUNTIME_DIR="$T/runbad" DLSHIM_ROOTS="$T/solo" DLSHIM_PEERS=127.0.0.1:24990,127.0.0.1:24991 \
	DLSHIM_NODE=5 LD_PRELOAD="$B/libdlshim.so" $PY -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$T/solo/f.bin")
[ "$got" = "$(sha256sum "$T/solo/f.bin" | cut -d' ' -f1)" ] || fail "bad DLSHIM_NODE: wrong bytes"
DLSHIM_RUNTIME_DIR="$T/runbad" "$B/dlshim" status | grep -q "multi-node off: DLSHIM_NODE=5 is out of range" ||
	fail "status does not explain the bad DLSHIM_NODE"
kill "$(cat "$T/pidbad")"

# ---- UCX is loaded only where peers are configured ----
mkdir -p -m 700 "$T/runsolo"
env DLSHIM_RUNTIME_DIR="$T/runsolo" DLSHIM_ROOTS="$T/solo" DLSHIM_IDLE_EXIT=300 "$B/dlshimd" --foreground >/dev/null 2>&1 &
echo $! >"$T/pidsolo"
wait_for 10 test -S "$T/runsolo/sock" || fail "single-node coordinator did not start"
! grep -q "libucp" "/proc/$(cat "$T/pidsolo")/maps" || fail "a single-node coordinator mapped libucp"
kill "$(cat "$T/pidsolo")"
# A coordinator binary without its multi-node module next to it says so and serves locally.
mkdir -p "$T/bin" -m 700 "$T/runnomod" && cp "$B/dlshimd" "$T/bin/"
env DLSHIM_RUNTIME_DIR="$T/runnomod" DLSHIM_ROOTS="$T/solo" DLSHIM_PEERS=127.0.0.1:24990,127.0.0.1:24991 \
	DLSHIM_NODE=0 DLSHIM_IDLE_EXIT=300 "$T/bin/dlshimd" --foreground >/dev/null 2>&1 &
echo $! >"$T/pidnomod"
wait_for 10 test -S "$T/runnomod/sock" || fail "coordinator without the module did not start"
DLSHIM_RUNTIME_DIR="$T/runnomod" "$B/dlshim" status | grep -q "multi-node off: multi-node module dlshimd-peers.so not found" ||
	fail "status does not explain the missing multi-node module"
got=$(env DLSHIM_RUNTIME_DIR="$T/runnomod" DLSHIM_ROOTS="$T/solo" DLSHIM_DAEMON="$T/bin/dlshimd" \
	LD_PRELOAD="$B/libdlshim.so" $PY -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$T/solo/f.bin")
[ "$got" = "$(sha256sum "$T/solo/f.bin" | cut -d' ' -f1)" ] || fail "without the module: wrong bytes"
kill "$(cat "$T/pidnomod")"

# ---- a node whose peer is down reports it and serves locally ----
start_node 0
start_node 1
wait_for 15 peers_up 0 1 || { cat "$T"/run*/dlshimd.log; fail "nodes 0 and 1 did not connect"; }
grep -q "libucp" "/proc/$(cat "$T/pid0")/maps" || fail "node 0 runs multi-node without its UCX module mapped?"
DLSHIM_RUNTIME_DIR="$T/run0" "$B/dlshim" status >"$T/status0" || fail "dlshim status failed"
cat "$T/status0"
grep -q "node 2 .*unreachable" "$T/status0" || fail "status does not show node 2 as unreachable"
grep -q "node 1 .*up, 42 files, transport tcp" "$T/status0" || fail "status does not show the transport UCX chose"
grep -q "RDMA devices: " "$T/status0" || fail "status does not list the RDMA devices"
grep -q "prefetch: up to 8 files per request" "$T/status0" || fail "status does not show the prefetch setting"
grep -q "is unreachable" "$T/run0/dlshimd.log" || fail "the log does not report the unreachable node"
start_node 2
for i in 0 1 2; do
	wait_for 15 peers_up $i 2 || { cat "$T"/run*/dlshimd.log; fail "node $i does not see both peers"; }
done

# ---- phase 1: every node reads the whole dataset ----
for i in 0 1 2; do
	on_node $i env LD_PRELOAD="$B/libdlshim.so" $PY "$HERE/mn_reader.py" "$ROOT" "$T/manifest" "$T/out1_$i.json" &
done
for i in 0 1 2; do
	for _ in $(seq 600); do [ -s "$T/out1_$i.json" ] && break; sleep 0.1; done
done
sleep 0.3
$PY - "$T" <<'PYEOF' || fail "phase 1: wrong bytes or counters"
import json, sys
import mn_check as mn
t = sys.argv[1]
man = mn.manifest(t)
bad = 0
for i in range(3):
    out = json.load(open(f"{t}/out1_{i}.json"))
    wrong = [rel for rel, sha, size, home in man if out.get(rel) != sha]
    if wrong:
        print(f"node {i}: {len(wrong)} files wrong, e.g. {wrong[:3]} -> {[out.get(w) for w in wrong[:3]]}")
        bad = 1
    st = mn.stats(t, f"run{i}")["peers"]
    remote = [(rel, int(size)) for rel, sha, size, home in man if int(home) != i]
    r = st["remote"]
    print(f"node {i}: {len(man)} files correct; remote requests {r['requests']} ok {r['ok']} "
          f"bytes {r['bytes']} (expected {len(remote)} files, {sum(s for _, s in remote)} bytes); "
          f"served to peers {st['served']}")
    if r["ok"] != len(remote) or r["bytes"] != sum(s for _, s in remote) or r["failures"]:
        bad = 1
sys.exit(bad)
PYEOF

# ---- phase 2: node 2 dies while nodes 0 and 1 read again ----
for i in 0 1; do
	on_node $i env LD_PRELOAD="$B/libdlshim.so" $PY "$HERE/mn_reader.py" "$ROOT" "$T/manifest" "$T/out2_$i.json" 0.01 &
done
sleep 0.4
kill -9 "$(cat "$T/pid2")"
for i in 0 1; do
	for _ in $(seq 600); do [ -s "$T/out2_$i.json" ] && break; sleep 0.1; done
	[ -s "$T/out2_$i.json" ] || fail "node $i's reader did not finish after node 2 died"
done
$PY - "$T" <<'PYEOF' || fail "phase 2: wrong bytes after a node died"
import json, sys
import mn_check as mn
t = sys.argv[1]
man = mn.manifest(t)
bad = 0
for i in range(2):
    out = json.load(open(f"{t}/out2_{i}.json"))
    ok = lost = 0
    for rel, sha, size, home in man:
        v = out.get(rel)
        if v == sha:
            ok += 1
        elif home == "2" and v == "ERR:ENOENT":
            lost += 1   # its home is gone and it was no longer cached here
        else:
            print(f"node {i}: {rel} (home {home}) -> {v}")
            bad = 1
    print(f"node {i}: {ok} correct, {lost} unavailable (home node 2 dead)")
sys.exit(bad)
PYEOF
wait_for 10 sh -c "DLSHIM_RUNTIME_DIR=$T/run0 $B/dlshim status | grep -q 'node 2 .*unreachable'" ||
	fail "status does not show the dead node as unreachable"
grep -q "node 2 (.*) is unreachable" "$T/run0/dlshimd.log" || fail "the log does not name the dead node"
for i in 0 1; do kill -9 "$(cat "$T/pid$i")" 2>/dev/null || true; done

fi

if [ "${MN_ONLY:-all}" != ddp ]; then
# ---- phase 3: redirect across nodes, prefetch off then on ----
# Fresh coordinators (empty caches) on new ports for each run.
redirect_run() { # name prefetch port-base [mode]
	local mode=${4:-dir}
	PREFETCH=$2 fresh_cluster "$1" "$3"
	for i in 0 1 2; do
		on_node $i env LD_PRELOAD="$B/libdlshim.so" DLSHIM_REDIRECT=$mode ${FILELIST:+DLSHIM_FILELIST=$FILELIST} \
			$PY "$HERE/mn_torch_job.py" "$ROOT" "$T/manifest" "$T/out_$1_$i.json" 2 >"$T/job_$1_$i.out" 2>&1 &
	done
	outputs_of "$1" 0 1 2
	sleep 0.3
	$PY - "$T" "$1" "$mode" <<'PYEOF' || fail "$1: wrong bytes, permutation or label groups"
import collections, json, sys
import mn_check as mn
t, name, mode = sys.argv[1], sys.argv[2], sys.argv[3]
man = mn.manifest(t)
group = mn.class_of if mode == "dir" else (lambda rel: "root")
by_class = mn.by_group(man, group)   # label group -> sha -> file
bad = 0
tot = {"requests": 0, "hits": 0, "received": 0, "from_disk": 0}
for i in range(3):
    got = json.load(open(f"{t}/out_{name}_{i}.json"))
    served = collections.Counter()
    for rel, sha in got:
        cls = group(rel)
        f = by_class[cls].get(sha)
        if f is None:   # wrong bytes, or a file of another class
            print(f"node {i}: asked {rel}, got bytes that are no file of {cls}: {sha}")
            bad = 1
        else:
            served[f] += 1
    # A permutation: the multiset of contents received is the dataset's
    # (files with equal bytes, such as the empty ones, cannot be told apart).
    want = collections.Counter(sha for rel, sha, size, home in man)
    have = collections.Counter(sha for rel, sha in got)
    if have != want:
        missing = [by_class[group(rel)].get(sha, rel) for rel, sha, *_ in man if have[sha] < want[sha]]
        twice = [sha[:12] for sha in have if have[sha] > want[sha]]
        print(f"node {i}: {len(got)} samples; not served {missing[:5]}; served too often {twice[:5]}")
        bad = 1
    st = mn.stats(t, f"{name}{i}")["peers"]
    r, p = st["remote"], st["prefetch"]
    redirected = sum(1 for rel, sha in got if by_class[group(rel)].get(sha) != rel)
    print(f"{name} node {i}: {len(got)} samples, a permutation of the {len(man)} files, {'classes' if mode == 'dir' else 'root group'} kept, "
          f"{redirected} redirected; remote requests {r['requests']} (failed {r['failures']}), "
          f"prefetch received {p['received']} hits {p['hits']}; served to peers {st['served']}")
    if r["failures"]:
        bad = 1
    tot["requests"] += r["requests"]
    tot["hits"] += p["hits"]
    tot["received"] += p["received"]
    tot["from_disk"] += st["served"]["prefetched_from_disk"]
json.dump(tot, open(f"{t}/counts_{name}", "w"))
sys.exit(bad)
PYEOF
	for i in 0 1 2; do kill -9 "$(cat "$T/pid$i")" 2>/dev/null || true; done
}
# A cache that holds the dataset: the prefetch effect is measured, not eviction.
CACHE=${MN_REDIRECT_CACHE:-16M}
redirect_run rdoff 0 24100
redirect_run rdon 8 24200
# any: one label group per root (and extension) across the cluster.
redirect_run rdany 8 24400 any
# A file list naming the cluster's files (relative to the list): those only
# a peer has join the redirect dataset too, so prefetch serves them.
sed 's| .*||; s|^|root/|' "$T/manifest" >"$T/list"
FILELIST="$T/list" redirect_run rdlist 8 24700
$PY - "$T" <<'PYEOF' || fail "rdlist: the listed remote files are not part of the redirect dataset"
import json, sys
import mn_check as mn
c = json.load(open(f"{sys.argv[1]}/counts_rdlist"))
man = mn.manifest(sys.argv[1])
remote = sum(1 for i in range(3) for rel, sha, size, home in man if int(home) != i)
print(f"rdlist: {c['requests']} remote requests for {remote} remote files, {c['hits']} prefetch hits")
sys.exit(0 if c["requests"] < remote and c["hits"] > 0 else 1)
PYEOF

# ---- phase 4: redirect, node 2 dies mid-epoch ----
# Jobs on nodes 0 and 1 must finish; every sample is the exact bytes of a
# file of the class asked for, even for a path only node 2 had (decided
# again until a live file serves it). A request whose stand-in
# died with node 2 is decided again, so every file of nodes 0 and 1 is
# received; files received twice are at most the files lost (the sampler
# asks for every path: pigeonhole, docs/design.md "Limitations").
PREFETCH=8 fresh_cluster rdkill 24300
for i in 0 1; do
	on_node $i env LD_PRELOAD="$B/libdlshim.so" DLSHIM_REDIRECT=dir \
		$PY "$HERE/mn_torch_job.py" "$ROOT" "$T/manifest" "$T/out_rdkill_$i.json" 2 0.02 >"$T/job_rdkill_$i.out" 2>&1 &
done
sleep 0.8
kill -9 "$(cat "$T/pid2")"
outputs_of rdkill 0 1
$PY - "$T" <<'PYEOF' || fail "rdkill: wrong bytes or classes after node 2 died"
import collections, json, sys
import mn_check as mn
t = sys.argv[1]
man = mn.manifest(t)
by_class = mn.by_group(man)
bad = 0
for i in range(2):
    got = json.load(open(f"{t}/out_rdkill_{i}.json"))
    ok = err = 0
    for rel, sha in got:
        if sha.startswith("ERR:"):
            err += 1
        elif by_class[rel.split("/")[0]].get(sha):
            ok += 1
        else:
            print(f"node {i}: asked {rel}, got bytes of no file of its class")
            bad = 1
    # What the job received, file by file (files with equal bytes cannot be
    # told apart: counted by content).
    have = collections.Counter(sha for rel, sha in got if not sha.startswith("ERR:"))
    want = collections.Counter(sha for rel, sha, size, home in man)
    live = collections.Counter(sha for rel, sha, size, home in man if home != "2")
    missing_live = [sha[:12] for sha in live if have[sha] < live[sha]]
    lost = sum(max(0, want[sha] - have[sha]) for sha in want if have[sha] >= live[sha])
    repeats = sum(have[sha] - want[sha] for sha in have if have[sha] > want[sha])
    st = mn.stats(t, f"rdkill{i}")
    redecided = sum(j.get("redecided", 0) for j in st["jobs"])
    print(f"rdkill node {i}: {len(got)} samples, {ok} exact files of the class asked for, {err} errors (node 2 died); "
          f"{lost} files of node 2 never received, {repeats} received twice, live files missing {missing_live[:5]}; "
          f"{redecided} requests decided again")
    # Requests whose stand-in died with node 2 were decided again.
    bad |= redecided == 0
    bad |= len(got) != len(man) or ok == 0
    # Every file of a live node is received (a request whose stand-in died
    # with node 2 is decided again); repeats come only from the files lost
    # with node 2 (pigeonhole: the epoch has more requests than live files).
    bad |= bool(missing_live) or repeats > lost
    # A request for a path only node 2 had is decided again until a live
    # file serves it (dead-home failures are fast): no errors.
    bad |= err > 0
sys.exit(bad)
PYEOF
for i in 0 1; do kill -9 "$(cat "$T/pid$i")" 2>/dev/null || true; done

$PY - "$T" <<'PYEOF' || fail "prefetch did not cut the remote requests"
import json, sys
off = json.load(open(f"{sys.argv[1]}/counts_rdoff"))
on = json.load(open(f"{sys.argv[1]}/counts_rdon"))
print(f"remote requests: prefetch off {off['requests']}, on {on['requests']} "
      f"({off['requests'] / max(on['requests'], 1):.1f}x fewer); prefetch hits {on['hits']} of {on['received']} received")
print(f"prefetched files a cold home read from disk with the wanted one: {on['from_disk']}")
# Fresh coordinators: the homes are cold at first, so some candidates must
# have been read along with a wanted file (redox's chunk refill).
sys.exit(0 if on["requests"] < off["requests"] and on["hits"] > 0 and off["hits"] == 0 and on["from_disk"] > 0
         else 1)
PYEOF
fi

# ---- phase 5: one DDP job whose ranks run on the three nodes ----
# A rank per node (torch.distributed over gloo between the namespaces,
# DistributedSampler, 2 DataLoader workers, 2 epochs, DLSHIM_REDIRECT=dir).
# The job is one job across the cluster: in each epoch the samples all
# ranks received together must be every file exactly once, each from the
# class directory asked for, byte for byte. With DLSHIM_JOB_SPAN=off each
# node's part decides alone: the same check must then find files served
# twice (the check can fail).
ddp_run() { # name span port-base
	PREFETCH=8 fresh_cluster "$1" "$3"
	for i in 0 1 2; do
		on_node $i env LD_PRELOAD="$B/libdlshim.so" DLSHIM_REDIRECT=dir DLSHIM_JOB_SPAN=$2 \
			TORCHELASTIC_RUN_ID="mn$1" WORLD_SIZE=3 LOCAL_WORLD_SIZE=1 RANK=$i \
			MASTER_ADDR=10.231.7.1 MASTER_PORT=$(($3 + 50)) GLOO_SOCKET_IFNAME=eth0 \
			$PY "$HERE/mn_ddp_job.py" "$ROOT" "$T/manifest" "$T/out_$1_$i.json" 2 >"$T/job_$1_$i.out" 2>&1 &
	done
	outputs_of "$1" 0 1 2
	sleep 0.3
	$PY - "$T" "$1" "$2" <<'PYEOF' || fail "$1: wrong bytes, epochs or label groups across the DDP ranks"
import collections, json, sys
import mn_check as mn
t, name, span = sys.argv[1:4]
man = mn.manifest(t)
by_class = mn.by_group(man)
want = collections.Counter(sha for rel, sha, size, home in man)
ranks = [json.load(open(f"{t}/out_{name}_{i}.json")) for i in range(3)]
bad = wrong_epochs = 0
for ep in range(2):
    got = [s for r in ranks for s in r[ep]]
    for rel, sha in got:
        if by_class[rel.split("/")[0]].get(sha) is None:
            print(f"{name} epoch {ep}: asked {rel}, got bytes that are no file of its class")
            bad = 1
    have = collections.Counter(sha for rel, sha in got)
    twice = sum(have[s] - want[s] for s in have if have[s] > want[s])
    missing = sum(want[s] - have[s] for s in want if have[s] < want[s])
    print(f"{name} epoch {ep}: {len(got)} samples over 3 ranks ({', '.join(str(len(r[ep])) for r in ranks)}); "
          f"{twice} received more often than the file exists, {missing} never received")
    wrong_epochs += twice > 0 or missing > 0 or len(got) != len(man)
claims = refused = 0
for i in range(3):
    st = mn.stats(t, f"{name}{i}")
    job = [j for j in st["jobs"] if j["job"] == f"ddp-mn{name}"]
    c = st["peers"]["claims"]
    claims += c["asked_local"] + c["asked_remote"]
    refused += sum(j["claims_refused"] for j in job)
    spans = [j["spans_nodes"] for j in job]
    print(f"{name} node {i}: job spans nodes {spans}, claims {c}")
    if span == "auto" and spans != [True]:
        bad = 1
print(f"{name}: {claims} claims, {refused} refused (decided again)")
if span == "auto":
    # Every sample was claimed; the ranks' epochs are whole.
    bad |= wrong_epochs > 0 or claims < 2 * len(man)
else:
    # Without claims each node's part serves on its own view: files repeat.
    bad |= wrong_epochs == 0 or claims > 0
sys.exit(bad)
PYEOF
	if [ "$2" = auto ]; then
		DLSHIM_RUNTIME_DIR="$T/${1}0" "$B/dlshim" status | grep -q "claims: *[1-9][0-9]* asked" ||
			fail "$1: status does not show the claims"
	fi
	for i in 0 1 2; do kill -9 "$(cat "$T/pid$i")" 2>/dev/null || true; done
}
ddp_run ddpspan auto 24500
ddp_run ddpalone off 24600

# ---- phase 6: a DDP job whose claim authority for some groups is down ----
# Node 2 (no rank of its own) dies before a 2-rank job on nodes 0 and 1
# starts: claims of the groups it was authority for cannot be asked, so
# those files are served unverified (counted) and the ranks finish, every
# sample the exact bytes of a file of the class asked for (the ranks ask
# only for files of the live nodes).
PREFETCH=8 fresh_cluster ddpdead 24800
kill -9 "$(cat "$T/pid2")"
for i in 0 1; do
	wait_for 15 sh -c "DLSHIM_RUNTIME_DIR=$T/ddpdead$i $B/dlshim status | grep -q 'node 2 .*unreachable'" ||
		fail "ddpdead: node $i does not see node 2 down"
done
awk '$4 != 2' "$T/manifest" >"$T/manifest_live"
for i in 0 1; do
	on_node $i env LD_PRELOAD="$B/libdlshim.so" DLSHIM_REDIRECT=dir TORCHELASTIC_RUN_ID=mnddpdead \
		WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 RANK=$i MASTER_ADDR=10.231.7.1 MASTER_PORT=24850 GLOO_SOCKET_IFNAME=eth0 \
		$PY "$HERE/mn_ddp_job.py" "$ROOT" "$T/manifest_live" "$T/out_ddpdead_$i.json" 1 >"$T/job_ddpdead_$i.out" 2>&1 &
done
outputs_of ddpdead 0 1
$PY - "$T" <<'PYEOF' || fail "ddpdead: wrong bytes, or the dead authority was not noticed"
import json, sys
import mn_check as mn
t = sys.argv[1]
man = mn.manifest(t)
by_class = mn.by_group(man)
bad = unverified = n = 0
for i in range(2):
    for rel, sha in json.load(open(f"{t}/out_ddpdead_{i}.json"))[0]:
        n += 1
        if by_class[rel.split("/")[0]].get(sha) is None:
            print(f"ddpdead: rank {i} asked {rel}, got bytes of no file of its class")
            bad = 1
    st = mn.stats(t, f"ddpdead{i}")
    unverified += st["peers"]["claims"]["unverified"]
print(f"ddpdead: {n} samples over 2 ranks, each the bytes of a file of its class; {unverified} claims unverified "
      "(authority node 2 down)")
live = sum(1 for l in man if l[3] != "2")
sys.exit(bad or unverified == 0 or n != (live + 1) // 2 * 2)  # DistributedSampler pads to whole ranks
PYEOF
for i in 0 1; do kill -9 "$(cat "$T/pid$i")" 2>/dev/null || true; done
echo "multinode: PASS"
