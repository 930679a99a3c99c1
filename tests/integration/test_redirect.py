#!/usr/bin/env python3
"""Redirect modes under a real PyTorch DataLoader (ImageFolder), 3 epochs,
num_workers 0 and 2, cache smaller than the dataset so chunks are loaded and
evicted. Checked from what the Dataset received (sha256 of the bytes it read),
never from the shim's own stats:
  * every sample's bytes are exactly the bytes of some file of the dataset;
  * dir: that file is in the requested path's class directory;
    any: it is under the same root; both: same extension, never hidden;
  * each epoch is a permutation of the dataset (every file exactly once);
  * exact mode (redirect off) is byte-exact: bytes == requested file.
"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T

TRAIN = r'''
import hashlib, json, os, sys, torch, torchvision
from torch.utils.data import DataLoader
root, workers, epochs, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
class Recorder(torchvision.datasets.ImageFolder):
    def __getitem__(self, i):
        path, label = self.samples[i]
        with open(path, "rb") as f:
            data = f.read()
        return hashlib.sha256(data).hexdigest(), path, label
torch.manual_seed(0)
ds = Recorder(root)
log = []
for ep in range(epochs):
    got = []
    for h, p, y in DataLoader(ds, batch_size=8, shuffle=True, num_workers=workers):
        got += [[a, b, int(c)] for a, b, c in zip(h, p, y)]
    log.append(got)
json.dump(log, open(out, "w"))
'''


def check_run(env, root, manifest, mode, workers, label, cache):
    by_hash = {}
    for p, h in manifest.items():
        by_hash.setdefault(h, []).append(p)
    out = env.path("log-%s-%d.json" % (mode, workers))
    script = T.write_script(env.path("train.py"), TRAIN)
    stats_file = env.path("stats-%s-%d.json" % (mode, workers))
    p = env.run([T.PYTHON, script, root, str(workers), "3", out], timeout=240,
                DLSHIM_ROOTS=root, DLSHIM_REDIRECT=mode, DLSHIM_CACHE=cache,
                DLSHIM_STATS=stats_file)
    if not T.check(p.returncode == 0, "%s: training script exits 0" % label, p.stderr.decode(errors="replace")[-2000:]):
        return
    T.check(b"dlshim: warning" not in p.stderr, "%s: no shim warning" % label, p.stderr.decode(errors="replace")[-1000:])
    log = json.load(open(out))
    images = sorted(q for q in manifest if q.endswith(".jpg"))
    displacement = []  # per epoch, measured from what the Dataset received
    for ep, got in enumerate(log):
        served = []
        wrong = []
        for h, req, _ in got:
            cands = by_hash.get(h, [])
            if not cands:
                wrong.append("bytes of %s match no file" % req)
                continue
            # identical files are interchangeable; prefer one satisfying the rule
            ok = [c for c in cands if
                  (mode == "off" and c == req) or
                  (mode == "dir" and os.path.dirname(c) == os.path.dirname(req)) or
                  (mode == "any" and c.startswith(root + "/"))]
            ok = [c for c in ok if os.path.splitext(c)[1] == os.path.splitext(req)[1]
                  and not os.path.basename(c).startswith(".")]
            if not ok:
                wrong.append("%s served %s" % (req, cands))
                continue
            served.append(ok[0])
        T.check(not wrong, "%s epoch %d: every sample's bytes are a valid file for its request"
                % (label, ep), "\n".join(wrong[:10]))
        if len(served) == len(got):
            asked = {req: k for k, (_, req, _) in enumerate(got)}
            moves = [abs(k - asked[p]) for k, p in enumerate(served) if p in asked]
            displacement.append(sum(moves) / max(1, len(moves)) / max(1, len(got)))
        counts = collections.Counter(served)
        dup = [p for p, n in counts.items() if n != 1]
        missing = [p for p in images if p not in counts]
        T.check(len(got) == len(images) and not dup and not missing,
                "%s epoch %d: a permutation of the dataset (%d samples)" % (label, ep, len(got)),
                "dups %s missing %s" % (dup[:5], missing[:5]))
        if mode != "off":
            T.info("%s epoch %d: %d of %d requests redirected"
                   % (label, ep, sum(1 for (h, r, _) in got if manifest.get(r) != h), len(got)))
    if not T.check(os.path.exists(stats_file), "%s: DLSHIM_STATS file written" % label):
        return
    st = json.load(open(stats_file))
    # The randomness report: every finished epoch has one, and its
    # displacement is what the Dataset saw (exactly 0 in exact mode; with one
    # process the coordinator sees the Dataset's own order).
    done = [e for e in st["per_epoch"] if e["complete"]]
    T.check(len(done) >= 2 and all("order" in e for e in done),
            "%s: order report for each finished epoch" % label, json.dumps(st["per_epoch"])[:800])
    for e in done[:2]:
        o = e.get("order", {})
        mine = displacement[e["epoch"]] if e["epoch"] < len(displacement) else None
        T.info("%s epoch %d order: shim %s, Dataset displacement %s" % (label, e["epoch"], o, mine))
        if mode == "off":
            T.check(o.get("displacement") == 0, "%s epoch %d: displacement 0 in exact mode" % (label, e["epoch"]))
        elif workers == 0 and mine is not None:
            T.check(abs(o.get("displacement", -1) - mine) < 0.08,
                    "%s epoch %d: reported displacement %.3f matches the Dataset's %.3f"
                    % (label, e["epoch"], o.get("displacement", -1), mine))
    T.info("%s stats: hits %d misses %d redirects %d chunk_loads %d disk %d consumed %d"
           % (label, st["hits"], st["misses"], st.get("redirects", 0), st.get("chunk_loads", 0),
              st["bytes_from_disk"], st.get("bytes_consumed", 0)))


def main():
    env = T.Env("redirect")
    root = env.path("data")
    T.make_imagefolder(root, classes=4, per_class=40, seed=3)
    # Strays a real dataset has: never served in place of an image.
    with open(os.path.join(root, "class00", "README.txt"), "w") as f:
        f.write("not an image\n")
    with open(os.path.join(root, "class01", ".DS_Store"), "wb") as f:
        f.write(b"\0" * 1000)
    manifest = T.manifest(root)
    size = T.tree_size(root)
    cache = str(size // 2)  # half the dataset: chunks are loaded, consumed and evicted
    T.info("dataset: %d files, %d bytes; cache %s bytes" % (len(manifest), size, cache))
    for mode in ("dir", "any", "off"):
        for workers in (0, 2):
            T.section("DLSHIM_REDIRECT=%s num_workers=%d" % (mode, workers))
            check_run(env, root, manifest, mode, workers, "%s/w%d" % (mode, workers), cache)
            env.stop_daemon(env.runtime_dir)
            env.new_runtime_dir()
    T.finish()


if __name__ == "__main__":
    main()
