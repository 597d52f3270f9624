#!/usr/bin/env bash
# The seeded chaos soak (docs/reliability.md): on a control plane of its own (started with
# hack/k8s.sh up on free ports, stopped when the run ends), the operator and the api-manager
# with two replicas each, the StorageOS simulator and a live workload, while a schedule drawn
# from the seed injects overlapping faults. Invariants are checked during and after the run from
# the apiserver's audit log and the simulator's request log; any violation fails the run and
# prints the seed and the history that shows it.
#
#   hack/soak.sh [--minutes N] [--seed S]     (defaults: 3 minutes, seed 1)
#
# The same seed gives the same schedule. Extra arguments after `--` go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }

minutes=3
seed=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --minutes) minutes=${2:-}; shift 2 ;;
    --seed) seed=${2:-}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "hack/soak.sh: unknown argument $1 (see hack/soak.sh --help)" >&2; exit 2 ;;
  esac
done
[[ $minutes =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "hack/soak.sh: --minutes takes a number, e.g. --minutes 30" >&2; exit 2; }
[[ $seed =~ ^[0-9]+$ ]] || { echo "hack/soak.sh: --seed takes a non-negative integer, e.g. --seed 1" >&2; exit 2; }

echo "soak: seed $seed, $minutes minutes"
# The soak starts its own plane: a KUBECONFIG of another plane is never used.
unset KUBECONFIG
SOAK_MINUTES=$minutes SOAK_SEED=$seed exec cargo test --test k8s_soak "$@" -- --nocapture
