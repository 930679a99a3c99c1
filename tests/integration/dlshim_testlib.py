"""Common setup for dlshim integration tests (Python side; lib.sh is the shell side).

Every test gets a fresh temporary directory and a fresh coordinator runtime
directory (DLSHIM_RUNTIME_DIR), DLSHIM_IDLE_EXIT=5, and a cleanup that runs
`dlshim stop`, makes sure the coordinator of that runtime directory is gone and
removes the temporary files.

Also usable as a command by lib.sh:
    dlshim_testlib.py imagefolder DIR [CLASSES PER_CLASS [SEED]]
    dlshim_testlib.py random-files DIR N MIN_BYTES MAX_BYTES [SEED]
    dlshim_testlib.py json EXPR              (stdin: JSON bound to `j`; prints the value)
    dlshim_testlib.py daemon-pids RUNTIME_DIR
    dlshim_testlib.py check-hashes OUTPUT MANIFEST [REPS]
"""
import atexit
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
EXIT_NOT_AVAILABLE = 77


def build_dir():
    return os.path.abspath(os.environ.get("DLSHIM_BUILD") or os.path.join(REPO, "build"))


BUILD = build_dir()
LIB = os.path.join(BUILD, "libdlshim.so")
DAEMON = os.path.join(BUILD, "dlshimd")
CLI = os.path.join(BUILD, "dlshim")


def require_build():
    missing = [p for p in (LIB, DAEMON, CLI) if not os.path.exists(p)]
    if missing:
        print("not available: missing " + ", ".join(missing) + " (run make)", flush=True)
        sys.exit(EXIT_NOT_AVAILABLE)


# ---------------------------------------------------------------- checks

_failures = []


def section(title):
    print("\n== " + title, flush=True)


def check(cond, what, detail=None):
    """Record one assertion. Prints 'ok: what' or 'FAIL: what' (+ detail)."""
    if cond:
        print("  ok: " + what, flush=True)
    else:
        _failures.append(what)
        print("  FAIL: " + what, flush=True)
        if detail is not None:
            text = detail if isinstance(detail, str) else repr(detail)
            for line in text.splitlines()[:40]:
                print("        " + line, flush=True)
    return bool(cond)


def info(msg):
    print("  .. " + msg, flush=True)


def finish():
    if _failures:
        print("\n%d check(s) failed:" % len(_failures), flush=True)
        for f in _failures:
            print("  - " + f, flush=True)
        sys.exit(1)
    print("\nall checks passed", flush=True)
    sys.exit(0)


def wait_until(pred, timeout=10.0, interval=0.05):
    """Poll pred() until truthy or timeout; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


# ---------------------------------------------------------------- datasets

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def make_imagefolder(root, classes=4, per_class=25, seed=1):
    """A tiny ImageFolder of real JPEGs of varied sizes. Returns the file paths."""
    from PIL import Image
    import numpy as np

    rng = np.random.default_rng(seed)
    paths = []
    for c in range(classes):
        d = os.path.join(root, "class%02d" % c)
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            w = int(rng.integers(24, 200))
            h = int(rng.integers(24, 200))
            # smooth gradient + noise: compresses like a photo, differs per file
            yy, xx = np.mgrid[0:h, 0:w]
            base = np.stack([(xx * (c + 1) * 3) % 256, (yy * 5 + i * 7) % 256,
                             ((xx + yy) * (i + 1)) % 256], axis=-1)
            noise = rng.integers(0, 60, size=(h, w, 3))
            arr = ((base + noise) % 256).astype("uint8")
            p = os.path.join(d, "img_%03d.jpg" % i)
            Image.fromarray(arr, "RGB").save(p, format="JPEG", quality=int(rng.integers(70, 96)))
            paths.append(p)
    return sorted(paths)


def write_random_files(directory, n, min_bytes, max_bytes, seed=2, prefix="f", suffix=".bin"):
    rnd = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    paths = []
    for i in range(n):
        size = rnd.randint(min_bytes, max_bytes)
        p = os.path.join(directory, "%s%04d%s" % (prefix, i, suffix))
        with open(p, "wb") as f:
            f.write(rnd.randbytes(size))
        paths.append(p)
    return paths


def list_files(root):
    out = []
    for dp, dn, fn in os.walk(root):
        dn.sort()
        for f in sorted(fn):
            p = os.path.join(dp, f)
            if os.path.isfile(p):
                out.append(p)
    return sorted(out)


def manifest(root):
    """{path: sha256} of every regular file under root."""
    return {p: sha256_file(p) for p in list_files(root)}


def tree_size(root):
    return sum(os.path.getsize(p) for p in list_files(root))


# ---------------------------------------------------------------- processes

def daemon_pids(runtime_dir):
    """pids of dlshimd processes serving runtime_dir (found via /proc)."""
    pids = []
    rd = runtime_dir.rstrip("/").encode()
    for ent in os.listdir("/proc"):
        if not ent.isdigit():
            continue
        pid = int(ent)
        try:
            with open("/proc/%d/comm" % pid, "rb") as f:
                comm = f.read().strip()
            exe = b""
            try:
                exe = os.readlink("/proc/%d/exe" % pid).encode()
            except OSError:
                pass
            if comm != b"dlshimd" and not os.path.basename(exe).startswith(b"dlshimd"):
                continue
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if b"DLSHIM_RUNTIME_DIR=" + rd in env or b"DLSHIM_RUNTIME_DIR=" + rd + b"/" in env \
                or any(rd in a for a in cmd):
            pids.append(pid)
    return pids


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Env:
    """A fresh test environment: temp dir, runtime dir, clean DLSHIM_* env."""

    def __init__(self, name):
        require_build()
        self.tmp = tempfile.mkdtemp(prefix="dlshim-%s-" % name)
        self.runtime_dirs = []
        self.extra_dirs = []
        self.base = {k: v for k, v in os.environ.items()
                     if not k.startswith("DLSHIM_") and k != "LD_PRELOAD"}
        self.base["DLSHIM_IDLE_EXIT"] = "5"
        self.base["DLSHIM_BUILD"] = BUILD
        self.base["PYTHONDONTWRITEBYTECODE"] = "1"
        self.runtime_dir = None
        self.new_runtime_dir()
        self._cleaned = False
        atexit.register(self.cleanup)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        info("build %s, tmp %s, runtime dir %s" % (BUILD, self.tmp, self.runtime_dir))

    def _on_signal(self, signum, frame):
        self.cleanup()
        os._exit(128 + signum)

    def new_runtime_dir(self):
        """A fresh runtime dir (a new coordinator); becomes the default."""
        d = tempfile.mkdtemp(prefix="rt.", dir=self.tmp)
        self.runtime_dirs.append(d)
        self.runtime_dir = d
        self.base["DLSHIM_RUNTIME_DIR"] = d
        return d

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def env(self, shim=True, **over):
        e = dict(self.base)
        if shim:
            e["LD_PRELOAD"] = LIB
        for k, v in over.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = str(v)
        return e

    def run(self, cmd, shim=True, timeout=120, input=None, env=None, check_rc=False, **over):
        e = env if env is not None else self.env(shim=shim, **over)
        p = subprocess.run(cmd, env=e, input=input, capture_output=True, timeout=timeout)
        if check_rc and p.returncode != 0:
            raise RuntimeError("%r exited %d: %s" % (cmd, p.returncode, p.stderr.decode(errors="replace")))
        return p

    def popen(self, cmd, shim=True, env=None, **over):
        e = env if env is not None else self.env(shim=shim, **over)
        return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def cli(self, *args, timeout=30, runtime_dir=None):
        e = self.env(shim=False)
        if runtime_dir:
            e["DLSHIM_RUNTIME_DIR"] = runtime_dir
        return subprocess.run([CLI] + list(args), env=e, capture_output=True, timeout=timeout)

    def stats(self, runtime_dir=None):
        """Parsed `dlshim stats --json`; raises with the CLI's output on failure."""
        p = self.cli("stats", "--json", runtime_dir=runtime_dir)
        if p.returncode != 0:
            raise RuntimeError("dlshim stats --json exited %d: %s" % (p.returncode, p.stderr.decode(errors="replace")))
        return json.loads(p.stdout)

    def try_stats(self, runtime_dir=None):
        try:
            return self.stats(runtime_dir)
        except Exception:
            return None

    def daemon_pids(self, runtime_dir=None):
        return daemon_pids(runtime_dir or self.runtime_dir)

    def stop_daemon(self, runtime_dir, timeout=10):
        try:
            self.cli("stop", runtime_dir=runtime_dir, timeout=timeout)
        except Exception:
            pass
        if not wait_until(lambda: not [p for p in daemon_pids(runtime_dir) if pid_alive(p)], timeout=5):
            for p in daemon_pids(runtime_dir):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass

    def cleanup(self):
        if self._cleaned:
            return
        self._cleaned = True
        for d in self.runtime_dirs:
            self.stop_daemon(d)
        for d in [self.tmp] + self.extra_dirs:
            shutil.rmtree(d, ignore_errors=True)


def write_script(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def hdf5_env(name, make_text, fname, *args):
    """A fresh Env whose data root holds one HDF5 file, made (without the
    shim) by the Python program make_text run as `make.py PATH ARGS...`.
    Returns (env, root, path, make.py) (make.py remakes the file)."""
    env = Env(name)
    root = env.path("data")
    os.makedirs(root)
    h5 = os.path.join(root, fname)
    make = write_script(env.path("make.py"), make_text)
    env.run([PYTHON, make, h5] + [str(a) for a in args], shim=False, check_rc=True)
    return env, root, h5, make


# ---------------------------------------------------------------- command mode

def _check_hashes(output, manifest_file, reps=1):
    """Every '<sha>  <path>' line of output must match the manifest, and each
    manifest path must appear exactly reps times. Returns a list of problems."""
    exp = {}
    with open(manifest_file) as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                h, p = line.split("  ", 1)
                exp[p] = h
    seen = {}
    problems = []
    with open(output) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            try:
                h, p = line.split("  ", 1)
            except ValueError:
                problems.append("malformed line: %r" % line)
                continue
            if p not in exp:
                problems.append("unexpected path: %s" % p)
            elif exp[p] != h:
                problems.append("wrong bytes: %s got %s expected %s" % (p, h, exp[p]))
            seen[p] = seen.get(p, 0) + 1
    for p in exp:
        if seen.get(p, 0) != reps:
            problems.append("%s read %d times, expected %d" % (p, seen.get(p, 0), reps))
    return problems


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    cmd = argv[1]
    if cmd == "imagefolder":
        classes = int(argv[3]) if len(argv) > 3 else 4
        per = int(argv[4]) if len(argv) > 4 else 25
        seed = int(argv[5]) if len(argv) > 5 else 1
        make_imagefolder(argv[2], classes, per, seed)
    elif cmd == "random-files":
        seed = int(argv[6]) if len(argv) > 6 else 2
        write_random_files(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), seed)
    elif cmd == "json":
        j = json.load(sys.stdin)
        v = eval(argv[2], {"j": j})
        print(json.dumps(v) if isinstance(v, (dict, list, bool)) or v is None else v)
    elif cmd == "daemon-pids":
        print(" ".join(str(p) for p in daemon_pids(argv[2]) if pid_alive(p)))
    elif cmd == "check-hashes":
        probs = _check_hashes(argv[2], argv[3], int(argv[4]) if len(argv) > 4 else 1)
        for p in probs[:30]:
            print(p)
        if len(probs) > 30:
            print("... and %d more" % (len(probs) - 30))
        return 1 if probs else 0
    else:
        print("unknown command " + cmd, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
