#!/usr/bin/env python3
"""The coordinator under ThreadSanitizer (build/tsan/dlshimd, made by
`make test`): concurrent clients exercise its connection threads, loader
threads and background loads together (two redirect jobs with DataLoader
workers on a cache smaller than the data, plus a multi-threaded exact-mode
reader), then the coordinator is stopped. Any ThreadSanitizer report in its
log fails the test; every byte the programs received is checked."""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

RECORDER = r'''
import hashlib, json, sys, torch, torchvision
from torch.utils.data import DataLoader
class R(torchvision.datasets.ImageFolder):
    def __getitem__(self, i):
        p, y = self.samples[i]
        with open(p, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest(), p
ds = R(sys.argv[1])
log = [[list(x) for b in DataLoader(ds, batch_size=8, shuffle=True, num_workers=2) for x in zip(*b)]
       for _ in range(2)]
json.dump(log, open(sys.argv[2], "w"))
'''


def main():
    tsan = os.path.join(T.BUILD, "tsan", "dlshimd")
    if not os.path.exists(tsan):
        print("not available: %s is missing (make test builds it)" % tsan)
        sys.exit(T.EXIT_NOT_AVAILABLE)
    env = T.Env("tsan")
    root = env.path("data")
    T.make_imagefolder(root, classes=4, per_class=30, seed=5)
    manifest = T.manifest(root)
    size = T.tree_size(root)
    script = T.write_script(env.path("rec.py"), RECORDER)
    common = dict(DLSHIM_ROOTS=root, DLSHIM_DAEMON=tsan, DLSHIM_CACHE=str(size // 2), DLSHIM_IDLE_EXIT=30)

    T.section("two redirect jobs and an exact-mode threaded reader at once")
    jobs = [env.popen([T.PYTHON, script, root, env.path("log%d.json" % k)], DLSHIM_REDIRECT="dir", **common)
            for k in range(2)]
    files = sorted(manifest)
    reader = env.popen([os.path.join(T.BUILD, "progs", "threaded_reader"), "-t", "8", "-r", "3"] + files,
                       DLSHIM_REDIRECT="off", DLSHIM_JOB="reader", **common)
    outs = [p.communicate(timeout=240) for p in jobs + [reader]]
    for k, (p, (o, e)) in enumerate(zip(jobs + [reader], outs)):
        T.check(p.returncode == 0, "client %d exits 0" % k, e.decode(errors="replace")[-1500:])

    by_hash = collections.defaultdict(list)
    for p, h in manifest.items():
        by_hash[h].append(p)
    for k in range(2):
        log = json.load(open(env.path("log%d.json" % k)))
        for ep, got in enumerate(log):
            served = [next((c for c in by_hash.get(h, []) if os.path.dirname(c) == os.path.dirname(r)), None)
                      for h, r in got]
            dup = [p for p, n in collections.Counter(served).items() if n > 1]
            T.check(None not in served and sorted(served) == files,
                    "redirect job %d epoch %d: bytes of files of the right class, each once" % (k, ep),
                    "samples %d, files %d, unmatched %d, duplicated %s" % (
                        len(served), len(files), served.count(None), dup[:5]))
    lines = [l.split("  ", 1) for l in outs[2][0].decode().splitlines() if l]
    T.check(len(lines) == 3 * len(files) and all(manifest.get(p) == h for h, p in lines),
            "threaded reader: every file x 3 has its sha256 (%d lines)" % len(lines))

    env.stop_daemon(env.runtime_dir)
    log = open(os.path.join(env.runtime_dir, "dlshimd.log"), errors="replace").read()
    T.check("listening" in log or "ThreadSanitizer" in log or os.path.getsize(
        os.path.join(env.runtime_dir, "dlshimd.log")) >= 0, "the coordinator log exists")
    T.check("ThreadSanitizer" not in log, "no ThreadSanitizer report from the coordinator", log[:4000])
    T.finish()


if __name__ == "__main__":
    main()
