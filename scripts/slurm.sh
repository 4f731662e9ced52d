#!/usr/bin/env bash
# Slurm on this machine, for the `pmi` bootstrap's tests under `srun --mpi=pmi2` and
# `--mpi=pmix` (Slurm's PMI-1 and PMIx servers): installs
# slurm-wlm and munge (apt) when missing, writes a one-node configuration under
# target/slurm (this host, its cores, oversubscription allowed), starts munged, slurmctld
# and slurmd, and stops them again. Everything lives under target/slurm and the daemons'
# pid files there: a killed run's daemons are stopped by the next one.
#
#   bash scripts/slurm.sh test     # start, run the checks below, stop (CI)
#   bash scripts/slurm.sh start    # then: SLURM_CONF=target/slurm/slurm.conf srun -O -n 4 --mpi=pmi2 ...
#   bash scripts/slurm.sh start-two   # and the two hosts below (target/slurm/two/slurm.conf)
#   bash scripts/slurm.sh stop        # both
#
# The checks, each under `--mpi=pmi2` and `--mpi=pmix`: `srun -n 4 target/release/examples/ring`
# prints "ring of 4 ranks" (a default build, no MPI library), and the tests of
# onesided/tests/pmi.rs run under `srun -O -K` (one job of all ranks, a rank that panics ends the job within
# 20 s and leaves nothing in /dev/shm, a PMI socket that cannot be joined is an error).
# Then the same on two hosts made of namespaces (below): `srun -N 2 -n 4` ring with its data
# across the veth (both servers), osbench's latency cells on every window flavor, an MPICH C program
# (onesided-mpi/tests/c/across.c) under the preload with its windows onesided's across the
# hosts (progress thread `block`, then none), the tests again (with a peer's clean early
# exit, a collective deadlock and a SIGKILLed rank seen across the hosts), the scenarios of
# onesided/tests/across_nodes.rs (ONESIDED_TEST_LAUNCHER), and both hosts'
# /dev/shm empty afterwards. Each host has half of this machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$PWD/target/slurm
export SLURM_CONF=$dir/slurm.conf

stop() {
  for d in slurmd slurmctld; do
    if [[ -f $dir/$d.pid ]]; then
      kill "$(cat "$dir/$d.pid")" 2>/dev/null || true
      rm -f "$dir/$d.pid"
    fi
  done
  if [[ -f $dir/munged.pid ]]; then
    kill "$(cat "$dir/munged.pid")" 2>/dev/null || true
    rm -f "$dir/munged.pid"
  fi
  # Give them a moment to let go of their ports.
  sleep 1
}

start() {
  local need=()
  # libpmix-dev: Slurm's pmix plugin loads the unversioned libpmix.so.
  for pkg in slurm-wlm munge libpmix-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep 'install ok installed' >/dev/null || need+=("$pkg")
  done
  if ((${#need[@]})); then
    apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  stop
  # Daemons of another checkout's run (its pid files elsewhere) hold the ports: say whose,
  # rather than a node that never comes up.
  local held
  held=$(ss -Hltnp '( sport = :16817 or sport = :16818 )' 2>/dev/null || true)
  if [[ -n $held ]]; then
    echo "slurm.sh: Slurm's ports 16817/16818 are taken (another run's daemons?):" >&2
    echo "$held" >&2
    echo "slurm.sh: stop them (bash scripts/slurm.sh stop in their checkout, or pkill slurmctld slurmd)" >&2
    return 1
  fi
  rm -rf "$dir"
  mkdir -p "$dir"/{ctld,d,munge}
  # munge: a key of this run, its socket and pid file under target/slurm.
  dd if=/dev/urandom bs=1 count=1024 of="$dir/munge/munge.key" 2>/dev/null
  chown -R munge:munge "$dir/munge"
  chmod 755 "$dir/munge"
  chmod 400 "$dir/munge/munge.key"
  local sock=$dir/munge/munge.socket
  su -s /bin/sh munge -c "/usr/sbin/munged --key-file=$dir/munge/munge.key \
    --socket=$sock --pid-file=$dir/munge/munged.pid --log-file=$dir/munge/munged.log \
    --seed-file=$dir/munge/munged.seed"
  cp "$dir/munge/munged.pid" "$dir/munged.pid"
  local host cpus
  host=$(hostname)
  cpus=$(nproc)
  cat >"$SLURM_CONF" <<CONF
ClusterName=onesided
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/d
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ReturnToService=2
MpiDefault=none
KillOnBadExit=1
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:16
CONF
  slurmctld
  slurmd
  # Up when the node is idle.
  for _ in $(seq 1 50); do
    sinfo -h -o %T 2>/dev/null | grep idle >/dev/null && return 0
    sleep 0.2
  done
  echo "slurm.sh: the node never came up" >&2
  tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2
  return 1
}

# Two hosts: network namespaces joined by a veth pair (scripts/netns-pair.sh; 10.231.6.0/24,
# blackholed in the root namespace meanwhile), one slurmd each with a /dev/shm and process
# ids of its own (nsenter keeps the host's cgroup mounts, which slurmd needs; `ip netns exec`
# would remount /sys), the controller in the first. A second cluster under target/slurm/two.
two_ns=(onesided-slurm-a onesided-slurm-b)
two_veth=(os-slurm-a os-slurm-b)
two_dir=$dir/two

two_hosts_down() {
  local pidfile pids=()
  # node*.pid: each host's `unshare`, whose child is its slurmd (it ends with it).
  for pidfile in "$two_dir"/node1.pid "$two_dir"/node2.pid "$two_dir"/slurmctld.pid; do
    if [[ -f $pidfile ]]; then
      pids+=("$(cat "$pidfile")")
      pkill -TERM -P "$(cat "$pidfile")" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
  if ((${#pids[@]})); then
    kill "${pids[@]}" 2>/dev/null || true
    # The daemons take a moment to shut down; then the namespaces go.
    for _ in $(seq 1 50); do
      kill -0 "${pids[@]}" 2>/dev/null || break
      sleep 0.2
    done
    for pid in "${pids[@]}"; do
      pkill -KILL -P "$pid" 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true
    done
  fi
  bash scripts/netns-pair.sh down "${two_ns[@]}" 10.231.6
  rmdir /run/onesided-slurm-checkout 2>/dev/null || true
}

two_hosts_up() {
  two_hosts_down
  mkdir -p "$two_dir"/{ctld,dnode1,dnode2}
  bash scripts/netns-pair.sh up "${two_ns[@]}" "${two_veth[@]}" 10.231.6
  sed -e "s|^SlurmctldHost=.*|SlurmctldHost=$(hostname)(10.231.6.1)|" \
      -e "s|^ClusterName=.*|ClusterName=onesided2|" \
      -e "s|^StateSaveLocation=.*|StateSaveLocation=$two_dir/ctld|" \
      -e "s|^SlurmdSpoolDir=.*|SlurmdSpoolDir=$two_dir/d%n|" \
      -e "s|^SlurmctldPidFile=.*|SlurmctldPidFile=$two_dir/slurmctld.pid|" \
      -e "s|^SlurmdPidFile=.*|SlurmdPidFile=$two_dir/slurmd-%n.pid|" \
      -e "s|^SlurmctldLogFile=.*|SlurmctldLogFile=$two_dir/slurmctld.log|" \
      -e "s|^SlurmdLogFile=.*|SlurmdLogFile=$two_dir/slurmd-%n.log|" \
      -e "/^NodeName=/d" -e "/^PartitionName=/d" "$SLURM_CONF" >"$two_dir/slurm.conf"
  # Each host gets cores of its own (half of the CPUs this process may use, pinned below):
  # hosts that both claimed every core made their ranks poll as if each had one, four
  # ranks on two cores, and operations across the veth then waited seconds (a 1 s test
  # took 11–107 s; with a core per host, 1–2 s in 12 runs of 12).
  local part per
  local -a parts two_cpus cpus=()
  IFS=, read -ra parts < <(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  for part in "${parts[@]}"; do
    mapfile -t -O "${#cpus[@]}" cpus < <(seq "${part%-*}" "${part#*-}")
  done
  per=$(( ${#cpus[@]} >= 2 ? ${#cpus[@]} / 2 : 1 ))
  two_cpus=("$(IFS=,; echo "${cpus[*]:0:per}")" "$(IFS=,; echo "${cpus[*]: -per}")")
  cat >>"$two_dir/slurm.conf" <<CONF
NodeName=node1 NodeAddr=10.231.6.1 CPUs=$per State=UNKNOWN
NodeName=node2 NodeAddr=10.231.6.2 CPUs=$per State=UNKNOWN
PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:16
CONF
  SLURM_CONF=$two_dir/slurm.conf nsenter --net="/var/run/netns/${two_ns[0]}" slurmctld
  # Each host has its own host name (a UTS namespace), /dev/shm and /tmp (Slurm's PMIx
  # servers of a step, one per host, each create /tmp/spmix_appdir_*: in a shared /tmp the
  # second failed), its own PID namespace too (cross-memory attach cannot reach the other
  # host's processes), and its cores (taskset: its tasks inherit slurmd's affinity under
  # task/none). A checkout under /tmp stays in view through the host's new /tmp (held by a
  # bind mount: slurm.conf, munge's socket and the binaries the steps run are in it; a
  # clean clone there saw none of them, and the hosts never came up). In the foreground
  # (-D) behind `&`: $! is `unshare`, in the host's mount namespace, which takes slurmd
  # down with it (--kill-child).
  local host_setup='
    repo=$1 k=$2 hold=/run/onesided-slurm-checkout
    mount -t tmpfs -o mode=1777 tmpfs /dev/shm || exit 1
    case $repo/ in /tmp/*) mkdir -p "$hold" && mount --bind "$repo" "$hold" || exit 1 ;; esac
    mount -t tmpfs -o mode=1777 tmpfs /tmp || exit 1
    case $repo/ in /tmp/*) mkdir -p "$repo" && mount --bind "$hold" "$repo" || exit 1 ;; esac
    hostname "node$k" && exec slurmd -D -N "node$k"'
  for k in 1 2; do
    SLURM_CONF=$two_dir/slurm.conf nsenter --net="/var/run/netns/${two_ns[$((k - 1))]}" \
      taskset -c "${two_cpus[$((k - 1))]}" \
      unshare -m -u -p --fork --kill-child --mount-proc --propagation private \
      sh -c "$host_setup" host "$(pwd -P)" "$k" >"$two_dir/slurmd-node$k.out" 2>&1 &
    echo $! >"$two_dir/node$k.pid"
  done
  for _ in $(seq 1 50); do
    [[ $(SLURM_CONF=$two_dir/slurm.conf nsenter --net="/var/run/netns/${two_ns[0]}" \
         sinfo -h -o %T 2>/dev/null | grep -c idle) == 1 ]] &&
      [[ $(SLURM_CONF=$two_dir/slurm.conf nsenter --net="/var/run/netns/${two_ns[0]}" \
           sinfo -h -N -o %T 2>/dev/null | grep -c idle) == 2 ]] && return 0
    sleep 0.2
  done
  echo "slurm.sh: the two hosts never came up" >&2
  tail -n 5 "$two_dir"/*.log >&2
  return 1
}

# The onesided names in host k's /dev/shm (k = 1, 2), seen from its slurmd's mounts.
shm_of() {
  local pid
  pid=$(cat "$two_dir/node$1.pid")
  [[ -d /proc/$pid ]] || { echo "slurm.sh: host $1's slurmd is gone" >&2; return 1; }
  nsenter --mount="/proc/$pid/ns/mnt" ls /dev/shm | { grep '^onesided' || true; }
}

two_host_checks() {
  # Windows across hosts need the feature `ofi`.
  cargo build --release -q -p onesided --features ofi --examples
  cargo build --release -q -p osbench --features ofi
  two_hosts_up
  local run=(env SLURM_CONF="$two_dir/slurm.conf" nsenter --net="/var/run/netns/${two_ns[0]}")
  local rx0 rx1 out
  rx_of() { ip netns exec "${two_ns[1]}" cat "/sys/class/net/${two_veth[1]}/statistics/rx_bytes"; }
  rx0=$(rx_of)
  out=$(timeout 120 "${run[@]}" srun -N 2 -n 4 -O --mpi=pmi2 target/release/examples/ring)
  echo "$out"
  rx1=$(rx_of)
  grep -q "ring of 4 ranks" <<<"$out" || { echo "slurm.sh: two hosts: not one job of 4 ranks" >&2; return 1; }
  echo "slurm.sh: two hosts: host 2 received $((rx1 - rx0)) bytes on the veth"
  ((rx1 - rx0 > 4096)) || { echo "slurm.sh: two hosts: nothing crossed the veth" >&2; return 1; }
  # The same job started by Slurm's PMIx servers (one per host; onesided loads libpmix).
  rx0=$(rx_of)
  out=$(timeout 120 "${run[@]}" srun -N 2 -n 4 -O --mpi=pmix target/release/examples/ring)
  rx1=$(rx_of)
  grep -q "ring of 4 ranks" <<<"$out" || { echo "slurm.sh: two hosts, pmix: not one job of 4 ranks" >&2; return 1; }
  echo "slurm.sh: two hosts, --mpi=pmix: host 2 received $((rx1 - rx0)) bytes on the veth"
  ((rx1 - rx0 > 4096)) || { echo "slurm.sh: two hosts, pmix: nothing crossed the veth" >&2; return 1; }
  # osbench's 8-byte and 64 KiB cells across the hosts, every window flavor (a default
  # build: onesided's side only), its data over the veth.
  rx0=$(rx_of)
  out=$(timeout 300 "${run[@]}" srun -N 2 -n 2 -O -K --mpi=pmi2 target/release/osbench \
    put-latency get-latency fop-latency --window allocate,create,dynamic --sizes 8,65536 \
    --time-ms 20)
  rx1=$(rx_of)
  echo "$out" | grep -E '^(allocate|create|dynamic) .* latency' | sed -n '1,12p'
  for w in allocate create dynamic; do
    grep -qE "^$w .* 64K .* latency" <<<"$out" \
      || { echo "slurm.sh: two hosts: osbench measured no $w window" >&2; return 1; }
  done
  echo "slurm.sh: two hosts: osbench moved $((rx1 - rx0)) bytes over the veth"
  ((rx1 - rx0 > 1000000)) || { echo "slurm.sh: two hosts: osbench's data did not cross" >&2; return 1; }
  # A C program under the preload across the hosts: MPICH 4.0.2's across.c, its windows
  # onesided's through libfabric over the veth while the target waits in MPICH's blocking
  # calls; once more with no progress thread, where only those waits can serve.
  cargo build --release -q -p onesided-mpi --features mpich,ofi
  mkdir -p target/slurm-c
  mpicc.mpich -O2 -Wall -Werror -Ionesided-mpi/include -o target/slurm-c/across \
    onesided-mpi/tests/c/across.c
  local progress
  for progress in block none; do
    rx0=$(rx_of)
    # (MPICH's UCX looks for interfaces in /sys, which the namespaces share with the host:
    # it saw only the loopback and its MPI_Init failed. Each task gets a sysfs of its own
    # network namespace, mounted in a mount namespace of its own.)
    out=$(timeout 120 "${run[@]}" srun -N 2 -n 2 -O -K --mpi=pmi2 unshare --mount sh -c \
      'mount -t sysfs sysfs /sys && exec "$@"' task env ONESIDED_PROGRESS=$progress UCX_TLS=tcp,self \
      LD_PRELOAD="$PWD/target/release/libonesided_mpi.so" target/slurm-c/across \
      2>&1) || true
    rx1=$(rx_of)
    grep -q "across: ok" <<<"$out" || {
      echo "$out" | tail -30
      echo "slurm.sh: two hosts: across.c under the preload ($progress) failed" >&2
      return 1
    }
    echo "slurm.sh: two hosts: across.c under the preload, progress $progress: $((rx1 - rx0)) bytes over the veth"
    ((rx1 - rx0 > 1000000)) || { echo "slurm.sh: two hosts: across.c's data did not cross" >&2; return 1; }
  done
  # The cross-node suite's scenarios (onesided/tests/across_nodes.rs), each test's ranks
  # started by srun over the two hosts instead of osrun's virtual nodes — but two that
  # stop the peer's process with a signal (its PID is another host's) and have osrun ask
  # the waits for their reports.
  ONESIDED_TEST_LAUNCHER="${run[*]} srun -N 2 -O -K --mpi=pmi2 --label" \
    timeout 900 cargo test -q -p onesided --features ofi --test across_nodes -- \
    --skip a_network_wait_that_lasts_reports_itself --skip a_timed_out_job_hears_from_its_network_waits
  local mpi
  for mpi in pmi2 pmix; do
    ONESIDED_PMI_HOSTS=2 ONESIDED_PMI_LAUNCHER="${run[*]} srun -N 2 -O -K --mpi=$mpi" \
      timeout 300 cargo test -q -p onesided --features ofi --test pmi -- \
      hydra_starts_one_job_of_all_its_ranks a_rank_that_panics_ends_the_hydra_job \
      waits_for_an_ended_or_deadlocked_peer_on_another_pmi_node_fail \
      a_sigkilled_rank_ends_the_pmi_job_within_5_s
  done
  # The reapers poll every 0.2 s.
  sleep 1
  local left
  left="$(shm_of 1)$(shm_of 2)" || return 1
  [[ -z $left ]] || { echo "slurm.sh: two hosts: left in /dev/shm: $left" >&2; return 1; }
}

checks() {
  cargo build --release -q -p onesided --examples
  local out
  out=$(timeout 120 srun -O -n 4 --mpi=pmi2 target/release/examples/ring)
  echo "$out"
  grep -q "ring of 4 ranks" <<<"$out" || { echo "slurm.sh: srun ring: not one job of 4 ranks" >&2; return 1; }
  out=$(timeout 120 srun -O -n 4 --mpi=pmix target/release/examples/ring)
  grep -q "ring of 4 ranks" <<<"$out" || { echo "slurm.sh: srun --mpi=pmix ring: not one job of 4 ranks" >&2; return 1; }
  local mpi
  for mpi in pmi2 pmix; do
    ONESIDED_PMI_LAUNCHER="srun -O -K --mpi=$mpi" timeout 300 cargo test -q -p onesided --test pmi
    # A failing rank ends the step through PMI's abort also where the site does not kill
    # on a bad exit (this cluster's KillOnBadExit=1 turned off for the step).
    ONESIDED_PMI_LAUNCHER="srun -O --kill-on-bad-exit=0 --mpi=$mpi" timeout 300 \
      cargo test -q -p onesided --test pmi a_rank_that_panics_ends_the_hydra_job
  done
}

case ${1:-test} in
  start) start ;;
  # Both clusters up, for running a check by hand: see two_host_checks for the `srun` line.
  start-two) start && two_hosts_up ;;
  stop) two_hosts_down; stop ;;
  test)
    start
    trap 'two_hosts_down; stop' EXIT
    checks
    echo "slurm.sh: srun --mpi=pmi2 and --mpi=pmix, one host: ok"
    two_host_checks
    echo "slurm.sh: srun --mpi=pmi2 and --mpi=pmix, two hosts: ok"
    ;;
  *) echo "usage: slurm.sh [test|start|start-two|stop]" >&2; exit 2 ;;
esac
