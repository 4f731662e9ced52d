#!/usr/bin/env bash
# The onesided tour: builds everything and runs the examples with the embedded launcher
# (no MPI needed). Every example checks its own results.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bins --examples
osrun=target/release/osrun
echo
echo "== first: the README's first program (2 ranks)"
$osrun -n 2 --timeout 120 target/release/examples/first
echo
echo "== ring: a token travels around 4 ranks with fence, then PSCW, then locks + flush"
$osrun -n 4 --timeout 120 target/release/examples/ring
echo
echo "== halo: 1-D heat diffusion, PSCW halo exchange, compared with a serial run"
$osrun -n 4 --timeout 120 target/release/examples/halo 20000 200
echo
echo "== putflush: 3 x 100000 put/flush loops, data checked (scripts/instr-count.sh counts them)"
$osrun -n 2 --timeout 120 target/release/examples/putflush
echo
echo "== atomics: 8-byte fetch_and_op, compare_and_swap, accumulate next to raw CPU atomics"
$osrun -n 2 --timeout 120 target/release/examples/atomics
echo
echo "== dht: distributed hashtable (CAS + fetch_and_op), every key verified, 1..2 inserters"
$osrun -n 2 --timeout 300 target/release/examples/dht
echo
echo "== lu: LU decomposition, pivot rows broadcast with PSCW, blocking vs nonblocking epochs,"
echo "   checked against a serial LU (2 and 4 ranks)"
$osrun -n 2 --timeout 300 target/release/examples/lu 512
$osrun -n 4 --timeout 300 target/release/examples/lu 512
echo
echo "== spmv: sparse matrix-vector products, the halo exchanged by a persistent alltoallv"
echo "   plan (seed 001), checked against a serial computation (4 ranks, each plan variant)"
for variant in fence hierarchical lock auto; do
  $osrun -n 4 --timeout 300 target/release/examples/spmv 4000 50 "$variant"
done
echo
echo "== the guides' programs: nonblocking synchronization and reorder keys (seed 004),"
echo "   thread scope, order, notifications, memory handles (seed 000), alltoallv plans (seed 001)"
$osrun -n 2 --timeout 120 target/release/examples/nonblocking
$osrun -n 2 --timeout 120 target/release/examples/extensions
$osrun -n 4 --timeout 300 target/release/examples/alltoallv 4096 50
echo
echo "== tour: latency of every window kind, cost of every synchronization (2 ranks)"
$osrun -n 2 --timeout 300 target/release/examples/tour
echo
echo "== osbench: put and fetch_and_op latency, synchronization calls (2 ranks, onesided only;"
echo "   scripts/bench.sh runs the whole suite side by side with MPICH and Open MPI)"
$osrun -n 2 --timeout 300 target/release/osbench put-latency fop-latency sync-latency \
  --window allocate,create,dynamic --sync flush,fence --sizes 8,4K,1M --time-ms 10
echo
echo "== osbench sync-patterns: seed 004's inefficiency patterns and reorder scenarios,"
echo "   blocking vs nonblocking epochs (4 ranks)"
$osrun -n 4 --timeout 300 target/release/osbench sync-patterns
