#!/usr/bin/env bash
# Instructions on the critical path of an 8-byte put followed by a flush on an allocate
# window, counted by callgrind (repeatable on a noisy machine, unlike timings), next to
# foMPI's published numbers ([Gerstenberger13] §2.3-2.4: put 173, flush 78); and of the 8-byte
# atomics fetch_and_op(sum), compare_and_swap and accumulate(sum); and, for the record, of
# the uncontended synchronizations (shared and exclusive lock + unlock — the exclusive pair
# before and after the window's first lock_all, which makes exclusive locks join the
# exclusive class —, lock_all + unlock_all, a PSCW epoch, a fence).
#
# Rank 0 of `examples/putflush` runs four loops of ITERS iterations under callgrind; the
# inclusive instruction count of each loop function divided by ITERS, minus the empty
# loop's own cost, is the cost of one call. With --check, fail when put + flush costs more
# than 30 instructions (the budget of the blocking fast path next to the nonblocking engine;
# foMPI's is 251) or an 8-byte atomic is more than one CPU atomic.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "instr-count: needs valgrind (apt-get install -y valgrind)" >&2; exit 1; }
cargo build --release -q -p osrun --bins
cargo build --release -q -p onesided --example putflush
out=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$out"' EXIT
[ -n "${KEEP:-}" ] && echo "instr-count: keeping $out" >&2
target/release/osrun -n 2 --timeout 600 sh -c '
  if [ "$ONESIDED_RANK" = 0 ]; then
    exec valgrind --tool=callgrind --callgrind-out-file='"$out"'/callgrind.out target/release/examples/putflush
  else
    exec target/release/examples/putflush
  fi' >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
iters=$(sed -n 's/^putflush: \([0-9]*\) iterations.*/\1/p' "$out/log")
pscw_iters=$(sed -n 's/^putflush: .* \([0-9]*\) PSCW epochs.*/\1/p' "$out/log")
callgrind_annotate --inclusive=yes --threshold=100 "$out/callgrind.out" 2>/dev/null >"$out/annotate"
count() { grep -E "putflush.rs:onesided_bench_$1 \[" "$out/annotate" | sed -n 1p | awk '{gsub(",", "", $1); print $1}'; }
empty=$(count empty) pf=$(count put_flush) put=$(count put) flush=$(count flush)
fop=$(count fetch_and_op) cas=$(count compare_and_swap) acc=$(count accumulate)
lu=$(count lock_unlock) lux=$(count lock_unlock_exclusive) lau=$(count lock_all_unlock_all) pscw=$(count pscw) fence=$(count fence)
luc=$(count lock_unlock_classed)
per() { awk -v n="$1" -v e="$empty" -v i="$iters" 'BEGIN { printf "%.1f", (n - e) / i }'; }
overhead=$(awk -v e="$empty" -v i="$iters" 'BEGIN { printf "%.1f", e / i }')
echo "valgrind --tool=callgrind, $iters iterations per loop, loop overhead ($overhead/iteration) subtracted"
printf '%-24s %12s %12s\n' "critical path" "onesided" "foMPI"
printf '%-24s %12s %12s\n' "put (8 bytes)" "$(per "$put")" 173
printf '%-24s %12s %12s\n' "flush" "$(per "$flush")" 78
printf '%-24s %12s %12s\n' "put + flush" "$(per "$pf")" 251
printf '%-24s %12s %12s\n' "fetch_and_op (sum)" "$(per "$fop")" "-"
printf '%-24s %12s %12s\n' "compare_and_swap" "$(per "$cas")" "-"
printf '%-24s %12s %12s\n' "accumulate (sum, 1 elt)" "$(per "$acc")" "-"
printf '%-24s %12s %12s\n' "lock + unlock (shared)" "$(per "$lu")" "-"
printf '%-24s %12s %12s\n' "lock + unlock (exclusive)" "$(per "$lux")" "-"
printf '%-24s %12s %12s\n' "  after a lock_all" "$(per "$luc")" "-"
printf '%-24s %12s %12s\n' "lock_all + unlock_all" "$(per "$lau")" "-"
printf '%-24s %12s %12s\n' "PSCW epoch (4 calls)" "$(awk -v n="$pscw" -v i="$pscw_iters" 'BEGIN { printf "%.1f", n / i }')" "-"
printf '%-24s %12s %12s\n' "fence (2 ranks)" "$(awk -v n="$fence" -v i="$pscw_iters" 'BEGIN { printf "%.1f", n / i }')" "-"
# Each atomic's fast path must be a single CPU atomic: count the locked instructions in the
# body of its loop function (slow paths are separate functions, reached by a call).
echo
echo "locked instructions in each loop (the whole fast path of the call):"
bad=0
for f in fetch_and_op compare_and_swap accumulate; do
  body=$(objdump -d --no-show-raw-insn -C target/release/examples/putflush | awk "/<onesided_bench_$f>:/,/^\$/")
  # `lock` prefixes, and xchg with a memory operand (implicitly locked; `xchg %ax,%ax` is
  # a two-byte nop used as padding).
  pattern='lock |xchg[a-z]* .*\('
  locked=$(printf '%s\n' "$body" | grep -E "$pattern" | sed -E 's/^ *[0-9a-f]+:\s*//' | paste -sd';')
  n=$(printf '%s\n' "$body" | grep -cE "$pattern" || true)
  printf '  %-20s %s  (%s)\n' "$f" "$n" "$locked"
  [ "$n" = 1 ] || bad=1
done
if [ "${1:-}" = "--check" ]; then
  [ "$bad" = 0 ] || { echo "instr-count: an 8-byte atomic is not a single CPU atomic" >&2; exit 1; }
  awk -v x="$(per "$pf")" 'BEGIN { exit !(x <= 30) }' \
    || { echo "instr-count: put + flush costs more than 30 instructions" >&2; exit 1; }
fi
