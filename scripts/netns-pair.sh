#!/usr/bin/env bash
# Two hosts on this machine for tests of what crosses a network: two network namespaces
# joined by a veth pair, addresses PREFIX.1 and PREFIX.2 on a /24 that is blackholed in the
# root namespace meanwhile (a packet that leaks out of the pair is dropped, not routed).
# One place for what scripts/slurm.sh, osrun's tests/netns.rs and onesided's tests/pmi.rs
# set up (root only).
#
#   bash scripts/netns-pair.sh up NS_A NS_B VETH_A VETH_B PREFIX   # e.g. ... 10.231.7
#   bash scripts/netns-pair.sh down NS_A NS_B PREFIX               # also after a failed up
#   bash scripts/netns-pair.sh run NS COMMAND...                   # COMMAND on host NS
#
# `run` gives the command a /dev/shm of the host's own (a private mount namespace with a
# fresh tmpfs), as a separate machine has: onesided's node segments live there.
set -euo pipefail

case "${1:-}" in
  up)
    [[ $# -eq 6 ]] || { echo "usage: $0 up NS_A NS_B VETH_A VETH_B PREFIX" >&2; exit 2; }
    ns=("$2" "$3") veth=("$4" "$5") prefix=$6
    ip route add blackhole "$prefix.0/24"
    ip netns add "${ns[0]}"
    ip netns add "${ns[1]}"
    ip link add "${veth[0]}" type veth peer name "${veth[1]}"
    for k in 0 1; do
      ip link set "${veth[$k]}" netns "${ns[$k]}"
      ip -n "${ns[$k]}" addr add "$prefix.$((k + 1))/24" dev "${veth[$k]}"
      ip -n "${ns[$k]}" link set "${veth[$k]}" up
      ip -n "${ns[$k]}" link set lo up
    done
    ;;
  down)
    [[ $# -eq 4 ]] || { echo "usage: $0 down NS_A NS_B PREFIX" >&2; exit 2; }
    # The veth pair goes with its namespaces.
    ip netns del "$2" 2>/dev/null || true
    ip netns del "$3" 2>/dev/null || true
    ip route del blackhole "$4.0/24" 2>/dev/null || true
    ;;
  run)
    [[ $# -ge 3 ]] || { echo "usage: $0 run NS COMMAND..." >&2; exit 2; }
    ns=$2
    shift 2
    exec ip netns exec "$ns" unshare -m --propagation private \
      sh -c 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"' sh "$@"
    ;;
  *)
    echo "usage: $0 up|down|run ..." >&2
    exit 2
    ;;
esac
