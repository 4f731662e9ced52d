#!/usr/bin/env python3
"""The seeds' acceptance ratios across two virtual nodes, from the records bench.sh --net
writes (results/net-seeds.json, net-sync-patterns.json, net-alltoallv-{mpich,openmpi}.json).
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
        print(f"{claim:<62} {'-':>7}  not measured")
        return
    verdict = "holds" if holds(ratio) else "does not hold"
    print(f"{claim:<62} {ratio:7.2f}  {verdict} ({detail})")


def main():
    seeds = load("net-seeds.json")
    patterns = load("net-sync-patterns.json")
    print("Seeds across two virtual nodes (tcp;ofi_rxm on the loopback), one bench.sh run")
    print(f"{'claim':<62} {'ratio':>7}")

    def tx(metric):
        return cell(seeds, bench="transactions", sync="hotspot", ranks=2, metric=metric)

    b, a = tx("blocking"), tx("nonblocking-aaar")
    line("transactions hot spot, 2 ranks: A_A_A_R / blocking >= 1.2",
         a / b if a and b else None, lambda r: r >= 1.2, f"{a:.0f} vs {b:.0f} tx/s" if a and b else "")

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

    for host, name in [("openmpi", "Open MPI"), ("mpich", "MPICH")]:
        recs = load(f"net-alltoallv-{host}.json")
        need = 1.5 if host == "openmpi" else 1.0
        for size in [32 << 10, 256 << 10]:
            plans = [r["value"] for r in recs
                     if r.get("impl") == "onesided" and r.get("bytes") == size
                     and r.get("metric", "").startswith("persistent-")
                     and r.get("pattern") == "uniform"]
            theirs = cell(recs, impl=host, bytes=size, metric="two-sided", pattern="uniform")
            best = min(plans) if plans else None
            line(f"alltoallv {size >> 10} KiB, 2 ranks: {name} / best plan >= {need}",
                 theirs / best if best and theirs else None, lambda r, n=need: r >= n,
                 f"{theirs:.1f} vs {best:.1f} us" if best and theirs else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
