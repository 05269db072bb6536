#!/usr/bin/env python3
"""Attribute a CPU profile of kvd or etcd to subsystems, the same rules for both.

    go tool pprof -traces PROFILE | scripts/lib/pprof-subsystems.py [REQUESTS] [--other N] [--detail N] [--alloc]

--other N lists the N biggest stacks no rule matched; --detail N lists, per
subsystem, the N frames that decided the most samples (the leaf-most matching
frame; for stack growth the first non-runtime caller).

Each sample is charged to one subsystem:
  1. profiling / metrics scrape (net/http/pprof, runtime/pprof, promhttp): excluded
     from the per-request figures;
  2. GC: any stack through the mark workers, assists, sweeping or scavenging;
  3. goroutine stacks: runtime.newstack / morestack / newproc (growing the stack of
     a fresh goroutine, such as gRPC's one per stream);
  4. runtime scheduler: stacks with nothing but runtime frames (schedule, findRunnable,
     netpoll, timers, sysmon);
  5. otherwise the first frame from the leaf up that matches a rule below: a malloc,
     a channel send or a syscall is charged to the code that made it, protobuf work
     is protobuf wherever it happens (API messages, raft entries, WAL records), socket
     I/O is "network I/O" whoever writes.
Prints one line per subsystem: CPU seconds, share, and µs/request when REQUESTS is
given (excluded samples left out), plus memo lines (malloc, syscalls, wakeups) that
cut across the subsystems. With --alloc it reads an allocation profile instead
(go tool pprof -traces -sample_index=alloc_objects or alloc_space) and prints
objects or bytes per request by the same rules.
"""
import re
import sys

RULES = [  # (subsystem, regex on a frame), tried per frame from the leaf up
    ("network I/O (socket syscalls)", r"^net\.\(\*(netFD|conn)\)|^net\.\(\*TCPConn\)"),
    ("protobuf encode/decode", r"google\.golang\.org/protobuf/|github\.com/golang/protobuf/|github\.com/gogo/protobuf/"
     r"|google\.golang\.org/grpc/encoding/proto|grpc\.codecV\dBridge|v3rpc\.\(\*codec\)"
     r"|(etcdserverpb|mvccpb|authpb|raftpb|membershippb|walpb|snappb|leasepb|kvdpb\w*)\.\(?\*?\w*\)?\.?(Marshal|Unmarshal|Size|XXX_|ProtoReflect|sov|encodeVarint|skip)"
     r"|(etcdserverpb|mvccpb|authpb|raftpb|membershippb|walpb)\.(sov|soz|encodeVarint|skip)"),
    ("backend engine", r"go\.etcd\.io/bbolt|github\.com/dgraph-io/badger|github\.com/dgraph-io/ristretto"
     r"|etcd/server/v3/storage/backend|kvd/pkg/backend"),
    ("WAL write+fsync", r"kvd/pkg/raftlog|etcd/server/v3/storage/wal|etcd/server/v3/storage\.\(\*storage\)"
     r"|kvd/pkg/raftnode\.\(\*WALWriter\)|kvd/pkg/raftnode\.\(\*walWriter\)"),
    ("watch hub", r"kvd/pkg/watchhub|mvcc\.\(\*watchableStore\)|mvcc\.\(\*watcherGroup\)|mvcc\.\(\*watchStream\)"
     r"|mvcc\.newWatcherBatch|mvcc\.\(\*watcherSetByKey\)|mvcc\.\(\*watchableStore\)\.notify|v3rpc\.\(\*serverWatchStream\)"),
    ("MVCC + index", r"kvd/pkg/mvcc|kvd/pkg/index|etcd/server/v3/storage/mvcc|github\.com/google/btree"
     r"|etcd/server/v3/storage/schema|etcd/server/v3/etcdserver/cindex|github\.com/tidwall/btree"),
    ("raft (incl. read index, driver)", r"go\.etcd\.io/raft/v3|kvd/pkg/raftnode|kvd/pkg/transport|etcdserver\.\(\*raftNode\)"
     r"|etcdserver\.\(\*EtcdServer\)\.(linearizableReadLoop|requestCurrentIndex|sendReadIndex|readIndex|run$|run\.func\d+$|processInternalRaftRequestOnce\.func)"
     r"|etcdserver\.\(\*raftReadyHandler\)|etcdserver/api/rafthttp|etcdserver\.(raftNode|updateCommittedIndex)"),
    ("applier / txn layer", r"kvd/pkg/apply|etcd/server/v3/etcdserver/apply|etcd/server/v3/etcdserver/txn|etcd/pkg/v3/schedule"
     r"|etcdserver\.\(\*EtcdServer\)\.(apply|applyAll|applyEntries|applyEntryNormal|applySnapshot|triggerSnapshot|snapshot|notifyAboutFirstCommitInTerm)"
     r"|etcd/pkg/v3/wait|etcdserver\.\(\*EtcdServer\)\.getAppliedIndex"),
    ("auth + interceptors + metrics", r"kvd/pkg/authz|etcd/server/v3/auth|UnaryInterceptor|UnaryServerInterceptor|StreamInterceptor"
     r"|chainUnaryInterceptors|newLogUnaryInterceptor|newUnaryInterceptor|grpc-ecosystem|go\.opentelemetry\.io"
     r"|prometheus/client_golang|kvd/pkg/tracing|kvd/pkg/pluginhost"),
    ("API handler (request path)", r"kvd/pkg/api|etcdserverpb\._|etcdserver/api/v3rpc|etcdserver\.\(\*EtcdServer\)"
     r"|etcd/pkg/v3/idutil|kvd/pkg/server|kvd/pkg/alarms|etcdserver/api/membership|kvd/pkg/membership"),
    ("gRPC transport + HTTP/2", r"google\.golang\.org/grpc|golang\.org/x/net/http2|golang\.org/x/net/"),
    ("leases", r"kvd/pkg/leasemgr|etcd/server/v3/lease"),
    ("logging", r"go\.uber\.org/zap"),
]
RULES = [(n, re.compile(r)) for n, r in RULES]
EXCLUDE = re.compile(r"net/http/pprof|runtime/pprof|promhttp|prometheus\.\(\*Registry\)\.Gather|runtime\.sigprof")
GC = re.compile(r"^runtime\.(gcBgMarkWorker|gcAssistAlloc|gcAssistAlloc1|bgsweep|bgscavenge|gcStart|gcMarkDone|gcMarkTermination"
                r"|deductSweepCredit|sweepone|\(\*sweepLocked\)\.sweep|\(\*mheap\)\.reclaim|gcDrain|markroot|\(\*gcControllerState\)|forEachP"
                r"|gcStopTheWorldWithSema|stopTheWorldWithSema|gcMarkWorkAvailable|\(\*scavengerState\))")
STACKS = re.compile(r"^runtime\.(newstack|morestack|copystack|newproc|newproc1|malg|gfget|gfput)$")
RUNTIME = re.compile(r"^(runtime|internal/runtime|syscall|internal/)[./]")
MEMO = {
    "malloc (mallocgc, outside GC assist)": re.compile(r"^runtime\.mallocgc$"),
    "syscalls (any)": re.compile(r"^(internal/runtime/syscall|syscall)\.|^runtime\.(futex|epollwait|usleep|nanotime1|write1|read|madvise)"),
    "goroutine wakeups (ready/wakep)": re.compile(r"^runtime\.(ready|wakep|goready)$"),
}


UNITS = {"": 1, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9,
         "B": 1, "kB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


def traces(f):
    stack, val = [], 0.0
    for line in f:
        line = line.rstrip("\n")
        if line.startswith("-----------+"):
            if stack:
                yield val, stack
            stack, val = [], 0.0
            continue
        m = re.match(r"^\s+([\d.]+)(ms|s|us|µs|ns|B|kB|MB|GB|TB)?\s+(\S.*)$", line)
        if m and not stack:
            v, u, fn = float(m.group(1)), m.group(2) or "", m.group(3)
            val = v * UNITS[u]
            stack = [fn]
        elif stack and line.startswith("  ") and line.strip():
            stack.append(line.strip())
    if stack:
        yield val, stack


def frame(fn):
    return fn.replace(" (inline)", "").strip()


def classify(stack):
    """The subsystem of a stack (leaf first), and the frame that decided it."""
    fs = [frame(f) for f in stack]
    for f in fs:
        if EXCLUDE.search(f):
            return "(profiling / metrics scrape, excluded)", f
    for f in fs:
        if GC.search(f):
            return "GC", f
    for i, f in enumerate(fs):
        if STACKS.search(f):
            # the function whose call grew the stack, or that started the goroutine
            return "goroutine stack growth + creation", next((g for g in fs[i + 1:] if not RUNTIME.search(g)), f)
    if all(RUNTIME.search(f) for f in fs):
        return "runtime scheduler + timers", fs[-1]
    for f in fs:
        for name, rx in RULES:
            if rx.search(f):
                return name, f
    return "other", fs[0]


def main():
    args = sys.argv[1:]
    reqs = float(args[0]) if args and not args[0].startswith("-") else 0
    show_other = int(args[args.index("--other") + 1]) if "--other" in args else 0
    detail = int(args[args.index("--detail") + 1]) if "--detail" in args else 0
    alloc = "--alloc" in args  # an allocation profile: per request in objects or bytes, not µs
    scale, unit, vfmt = (1, "/req", "{:.0f}") if alloc else (1e6, " µs/req", "{:.2f}s")
    tot, by, memo, other, frames = 0.0, {}, {k: 0.0 for k in MEMO}, {}, {}
    for v, st in traces(sys.stdin):
        tot += v
        c, f = classify(st)
        by[c] = by.get(c, 0) + v
        frames.setdefault(c, {})
        frames[c][f] = frames[c].get(f, 0) + v
        if c == "other":
            k = " < ".join(frame(f) for f in st[:6])
            other[k] = other.get(k, 0) + v
        if not c.startswith("(profiling"):
            fs = [frame(f) for f in st]
            for k, rx in MEMO.items():
                if any(rx.search(f) for f in fs) and not (k.startswith("malloc") and c == "GC"):
                    memo[k] += v
    excl = by.get("(profiling / metrics scrape, excluded)", 0)
    V = vfmt.format
    print(f"total\t{V(tot)}\texcluded\t{V(excl)}\trequests\t{reqs:.0f}")
    for name, v in sorted(by.items(), key=lambda kv: -kv[1]):
        us = f"{v / reqs * scale:.1f}" if reqs and not name.startswith("(") else ""
        print(f"{name}\t{V(v)}\t{100 * v / tot:.1f}%\t{us}")
    if reqs:
        print(f"TOTAL per request\t{V(tot - excl)}\t\t{(tot - excl) / reqs * scale:.1f}")
    for k, v in memo.items():
        if alloc:
            break
        us = f"{v / reqs * scale:.1f}" if reqs else ""
        print(f"memo: {k}\t{V(v)}\t{100 * v / tot:.1f}%\t{us}")
    for k, v in sorted(other.items(), key=lambda kv: -kv[1])[:show_other]:
        print(f"other\t{V(v)}\t{k}")
    if detail:
        for name, _ in sorted(by.items(), key=lambda kv: -kv[1]):
            print(f"\n{name}: the frames that decided it")
            for f, v in sorted(frames[name].items(), key=lambda kv: -kv[1])[:detail]:
                us = f"{v / reqs * scale:.2f}{unit}" if reqs else ""
                print(f"  {V(v)}\t{us}\t{f}")


main()
