#!/usr/bin/python3
"""Extent reads (engine/daemon/extent_read.c): chunk loads that read the block
device directly, byte-exact and only where the file system's map is safe.

The machine's own disk is not open to us (the container's device cgroup), so
the test makes a small ext4 file system on a loop device, as a user's data
disk would be:
  (a) extent_check: files freshly written (delayed allocation: the map is taken
      after a sync), many in few device reads, every byte equal to an ordinary
      read; a sparse file is declined (read the ordinary way), never misread;
  (b) a PyTorch ImageFolder DataLoader (num_workers 2) under DLSHIM_REDIRECT=dir
      on that file system, 3 epochs: every sample's bytes are a file of the
      requested class, each epoch a permutation (test_redirect.check_run), and
      the coordinator loaded files by extent reads (stats loader.extent_files);
  (c) DLSHIM_EXTENT_READS=off: the same run, no extent read at all.
Without root or loop devices the test says so and fails.
"""
import atexit
import json
import os
import subprocess
import sys

import dlshim_testlib as T
import test_redirect

EXTENT_CHECK = os.path.join(T.BUILD, "progs", "extent_check")


def sh(*cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def make_loop_fs(env):
    img = env.path("disk.img")
    mnt = env.path("mnt")
    os.makedirs(mnt)
    with open(img, "wb") as f:
        f.truncate(256 << 20)
    p = sh("mkfs.ext4", "-q", "-F", img)
    if p.returncode != 0:
        return None, p.stdout
    p = sh("losetup", "-f", "--show", img)
    if p.returncode != 0:
        return None, "losetup: " + p.stdout
    loop = p.stdout.strip()
    atexit.register(lambda: sh("losetup", "-d", loop))
    p = sh("mount", loop, mnt)
    if p.returncode != 0:
        return None, "mount: " + p.stdout
    atexit.register(lambda: (sh("umount", "-l", mnt)))
    return mnt, loop


def stats_loader(env):
    st = env.stats()
    return st.get("loader", {})


def main():
    T.require_build()
    env = T.Env("extent-reads")
    env.base["DLSHIM_IDLE_EXIT"] = "60"  # stats are read after the job exits
    if os.geteuid() != 0:
        T.check(False, "extent reads need root for a loop device; running as uid %d" % os.geteuid())
        T.finish()
    mnt, detail = make_loop_fs(env)
    if not T.check(mnt is not None, "a loop-mounted ext4 for the data", detail):
        T.finish()

    T.section("(a) extent_check: bytes equal an ordinary read; a sparse file is declined")
    d = os.path.join(mnt, "a")
    T.write_random_files(d, 120, 1, 300000, seed=5, suffix=".bin")
    sparse = os.path.join(d, "sparse.bin")
    with open(sparse, "wb") as f:
        f.truncate(1 << 20)
        f.write(b"tail")
    files = sorted(os.path.join(d, x) for x in os.listdir(d))
    p = sh(EXTENT_CHECK, *files)
    out = p.stdout
    T.check(p.returncode == 0 and "MISMATCH" not in out, "extent_check: no byte differs", out[-1500:])
    T.check("available 1" in out, "the loop device can be read directly", out[:300])
    done = int(out.split("done ")[1].split()[0]) if "done " in out else 0
    runs = int(out.split("runs ")[1].split()[0]) if "runs " in out else 0
    T.check(done == len(files) - 1, "every plain file was read by extents (%d of %d)" % (done, len(files) - 1), out[:400])
    T.check(0 < runs <= 16, "in few device reads (%d for %d files)" % (runs, done))
    T.check("declined %s" % sparse in out, "the sparse file was declined")

    T.section("(b) ImageFolder under dir redirect on the loop file system")
    root = os.path.join(mnt, "images")
    T.make_imagefolder(root, classes=4, per_class=40, seed=3)
    manifest = T.manifest(root)
    cache = str(T.tree_size(root) // 2)
    subprocess.run(["sync"])
    before = len(T._failures)
    test_redirect.check_run(env, root, manifest, "dir", 2, "extent/dir/w2", cache)
    T.check(len(T._failures) == before, "redirect guarantees hold with extent reads")
    ld = stats_loader(env)
    T.info("loader stats: %s" % json.dumps(ld))
    T.check(ld.get("extent_reads") == "auto" and ld.get("extent_files", 0) > 0,
            "the coordinator loaded files by extent reads (%s files in %s runs)"
            % (ld.get("extent_files"), ld.get("extent_runs")))
    # Gaps of up to 64 KiB (often a file of the chunk already in the cache)
    # are read over rather than paying another request.
    T.check(ld.get("extent_device_bytes", 0) <= 1.5 * ld.get("extent_file_bytes", 1),
            "extent reads read little besides the files (%s device bytes for %s file bytes)"
            % (ld.get("extent_device_bytes"), ld.get("extent_file_bytes")))
    env.stop_daemon(env.runtime_dir)
    env.new_runtime_dir()

    T.section("(c) DLSHIM_EXTENT_READS=off")
    env.base["DLSHIM_EXTENT_READS"] = "off"
    test_redirect.check_run(env, root, manifest, "dir", 0, "extent-off/dir/w0", cache)
    ld = stats_loader(env)
    T.check(ld.get("extent_reads") == "off" and ld.get("extent_files") == 0,
            "no extent read when off (%s)" % json.dumps(ld))
    env.stop_daemon(env.runtime_dir)
    T.finish()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
