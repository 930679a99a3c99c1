#!/usr/bin/env python3
"""The coordinator under valgrind (memcheck) for one run: started by hand in
the foreground, three clients read a dataset (exact, then redirect dir, one
of them twice), `dlshim stop`, and the coordinator must exit 0 with zero
memcheck errors (definite leaks counted as errors). The clients' bytes are
checked against the files (sha256).
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

READER = r'''
import hashlib, sys
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        print(hashlib.sha256(f.read()).hexdigest() + "  " + p, flush=True)
'''


def main():
    env = T.Env("valgrind-daemon")
    if shutil.which("valgrind") is None:
        print("not available: valgrind is not installed")
        sys.exit(T.EXIT_NOT_AVAILABLE)
    root = env.path("data")
    T.make_imagefolder(root, classes=2, per_class=12)
    files = T.list_files(root)
    manifest = {p: T.sha256_file(p) for p in files}
    script = T.write_script(env.path("reader.py"), READER)
    vlog = env.path("valgrind.log")
    denv = env.env(shim=False, DLSHIM_CACHE="32M", DLSHIM_IDLE_EXIT="600")
    d = subprocess.Popen(["valgrind", "--error-exitcode=99", "--leak-check=full",
                          "--errors-for-leak-kinds=definite", "--log-file=" + vlog, T.DAEMON, "--foreground"],
                         env=denv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    sock = os.path.join(env.runtime_dir, "sock")
    up = T.wait_until(lambda: os.path.exists(sock) and env.try_stats() is not None, timeout=60, interval=0.2)
    if not T.check(up, "the coordinator under valgrind answers"):
        d.kill()
        T.finish()
    for i, mode in enumerate(("off", "off", "dir")):
        p = env.run([T.PYTHON, script] + files, timeout=120, DLSHIM_ROOTS=root, DLSHIM_REDIRECT=mode,
                    DLSHIM_JOB="job%d" % i)
        got = [line.split("  ", 1) for line in p.stdout.decode().splitlines()]
        if mode == "off":
            ok = len(got) == len(files) and all(manifest.get(path) == h for h, path in got)
        else:
            ok = sorted(h for h, _ in got) == sorted(manifest.values())
        T.check(p.returncode == 0 and ok, "client %d (%s) read correct bytes" % (i, mode),
                p.stderr.decode(errors="replace")[-800:])
        T.check(b"dlshim: warning" not in p.stderr, "client %d: no shim warning" % i,
                p.stderr.decode(errors="replace")[-800:])
    st = env.try_stats() or {}
    T.check(st.get("daemon", {}).get("pid") == d.pid, "the clients were served by the coordinator under valgrind",
            st.get("daemon"))
    env.cli("stop")
    try:
        rc = d.wait(timeout=60)
    except subprocess.TimeoutExpired:
        d.kill()
        rc = d.wait()
    text = open(vlog).read() if os.path.exists(vlog) else ""
    T.check(rc == 0, "the coordinator exits 0 under valgrind (exit %d)" % rc, text[-3000:])
    T.check("ERROR SUMMARY: 0 errors" in text, "memcheck reports zero errors", text[-3000:])
    T.finish()


if __name__ == "__main__":
    main()
