#!/usr/bin/env bash
# Slurm on this machine, for the `pmi` bootstrap's tests under `srun --mpi=pmi2`: installs
# slurm-wlm and munge (apt) when missing, writes a one-node configuration under
# target/slurm (this host, its cores, oversubscription allowed), starts munged, slurmctld
# and slurmd, and stops them again. Everything lives under target/slurm and the daemons'
# pid files there: a killed run's daemons are stopped by the next one.
#
#   bash scripts/slurm.sh test     # start, run the checks below, stop (CI)
#   bash scripts/slurm.sh start    # then: SLURM_CONF=target/slurm/slurm.conf srun -O -n 4 --mpi=pmi2 ...
#   bash scripts/slurm.sh stop
#
# The checks: `srun -n 4 --mpi=pmi2 target/release/examples/ring` prints "ring of 4 ranks"
# (a default build, no MPI library), and the tests of onesided/tests/pmi.rs run under
# `srun -O -K --mpi=pmi2` (one job of all ranks, a rank that panics ends the job within
# 20 s and leaves nothing in /dev/shm, a PMI socket that cannot be joined is an error).
# Not yet: several hosts (namespaces), PMIx.
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
  for pkg in slurm-wlm munge; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
  done
  if ((${#need[@]})); then
    apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  stop
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
    sinfo -h -o %T 2>/dev/null | grep -q idle && return 0
    sleep 0.2
  done
  echo "slurm.sh: the node never came up" >&2
  tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2
  return 1
}

checks() {
  cargo build --release -q -p onesided --examples
  local out
  out=$(timeout 120 srun -O -n 4 --mpi=pmi2 target/release/examples/ring)
  echo "$out"
  grep -q "ring of 4 ranks" <<<"$out" || { echo "slurm.sh: srun ring: not one job of 4 ranks" >&2; return 1; }
  ONESIDED_PMI_LAUNCHER="srun -O -K --mpi=pmi2" timeout 300 cargo test -q -p onesided --test pmi
}

case ${1:-test} in
  start) start ;;
  stop) stop ;;
  test)
    start
    trap stop EXIT
    checks
    echo "slurm.sh: srun --mpi=pmi2: ok"
    ;;
  *) echo "usage: slurm.sh [test|start|stop]" >&2; exit 2 ;;
esac
