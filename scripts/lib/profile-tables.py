#!/usr/bin/env python3
"""Markdown tables from one or more scripts/profile.sh output directories.

    scripts/lib/profile-tables.py OUTDIR [OUTDIR...]

Per workload: CPU µs per request by subsystem (from <server>-<workload>.subsystems.txt),
one column per server, the median over the directories given (with the range when
there are several); then allocations per request by subsystem (objects and bytes,
from the allocation profiles) and the exact totals from runtime.MemStats
(summary.tsv).
"""
import os
import re
import subprocess
import sys

SERVERS = ["kvd-bolt", "kvd-badger", "etcd"]
WORKLOADS = [("put", "put"), ("range-s", "1-key range, serializable"), ("range-l", "1-key range, linearizable")]
ORDER = [
    "gRPC transport + HTTP/2", "network I/O (socket syscalls)", "goroutine stack growth + creation",
    "protobuf encode/decode", "auth + interceptors + metrics", "API handler (request path)",
    "raft (incl. read index, driver)", "WAL write+fsync", "applier / txn layer", "MVCC + index",
    "backend engine", "watch hub", "leases", "logging", "GC", "runtime scheduler + timers", "other",
]
HERE = os.path.dirname(os.path.abspath(__file__))


def parse(text):
    rows, total = {}, None
    for line in text.splitlines():
        if not line.strip():
            break
        p = line.split("\t")
        if p[0] == "TOTAL per request":
            total = float(p[3])
        elif len(p) == 4 and p[3] and not p[0].startswith(("total", "memo", "(")):
            rows[p[0]] = float(p[3])
    memo = {}
    for line in text.splitlines():
        p = line.split("\t")
        if p[0].startswith("memo: ") and len(p) == 4 and p[3]:
            memo[p[0][6:]] = float(p[3])
    return rows, total, memo


def summary(d):
    out = {}
    with open(os.path.join(d, "summary.tsv")) as f:
        next(f)
        for line in f:
            p = line.rstrip("\n").split("\t")
            out[(p[0], p[1])] = dict(requests=int(p[2]), us=float(p[4]), mallocs=float(p[5]), bytes=float(p[6]), rps=float(p[7]))
    return out


def alloc(d, s, w, idx, reqs):
    f = os.path.join(d, f"{s}-{w}.allocs.pb.gz")
    tr = subprocess.run(["go", "tool", "pprof", "-traces", f"-sample_index={idx}", f], capture_output=True, text=True).stdout
    res = subprocess.run([sys.executable, os.path.join(HERE, "pprof-subsystems.py"), str(reqs), "--alloc"],
                         input=tr, capture_output=True, text=True).stdout
    return parse(res)


def cell(vals, fmt):
    vals = [v for v in vals if v is not None]
    if not vals:
        return ""
    vals.sort()
    k = len(vals)
    m = vals[k // 2] if k % 2 else (vals[k // 2 - 1] + vals[k // 2]) / 2
    if len(vals) > 1 and fmt(min(vals)) != fmt(max(vals)):
        return f"{fmt(m)} ({fmt(min(vals))}–{fmt(max(vals))})"
    return fmt(m)


def main():
    dirs = sys.argv[1:]
    sums = [summary(d) for d in dirs]
    for w, label in WORKLOADS:
        data = {}
        for s in SERVERS:
            for i, d in enumerate(dirs):
                p = os.path.join(d, f"{s}-{w}.subsystems.txt")
                if os.path.exists(p):
                    data[(s, i)] = parse(open(p).read())
        print(f"\n{label}: server CPU µs per request by subsystem\n")
        print("| subsystem | " + " | ".join(SERVERS) + " |")
        print("| --- |" + " ---: |" * len(SERVERS))
        present = [r for r in ORDER if any(r in v[0] and v[0][r] >= 0.05 for v in data.values())]
        f1 = lambda v: f"{v:.1f}"
        for r in present:
            print(f"| {r} | " + " | ".join(cell([data[(s, i)][0].get(r, 0.0) for i in range(len(dirs)) if (s, i) in data], f1) for s in SERVERS) + " |")
        print("| **sum (profile)** | " + " | ".join(cell([data[(s, i)][1] for i in range(len(dirs)) if (s, i) in data], f1) for s in SERVERS) + " |")
        print("| server CPU from /proc | " + " | ".join(cell([sm[(s, w)]["us"] for sm in sums if (s, w) in sm], f1) for s in SERVERS) + " |")
        for m in ["malloc (mallocgc, outside GC assist)", "syscalls (any)"]:
            print(f"| memo: {m} | " + " | ".join(cell([data[(s, i)][2].get(m) for i in range(len(dirs)) if (s, i) in data], f1) for s in SERVERS) + " |")
        print("| requests in the 20 s window | " + " | ".join(cell([sm[(s, w)]["requests"] for sm in sums if (s, w) in sm], lambda v: f"{v:.0f}") for s in SERVERS) + " |")
    print("\nAllocations per request (runtime.MemStats over the window; by subsystem from the sampled allocation profile of the first directory)\n")
    for w, label in WORKLOADS:
        objs, byts = {}, {}
        for s in SERVERS:
            if (s, w) in sums[0]:
                n = sums[0][(s, w)]["requests"]
                objs[s] = alloc(dirs[0], s, w, "alloc_objects", n)[0]
                byts[s] = alloc(dirs[0], s, w, "alloc_space", n)[0]
        print(f"\n{label}: objects / bytes per request\n")
        print("| subsystem | " + " | ".join(SERVERS) + " |")
        print("| --- |" + " ---: |" * len(SERVERS))
        rows = [r for r in ORDER if any(r in objs.get(s, {}) for s in SERVERS)]
        for r in rows:
            print(f"| {r} | " + " | ".join(f"{objs[s].get(r, 0):.0f} / {byts[s].get(r, 0):.0f} B" if s in objs else "" for s in SERVERS) + " |")
        print("| **MemStats: Mallocs / TotalAlloc** | " + " | ".join(
            cell([sm[(s, w)]["mallocs"] for sm in sums if (s, w) in sm], lambda v: f"{v:.0f}") + " / " +
            cell([sm[(s, w)]["bytes"] for sm in sums if (s, w) in sm], lambda v: f"{v:.0f} B") for s in SERVERS) + " |")


main()
