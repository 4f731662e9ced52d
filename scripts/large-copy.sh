#!/usr/bin/env bash
# The large-copy rule: put and get of 64 KiB-4 MiB on allocate windows (flush
# synchronization), onesided against Open MPI in the same jobs, three jobs; the median of
# the three per size and implementation decides. A size where onesided's median is more than
# 5% slower than Open MPI's fails (exit status 1).
#
#   bash scripts/large-copy.sh                # writes results/large-copy.{txt,json}
#   RUNS=5 bash scripts/large-copy.sh         # more jobs
#
# Expects target/openmpi/release/osbench (scripts/bench.sh builds it).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-3}
bin=target/openmpi/release/osbench
if [[ ! -x $bin ]]; then
  MPICC=mpicc.openmpi CARGO_TARGET_DIR=target/openmpi \
    cargo build --release -p osbench --features mpi
fi
mkdir -p results
jsons=()
for run in $(seq 1 "$runs"); do
  out=results/large-copy-run$run.json
  echo "== large copies, job $run of $runs"
  timeout 600 mpiexec.openmpi --allow-run-as-root --oversubscribe --bind-to none -n 2 \
    "$bin" put-latency get-latency --window allocate --sync flush \
    --sizes 64K,128K,256K,512K,1M,2M,4M --time-ms 100 --json "$out" >/dev/null
  jsons+=("$out")
done

python3 - "${jsons[@]}" <<'EOF' | tee results/large-copy.txt
import json, statistics, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
cells = {}
for records in runs:
    for r in records:
        if r["metric"] != "latency":
            continue
        cells.setdefault((r["bench"], r["bytes"]), {}).setdefault(r["impl"], []).append(r["value"])
print(f"put/get latency on allocate windows, flush, median of {len(runs)} jobs (us)")
print(f"{'bench':<12} {'bytes':>8} {'onesided':>9} {'openmpi':>9} {'ratio':>6}  runs (onesided / openmpi)")
failed = 0
summary = []
for (bench, size), impls in sorted(cells.items()):
    ours, theirs = impls["onesided"], impls["openmpi"]
    mo, mt = statistics.median(ours), statistics.median(theirs)
    ratio = mo / mt
    verdict = "ok" if ratio <= 1.05 else "SLOWER"
    failed += verdict != "ok"
    each = " ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(ours, theirs))
    label = f"{size // 1024}K" if size < 1 << 20 else f"{size >> 20}M"
    print(f"{bench:<12} {label:>8} {mo:>9.2f} {mt:>9.2f} {ratio:>6.2f}  {each}  {verdict}")
    summary.append({"bench": bench, "bytes": size, "onesided": mo, "openmpi": mt,
                    "ratio": ratio, "runs": len(ours)})
json.dump(summary, open("results/large-copy.json", "w"), indent=1)
print("ratio = onesided / Open MPI time (below 1: onesided faster); more than 1.05 fails")
sys.exit(1 if failed else 0)
EOF
