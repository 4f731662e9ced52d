#!/usr/bin/env python3
"""The seeds' acceptance ratios across two virtual nodes, from the records bench.sh --net
writes (results/net-seeds.json, net-transactions-yield.json, net-transactions8.json,
net-sync-patterns.json, net-alltoallv-{mpich,openmpi,openmpi5,mpich5-ofi,mpich5-ucx}.json,
net-alltoallv{4,8}-{openmpi,openmpi5,mpich5-ofi}.json, net-floor.json, net-thread-mix.json,
thread-mix.json, net-memory1.json, net-memory8-{8,32,64}.json). MPI columns are named by
the version their records carry and the network path of their job.
Prints one line per claim: what it asks, the ratio measured, and whether it holds."""
import json
import os
import sys


def load(name):
    path = os.path.join("results", name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)


def cell(records, **want):
    """The value of the one record matching every field of `want` (None when absent)."""
    for r in records:
        if all(r.get(k) == v for k, v in want.items()):
            return r["value"]
    return None


def line(claim, ratio, holds, detail):
    if ratio is None:
        print(f"{claim:<74} {'-':>7}  not measured")
        return
    verdict = "reported" if holds is None else "holds" if holds(ratio) else "does not hold"
    print(f"{claim:<74} {ratio:7.2f}  {verdict} ({detail})")


def main():
    seeds = load("net-seeds.json")
    patterns = load("net-sync-patterns.json")
    print("Seeds across two virtual nodes (tcp;ofi_rxm on the loopback), one bench.sh run")
    print(f"{'claim':<74} {'ratio':>7}")

    yielding = load("net-transactions-yield.json")
    for records, mode in [(seeds, "block"), (yielding, "yield")]:
        def tx(metric, records=records):
            return cell(records, bench="transactions", sync="hotspot", ranks=2, metric=metric)

        b, a = tx("blocking"), tx("nonblocking-aaar")
        line(f"transactions hot spot, 2 ranks, progress {mode}: A_A_A_R / blocking >= 1.2",
             a / b if a and b else None, lambda r: r >= 1.2,
             f"{a:.0f} vs {b:.0f} tx/s" if a and b else "")

    wider = load("net-transactions8.json")
    for ranks in [4, 8]:
        for pattern in ["hotspot", "uniform"]:
            b = cell(wider, bench="transactions", sync=pattern, ranks=ranks, metric="blocking")
            a = cell(wider, bench="transactions", sync=pattern, ranks=ranks,
                     metric="nonblocking-aaar")
            line(f"transactions {pattern}, {ranks} ranks on 2 nodes: A_A_A_R / blocking",
                 a / b if a and b else None, None,
                 f"{a:.0f} vs {b:.0f} tx/s" if a and b else "")

    for pattern in ["late-post", "late-complete", "wait-at-fence", "late-unlock"]:
        nb = cell(patterns, bench="sync-patterns", sync=pattern, metric="nonblocking")
        bl = cell(patterns, bench="sync-patterns", sync=pattern, metric="blocking")
        line(f"sync-patterns {pattern}: nonblocking / blocking <= 1/3",
             nb / bl if nb and bl else None, lambda r: r <= 1 / 3,
             f"{nb:.0f} vs {bl:.0f} us" if nb and bl else "")
    for scenario in ["aaar-pscw", "aaar-lock", "aaer", "eaer", "eaar"]:
        on = cell(patterns, sync=f"reorder-{scenario}", metric="reorder-on", role="victim")
        off = cell(patterns, sync=f"reorder-{scenario}", metric="reorder-off", role="victim")
        line(f"reorder {scenario} victim: on / off <= 1/3",
             on / off if on and off else None, lambda r: r <= 1 / 3,
             f"{on:.0f} vs {off:.0f} us" if on and off else "")

    # Seed 000's thread scope where it pays (thread-flush --mix): the small-flush thread's
    # mean put + flush beside 3 threads streaming 1 MiB puts, per scope, against alone.
    for path, where, need in [("net-thread-mix.json", "2 nodes", 5.0),
                              ("thread-mix.json", "1 node", None)]:
        mix = load(path)
        for window in ["allocate", "create"]:
            def small(metric, pattern, mix=mix, window=window):
                return next((r["value"] for r in mix
                             if r.get("sync") == "mix" and r.get("window") == window
                             and r.get("metric") == metric and r.get("pattern") == pattern
                             and r.get("unit") == "us" and not r.get("role")), None)
            three = "3 streams of 4 x 1 MiB in flight"
            proc, thr = small("process-scope", three), small("thread-scope", three)
            alone = small("no-streams", "no streams")
            claim = f"thread-flush --mix {window}, {where}, 3 streams: process / thread scope"
            if need is not None:
                claim += f" >= {need:g}"
            line(claim, proc / thr if proc and thr else None,
                 None if need is None else (lambda r, n=need: r >= n),
                 f"{proc:.1f} vs {thr:.1f} us" if proc and thr else "")
            claim = f"thread-flush --mix {window}, {where}, 3 streams: thread scope / alone"
            if need is not None:
                claim += " <= 2"
            line(claim, thr / alone if thr and alone else None,
                 None if need is None else (lambda r: r <= 2),
                 f"{thr:.1f} vs {alone:.1f} us" if thr and alone else "")

    proc = cell(seeds, bench="thread-flush", metric="process-scope", threads=4)
    thr = cell(seeds, bench="thread-flush", metric="thread-scope", threads=4)
    line("thread-flush, 4 threads: process / thread scope >= 2",
         proc / thr if proc and thr else None, lambda r: r >= 2,
         f"{proc:.1f} vs {thr:.1f} us" if proc and thr else "")

    mh = cell(seeds, bench="put-latency", window="memhandle", sync="flush", bytes=8, metric="latency")
    al = cell(seeds, bench="put-latency", window="allocate", sync="flush", bytes=8, metric="latency",
              impl="onesided")
    line("memhandle put / allocate put (8 B + flush) <= 1.1",
         mh / al if mh and al else None, lambda r: r <= 1.1,
         f"{mh:.1f} vs {al:.1f} us" if mh and al else "")
    cyc = cell(seeds, bench="put-latency", window="memhandle", sync="flush", bytes=8,
               metric="create-put-free")
    dyn = cell(seeds, bench="put-latency", window="dynamic", sync="flush", bytes=8,
               metric="attach-put-detach")
    line("memhandle create+put+free / dynamic attach+put+detach < 1",
         cyc / dyn if cyc and dyn else None, lambda r: r < 1,
         f"{cyc:.1f} vs {dyn:.1f} us" if cyc and dyn else "")

    # Seed 000 Figs. 10-11: a flag behind its data through mpi_win_order costs less than
    # the flush it replaces (no acceptance line of its own; checked as the paper's claim).
    flushed = cell(seeds, bench="order-flag", metric="put-flush-flag")
    ordered = cell(seeds, bench="order-flag", metric="put-flag-ordered")
    line("order-flag: put+flush+flag / ordered put+flag > 1",
         flushed / ordered if flushed and ordered else None, lambda r: r > 1,
         f"{flushed:.1f} vs {ordered:.1f} us" if flushed and ordered else "")

    # Seed 001: the best persistent plan against each MPI's network MPI_Alltoallv (named by
    # the version its records carry, and its path) and against the socket floor.
    floor = load("net-floor.json")
    jobs = [("net-alltoallv-openmpi.json", 2, "openmpi", "OMPI {v} tcp", 1.5),
            ("net-alltoallv-mpich.json", 2, "mpich", "MPICH {v} ucx", 1.0),
            ("net-alltoallv-mpich5-ofi.json", 2, "mpich", "MPICH {v} ofi", 1.0),
            ("net-alltoallv-mpich5-ucx.json", 2, "mpich", "MPICH {v} ucx", 1.0),
            ("net-alltoallv-openmpi5.json", 2, "openmpi", "OMPI {v} tcp", 1.0),
            ("net-alltoallv4-openmpi.json", 4, "openmpi", "OMPI {v} tcp", 1.0),
            ("net-alltoallv4-openmpi5.json", 4, "openmpi", "OMPI {v} tcp", 1.0),
            ("net-alltoallv4-mpich5-ofi.json", 4, "mpich", "MPICH {v} ofi", 1.0),
            ("net-alltoallv8-openmpi.json", 8, "openmpi", "OMPI {v} tcp", None),
            ("net-alltoallv8-openmpi5.json", 8, "openmpi", "OMPI {v} tcp", None),
            ("net-alltoallv8-mpich5-ofi.json", 8, "mpich", "MPICH {v} ofi", None)]
    floored = set()
    for path, ranks, host, label, need in jobs:
        recs = load(path)
        version = next((r["version"] for r in recs if r.get("version")), "?")
        name = label.format(v=version)
        for size in [32 << 10, 256 << 10]:
            plans = {r["metric"][len("persistent-"):]: r["value"] for r in recs
                     if r.get("impl") == "onesided" and r.get("bytes") == size
                     and r.get("metric", "").startswith("persistent-")
                     and r.get("pattern") == "uniform"}
            theirs = cell(recs, impl=host, bytes=size, metric="two-sided", pattern="uniform")
            best = min(plans, key=plans.get) if plans else None
            claim = f"alltoallv {size >> 10} KiB, {ranks} ranks: {name} / best plan"
            if need is None:
                # 8 ranks: reported, no acceptance ratio.
                holds = None
            else:
                claim += f" >= {need:g}"
                holds = lambda r, n=need: r >= n
            line(claim, theirs / plans[best] if best and theirs else None, holds,
                 f"{theirs:.1f} vs {plans[best]:.1f} us, {best}" if best and theirs else "")
            if ranks == 2 and best and size not in floored:
                # Once per size (the first 2-rank job's plans): the best plan against the
                # floor of any exchange here.
                floored.add(size)
                sock = cell(floor, bench="socket-floor", bytes=size, metric="exchange-p50")
                line(f"alltoallv {size >> 10} KiB, 2 ranks: best plan / socket floor <= 1.3",
                     plans[best] / sock if best and sock else None, lambda r: r <= 1.3,
                     f"{plans[best]:.1f} vs {sock:.1f} us, {best}" if best and sock else "")
    bandwidth_floor(floor)
    memory()
    models()
    return 0


def bandwidth_floor(floor):
    """1 MiB put bandwidth across the nodes (the net-wide jobs of bench.sh) against the
    floor of one loopback TCP stream (socket-floor --stream 1M: 64 blocks one way, then a
    one-byte answer, both ends spinning): onesided and raw libfabric (medians over the jobs)
    and each MPI's network path, as fractions of the floor. Reported: the floor runs in
    another minute of the run, and this machine's phases move both."""
    import statistics
    sock = cell(floor, bench="socket-floor", bytes=1 << 20, metric="stream-bandwidth")
    if sock is None:
        line("1 MiB put bandwidth / socket stream floor", None, None, "")
        return
    ours = {"onesided": [], "ofi-raw": []}
    theirs = []
    for job, label in [("mpich", "MPICH {v} ucx"), ("openmpi", "OMPI {v} tcp"),
                       ("mpich5-ofi", "MPICH {v} ofi"), ("mpich5-ucx", "MPICH {v} ucx")]:
        for r in load(f"net-wide-{job}.json"):
            if r.get("bench") != "put-bw" or r.get("metric") != "bandwidth" \
                    or r.get("bytes") != 1 << 20:
                continue
            if r["impl"] in ours:
                ours[r["impl"]].append(r["value"])
            else:
                theirs.append((label.format(v=r.get("version", "?")), r["value"]))
    rows = [(who, statistics.median(v)) for who, v in ours.items() if v] + theirs
    for who, v in rows:
        line(f"1 MiB put bandwidth: {who} / socket stream floor", v / sock, None,
             f"{v:.0f} vs {sock:.0f} MB/s")


def memory():
    """Seed 003's scale of memory: what one more allocate window costs a process (its
    segment pages plus the heap it keeps), flat within 10% from 2 to 64 ranks on one node
    and from 8 to 64 on 8; resident memory and the once-per-process costs beside."""
    print()
    print("Memory per allocate window and process (KiB; win-create, increments over 64 windows)")
    print(f"{'nodes':>5} {'ranks':>5} {'window':>7} {'shared':>7} {'heap':>6} {'resident':>8} "
          f"{'once':>6}")
    for nodes, jobs, counts in [(1, ["net-memory1.json"], [2, 8, 32, 64]),
                                (8, [f"net-memory8-{n}.json" for n in (8, 32, 64)],
                                 [8, 32, 64])]:
        records = [r for j in jobs for r in load(j) if r.get("impl") == "onesided"]
        totals = []
        for ranks in counts:
            def kib(metric, ranks=ranks):
                return cell(records, bench="win-create", window="allocate", ranks=ranks,
                            metric=metric)
            shm, heap, rss, once = (kib(m) for m in
                                    ("shm_delta", "heap_delta", "rss_delta", "rss_once"))
            if shm is None or heap is None:
                print(f"{nodes:>5} {ranks:>5}  not measured")
                continue
            totals.append(shm + heap)
            print(f"{nodes:>5} {ranks:>5} {shm + heap:7.2f} {shm:7.2f} {heap:6.2f} "
                  f"{rss:8.2f} {once:6.2f}")
        if totals:
            line(f"memory per window on {nodes} node(s), {counts[0]}-{counts[-1]} ranks: "
                 "max / min <= 1.1", max(totals) / min(totals), lambda r: r <= 1.1,
                 f"{min(totals):.2f}-{max(totals):.2f} KiB")


def fit(points):
    """Least squares a, b of y = a*x + b (None with fewer than two distinct x)."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    a = sum((x - mx) * (y - my) for x, y in points) / sxx
    return a, my - a * mx


def models():
    """Seed 003's models across the two virtual nodes, fitted to the sync-latency jobs at
    2, 4 and 8 ranks (report only: beyond 2 ranks this machine times its scheduler)."""
    import math
    fence, pscw = [], []
    for ranks in (2, 4, 8):
        for r in load(f"net-sync-latency{ranks}.json"):
            if r.get("impl") != "onesided":
                continue
            metric = r.get("metric", "")
            # PSCW epochs by neighbour count k are written as metric latency_k<k>.
            if ranks == 8 and r.get("sync") == "pscw" and metric.startswith("latency_k"):
                pscw.append((int(metric[len("latency_k"):]), r["value"]))
            if metric != "latency":
                continue
            # The whole job only: its prefixes of 2 and 4 ranks sit on one node (osrun
            # places consecutive blocks).
            if (r.get("bench") == "sync-latency" and r.get("sync") == "fence"
                    and r.get("ranks") == ranks):
                fence.append((ranks, r["value"]))
    print()
    print("Seed 003's models across two virtual nodes (report only: 2 cores time their scheduler)")
    if fence:
        pts = ", ".join(f"p={p}: {v:.0f} us" for p, v in sorted(fence))
        ab = fit([(math.log2(p), v) for p, v in fence])
        model = f"P(p) = {ab[0]:.1f} us * log2(p) + {ab[1]:.1f} us" if ab else "one point"
        print(f"fence:  {model}  ({pts})")
    else:
        print("fence:  not measured")
    if pscw:
        pts = ", ".join(f"k={k}: {v:.0f} us" for k, v in sorted(pscw))
        ab = fit(pscw)
        model = f"P(k) = {ab[0]:.1f} us * k + {ab[1]:.1f} us" if ab else "one point"
        print(f"PSCW, 8 ranks:  {model}  ({pts})")
    else:
        print("PSCW:   not measured")


if __name__ == "__main__":
    sys.exit(main())
