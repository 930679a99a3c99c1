#!/usr/bin/python3
"""Training fidelity: does redirection cost accuracy? (`make fidelity`)

    fidelity.py [--train N] [--epochs E] [--modes exact,dir] [--repeats R] [--out DIR]

Converts Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist)
into an ImageFolder tree of PNG files (one directory per class), then trains
the same small CNN with the same seeds under the shim in each mode:

    exact  DLSHIM_REDIRECT=off: the bytes every request asked for
    exact-reshuffled  the same with another shuffling seed: the noise floor
    dir    DLSHIM_REDIRECT=dir, chunk sampler, cache a quarter of the dataset
    dsa    DLSHIM_REDIRECT=dir, DLSHIM_SAMPLER=dsa (when the build has it)

Test accuracy and loss after each epoch come from the official 10,000-image
test set, read straight from the idx file (not through the shim). The shim's
randomness report (dlshim stats: displacement, chunk locality, pair repeat,
class mix) is saved next to them. Writes OUT/fidelity.json, OUT/fidelity.csv,
OUT/fidelity.md and docs/img/fidelity.png.

One run's last epoch moves by about a point from run to run in every mode,
so the verdict compares averages: each mode's test accuracy over its last
two epochs (one epoch when there is one), averaged over R runs (exact-
reshuffled and the redirect modes run R times with different seeds; exact is
deterministic and runs once), against the same average over the exact runs
(exact and exact-reshuffled together: exact mode under different shuffles).
A redirect mode fails when it is more than --max-drop points below.
"""
import argparse
import csv
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
FMNIST = "/usr/share/datasets/fashion-mnist"
# Numbered so that ImageFolder's sorted class order is the idx files' labels.
CLASSES = ["%d-%s" % c for c in enumerate(
    ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"])]

TRAIN = r'''
import json, sys, time
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F
from PIL import Image
from torchvision import datasets

root, test_npz, epochs, out, shuffle_seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
torch.set_num_threads(1)
torch.manual_seed(0)

def load(path):
    with open(path, "rb") as f:
        return np.asarray(Image.open(f).convert("L"), dtype=np.float32) / 255.0

def to_tensor(a):
    return torch.from_numpy((a - 0.286) / 0.353)[None]

ds = datasets.ImageFolder(root, loader=load, transform=to_tensor)
gen = torch.Generator().manual_seed(shuffle_seed)
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2, generator=gen,
                                 persistent_workers=False)
t = np.load(test_npz)
tx = torch.from_numpy((t["x"].astype(np.float32) / 255.0 - 0.286) / 0.353)[:, None]
ty = torch.from_numpy(t["y"].astype(np.int64))

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)
    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))

net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
log = []
for ep in range(epochs):
    t0 = time.time()
    net.train()
    tl, n = 0.0, 0
    for x, y in dl:
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        tl += loss.item() * len(y)
        n += len(y)
    net.eval()
    with torch.no_grad():
        logits = torch.cat([net(tx[i:i + 1000]) for i in range(0, len(tx), 1000)])
        test_loss = F.cross_entropy(logits, ty).item()
        acc = (logits.argmax(1) == ty).float().mean().item()
    log.append({"epoch": ep, "train_loss": tl / n, "test_loss": test_loss, "test_acc": acc,
                "samples": n, "seconds": time.time() - t0})
    print("  epoch %d: train loss %.4f, test loss %.4f, test accuracy %.2f%% (%.0f s)"
          % (ep, tl / n, test_loss, 100 * acc, time.time() - t0), flush=True)
json.dump(log, open(out, "w"))
'''


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return n, data[16:], (rows, cols)
    return n, data[8:], None


def build_dataset(work, ntrain):
    """ImageFolder of PNGs (the first ntrain training images) + the test set as .npz."""
    import numpy as np
    from PIL import Image
    root = os.path.join(work, "fashion-mnist-v2-%d" % ntrain)
    test = os.path.join(work, "fashion-mnist-test.npz")
    if not os.path.exists(os.path.join(root, ".complete")):
        n, img, (r, c) = read_idx(os.path.join(FMNIST, "train-images-idx3-ubyte.gz"))
        _, lab, _ = read_idx(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz"))
        x = np.frombuffer(img, dtype=np.uint8).reshape(n, r, c)
        for name in CLASSES:
            os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(min(ntrain, n)):
            Image.fromarray(x[i]).save(os.path.join(root, CLASSES[lab[i]], "%05d.png" % i))
        open(os.path.join(root, ".complete"), "w").close()
    if not os.path.exists(test):
        n, img, (r, c) = read_idx(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz"))
        _, lab, _ = read_idx(os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz"))
        np.savez(test, x=np.frombuffer(img, dtype=np.uint8).reshape(n, r, c), y=np.frombuffer(lab, dtype=np.uint8))
    return root, test


def tree_files(root):
    return sum(len([f for f in fs if not f.startswith(".")]) for _, _, fs in os.walk(root))


def run_mode(mode, rep, root, test, epochs, work, build):
    rt = tempfile.mkdtemp(prefix="rt-", dir=work)
    os.chmod(rt, 0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLSHIM_")}
    # Every file takes at least one 16 KiB cache block: a quarter of the
    # dataset's files fit, so redirection has to work for the rest.
    cache = max(4 << 20, tree_files(root) * 16384 // 4)
    env.update(LD_PRELOAD=os.path.join(build, "libdlshim.so"), DLSHIM_ROOTS=root, DLSHIM_RUNTIME_DIR=rt,
               DLSHIM_CACHE=str(cache), DLSHIM_SEED=str(7 + rep), DLSHIM_JOB="fidelity-" + mode,
               DLSHIM_IDLE_EXIT="30", DLSHIM_STATS=os.path.join(work, "stats-%s.json" % mode))
    if mode in ("exact", "exact-reshuffled"):
        env["DLSHIM_REDIRECT"] = "off"
    elif mode == "dir":
        env.update(DLSHIM_REDIRECT="dir", DLSHIM_SAMPLER="chunk")
    elif mode == "dsa":
        env.update(DLSHIM_REDIRECT="dir", DLSHIM_SAMPLER="dsa")
    script = os.path.join(work, "train_fidelity.py")
    with open(script, "w") as f:
        f.write(TRAIN)
    out = os.path.join(work, "log-%s.json" % mode)
    print("== %s, run %d (cache %d MiB)" % (mode, rep + 1, cache >> 20), flush=True)
    t0 = time.time()
    # exact-reshuffled: exact mode with other shuffling seeds, the noise
    # floor against which the redirect modes' differences are judged.
    seed = str(2 + rep) if mode == "exact-reshuffled" else "1"
    p = subprocess.run(["/usr/bin/python3", script, root, test, str(epochs), out, seed], env=env,
                       stderr=subprocess.PIPE, text=True)
    subprocess.run([os.path.join(build, "dlshim"), "stop"], env=dict(env, LD_PRELOAD=""),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    warn = [ln for ln in p.stderr.splitlines() if ln.startswith("dlshim: warning")]
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-3000:])
        raise SystemExit("fidelity: the %s run failed" % mode)
    stats = json.load(open(env["DLSHIM_STATS"]))
    order = [e.get("order") for e in stats.get("per_epoch", []) if e.get("complete")]
    return {"mode": mode, "run": rep, "epochs": json.load(open(out)), "warnings": warn, "order": order,
            "redirects": stats.get("redirects", 0), "requests": stats.get("requests", 0),
            "seconds": time.time() - t0}


EXACT = ("exact", "exact-reshuffled")


def late_acc(run):
    """Test accuracy (points) over the run's last two epochs (its only one when it has one)."""
    eps = run["epochs"][-2:]
    return 100 * sum(e["test_acc"] for e in eps) / len(eps)


def summarize(res, max_drop):
    """Per mode: each run's final and late accuracy, their mean, and the verdict against exact."""
    modes = []
    for r in res["runs"]:
        if r["mode"] not in modes:
            modes.append(r["mode"])
    late = {m: [late_acc(r) for r in res["runs"] if r["mode"] == m] for m in modes}
    final = {m: [100 * r["epochs"][-1]["test_acc"] for r in res["runs"] if r["mode"] == m] for m in modes}
    base_runs = [v for m in EXACT for v in late.get(m, [])]
    base = sum(base_runs) / len(base_runs) if base_runs else None
    out = {"baseline_late_acc": base, "baseline_runs": len(base_runs), "max_drop": max_drop, "modes": {}}
    for m in modes:
        mean = sum(late[m]) / len(late[m])
        d = {"runs": len(late[m]), "late_acc": late[m], "final_acc": final[m], "late_acc_mean": mean,
             "vs_exact": None if base is None else mean - base}
        d["ok"] = m in EXACT or base is None or base - mean <= max_drop
        out["modes"][m] = d
    return out


def write_outputs(res, outdir, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(outdir, exist_ok=True)
    json.dump(res, open(os.path.join(outdir, "fidelity.json"), "w"), indent=1)
    with open(os.path.join(outdir, "fidelity.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mode", "run", "epoch", "train_loss", "test_loss", "test_acc", "displacement", "locality",
                    "locality_shuffle", "pair_repeat", "class_mix"])
        for r in res["runs"]:
            for e in r["epochs"]:
                o = r["order"][e["epoch"]] if e["epoch"] < len(r["order"]) and r["order"][e["epoch"]] else {}
                w.writerow([r["mode"], r["run"] + 1, e["epoch"], "%.4f" % e["train_loss"], "%.4f" % e["test_loss"],
                            "%.4f" % e["test_acc"], o.get("displacement", ""), o.get("locality", ""),
                            o.get("locality_shuffle", ""), o.get("pair_repeat", ""), o.get("class_mix", "")])
    # Per mode: the mean over its runs, and the band from the lowest to the highest run.
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, m in enumerate(res["summary"]["modes"]):
        runs = [r for r in res["runs"] if r["mode"] == m]
        n = min(len(r["epochs"]) for r in runs)
        ep = list(range(1, n + 1))
        for a, key, scale in ((ax[0], "test_acc", 100), (ax[1], "test_loss", 1)):
            vals = [[scale * r["epochs"][k][key] for r in runs] for k in range(n)]
            a.plot(ep, [sum(v) / len(v) for v in vals], marker="o", color="C%d" % i,
                   label="%s (%d run%s)" % (m, len(runs), "s" if len(runs) > 1 else ""))
            if len(runs) > 1:
                a.fill_between(ep, [min(v) for v in vals], [max(v) for v in vals], color="C%d" % i, alpha=0.15)
    ax[0].set_xlabel("epoch")
    ax[0].set_ylabel("test accuracy (%)")
    ax[1].set_xlabel("epoch")
    ax[1].set_ylabel("test loss")
    for a in ax:
        a.set_xticks(range(1, res["epochs"] + 1))
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.suptitle("Fashion-MNIST (%d training images) under dlshim: mean of runs, band = lowest to highest"
                 % res["train_images"], fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    sm = res["summary"]
    lines = ["| mode | runs | final accuracy per run | last-epochs accuracy per run | mean | vs exact runs |",
             "|---|---|---|---|---|---|"]
    for m, d in sm["modes"].items():
        lines.append("| %s | %d | %s | %s | %.2f%% | %s |" % (
            m, d["runs"], ", ".join("%.2f%%" % v for v in d["final_acc"]),
            ", ".join("%.2f%%" % v for v in d["late_acc"]), d["late_acc_mean"],
            "-" if m in EXACT or d["vs_exact"] is None else "%+.2f points%s" % (d["vs_exact"], "" if d["ok"] else " (FAIL)")))
    lines += ["", "Last-epochs accuracy: the mean over the last two epochs. Exact runs: %d (mean %s); bound: "
              "%.1f points below it." % (sm["baseline_runs"], "-" if sm["baseline_late_acc"] is None
                                          else "%.2f%%" % sm["baseline_late_acc"], sm["max_drop"]), "",
              "Each mode's first run, per epoch:", "",
              "| mode | epoch | train loss | test loss | test accuracy | displacement | chunk locality (shuffle) "
              "| pair repeat (shuffle) | class mix |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        if r["run"]:
            continue
        for e in r["epochs"]:
            o = r["order"][e["epoch"]] if e["epoch"] < len(r["order"]) and r["order"][e["epoch"]] else {}
            rep = "%.3f (%.3f)" % (o["pair_repeat"], o["pair_repeat_shuffle"]) if "pair_repeat" in o else "-"
            loc = "%.3f (%.3f)" % (o["locality"], o["locality_shuffle"]) if o else "-"
            lines.append("| %s | %d | %.4f | %.4f | %.2f%% | %s | %s | %s | %s |" % (
                r["mode"], e["epoch"] + 1, e["train_loss"], e["test_loss"], 100 * e["test_acc"],
                "%.3f" % o["displacement"] if o else "-", loc, rep, "%.3f" % o["class_mix"] if o else "-"))
    md = "\n".join(lines) + "\n"
    open(os.path.join(outdir, "fidelity.md"), "w").write(md)
    print(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=int, default=20000, help="training images (of 60,000)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--modes", default="exact,exact-reshuffled,dir,dsa")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of each mode but exact (deterministic: one run), with different seeds")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--png", default=os.path.join(REPO, "docs", "img", "fidelity.png"))
    ap.add_argument("--work", default=os.environ.get("FIDELITY_WORK", "/var/tmp/dlshim-fidelity"))
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--max-drop", type=float, default=1.0,
                    help="fail when a redirect mode's mean last-epochs accuracy is more than this many points "
                         "below the exact runs'")
    a = ap.parse_args()
    if a.repeats < 1:
        raise SystemExit("fidelity: --repeats must be at least 1")
    if not os.path.isdir(FMNIST):
        raise SystemExit("fidelity: %s is missing (apt-get install dataset-fashion-mnist)" % FMNIST)
    os.makedirs(a.work, exist_ok=True)
    root, test = build_dataset(a.work, a.train)
    res = {"train_images": a.train, "epochs": a.epochs, "repeats": a.repeats, "runs": []}
    for mode in a.modes.split(","):
        for rep in range(1 if mode == "exact" else a.repeats):
            r = run_mode(mode, rep, root, test, a.epochs, a.work, a.build)
            if mode == "dsa" and any("not implemented" in w for w in r["warnings"]):
                print("  (dsa is not implemented in this build: its run is left out)")
                break
            res["runs"].append(r)
    res["summary"] = summarize(res, a.max_drop)
    write_outputs(res, a.out, a.png)
    bad = [m for m, d in res["summary"]["modes"].items() if not d["ok"]]
    if bad:
        raise SystemExit("fidelity: %s lost more than %.1f points of test accuracy against exact (mean of the "
                         "last epochs over %d runs)" % (bad, a.max_drop, a.repeats))


if __name__ == "__main__":
    main()
