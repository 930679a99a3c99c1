#!/usr/bin/env python3
"""examples/h5_train.py as a user runs it, in a small size: without the shim,
then under the shim in exact and redirect modes (2 workers, 2 epochs, cache
smaller than the file). Every epoch must see every row once and no target
apart from its input; under the shim rows must come from the cache."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

EX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "h5_train.py")
ROWS = 384


def main():
    env = T.Env("h5-example")
    root = env.path("data")
    os.makedirs(root)
    h5 = os.path.join(root, "fields.h5")
    p = env.run([T.PYTHON, EX, "--make", h5, "--rows", str(ROWS), "--side", "32"], shim=False)
    T.check(p.returncode == 0, "--make exits 0", p.stderr.decode(errors="replace")[-1000:])
    size = os.path.getsize(h5)
    for label, over in (("plain", None), ("exact", "off"), ("redirect", "any")):
        T.section(label)
        report = env.path("report-%s.json" % label)
        stats_file = env.path("stats-%s.json" % label)
        args = [T.PYTHON, EX, "--data", h5, "--epochs", "2", "--workers", "2", "--report", report]
        if over is None:
            p = env.run(args, shim=False, timeout=300)
        else:
            p = env.run(args, timeout=300, DLSHIM_ROOTS=root, DLSHIM_REDIRECT=over, DLSHIM_CACHE=str(size // 2),
                        DLSHIM_STATS=stats_file)
        if not T.check(p.returncode == 0, "%s: exits 0" % label, p.stderr.decode(errors="replace")[-1500:]):
            continue
        rep = json.load(open(report))
        for e in rep["epochs"]:
            T.check(e["samples"] == ROWS and e["distinct_rows"] == ROWS and e["mismatched"] == 0,
                    "%s epoch %d: every row once, every target with its input" % (label, e["epoch"]), json.dumps(e))
        if over is not None:
            st = json.load(open(stats_file))
            T.info("%s: hits %d misses %d from disk %d from cache %d" % (label, st["hits"], st["misses"],
                   st["bytes_from_disk"], st["bytes_from_cache"]))
            T.check(st["bytes_from_cache"] > 0, "%s: rows served from the cache" % label)
        env.stop_daemon(env.runtime_dir)
        env.new_runtime_dir()
    T.finish()


if __name__ == "__main__":
    main()
