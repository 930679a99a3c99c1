#!/usr/bin/env bash
# Failure handling (DESIGN "Interposition rules" 1, 3, 4; Semantics: exact mode):
#  (a) coordinator SIGKILLed mid-run: the reader finishes with correct bytes and
#      exactly one "dlshim: warning:" line; the next client gets a new coordinator
#  (b) a job SIGKILLed while holding files open releases its pins; a killed
#      forked worker releases only its own pins; the next job runs correctly
#  (c) files rewritten between epochs (same size, other size, replaced): new bytes
#  (d) errors (EACCES as user nobody, ENOENT, EISDIR, ENOTDIR) are the same errno
#      with and without the shim
#  (e) a process that reads only unrouted paths never connects anywhere
#  (f) DLSHIM_DISABLE=1: no coordinator, correct bytes
#  (g) bad values of variables: correct bytes, one stderr line naming the variable
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
dl_setup faults

DATA=$DL_TMP/data
dl_make_random_files "$DATA/x" 50 0 120000 31
dl_make_random_files "$DATA/y" 30 16000 40000 32
dl_manifest "$DATA" "$DL_TMP/manifest"
find "$DATA" -type f | sort >"$DL_TMP/list"
NFILES=$(wc -l <"$DL_TMP/list")
export DLSHIM_ROOTS=$DATA
export DLSHIM_CACHE=128M
dl_build_reader reader -O2 -U_FORTIFY_SOURCE || { dl_fail "build tests/progs/threaded_reader.c"; dl_finish; }
READER=$DL_TMP/reader

# hashes_ok NAME OUT REPS
hashes_ok() {
	local probs
	if probs=$(dl_check_hashes "$2" "$DL_TMP/manifest" "$3"); then
		dl_ok "$1: every file x $3 has the sha256 of the file on disk"
	else
		dl_fail "$1: every file x $3 has the sha256 of the file on disk"
		printf '%s\n' "$probs" | head -n 15 | sed 's/^/        | /'
	fi
}
no_socket() { [ -z "$(find "$DLSHIM_RUNTIME_DIR" -type s 2>/dev/null)" ]; }
no_daemon() { [ -z "$(dl_daemon_pids "$DLSHIM_RUNTIME_DIR")" ]; }
proc_gone() { [ ! -e "/proc/$1" ] || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }
status_is() {
	local rc
	dl_cli status >/dev/null 2>&1
	rc=$?
	[ "$rc" -eq "$1" ]
}

#####################################################################
dl_section "(a) coordinator killed with SIGKILL while a reader loops over the files"
dl_new_runtime_dir
SYNC=$DL_TMP/sync_a
mkdir -p "$SYNC"
env LD_PRELOAD="$DL_LIB" "$READER" -t 8 -m read -c 8192 -r 5 -w "$SYNC" <"$DL_TMP/list" >"$DL_TMP/a.out" 2>"$DL_TMP/a.err" &
RPID=$!
DL_BG_PIDS+=("$RPID")
if dl_wait_until 30 test -e "$SYNC/ready"; then
	dl_ok "reader finished its first pass and waits (handshake)"
else
	dl_fail "reader finished its first pass and waits (handshake)"
fi
DPID=$(dl_stat 'j["daemon"]["pid"]' 2>/dev/null)
[ -n "$DPID" ] || DPID=$(dl_daemon_pids)
REQ_A=$(dl_stat 'sum(x["requests"] for x in j["jobs"])' 2>/dev/null)
[ "${REQ_A:-0}" -eq "$NFILES" ] && dl_ok "first pass was routed ($NFILES requests)" || dl_fail "first pass was routed (expected $NFILES requests, got '${REQ_A}')"
if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
	dl_ok "coordinator pid $DPID found"
	kill -9 "$DPID"
	dl_wait_until 5 proc_gone "$DPID" && dl_ok "coordinator killed with SIGKILL" || dl_fail "coordinator killed with SIGKILL"
else
	dl_fail "coordinator pid found (got '$DPID')"
fi
kill -0 "$RPID" 2>/dev/null && dl_ok "reader still running when the coordinator died (mid-run)" || dl_fail "reader still running when the coordinator died (mid-run)"
touch "$SYNC/go"
if ! dl_wait_until 60 proc_gone "$RPID"; then
	dl_fail "reader finishes within 60 s after the crash (hung: killing it)"
	kill -9 "$RPID"
fi
wait "$RPID"
rc=$?
[ "$rc" -eq 0 ] && dl_ok "reader exits 0" || dl_fail "reader exits 0 (got $rc)"
hashes_ok "(a) reader across the crash" "$DL_TMP/a.out" 5
nw=$(dl_warnings "$DL_TMP/a.err")
[ "$nw" -eq 1 ] && dl_ok "exactly one 'dlshim: warning:' line (got $nw)" || dl_fail "exactly one 'dlshim: warning:' line (got $nw)"
grep '^dlshim: warning: ' "$DL_TMP/a.err" | grep -qiE 'coordinator|dlshimd|daemon|connection' &&
	dl_ok "the warning is about the coordinator" || dl_fail "the warning is about the coordinator"
nother=$(grep -vc '^dlshim: warning: ' "$DL_TMP/a.err")
[ "$nother" -eq 0 ] && dl_ok "nothing else on stderr" || dl_fail "nothing else on stderr ($nother other lines)"
dl_show "$DL_TMP/a.err" 8

# a new client after the crash: recovers from the stale socket/lock
dl_shim "$READER" -t 8 -m pread <"$DL_TMP/list" >"$DL_TMP/a2.out" 2>"$DL_TMP/a2.err"
rc=$?
[ "$rc" -eq 0 ] && dl_ok "a new job after the crash exits 0" || dl_fail "a new job after the crash exits 0 (got $rc)"
hashes_ok "(a) new job after the crash" "$DL_TMP/a2.out" 1
DPID2=$(dl_stat 'j["daemon"]["pid"]' 2>/dev/null)
[ -n "$DPID2" ] && [ "$DPID2" != "$DPID" ] && dl_ok "it started a fresh coordinator (pid $DPID2)" || dl_fail "it started a fresh coordinator (pid '${DPID2}')"
REQ=$(dl_stat 'sum(x["requests"] for x in j["jobs"])' 2>/dev/null)
[ "${REQ:-0}" -eq "$NFILES" ] && dl_ok "the new job is routed again ($NFILES requests)" || dl_fail "the new job is routed again (expected $NFILES requests, got '${REQ}')"
[ "$(dl_warnings "$DL_TMP/a2.err")" -eq 0 ] && dl_ok "no warning for the new job" || { dl_fail "no warning for the new job"; dl_show "$DL_TMP/a2.err"; }

dl_info "(a2) the same while reads are in flight (no pause: killed once ~1.5 passes were routed)"
dl_new_runtime_dir
env LD_PRELOAD="$DL_LIB" "$READER" -t 8 -m pread -c 4096 -r 10 -d 20000 <"$DL_TMP/list" >"$DL_TMP/a3.out" 2>"$DL_TMP/a3.err" &
RPID=$!
DL_BG_PIDS+=("$RPID")
enough() { [ "$(dl_stat 'sum(x["requests"] for x in j["jobs"])' 2>/dev/null)" -ge $((NFILES * 3 / 2)) ] 2>/dev/null; }
dl_wait_until 30 enough && dl_ok "reader is in its second pass" || dl_fail "reader is in its second pass"
DPID=$(dl_stat 'j["daemon"]["pid"]' 2>/dev/null)
if [ -n "$DPID" ]; then kill -9 "$DPID"; fi
proc_gone "$RPID" && dl_fail "reader still running when the coordinator was killed" || dl_ok "reader still running when the coordinator was killed (pid $DPID)"
if ! dl_wait_until 60 proc_gone "$RPID"; then
	dl_fail "reader finishes within 60 s after the crash (hung: killing it)"
	kill -9 "$RPID"
fi
wait "$RPID"
rc=$?
[ "$rc" -eq 0 ] && dl_ok "reader exits 0" || dl_fail "reader exits 0 (got $rc)"
hashes_ok "(a2) reader across an in-flight crash" "$DL_TMP/a3.out" 10
nw=$(dl_warnings "$DL_TMP/a3.err")
[ "$nw" -eq 1 ] && dl_ok "exactly one 'dlshim: warning:' line (got $nw)" || { dl_fail "exactly one 'dlshim: warning:' line (got $nw)"; dl_show "$DL_TMP/a3.err" 8; }
nother=$(grep -vc '^dlshim: warning: ' "$DL_TMP/a3.err")
[ "$nother" -eq 0 ] && dl_ok "nothing else on stderr" || { dl_fail "nothing else on stderr ($nother other lines)"; dl_show "$DL_TMP/a3.err" 8; }

#####################################################################
dl_section "(b) a job killed with SIGKILL while holding files open"
dl_new_runtime_dir
cat >"$DL_TMP/holder.py" <<'EOF'
import os, sys, time
mode, root, ready = sys.argv[1:4]
files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)
def open_all(fl):
    fds = []
    for p in fl:
        fd = os.open(p, os.O_RDONLY)
        os.read(fd, 100)
        fds.append(fd)
    return fds
def mark(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)
if mode == "all":
    fds = open_all(files)
    mark(ready, "%d\n" % os.getpid())
    time.sleep(300)
else:  # fork: the parent keeps one file open, a forked worker opens the rest
    keep = os.open(files[0], os.O_RDONLY)
    os.read(keep, 10)
    pid = os.fork()
    if pid == 0:
        fds = open_all(files[1:])
        mark(ready, "%d\n" % os.getpid())
        time.sleep(300)
        os._exit(0)
    while not os.path.exists(ready + ".close"):
        time.sleep(0.02)
    os.close(keep)
    mark(ready + ".closed", "")
    time.sleep(300)
EOF
pinned() { dl_stat 'j["cache"]["items_pinned"]' 2>/dev/null; }
pinned_is() { [ "$(pinned)" = "$1" ]; }
READY=$DL_TMP/b.ready
# env execs python: $! is the python process itself
env LD_PRELOAD="$DL_LIB" /usr/bin/python3 "$DL_TMP/holder.py" all "$DATA" "$READY" >"$DL_TMP/b.out" 2>"$DL_TMP/b.err" &
HPID=$!
DL_BG_PIDS+=("$HPID")
dl_wait_until 30 test -e "$READY" && dl_ok "holder opened $NFILES files and waits" || dl_fail "holder opened $NFILES files and waits"
p=$(pinned)
[ "${p:-0}" -gt 0 ] && dl_ok "open files are pinned while held (items_pinned $p)" || dl_fail "open files are pinned while held (items_pinned '${p}')"
live=$(dl_stat 'sum(1 for x in j["jobs"] if x["live"])' 2>/dev/null)
[ "${live:-0}" -eq 1 ] && dl_ok "one live job" || dl_fail "one live job (got '${live}')"
kill -9 "$HPID"
wait "$HPID" 2>/dev/null
dl_wait_until 10 pinned_is 0 && dl_ok "items_pinned drops to 0 after the job is killed" || dl_fail "items_pinned drops to 0 after the job is killed (now '$(pinned)')"
nolive() { [ "$(dl_stat 'sum(1 for x in j["jobs"] if x["live"])' 2>/dev/null)" = 0 ]; }
dl_wait_until 10 nolive && dl_ok "the killed job is listed as not live" || dl_fail "the killed job is listed as not live"
dl_shim "$READER" -t 8 -m vec <"$DL_TMP/list" >"$DL_TMP/b2.out" 2>"$DL_TMP/b2.err"
rc=$?
[ "$rc" -eq 0 ] && [ ! -s "$DL_TMP/b2.err" ] && dl_ok "a following job exits 0 with a clean stderr" || { dl_fail "a following job exits 0 with a clean stderr (rc $rc)"; dl_show "$DL_TMP/b2.err"; }
hashes_ok "(b) following job" "$DL_TMP/b2.out" 1
dl_wait_until 10 pinned_is 0 && dl_ok "no pins left after the following job" || dl_fail "no pins left after the following job (now '$(pinned)')"

dl_info "forked worker killed, parent alive"
READY=$DL_TMP/b3.ready
env LD_PRELOAD="$DL_LIB" /usr/bin/python3 "$DL_TMP/holder.py" fork "$DATA" "$READY" >"$DL_TMP/b3.out" 2>"$DL_TMP/b3.err" &
HPID=$!
DL_BG_PIDS+=("$HPID")
dl_wait_until 30 test -e "$READY" && dl_ok "worker opened its files and waits" || dl_fail "worker opened its files and waits"
WPID=$(cat "$READY" 2>/dev/null)
[ -n "$WPID" ] && DL_BG_PIDS+=("$WPID")
p=$(pinned)
[ "${p:-0}" -ge 2 ] && dl_ok "parent's and worker's files are pinned (items_pinned $p)" || dl_fail "parent's and worker's files are pinned (items_pinned '${p}')"
[ -n "$WPID" ] && kill -9 "$WPID"
dl_wait_until 10 pinned_is 1 && dl_ok "killing the worker releases its pins; the parent's one open file stays pinned (items_pinned 1)" ||
	dl_fail "killing the worker releases its pins; the parent's one open file stays pinned (items_pinned '$(pinned)', expected 1)"
touch "$READY.close"
dl_wait_until 10 test -e "$READY.closed"
dl_wait_until 10 pinned_is 0 && dl_ok "the parent's close releases the last pin" || dl_fail "the parent's close releases the last pin (items_pinned '$(pinned)')"
kill -9 "$HPID" 2>/dev/null
wait "$HPID" 2>/dev/null

#####################################################################
dl_section "(c) files rewritten between two epochs"
dl_new_runtime_dir
DC=$DL_TMP/data_c
dl_make_random_files "$DC" 12 5000 60000 33
cat >"$DL_TMP/epochs.py" <<'EOF'
import hashlib, os, sys, time
root, out, sync = sys.argv[1:4]
epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 2
files = sorted(os.path.join(root, f) for f in os.listdir(root))
with open(out, "w") as o:
    for e in range(epochs):
        for p in files:
            with open(p, "rb") as f:
                o.write("%d %s %s\n" % (e, hashlib.sha256(f.read()).hexdigest(), p))
        o.flush()
        if e == 0 and sync != "-":
            open(sync + "/ready", "w").close()
            deadline = time.time() + 60
            while not os.path.exists(sync + "/go"):
                if time.time() > deadline:
                    sys.exit("timed out waiting for go")
                time.sleep(0.02)
EOF
cat >"$DL_TMP/rewrite.py" <<'EOF'
import os, random, sys
root = sys.argv[1]
files = sorted(os.path.join(root, f) for f in os.listdir(root))
r = random.Random(99)
a, b, c = files[0], files[1], files[2]
size = os.path.getsize(a)
with open(a, "r+b") as f:            # in place, same size, new bytes
    f.write(r.randbytes(size))
with open(b, "wb") as f:             # in place (truncate), bigger
    f.write(r.randbytes(os.path.getsize(b) + 12345))
with open(c + ".new", "wb") as f:    # replaced by rename, smaller
    f.write(r.randbytes(max(1, os.path.getsize(c) // 3)))
os.rename(c + ".new", c)
EOF
SYNC=$DL_TMP/sync_c
mkdir -p "$SYNC"
dl_manifest "$DC" "$DL_TMP/c.before"
DLSHIM_ROOTS=$DC LD_PRELOAD="$DL_LIB" /usr/bin/python3 "$DL_TMP/epochs.py" "$DC" "$DL_TMP/c.out" "$SYNC" 2>"$DL_TMP/c.err" &
EPID=$!
DL_BG_PIDS+=("$EPID")
dl_wait_until 30 test -e "$SYNC/ready" && dl_ok "epoch 0 done (handshake)" || dl_fail "epoch 0 done (handshake)"
/usr/bin/python3 "$DL_TMP/rewrite.py" "$DC"
dl_manifest "$DC" "$DL_TMP/c.after"
touch "$SYNC/go"
wait "$EPID"
rc=$?
[ "$rc" -eq 0 ] && dl_ok "two-epoch reader exits 0" || { dl_fail "two-epoch reader exits 0 (got $rc)"; dl_show "$DL_TMP/c.err"; }
sed -n 's/^0 \([0-9a-f]*\) \(.*\)$/\1  \2/p' "$DL_TMP/c.out" >"$DL_TMP/c.e0"
sed -n 's/^1 \([0-9a-f]*\) \(.*\)$/\1  \2/p' "$DL_TMP/c.out" >"$DL_TMP/c.e1"
cmp -s "$DL_TMP/c.e0" "$DL_TMP/c.before" && dl_ok "epoch 0 got the original bytes" || { dl_fail "epoch 0 got the original bytes"; diff "$DL_TMP/c.e0" "$DL_TMP/c.before" | head; }
cmp -s "$DL_TMP/c.e1" "$DL_TMP/c.after" && dl_ok "epoch 1 got the rewritten bytes (same size in place, bigger in place, replaced smaller)" || { dl_fail "epoch 1 got the rewritten bytes"; diff "$DL_TMP/c.e1" "$DL_TMP/c.after" | head; }
! cmp -s "$DL_TMP/c.before" "$DL_TMP/c.after" && dl_ok "(sanity) the rewrite changed 3 files" || dl_fail "(sanity) the rewrite changed 3 files"
DLSHIM_ROOTS=$DC dl_shim /usr/bin/python3 "$DL_TMP/epochs.py" "$DC" "$DL_TMP/c2.out" - 1 2>"$DL_TMP/c2.err"
sed -n 's/^0 \([0-9a-f]*\) \(.*\)$/\1  \2/p' "$DL_TMP/c2.out" >"$DL_TMP/c2.e0"
cmp -s "$DL_TMP/c2.e0" "$DL_TMP/c.after" && dl_ok "a new job gets the rewritten bytes" || { dl_fail "a new job gets the rewritten bytes"; diff "$DL_TMP/c2.e0" "$DL_TMP/c.after" | head; }
sr=$(dl_stat 'j["cache"]["stale_reloads"]' 2>/dev/null)
[ "${sr:-0}" -ge 2 ] && dl_ok "cache.stale_reloads counts the in-place rewrites ($sr >= 2)" || dl_fail "cache.stale_reloads counts the in-place rewrites (got '${sr}', expected >= 2)"
req=$(dl_stat 'sum(x["requests"] for x in j["jobs"])' 2>/dev/null)
[ "${req:-0}" -eq 36 ] && dl_ok "all 36 opens were routed" || dl_fail "all 36 opens were routed (got '${req}')"

#####################################################################
dl_section "(d) errors are the same with and without the shim"
cat >"$DL_TMP/errprobe.py" <<'EOF'
import errno, hashlib, json, os, sys
d = sys.argv[1]
def attempt(fn):
    try:
        v = fn()
        return ["ok", hashlib.sha256(v).hexdigest() if isinstance(v, bytes) else str(v)]
    except OSError as e:
        return ["err", errno.errorcode.get(e.errno, str(e.errno)), type(e).__name__]
def rd(path, flags=os.O_RDONLY):
    fd = os.open(path, flags)
    try:
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)
r = {}
r["read ok1"] = attempt(lambda: open(d + "/ok1.bin", "rb").read())
r["open secret"] = attempt(lambda: open(d + "/secret.bin", "rb").read())
r["os.open secret"] = attempt(lambda: rd(d + "/secret.bin"))
r["open in locked dir"] = attempt(lambda: open(d + "/locked/inner.bin", "rb").read())
r["open missing"] = attempt(lambda: open(d + "/missing.bin", "rb").read())
r["open file/x (ENOTDIR)"] = attempt(lambda: open(d + "/ok1.bin/x", "rb").read())
r["os.read dir (EISDIR)"] = attempt(lambda: rd(d + "/sub"))
r["open dir (EISDIR)"] = attempt(lambda: open(d + "/sub", "rb").read())
r["O_DIRECTORY on file"] = attempt(lambda: rd(d + "/ok1.bin", os.O_RDONLY | os.O_DIRECTORY))
r["open r+b"] = attempt(lambda: open(d + "/ok2.bin", "r+b").read())
r["O_CREAT in dataset"] = attempt(lambda: rd(d + "/created.bin", os.O_RDONLY | os.O_CREAT))
r["dangling symlink"] = attempt(lambda: open(d + "/dangling", "rb").read())
r["read ok2 after errors"] = attempt(lambda: open(d + "/ok2.bin", "rb").read())
r["read sub/inner after errors"] = attempt(lambda: open(d + "/sub/inner.bin", "rb").read())
print(json.dumps(r, sort_keys=True))
EOF
NB=$(mktemp -d /tmp/dlshim-nobody.XXXXXX)
DL_EXTRA_DIRS+=("$NB")
chmod 755 "$NB"
ND=$NB/data
mkdir -p "$ND/sub" "$ND/locked"
head -c 50000 /dev/urandom >"$ND/ok1.bin"
head -c 70000 /dev/urandom >"$ND/ok2.bin"
head -c 30000 /dev/urandom >"$ND/secret.bin"
head -c 20000 /dev/urandom >"$ND/sub/inner.bin"
head -c 20000 /dev/urandom >"$ND/locked/inner.bin"
ln -s "$ND/nowhere.bin" "$ND/dangling"
chmod 644 "$ND"/*.bin "$ND/sub/inner.bin"
chmod 755 "$ND" "$ND/sub"
chmod 000 "$ND/secret.bin"
chmod 700 "$ND/locked"
cp "$DL_TMP/errprobe.py" "$NB/errprobe.py"
chmod 644 "$NB/errprobe.py"
NBRT=$NB/rt
mkdir -m 700 "$NBRT"
chown nobody:nogroup "$NBRT"
mkdir -m 755 "$NB/out"
chown nobody:nogroup "$NB/out"
DL_RUNTIME_DIRS+=("$NBRT")
# the build must be reachable by nobody; otherwise use a copy
NBLIB=$DL_LIB
NBCLI=$DL_CLI
if ! setpriv --reuid=nobody --regid=nogroup --clear-groups test -r "$DL_LIB" -a -x "$DL_DAEMON" -a -x "$DL_CLI"; then
	mkdir -p "$NB/bin"
	cp "$DL_LIB" "$DL_DAEMON" "$DL_CLI" "$NB/bin/"
	chmod 755 "$NB/bin" "$NB/bin"/*
	NBLIB=$NB/bin/libdlshim.so
	NBCLI=$NB/bin/dlshim
fi
as_nobody() {
	setpriv --reuid=nobody --regid=nogroup --clear-groups \
		env -i PATH=/usr/bin:/bin HOME="$NB" DLSHIM_RUNTIME_DIR="$NBRT" DLSHIM_IDLE_EXIT=5 DLSHIM_ROOTS="$ND" "$@"
}
as_nobody /usr/bin/python3 "$NB/errprobe.py" "$ND" >"$DL_TMP/d.plain" 2>"$DL_TMP/d.plain.err"
as_nobody LD_PRELOAD="$NBLIB" DLSHIM_STATS="$NB/out/stats.json" /usr/bin/python3 "$NB/errprobe.py" "$ND" >"$DL_TMP/d.shim" 2>"$DL_TMP/d.shim.err"
grep -q '"open secret": \["err", "EACCES"' "$DL_TMP/d.plain" && dl_ok "(sanity) as nobody, the chmod 000 file gives EACCES without the shim" || { dl_fail "(sanity) as nobody, the chmod 000 file gives EACCES without the shim"; dl_show "$DL_TMP/d.plain"; dl_show "$DL_TMP/d.plain.err"; }
"$DL_PY" - "$DL_TMP/d.plain" "$DL_TMP/d.shim" <<'EOF' >"$DL_TMP/d.cmp"
import json, sys
try:
    a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
except Exception as e:
    print("FAIL probe output unreadable: %s" % e); sys.exit(0)
for k in sorted(a):
    print(("ok " if a[k] == b.get(k) else "FAIL ") + "as nobody: %s -> %s%s" % (k, a[k], "" if a[k] == b.get(k) else " but under the shim %s" % b.get(k)))
EOF
while IFS= read -r line; do
	case $line in ok\ *) dl_ok "${line#ok }" ;; *) dl_fail "${line#FAIL }" ;; esac
done <"$DL_TMP/d.cmp"
[ ! -s "$DL_TMP/d.shim.err" ] && dl_ok "as nobody: no stderr output under the shim" || { dl_fail "as nobody: no stderr output under the shim"; dl_show "$DL_TMP/d.shim.err"; }
r=$(dl_json 'j["requests"]' <"$NB/out/stats.json" 2>/dev/null)
[ "${r:-0}" -ge 3 ] && dl_ok "as nobody: the successful opens were routed (DLSHIM_STATS requests $r)" || dl_fail "as nobody: the successful opens were routed (DLSHIM_STATS requests '${r}', expected >= 3)"
as_nobody "$NBCLI" stop >/dev/null 2>&1
# the same probe as root (EACCES does not apply to root; the rest does)
/usr/bin/python3 "$DL_TMP/errprobe.py" "$ND" >"$DL_TMP/d.rplain" 2>&1
DLSHIM_ROOTS=$ND dl_shim /usr/bin/python3 "$DL_TMP/errprobe.py" "$ND" >"$DL_TMP/d.rshim" 2>"$DL_TMP/d.rshim.err"
"$DL_PY" - "$DL_TMP/d.rplain" "$DL_TMP/d.rshim" <<'EOF' >"$DL_TMP/d.rcmp"
import json, sys
try:
    a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
except Exception as e:
    print("FAIL probe output unreadable: %s" % e); sys.exit(0)
for k in sorted(a):
    print(("ok " if a[k] == b.get(k) else "FAIL ") + "as root: %s -> %s%s" % (k, a[k], "" if a[k] == b.get(k) else " but under the shim %s" % b.get(k)))
EOF
while IFS= read -r line; do
	case $line in ok\ *) dl_ok "${line#ok }" ;; *) dl_fail "${line#FAIL }" ;; esac
done <"$DL_TMP/d.rcmp"
[ ! -e "$ND/created.bin" ] || dl_info "(O_CREAT created a file as root, as it would without the shim)"

#####################################################################
dl_section "(e) a process that reads only unrouted paths never contacts a coordinator"
dl_new_runtime_dir
OTHER=$DL_TMP/other
dl_make_random_files "$OTHER" 20 100 50000 34
dl_manifest "$OTHER" "$DL_TMP/other.manifest"
find "$OTHER" -type f | sort >"$DL_TMP/other.list"
strace -f -qq -e trace=connect -o "$DL_TMP/e.strace" -E LD_PRELOAD="$DL_LIB" \
	"$READER" -t 8 -m read <"$DL_TMP/other.list" >"$DL_TMP/e.out" 2>"$DL_TMP/e.err"
rc=$?
[ "$rc" -eq 0 ] && dl_ok "reader of unrouted files exits 0" || { dl_fail "reader of unrouted files exits 0 (got $rc)"; dl_show "$DL_TMP/e.err"; }
if probs=$(dl_check_hashes "$DL_TMP/e.out" "$DL_TMP/other.manifest" 1); then dl_ok "unrouted bytes correct"; else dl_fail "unrouted bytes correct"; printf '%s\n' "$probs" | head -5; fi
nconn=$(grep -c 'connect(' "$DL_TMP/e.strace")
[ "$nconn" -eq 0 ] && dl_ok "strace: no connect() at all from the C reader" || { dl_fail "strace: no connect() at all from the C reader ($nconn)"; dl_show "$DL_TMP/e.strace" 5; }
strace -f -qq -e trace=connect -o "$DL_TMP/e2.strace" -E LD_PRELOAD="$DL_LIB" \
	/usr/bin/python3 -c 'import sys, hashlib
for p in open(sys.argv[1]).read().split():
    hashlib.sha256(open(p, "rb").read()).hexdigest()
open("/etc/passwd", "rb").read()' "$DL_TMP/other.list" >"$DL_TMP/e2.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && dl_ok "python reading unrouted files exits 0" || { dl_fail "python reading unrouted files exits 0 (got $rc)"; dl_show "$DL_TMP/e2.out"; }
grep -q "connect(.*$DLSHIM_RUNTIME_DIR" "$DL_TMP/e2.strace" && { dl_fail "strace: python made no connect() to the runtime dir"; dl_show "$DL_TMP/e2.strace" 5; } || dl_ok "strace: python made no connect() to the runtime dir"
nconn=$(grep -c 'connect(' "$DL_TMP/e2.strace")
[ "$nconn" -eq 0 ] && dl_ok "strace: no connect() at all from python" || { dl_fail "strace: no connect() at all from python ($nconn)"; dl_show "$DL_TMP/e2.strace" 5; }
no_socket && dl_ok "no socket in the runtime dir" || { dl_fail "no socket in the runtime dir"; ls -la "$DLSHIM_RUNTIME_DIR"; }
no_daemon && dl_ok "no coordinator process for the runtime dir" || dl_fail "no coordinator process for the runtime dir"
status_is 3 && dl_ok "dlshim status exits 3" || dl_fail "dlshim status exits 3"
[ "$(dl_warnings "$DL_TMP/e.err")" -eq 0 ] && [ ! -s "$DL_TMP/e.err" ] && dl_ok "nothing on stderr" || { dl_fail "nothing on stderr"; dl_show "$DL_TMP/e.err"; }

#####################################################################
dl_section "(f) DLSHIM_DISABLE=1"
dl_new_runtime_dir
DLSHIM_DISABLE=1 strace -f -qq -e trace=connect -o "$DL_TMP/f.strace" -E LD_PRELOAD="$DL_LIB" \
	"$READER" -t 8 -m read <"$DL_TMP/list" >"$DL_TMP/f.out" 2>"$DL_TMP/f.err"
rc=$?
[ "$rc" -eq 0 ] && [ ! -s "$DL_TMP/f.err" ] && dl_ok "reader exits 0 with a clean stderr" || { dl_fail "reader exits 0 with a clean stderr (rc $rc)"; dl_show "$DL_TMP/f.err"; }
hashes_ok "(f) DLSHIM_DISABLE=1" "$DL_TMP/f.out" 1
[ "$(grep -c 'connect(' "$DL_TMP/f.strace")" -eq 0 ] && dl_ok "strace: no connect()" || { dl_fail "strace: no connect()"; dl_show "$DL_TMP/f.strace" 5; }
no_socket && no_daemon && dl_ok "no coordinator started" || dl_fail "no coordinator started"
status_is 3 && dl_ok "dlshim status exits 3" || dl_fail "dlshim status exits 3"

#####################################################################
dl_section "(g) bad configuration values: pass-through, one message naming the variable"
for kv in DLSHIM_REDIRECT=bogus DLSHIM_CACHE=12Q DLSHIM_SAMPLER=nope DLSHIM_EVICT=sometimes DLSHIM_LOG=loud DLSHIM_CACHE=-5G; do
	var=${kv%%=*}
	dl_new_runtime_dir
	env "$kv" LD_PRELOAD="$DL_LIB" "$READER" -t 8 -m pread <"$DL_TMP/list" >"$DL_TMP/g.out" 2>"$DL_TMP/g.err"
	rc=$?
	[ "$rc" -eq 0 ] && dl_ok "$kv: reader exits 0" || dl_fail "$kv: reader exits 0 (got $rc)"
	hashes_ok "$kv" "$DL_TMP/g.out" 1
	nl=$(wc -l <"$DL_TMP/g.err")
	[ "$nl" -eq 1 ] && grep -q "$var" "$DL_TMP/g.err" && dl_ok "$kv: stderr is exactly one line naming $var" ||
		{ dl_fail "$kv: stderr is exactly one line naming $var ($nl lines)"; dl_show "$DL_TMP/g.err" 5; }
	grep -q '^dlshim: ' "$DL_TMP/g.err" && dl_ok "$kv: the line starts with 'dlshim: '" || dl_fail "$kv: the line starts with 'dlshim: '"
	if [ "$var" = DLSHIM_REDIRECT ]; then
		grep -q off "$DL_TMP/g.err" && grep -q dir "$DL_TMP/g.err" && grep -q any "$DL_TMP/g.err" &&
			dl_ok "$kv: the message lists the accepted values (off, dir, any)" || dl_fail "$kv: the message lists the accepted values (off, dir, any)"
	fi
	no_socket && no_daemon && dl_ok "$kv: the process fell back to pass-through (no coordinator started)" || dl_fail "$kv: the process fell back to pass-through (no coordinator started)"
done

dl_finish
