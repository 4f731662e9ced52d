#!/usr/bin/env bash
# Instructions on the critical path of an 8-byte put followed by a flush on an allocate
# window, counted by callgrind (repeatable on a noisy machine, unlike timings), next to
# foMPI's published numbers (seed 003 §2.3-2.4: put 173, flush 78).
#
# Rank 0 of `examples/putflush` runs four loops of ITERS iterations under callgrind; the
# inclusive instruction count of each loop function divided by ITERS, minus the empty
# loop's own cost, is the cost of one call. With --check, fail unless put + flush costs fewer
# instructions than foMPI's.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "instr-count: needs valgrind (apt-get install -y valgrind)" >&2; exit 1; }
cargo build --release -q -p osrun --bins
cargo build --release -q -p onesided --example putflush
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
target/release/osrun -n 2 --timeout 600 sh -c '
  if [ "$ONESIDED_RANK" = 0 ]; then
    exec valgrind --tool=callgrind --callgrind-out-file='"$out"'/callgrind.out target/release/examples/putflush
  else
    exec target/release/examples/putflush
  fi' >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
iters=$(sed -n 's/^putflush: \([0-9]*\) iterations.*/\1/p' "$out/log")
callgrind_annotate --inclusive=yes "$out/callgrind.out" >"$out/annotate"
count() { grep -E "putflush.rs:onesided_bench_$1 \[" "$out/annotate" | head -1 | awk '{gsub(",", "", $1); print $1}'; }
empty=$(count empty) pf=$(count put_flush) put=$(count put) flush=$(count flush)
per() { awk -v n="$1" -v e="$empty" -v i="$iters" 'BEGIN { printf "%.1f", (n - e) / i }'; }
overhead=$(awk -v e="$empty" -v i="$iters" 'BEGIN { printf "%.1f", e / i }')
echo "valgrind --tool=callgrind, $iters iterations per loop, loop overhead ($overhead/iteration) subtracted"
printf '%-24s %12s %12s\n' "critical path" "onesided" "foMPI"
printf '%-24s %12s %12s\n' "put (8 bytes)" "$(per "$put")" 173
printf '%-24s %12s %12s\n' "flush" "$(per "$flush")" 78
printf '%-24s %12s %12s\n' "put + flush" "$(per "$pf")" 251
if [ "${1:-}" = "--check" ]; then
  awk -v x="$(per "$pf")" 'BEGIN { exit !(x < 251) }' \
    || { echo "instr-count: put + flush is not below foMPI's 251 instructions" >&2; exit 1; }
fi
