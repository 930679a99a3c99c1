#!/usr/bin/python3
"""Read every file of a manifest under a root and record its sha256 (or
the error), as a training job's data loader would: one open + read each.

usage: mn_reader.py ROOT MANIFEST OUT [DELAY_S]
MANIFEST lines: relpath sha256 size home; OUT: JSON {relpath: sha or "ERR:<errno name>"}.
"""
import errno
import hashlib
import json
import sys
import time

root, manifest, out = sys.argv[1:4]
delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
res = {}
for line in open(manifest):
    rel = line.split()[0]
    try:
        with open(f"{root}/{rel}", "rb") as f:
            data = f.read()
        res[rel] = hashlib.sha256(data).hexdigest()
    except OSError as e:
        res[rel] = "ERR:" + errno.errorcode.get(e.errno, str(e.errno))
    if delay:
        time.sleep(delay)
with open(out, "w") as f:
    json.dump(res, f)
