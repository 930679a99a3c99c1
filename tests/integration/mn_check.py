"""What the checks of test_multinode.sh share: the dataset's manifest, its
files by label group and content, and a coordinator's stats.

Used from the test's inline Python (HERE on sys.path, B in the
environment)."""
import collections
import json
import os
import subprocess


def manifest(t):
    """[relpath, sha256, size, home node] of every file of the cluster."""
    return [line.split() for line in open(f"{t}/manifest")]


def class_of(rel):
    return rel.split("/")[0]


def by_group(man, group=class_of):
    """label group -> sha256 -> relpath."""
    d = collections.defaultdict(dict)
    for rel, sha, size, home in man:
        d[group(rel)][sha] = rel
    return d


def stats(t, run):
    """The JSON stats of the coordinator whose runtime directory is t/run."""
    out = subprocess.run(["env", f"DLSHIM_RUNTIME_DIR={t}/{run}", os.environ["B"] + "/dlshim", "stats", "--json"],
                         capture_output=True, text=True).stdout
    return json.loads(out)
