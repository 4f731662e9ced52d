#!/usr/bin/env bash
# OSU 7.4 one-sided benchmarks natively (MPICH 4.0.2) and under the onesided preload, side by
# side in one run: OSU's unchanged sources built a second time with 4 decimals
# (-DFLOAT_PRECISION=4; its build.sh prints 2), every latency and bandwidth test on every
# window kind and synchronization it accepts, native and preload alternating, ROUNDS rounds
# (default 5), medians. Writes results/cabi-bench.txt and prints the acceptance checks:
#   - 8-byte put and get latency, allocate windows with flush (-i 100000): preload >= 10x
#     lower than native;
#   - no latency combination slower than 1.2 x native + 0.05 us, no bandwidth combination
#     below native / 1.2 (compared at every message size OSU prints).
#
# Then strided puts with a datatype made per put (onesided-mpi/bench/subarray_put.c: a new
# 2-D subarray of MPI_BYTE per put, rows of 16 B to 64 KiB x 1, 16, 256 rows, at most 4 MiB
# a put, and the same with one reused type), native and preload alternating, ROUNDS
# rounds, medians; writes results/cabi-datatypes.txt and checks: preload <= 1.1 x native at
# every shape.
#
#   bash scripts/cabi-bench.sh            # ~20-40 minutes here
#   bash scripts/cabi-bench.sh datatypes  # only the strided puts (~2 minutes)
#   ROUNDS=1 ITERS=200 bash scripts/cabi-bench.sh   # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
iters=${ITERS:-1000}
bash scripts/cabi.sh build >/dev/null
lib=$PWD/target/release/libonesided_mpi.so
mkdir -p results target

datatypes() {
  local exe=target/subarray_put raw
  mpicc.mpich -O2 -Wall -Werror -o "$exe" onesided-mpi/bench/subarray_put.c
  raw=$(mktemp)
  for ((r = 1; r <= rounds; r++)); do
    echo "strided puts, round $r of $rounds (load $(cut -d' ' -f1-3 /proc/loadavg))"
    for mode in native preload; do
      local pre=()
      [[ $mode == preload ]] && pre=(env LD_PRELOAD="$lib")
      # One job at a time: the two modes never share the machine.
      "${pre[@]}" timeout 300 mpiexec.mpich -n 2 "$exe" 0.2 | sed "s/\$/ $mode/" >> "$raw"
    done
  done
  python3 - "$raw" "$rounds" <<'PY' | tee results/cabi-datatypes.txt
import collections, statistics, sys
raw, rounds = sys.argv[1], int(sys.argv[2])
cells = collections.defaultdict(list)
for line in open(raw):
    rows, row, kind, us, mode = line.split()
    cells[(int(row), int(rows), kind, mode)].append(float(us))
print(f"Strided puts of MPI_BYTE subarrays, MPICH 4.0.2 native vs LD_PRELOAD=libonesided_mpi.so,"
      f" 2 ranks, microseconds per put + flush_local, medians of {rounds} alternating rounds")
print(f"{'row bytes':>9} {'rows':>5} {'type':7} {'native':>10} {'preload':>10} {'preload/native':>15}")
bad = []
for (row, rows, kind) in sorted({k[:3] for k in cells}):
    n = statistics.median(cells[(row, rows, kind, "native")])
    p = statistics.median(cells[(row, rows, kind, "preload")])
    print(f"{row:>9} {rows:>5} {kind:7} {n:>10.3f} {p:>10.3f} {p / n:>15.2f}")
    if p > 1.1 * n:
        bad.append((row, rows, kind, n, p))
print(f"shapes where the preload takes more than 1.1 x native's time: {len(bad)}"
      f" ({'meets' if not bad else 'misses'} <= 1.1 x at every shape)")
for row, rows, kind, n, p in bad:
    print(f"  {row} B x {rows} rows, {kind} type: native {n:.3f} us, preload {p:.3f} us")
PY
  rm -f "$raw"
}
if [[ ${1:-} == datatypes ]]; then
  datatypes
  exit 0
fi
src=third_party/osu-micro-benchmarks-7.4
out=target/osu-mpich-4dp
mkdir -p "$out" results
util=(osu_util.c osu_util_mpi.c osu_util_graph.c osu_util_validation.c osu_util_papi.c)
tests=(put_latency get_latency acc_latency get_acc_latency fop_latency cas_latency put_bw get_bw
       put_bibw)
for t in "${tests[@]}"; do
  mpicc.mpich -O2 -w -I"$src/c/util" -DFIELD_WIDTH=18 -DFLOAT_PRECISION=4 \
    -o "$out/osu_$t" "$src/c/mpi/one-sided/osu_$t.c" "${util[@]/#/$src/c/util/}" -lm
done

raw=$(mktemp)
run() { # run MODE TEST ARGS...: "size value" lines
  local mode=$1 t=$2; shift 2
  local pre=()
  [[ $mode == preload ]] && pre=(env LD_PRELOAD="$lib")
  "${pre[@]}" timeout 300 mpiexec.mpich -n 2 "$out/osu_$t" "$@" 2>/dev/null \
    | awk '/^[0-9]/ {print $1, $2}' || true
}
for ((r = 1; r <= rounds; r++)); do
  echo "round $r of $rounds (load $(cut -d' ' -f1-3 /proc/loadavg))"
  for t in "${tests[@]}"; do
    for w in create allocate dynamic; do
      for s in pscw fence lock flush flush_local lock_all; do
        args=(-w "$w" -s "$s" -m 8:65536 -i "$iters" -x 20)
        # The headline cells, with OSU's default-scale iteration count.
        if [[ $w == allocate && $s == flush && ($t == put_latency || $t == get_latency) ]]; then
          args=(-w "$w" -s "$s" -m 8:8 -i 100000)
        fi
        for mode in native preload; do
          run "$mode" "$t" "${args[@]}" | while read -r size value; do
            echo "$t $w $s $size $mode $value"
          done >> "$raw"
        done
      done
    done
  done
done

python3 - "$raw" "$rounds" <<'PY' | tee results/cabi-bench.txt
import collections, statistics, sys
raw, rounds = sys.argv[1], int(sys.argv[2])
cells = collections.defaultdict(list)
for line in open(raw):
    t, w, s, size, mode, value = line.split()
    cells[(t, w, s, int(size), mode)].append(float(value))
keys = sorted({k[:4] for k in cells})
print(f"OSU 7.4 one-sided, MPICH 4.0.2 native vs LD_PRELOAD=libonesided_mpi.so, 2 ranks, medians of {rounds} alternating rounds")
print(f"{'test':16} {'window':9} {'sync':12} {'bytes':>7} {'native':>12} {'preload':>12} {'native/preload':>15}")
bad, head = [], []
for k in keys:
    n, p = cells.get(k + ("native",)), cells.get(k + ("preload",))
    if not n or not p:
        continue
    n, p = statistics.median(n), statistics.median(p)
    bw = k[0].endswith("_bw") or k[0] == "put_bibw"
    ratio = (p / n if bw else n / p) if min(n, p) > 0 else float("nan")
    print(f"{k[0]:16} {k[1]:9} {k[2]:12} {k[3]:>7} {n:>12.4f} {p:>12.4f} {ratio:>15.2f}")
    if bw and p < n / 1.2:
        bad.append((k, n, p))
    if not bw and p > 1.2 * n + 0.05:
        bad.append((k, n, p))
    if k[1:] == ("allocate", "flush", 8) and k[0] in ("put_latency", "get_latency"):
        head.append((k[0], n, p, n / p))
print()
for t, n, p, r in head:
    print(f"headline {t} 8 B allocate flush: native {n:.4f} us, preload {p:.4f} us: {r:.1f}x lower"
          f" ({'meets' if r >= 10 else 'misses'} >= 10x)")
print(f"combinations slower than 1.2 x native + 0.05 us (latency) or below native / 1.2 (bandwidth): {len(bad)}")
for k, n, p in bad:
    print(f"  {' '.join(map(str, k))}: native {n:.4f}, preload {p:.4f}")
PY
rm -f "$raw"
datatypes
