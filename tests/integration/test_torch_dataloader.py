"""PyTorch training under the shim: torchvision ImageFolder + DataLoader.

The training script's loader records the sha256 of the raw bytes it read
(open(path, 'rb').read()) before decoding them. Checked:
  * num_workers=0 and num_workers=2 (fork), 2 epochs each: every received
    hash equals the sha256 of the file on disk, every epoch covers the dataset
    exactly once, labels match the class directory;
  * the job's DLSHIM_STATS file exists and its requests == number of opens;
  * two jobs run concurrently on the same tree (no DLSHIM_JOB: distinct auto
    job ids): both correct, cache hits > 0, and bytes_from_disk summed over the
    jobs < 1.5x the dataset size (each file loaded about once).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dlshim_testlib as T  # noqa: E402

TRAIN = r'''
import hashlib, io, json, os, sys
import torch
from PIL import Image
from torchvision import datasets
torch.set_num_threads(1)
root, out, nw, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def loader(path):
    with open(path, "rb") as f:
        raw = f.read()
    img = Image.open(io.BytesIO(raw)).convert("RGB").resize((32, 32))
    x = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(32, 32, 3).permute(2, 0, 1).float() / 255
    return {"img": x, "sha": hashlib.sha256(raw).hexdigest(), "path": path, "pid": os.getpid(), "n": len(raw)}

ds = datasets.ImageFolder(root, loader=loader)
kw = {"multiprocessing_context": "fork"} if nw > 0 else {}
dl = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, num_workers=nw, **kw)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, len(ds.classes)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
res = {"classes": ds.classes, "epochs": [], "main_pid": os.getpid(), "job_env": os.environ.get("DLSHIM_JOB")}
for e in range(epochs):
    seen = []
    for batch, target in dl:
        loss = torch.nn.functional.cross_entropy(model(batch["img"]), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        for p, s, t, pid, n in zip(batch["path"], batch["sha"], target.tolist(), batch["pid"].tolist(), batch["n"].tolist()):
            seen.append([p, s, t, pid, n])
    res["epochs"].append(seen)
with open(out, "w") as f:
    json.dump(res, f)
'''


def check_result(label, res, man, classes, nw, epochs):
    """Assertions on one training run's record."""
    if not T.check(isinstance(res, dict) and len(res.get("epochs", [])) == epochs,
                   "%s: %d epochs recorded" % (label, epochs)):
        return
    T.check(res["classes"] == classes, "%s: ImageFolder found the %d classes" % (label, len(classes)), res["classes"])
    for e, seen in enumerate(res["epochs"]):
        paths = sorted(s[0] for s in seen)
        T.check(paths == sorted(man), "%s epoch %d: every file delivered exactly once (%d samples)" % (label, e, len(seen)),
                {"missing": sorted(set(man) - set(paths))[:5], "extra_or_dup": [p for p in paths if paths.count(p) > 1][:5]})
        bad = [(p, s, man.get(p)) for p, s, _, _, _ in seen if man.get(p) != s]
        T.check(not bad, "%s epoch %d: every sample's raw bytes have the file's sha256" % (label, e), bad[:5])
        wrong_label = [(p, t) for p, _, t, _, _ in seen if classes[t] != os.path.basename(os.path.dirname(p))]
        T.check(not wrong_label, "%s epoch %d: labels match the class directory" % (label, e), wrong_label[:5])
        pids = {s[3] for s in seen}
        if nw > 0:
            T.check(res["main_pid"] not in pids and len(pids) >= 1,
                    "%s epoch %d: samples were loaded in worker processes (%d pids)" % (label, e, len(pids)))


def main():
    env = T.Env("torch")
    root = env.path("data")
    T.section("dataset: ImageFolder, 4 classes x 25 JPEGs")
    T.make_imagefolder(root, classes=4, per_class=25, seed=7)
    man = T.manifest(root)
    size = T.tree_size(root)
    classes = sorted(os.listdir(root))
    T.info("%d files, %d bytes" % (len(man), size))
    train = T.write_script(env.path("train.py"), TRAIN)
    epochs = 2
    base_over = dict(DLSHIM_ROOTS=root, DLSHIM_CACHE="256M", DLSHIM_JOB=None)

    def finish_run(label, p, out, stats_file, nw):
        try:
            stdout, stderr = p.communicate(timeout=150)
        except Exception:  # noqa: BLE001
            p.kill()
            stdout, stderr = p.communicate()
            T.check(False, "%s: finished within 150 s" % label)
        err = stderr.decode(errors="replace")
        T.check(p.returncode == 0, "%s: training script exits 0" % label, err[-3000:])
        dl_lines = [l for l in err.splitlines() if l.startswith("dlshim:")]
        T.check(not dl_lines, "%s: no dlshim message on stderr" % label, "\n".join(dl_lines[:10]))
        try:
            res = json.load(open(out))
        except Exception as e:  # noqa: BLE001
            T.check(False, "%s: result file written" % label, str(e))
            return None, None
        check_result(label, res, man, classes, nw, epochs)
        st = None
        T.check(os.path.exists(stats_file), "%s: DLSHIM_STATS file exists" % label)
        try:
            st = json.load(open(stats_file))
        except Exception as e:  # noqa: BLE001
            T.check(False, "%s: DLSHIM_STATS file is JSON" % label, str(e))
        if st is not None:
            opens = sum(len(s) for s in res["epochs"])
            T.check(st.get("requests") == opens, "%s: DLSHIM_STATS requests (%s) == number of opens (%d)"
                    % (label, st.get("requests"), opens), st)
            T.check(isinstance(st.get("job"), str) and st.get("job"), "%s: DLSHIM_STATS names the job (%s)" % (label, st.get("job")))
        return res, st

    def start(label, nw, idx, **over):
        out = env.path("result-%s.json" % idx)
        sf = env.path("stats-%s.json" % idx)
        o = dict(base_over)
        o.update(over)
        p = env.popen([T.PYTHON, train, root, out, str(nw), str(epochs)], DLSHIM_STATS=sf, **o)
        return p, out, sf

    T.section("one job, num_workers=0, 2 epochs (cold cache)")
    # keep the coordinator (and its cache) up between the two runs
    p, out, sf = start("nw0", 0, "nw0", DLSHIM_IDLE_EXIT=60)
    finish_run("nw=0", p, out, sf, 0)

    T.section("one job, num_workers=2 (fork), 2 epochs (warm cache)")
    p, out, sf = start("nw2", 2, "nw2", DLSHIM_IDLE_EXIT=60)
    _, st = finish_run("nw=2", p, out, sf, 2)
    if st is not None:
        T.check(st.get("hits", 0) > 0, "nw=2: the second job is served from the cache left by the first (hits %s)" % st.get("hits"), st)
        T.check(st.get("bytes_from_cache", 0) > 0, "nw=2: workers copied bytes out of the cache (%s)" % st.get("bytes_from_cache"), st)
    try:
        s = env.stats()
        names = [j["job"] for j in s["jobs"]]
        T.check(len(set(names)) == len(names) >= 2, "the two sequential jobs have distinct job ids", names)
    except Exception as e:  # noqa: BLE001
        T.check(False, "dlshim stats --json works", str(e))

    T.section("two concurrent jobs on the same tree (fresh coordinator, cold cache)")
    env.new_runtime_dir()
    runs = [start("c%d" % i, 2, "conc%d" % i) for i in range(2)]
    sts = []
    for i, (p, out, sf) in enumerate(runs):
        _, st = finish_run("concurrent job %d" % i, p, out, sf, 2)
        sts.append(st)
    jobnames = [s.get("job") for s in sts if s]
    T.check(len(jobnames) == 2 and jobnames[0] != jobnames[1], "the concurrent jobs got distinct auto job ids", jobnames)
    try:
        s = env.stats()
    except Exception as e:  # noqa: BLE001
        T.check(False, "dlshim stats --json works", str(e))
        T.finish()
    jobs = [j for j in s.get("jobs", []) if j.get("job") in jobnames]
    T.check(len(jobs) == 2, "both jobs are listed by dlshim stats --json", [j.get("job") for j in s.get("jobs", [])])
    opens = len(man) * epochs
    for j in jobs:
        T.check(j.get("requests") == opens, "job %s: requests == %d opens" % (j.get("job"), opens), j)
    hits = sum(j.get("hits", 0) for j in s.get("jobs", []))
    disk = sum(j.get("bytes_from_disk", 0) for j in s.get("jobs", []))
    T.check(hits > 0, "total cache hits > 0 (%d)" % hits)
    T.check(disk < 1.5 * size, "bytes_from_disk summed over jobs (%d) < 1.5 x dataset (%d): each file loaded ~once"
            % (disk, size), s.get("jobs"))
    passed = sum(j.get("bytes_passthrough", 0) for j in s.get("jobs", []))
    T.check(disk + passed >= size, "cold cache: bytes_from_disk + bytes_passthrough (%d) >= dataset (%d)"
            % (disk + passed, size), s.get("jobs"))
    T.finish()


if __name__ == "__main__":
    main()
