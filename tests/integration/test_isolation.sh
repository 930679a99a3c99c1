#!/usr/bin/env bash
# Isolation between users (DESIGN "Processes": per-user directory, mode 0700,
# SO_PEERCRED; shared memory passed only as descriptors). Needs root (it runs
# parts as user nobody with setpriv).
#  (a) root's coordinator in a private runtime dir; as nobody: the runtime dir
#      cannot be listed or read, its socket cannot be connected to, the
#      coordinator's /proc/PID/fd (the memfd segment), /proc/PID/mem and
#      /proc/PID/map_files cannot be opened
#  (b) as nobody with CAP_DAC_OVERRIDE (so directory and socket modes do not
#      stop it): the coordinator itself refuses the connection (SO_PEERCRED):
#      no HELLO_OK, no segment descriptor, a STOP does nothing
#  (c) a shimmed process as nobody with DLSHIM_RUNTIME_DIR = root's dir:
#      pass-through, correct bytes, exactly one warning line; root's
#      coordinator never sees it and no second coordinator starts
#  (d) DLSHIM_RUNTIME_DIR pointing at an empty directory with mode 0777: no
#      coordinator is started there, pass-through, correct bytes, one warning
#  (e) DLSHIM_RUNTIME_DIR pointing at a mode-0777 directory (root's) or at a
#      directory owned by nobody, where nobody has planted a socket (a relay to
#      nobody's own coordinator, tests/integration/relay_sock.py): root's shim
#      must not talk to it (no connection, no HELLO, none of root's file
#      descriptors reach nobody); pass-through with correct bytes, one warning
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ "$(id -u)" -ne 0 ]; then
	echo "not available: needs root (runs parts as user nobody)"
	exit 77
fi
if ! command -v setpriv >/dev/null 2>&1 || ! id nobody >/dev/null 2>&1; then
	echo "not available: needs setpriv and a user nobody"
	exit 77
fi
dl_setup isolation
chmod 755 "$DL_TMP" # nobody may traverse the test dir; the runtime dirs stay 0700
RT=$DLSHIM_RUNTIME_DIR
NBGROUP=$(id -gn nobody)

DATA=$DL_TMP/data
dl_make_random_files "$DATA" 20 1000 80000 41
# a file only root may read (the thing a leak would expose)
head -c 54321 /dev/urandom >"$DATA/secret.bin"
chmod 755 "$DATA"
chmod 644 "$DATA"/*.bin
chmod 600 "$DATA/secret.bin"
dl_manifest "$DATA" "$DL_TMP/manifest"
export DLSHIM_ROOTS=$DATA
export DLSHIM_CACHE=64M
grep -v secret.bin "$DL_TMP/manifest" >"$DL_TMP/manifest.public"
SECRET_SHA=$(sha256sum "$DATA/secret.bin" | cut -d' ' -f1)

# The build must be usable by nobody; otherwise use a copy.
NBLIB=$DL_LIB
NBDAEMON=$DL_DAEMON
if ! setpriv --reuid=nobody --regid="$NBGROUP" --clear-groups test -r "$DL_LIB" -a -x "$DL_DAEMON"; then
	mkdir -p "$DL_TMP/bin"
	cp "$DL_LIB" "$DL_DAEMON" "$DL_TMP/bin/"
	chmod 755 "$DL_TMP/bin" "$DL_TMP/bin"/*
	NBLIB=$DL_TMP/bin/libdlshim.so
	NBDAEMON=$DL_TMP/bin/dlshimd
fi
# shell helpers: DLTEST_TMP marks our background processes for cleanup
as_nobody() { setpriv --reuid=nobody --regid="$NBGROUP" --clear-groups env DLTEST_TMP="$DL_TMP" "$@"; }
as_nobody_dac() {
	setpriv --reuid=nobody --regid="$NBGROUP" --clear-groups --inh-caps=+dac_override \
		--ambient-caps=+dac_override env DLTEST_TMP="$DL_TMP" "$@"
}
# sha256 lines of files, read under the shim with read(2) by cat
shim_cat_sums() {
	local f
	while read -r _ f; do
		printf '%s  %s\n' "$(LD_PRELOAD="$1" cat "$f" | sha256sum | cut -d' ' -f1)" "$f"
	done <"$2"
}
nwarn() { grep -c '^dlshim: warning: ' "$1" 2>/dev/null || true; }

# Python probes run as nobody
cat >"$DL_TMP/probe.py" <<'EOF'
import errno, json, os, socket, struct, sys
rt, pid = sys.argv[1], int(sys.argv[2])
r = {}
def attempt(name, fn):
    try:
        fn()
        r[name] = "ok"
    except OSError as e:
        r[name] = errno.errorcode.get(e.errno, str(e.errno))
attempt("listdir runtime dir", lambda: os.listdir(rt))
attempt("read dlshimd.log", lambda: open(rt + "/dlshimd.log", "rb").read())
attempt("stat sock", lambda: os.stat(rt + "/sock"))
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    s.connect(rt + "/sock")
attempt("connect sock", conn)
attempt("listdir /proc/pid/fd", lambda: os.listdir("/proc/%d/fd" % pid))
for fd in sys.argv[3:]:
    attempt("open /proc/pid/fd/" + fd, lambda: os.open("/proc/%d/fd/%s" % (pid, fd), os.O_RDONLY))
attempt("open /proc/pid/mem", lambda: os.open("/proc/%d/mem" % pid, os.O_RDONLY))
attempt("listdir /proc/pid/map_files", lambda: os.listdir("/proc/%d/map_files" % pid))
attempt("read /proc/pid/environ", lambda: open("/proc/%d/environ" % pid, "rb").read())
print(json.dumps(r, sort_keys=True))
EOF
cat >"$DL_TMP/peercred.py" <<'EOF'
# Connect to the coordinator's socket (possible here only thanks to
# CAP_DAC_OVERRIDE), then try HELLO (client and control) and STOP.
import os, socket, struct, sys, json
sock, inc = sys.argv[1], sys.argv[2]
sys.path.insert(0, inc)
MAGIC, VERSION = 0x31534C44, 1
HELLO, HELLO_OK, STOP, STATS = 1, 2, 9, 7
def hello(kind):
    return struct.pack("=IIQ128sII", os.getpid(), kind, 0xBAD, b"intruder", 0, 0)
def pkt(t, p=b""):
    return struct.pack("=IHHII", MAGIC, VERSION, t, len(p), 1) + p
out = {}
for name, msgs in (("client hello", [pkt(HELLO, hello(0))]),
                   ("control hello + stop", [pkt(HELLO, hello(1)), pkt(STOP)]),
                   ("stats", [pkt(STATS)])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    try:
        s.connect(sock)
    except OSError as e:
        out[name] = "connect failed: %s" % e
        continue
    got = []
    try:
        for m in msgs:
            s.send(m)
        while True:
            msg, fds, _f, _a = socket.recv_fds(s, 1 << 20, 4)
            if not msg:
                break
            got.append((struct.unpack_from("=IHHII", msg)[2], len(fds)))
            for fd in fds:
                os.close(fd)
    except (ConnectionResetError, BrokenPipeError):
        pass
    except socket.timeout:
        got.append("timeout: connection left open")
    out[name] = "connected; replies %s" % got
print(json.dumps(out))
EOF
chmod 644 "$DL_TMP/probe.py" "$DL_TMP/peercred.py"

#####################################################################
dl_section "(a) root's coordinator: nothing of it is reachable by nobody"
dl_shim cat "$DATA/f0000.bin" >/dev/null
DPID=$(dl_stat 'j["daemon"]["pid"]' 2>/dev/null)
if [ -z "$DPID" ] || [ ! -d "/proc/$DPID" ]; then
	dl_fail "root's coordinator started (pid '$DPID')"
	dl_finish
fi
dl_ok "root's coordinator runs (pid $DPID, runtime dir $RT)"
[ "$(stat -c %a "$RT")" = 700 ] && dl_ok "runtime dir mode 0700" || dl_fail "runtime dir mode 0700 (got $(stat -c %a "$RT"))"
[ "$(stat -c %U "$RT")" = root ] && dl_ok "runtime dir owned by root" || dl_fail "runtime dir owned by root"
MEMFDS=$(for f in /proc/"$DPID"/fd/*; do l=$(readlink "$f"); case $l in /memfd:*) basename "$f" ;; esac; done | tr '\n' ' ')
[ -n "$MEMFDS" ] && dl_ok "the segment is a memfd (fd $MEMFDS)" || dl_fail "the coordinator holds a memfd segment"
[ -z "$(find /dev/shm -maxdepth 1 -newer "$DL_TMP/manifest" -user root 2>/dev/null | head -n 1)" ] &&
	dl_ok "no new file in /dev/shm (the segment has no name)" || dl_info "new files in /dev/shm (maybe not ours)"
# shellcheck disable=SC2086
as_nobody /usr/bin/python3 "$DL_TMP/probe.py" "$RT" "$DPID" $MEMFDS >"$DL_TMP/a.json" 2>"$DL_TMP/a.err"
dl_show "$DL_TMP/a.json" 3
"$DL_PY" - "$DL_TMP/a.json" <<'EOF' >"$DL_TMP/a.res"
import json, sys
r = json.load(open(sys.argv[1]))
for k, v in sorted(r.items()):
    print(("ok" if v != "ok" else "FAIL") + " as nobody: %s is refused (%s)" % (k, v))
if not r:
    print("FAIL probe produced nothing")
EOF
while read -r verdict msg; do
	if [ "$verdict" = ok ]; then dl_ok "$msg"; else dl_fail "$msg"; fi
done <"$DL_TMP/a.res"
[ -s "$DL_TMP/a.res" ] || { dl_fail "the nobody probe ran"; dl_show "$DL_TMP/a.err"; }

#####################################################################
dl_section "(b) nobody with CAP_DAC_OVERRIDE reaches the socket: SO_PEERCRED refuses it"
as_nobody_dac /usr/bin/python3 "$DL_TMP/peercred.py" "$RT/sock" "$DL_HERE" >"$DL_TMP/b.json" 2>"$DL_TMP/b.err"
dl_show "$DL_TMP/b.json" 3
"$DL_PY" - "$DL_TMP/b.json" <<'EOF' >"$DL_TMP/b.res"
import json, sys
r = json.load(open(sys.argv[1]))
for k, v in sorted(r.items()):
    ok = v.startswith("connected; replies []")
    print(("ok" if ok else "FAIL") + " as nobody+dac_override: %s -> %s (expected: closed with no reply)" % (k, v))
if not r:
    print("FAIL the probe produced nothing")
EOF
while read -r verdict msg; do
	if [ "$verdict" = ok ]; then dl_ok "$msg"; else dl_fail "$msg"; fi
done <"$DL_TMP/b.res"
[ -s "$DL_TMP/b.res" ] || { dl_fail "the dac_override probe ran"; dl_show "$DL_TMP/b.err"; }
kill -0 "$DPID" 2>/dev/null && dl_ok "root's coordinator still runs after the intruder's STOP" || dl_fail "root's coordinator still runs after the intruder's STOP"
grep -q 'refusing a connection from uid 65534' "$RT/dlshimd.log" && dl_ok "the coordinator logged the refused uid" ||
	dl_fail "the coordinator logged 'refusing a connection from uid 65534'"

#####################################################################
dl_section "(c) a shimmed process as nobody pointed at root's runtime dir"
JOBS0=$(dl_stat 'len(j["jobs"])')
as_nobody env LD_PRELOAD="$NBLIB" DLSHIM_DAEMON="$NBDAEMON" /usr/bin/python3 -c '
import hashlib, sys
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        print("%s  %s" % (hashlib.sha256(f.read()).hexdigest(), p))
' $(cut -d' ' -f3 "$DL_TMP/manifest.public") >"$DL_TMP/c.out" 2>"$DL_TMP/c.err"
rc=$?
[ "$rc" -eq 0 ] && dl_ok "nobody's reader exits 0" || dl_fail "nobody's reader exits 0 (got $rc)"
if probs=$(dl_check_hashes "$DL_TMP/c.out" "$DL_TMP/manifest.public"); then
	dl_ok "nobody's reader gets the sha256 of every readable file"
else
	dl_fail "nobody's reader gets the sha256 of every readable file"
	printf '%s\n' "$probs" | head -n 5 | sed 's/^/        | /'
fi
nw=$(nwarn "$DL_TMP/c.err")
[ "$nw" -eq 1 ] && dl_ok "exactly one 'dlshim: warning:' line" || dl_fail "exactly one 'dlshim: warning:' line (got $nw)"
dl_show "$DL_TMP/c.err" 4
[ "$(grep -vc '^dlshim: warning: ' "$DL_TMP/c.err")" -eq 0 ] && dl_ok "nothing else on stderr" || dl_fail "nothing else on stderr"
[ "$(dl_stat 'len(j["jobs"])')" = "$JOBS0" ] && dl_ok "root's coordinator saw no job from nobody" || dl_fail "root's coordinator saw no job from nobody"
[ "$(dl_daemon_pids "$RT")" = "$DPID" ] && dl_ok "no second coordinator for root's runtime dir" || dl_fail "no second coordinator for root's runtime dir (pids: $(dl_daemon_pids "$RT"))"
[ "$(stat -c %U:%a "$RT")" = root:700 ] && dl_ok "root's runtime dir untouched (root:700)" || dl_fail "root's runtime dir untouched (now $(stat -c %U:%a "$RT"))"

#####################################################################
dl_section "(d) DLSHIM_RUNTIME_DIR is an empty directory with mode 0777"
OPEN=$DL_TMP/open777
mkdir "$OPEN"
chmod 777 "$OPEN"
DL_RUNTIME_DIRS+=("$OPEN")
DLSHIM_RUNTIME_DIR=$OPEN shim_cat_sums "$DL_LIB" "$DL_TMP/manifest" >"$DL_TMP/d.out" 2>"$DL_TMP/d.err"
if probs=$(dl_check_hashes "$DL_TMP/d.out" "$DL_TMP/manifest"); then
	dl_ok "correct bytes for every file (secret included)"
else
	dl_fail "correct bytes for every file"
	printf '%s\n' "$probs" | head -n 5 | sed 's/^/        | /'
fi
[ -z "$(find "$OPEN" -type s)" ] && dl_ok "no socket was created in the 0777 dir" || dl_fail "no socket was created in the 0777 dir"
[ -z "$(dl_daemon_pids "$OPEN")" ] && dl_ok "no coordinator serves the 0777 dir" || dl_fail "no coordinator serves the 0777 dir"
# one cat process per file: each must warn exactly once
NF=$(wc -l <"$DL_TMP/manifest")
nw=$(nwarn "$DL_TMP/d.err")
[ "$nw" -eq "$NF" ] && dl_ok "one warning line per process ($nw for $NF processes)" ||
	dl_fail "one warning line per process (got $nw lines for $NF processes)"
dl_show "$DL_TMP/d.err" 2
grep '^dlshim: warning: ' "$DL_TMP/d.err" | head -n 1 | grep -q "$OPEN" && dl_ok "the warning names the runtime dir" || dl_fail "the warning names the runtime dir"

#####################################################################
dl_section "(e) a socket planted by nobody in a 0777 dir / in nobody's own dir"
NB=$DL_TMP/nobody
mkdir -m 755 "$NB"
chown nobody:"$NBGROUP" "$NB"
NBRT=$NB/rt # nobody's real coordinator, the relay's upstream
DL_RUNTIME_DIRS+=("$NBRT")
EVIL=$NB/evil # owned by nobody, private to nobody
PLANT=$DL_TMP/shared777 # root's, but world-writable
mkdir -m 700 "$EVIL"
chown nobody:"$NBGROUP" "$EVIL"
mkdir "$PLANT"
chmod 777 "$PLANT"
DL_RUNTIME_DIRS+=("$EVIL" "$PLANT")
cp "$DL_HERE/relay_sock.py" "$DL_TMP/relay_sock.py"
chmod 644 "$DL_TMP/relay_sock.py"
# (setpriv directly, not through a function: $! must be the process itself)
setpriv --reuid=nobody --regid="$NBGROUP" --clear-groups env DLTEST_TMP="$DL_TMP" DLSHIM_RUNTIME_DIR="$NBRT" \
	DLSHIM_IDLE_EXIT=60 DLSHIM_CACHE=64M "$NBDAEMON" --foreground >"$DL_TMP/nbd.out" 2>&1 &
DL_BG_PIDS+=($!)
dl_wait_until 10 test -S "$NBRT/sock" && dl_ok "nobody's own coordinator runs (upstream of the relay)" ||
	dl_fail "nobody's own coordinator runs (upstream of the relay)"
RELAY_LOG=$NB/relay.log
setpriv --reuid=nobody --regid="$NBGROUP" --clear-groups env DLTEST_TMP="$DL_TMP" /usr/bin/python3 \
	"$DL_TMP/relay_sock.py" "$NBRT/sock" "$RELAY_LOG" "$PLANT/sock" "$EVIL/sock" >"$DL_TMP/relay.out" 2>&1 &
DL_BG_PIDS+=($!)
dl_wait_until 10 test -e "$RELAY_LOG.ready" && dl_ok "nobody's relay listens in $PLANT and $EVIL" ||
	{ dl_fail "nobody's relay listens"; dl_show "$DL_TMP/relay.out"; }
# sanity: the relay works as a coordinator for its own user (the attack is real)
as_nobody env LD_PRELOAD="$NBLIB" DLSHIM_RUNTIME_DIR="$EVIL" DLSHIM_ROOTS="$DATA" DLSHIM_DAEMON="$NBDAEMON" \
	/usr/bin/python3 -c 'import sys; open(sys.argv[1], "rb").read()' "$DATA/f0001.bin" 2>"$DL_TMP/e0.err"
grep -q "stolen fd: .* bytes sha256 $(sha256sum "$DATA/f0001.bin" | cut -d' ' -f1)" "$RELAY_LOG" 2>/dev/null &&
	dl_ok "(sanity) a shim client that talks to the relay hands it the descriptors of the files it opens" ||
	{ dl_fail "(sanity) the relay receives a client's descriptors"; dl_show "$RELAY_LOG"; dl_show "$DL_TMP/e0.err"; }
: >"$RELAY_LOG"

for dir in "$PLANT" "$EVIL"; do
	label="$(stat -c %U:%a "$dir") dir $(basename "$dir")"
	DLSHIM_RUNTIME_DIR=$dir dl_shim /usr/bin/python3 -c '
import hashlib, sys
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        print("%s  %s" % (hashlib.sha256(f.read()).hexdigest(), p))
' $(cut -d' ' -f3 "$DL_TMP/manifest") >"$DL_TMP/e.out" 2>"$DL_TMP/e.err"
	rc=$?
	[ "$rc" -eq 0 ] && dl_ok "$label: root's reader exits 0" || dl_fail "$label: root's reader exits 0 (got $rc)"
	if probs=$(dl_check_hashes "$DL_TMP/e.out" "$DL_TMP/manifest"); then
		dl_ok "$label: correct bytes for every file"
	else
		dl_fail "$label: correct bytes for every file"
		printf '%s\n' "$probs" | head -n 5 | sed 's/^/        | /'
	fi
	if grep -q "^accepted uid 0 " "$RELAY_LOG"; then
		dl_fail "$label: root's shim does not connect to a socket in a runtime dir it does not own privately"
		dl_show "$RELAY_LOG" 6
	else
		dl_ok "$label: root's shim does not connect to a socket in a runtime dir it does not own privately"
	fi
	n=$(grep -c '^stolen fd' "$RELAY_LOG")
	if grep -q "^stolen fd: .* sha256 $SECRET_SHA" "$RELAY_LOG"; then
		dl_fail "$label: nobody gets no descriptor of root's files (it got $n, including root-only secret.bin)"
	else
		[ "$n" -eq 0 ] && dl_ok "$label: nobody gets no descriptor of root's files" ||
			dl_fail "$label: nobody gets no descriptor of root's files (it got $n)"
	fi
	nw=$(nwarn "$DL_TMP/e.err")
	[ "$nw" -eq 1 ] && dl_ok "$label: exactly one 'dlshim: warning:' line" || dl_fail "$label: exactly one 'dlshim: warning:' line (got $nw)"
	dl_show "$DL_TMP/e.err" 3
	: >"$RELAY_LOG"
done

dl_finish
