#!/usr/bin/env python3
"""Regenerate the small seed corpora under tests/fuzz/corpus/ (proto, config, peer).

Layouts follow include/dlshim/proto.h and engine/daemon/peers/peer_proto.h
(host order, x86-64) and the input formats documented at the top of
tests/fuzz/fuzz_config.c and tests/fuzz/fuzz_peer.c.
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC, VERSION = 0x31534C44, 2
HELLO, HELLO_OK, OPEN, OPEN_R, LOADFD, RELEASE, STATS, TEXT, STOP, ERROR, DATASET, ROWS, ROWS_R = range(1, 14)


def hdr(t, n, seq=7, magic=MAGIC, version=VERSION):
    return struct.pack("<IHHII", magic, version, t, n, seq)


def pkt(t, payload=b"", seq=7):
    return hdr(t, len(payload), seq) + payload


def hello(job=b"job-1", terminated=True):
    j = job.ljust(128, b"\0") if terminated else (job * 128)[:128]
    return struct.pack("<IIQ", 1234, 0, 0xABCDEF) + j + struct.pack("<II", 1234, 0)


def proto():
    op = struct.pack("<QQQq", 2049, 123456, 4096, 1700000000123456789)
    rel = struct.pack("<IIQQQQQQqII", 3, 5, 8, 4096, 0, 2049, 123456, 4096, 1, 0, 0)
    ds = struct.pack("<IIII", 1, 0, 0, 0) + b"/data/a,/data/b\0/list.txt\0"
    rows = struct.pack("<QQQqQQQQII", 2049, 123456, 1 << 20, 1700000000123456789, 1000, 4096, 17, 1, 2, 0)
    return {
        "hello": pkt(HELLO, hello()),
        "hello_control": pkt(HELLO, hello(b"")[:4] + struct.pack("<I", 1) + hello(b"")[8:]),
        "hello_unterminated": pkt(HELLO, hello(b"x", terminated=False)),
        "hello_ok": pkt(HELLO_OK, struct.pack("<IIQQ", 99, 0, 0x1122334455667788, 1 << 30)),
        "open": pkt(OPEN, op),
        "open_r": pkt(OPEN_R, struct.pack("<IIIIQQ", 1, 3, 5, 0, 8, 4096)),
        "loadfd": pkt(LOADFD),
        "release": pkt(RELEASE, rel),
        "stats": pkt(STATS),
        "stop": pkt(STOP),
        "text": pkt(TEXT, b'{"daemon":{}}'),
        "error": pkt(ERROR, b"refused"),
        "dataset": pkt(DATASET, ds),
        "rows": pkt(ROWS, rows + b"/data/train.h5\0/x\0"),
        "rows_one_name": pkt(ROWS, rows + b"/data/train.h5\0"),
        "rows_r": pkt(ROWS_R, struct.pack("<IIQQQQQQ", 1, 3, 8, 65536, 16, 16, 17, 16)),
        "truncated_header": pkt(OPEN, op)[:11],
        "bad_magic": hdr(STATS, 0, magic=0xDEADBEEF),
        "bad_version": hdr(STATS, 0, version=VERSION + 1),
        "lying_length": hdr(OPEN, 4096) + op,
        "unknown_type": hdr(200, 0),
    }


def config_input(values, mask=None, ram=4, errsel=7):
    names = ["DISABLE", "ROOTS", "REDIRECT", "SAMPLER", "EVICT", "CACHE", "MAX_ITEM", "CHUNK", "SEED",
             "LOG", "IDLE_EXIT", "JOB", "FILELIST", "DAEMON", "RUNTIME_DIR", "STATS", "PEERS", "NODE", "XDG"]
    vals = [values.get(n, b"") for n in names]
    if mask is None:
        mask = sum(1 << i for i, n in enumerate(names) if n in values)
    return struct.pack("<I", mask)[:3] + bytes([ram, errsel]) + b"\0".join(vals)


def config():
    return {
        "defaults": config_input({}),
        "typical": config_input({"ROOTS": b"/data/imagenet/train,/data/x/../y/", "REDIRECT": b"dir",
                                 "SAMPLER": b"chunk", "EVICT": b"LRU", "CACHE": b"512M", "CHUNK": b"auto",
                                 "SEED": b"0x2a", "LOG": b"debug", "IDLE_EXIT": b"0", "JOB": b"train:1@a+b-c",
                                 "RUNTIME_DIR": b"/tmp/rt", "STATS": b"out/stats.json"}),
        "sizes": config_input({"CACHE": b"1.5GiB", "MAX_ITEM": b"50%", "ROOTS": b"/"}, ram=2),
        "bad_redirect": config_input({"REDIRECT": b"sideways"}, errsel=3),
        "bad_cache": config_input({"CACHE": b"18446744073709551616"}),
        "many_roots": config_input({"ROOTS": b",".join(b"/r%d" % i for i in range(17))}),
        "dotdot_roots": config_input({"ROOTS": b"/a/./b//c/../../..,,/a/b/,/a//b"}),
        "bad_job": config_input({"JOB": b".."}, errsel=1),
        "xdg": config_input({"XDG": b"/tmp/"}),
        "relative_paths": config_input({"FILELIST": b"rel", "DAEMON": b"/bin/x"}),
    }


# tests/fuzz/fuzz_peer.c: a selector byte, then one message of a 3-node
# cluster seen from node 0, answering request 7 to node 1 (3 files named).
PEER_MAGIC, PEER_VERSION = 0x4E534C44, 3


def fetch_r_rec(index, runs, status=0, node=1, req=7):
    return struct.pack("<IiQQqQIIII", node, status, req, 40000, 1700000000123456789, 5, 9, len(runs), index, 0) + \
        b"".join(struct.pack("<II", a, n) for a, n in runs)


def peer():
    hello = struct.pack("<IIIIQQQQIIII", PEER_MAGIC, PEER_VERSION, 1, 3, 0x1234, 0x7F0000000000, 4096, 100,
                        16384, 1, 8, 0) + b"RKEYBYTE"
    ent = lambda path: struct.pack("<QqI", 40000, 1700000000123456789, len(path)) + path
    files = struct.pack("<IIQ", 2, 2, 0x1234) + ent(b"/data/a/1.jpg") + ent(b"/data/b/2.jpg")
    fetch = struct.pack("<IIQ", 1, 2, 7) + b"/data/a/1.jpg\0/data/a/2.jpg\0/data/a/3.jpg\0"
    return {
        "hello": b"\x00" + hello,
        "files": b"\x01" + files,
        "files_truncated": b"\x01" + files[:-3],
        "fetch": b"\x02" + fetch,
        "fetch_alone": b"\x02" + struct.pack("<IIQ", 2, 0, 9) + b"/data/x\0",
        "fetch_r": b"\x03" + fetch_r_rec(0, [(3, 2), (10, 1)]) + fetch_r_rec(2, [(20, 3)]) + fetch_r_rec(1, [(99, 1)]),
        "fetch_r_refused": b"\x03" + fetch_r_rec(0, [], status=2),
        "fetch_r_outside": b"\x03" + fetch_r_rec(0, [(99, 2)]),
        "done": b"\x04" + struct.pack("<IIQQ", 2, 9, 7, 5),
        "claim": b"\x05" + struct.pack("<IIQQQQII", 2, 3, 11, 0xAB, 0xCD, 0xEF, 30, 0),
        "claim_current": b"\x05" + struct.pack("<IIQQQQII", 1, 3, 12, 0xAB, 0xCD, 0, 30, 1),
        "claim_r": b"\x06" + struct.pack("<IIQII", 1, 1, 11, 4, 2) + struct.pack("<QQ", 0x1111, 0x2222),
        "claim_r_stale": b"\x06" + struct.pack("<IIQII", 2, 0, 12, 2, 0),
    }


def main():
    for sub, items in (("proto", proto()), ("config", config()), ("peer", peer())):
        d = os.path.join(HERE, "corpus", sub)
        os.makedirs(d, exist_ok=True)
        for name, data in items.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
