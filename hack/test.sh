#!/usr/bin/env bash
# Every test tier, as CI runs it:
#   1. unit (pure: CRDs, rendering, flag parsing, ...)
#   2. API (the StorageOS client against the in-process simulator)
#   3. integration, against a real local Kubernetes control plane (hack/k8s.sh), including the
#      OLM bundle installed by OLM's own operator (hack/olm.sh)
# The control plane is built on first use (cached under ~/.cache/storageos-operator) and
# started if it is not running; a plane this script started is stopped again at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
# In CI the real-node test (tests/k8s_real_node.rs: the operator and api-manager as real pods,
# the Job symlink refusal, the drain guard) must run: the CI machine can run a real node
# (docs/real-node.md), so a missing host requirement there fails the run instead of skipping.
if [[ ${CI:-} == true ]]; then export STORAGEOS_REQUIRE_REAL_NODE=1; fi
# The test binaries, four control planes and the image builds take several GiB: a full disk
# shows up much later as an etcd or openssl failure, so say it first.
free_kib=$(df -Pk . | awk 'NR == 2 {print $4}')
if ((free_kib < 10 * 1024 * 1024)); then
  echo "warning: $((free_kib / 1024 / 1024)) GiB free here; a run needs about 10 (cargo clean, or remove target/debug/incremental)" >&2
fi

started_plane=0
if ! hack/k8s.sh status >/dev/null 2>&1; then
  hack/k8s.sh up
  started_plane=1
fi
# (An `if`, not `[[ ]] && ...`: a false test as the trap's last command would make the whole run
# exit 1 when the plane was already up.)
# Each step's wall time, printed at the end (pass or fail): where a slow run spent its minutes.
timings=()
step_start=$SECONDS
timed() { timings+=("$(printf '%5d s  %s' $((SECONDS - step_start)) "$1")"); step_start=$SECONDS; }
print_timings() {
  echo "---- wall time by step (total ${SECONDS} s) ----"
  printf '%s\n' "${timings[@]}"
}
cleanup() {
  print_timings
  if [[ $started_plane == 1 ]]; then hack/k8s.sh down; fi
}
trap cleanup EXIT
timed "control plane up"
eval "$(hack/k8s.sh env)"
export KUBECONFIG
# Integration tests never skip: the test support uses this plane (and refuses any cluster that
# hack/k8s.sh did not start, by the marker it writes next to the kubeconfig).

# The OLM bundle against OLM's own validators (built once by hack/olm.sh): any error or warning
# fails the run, with the validator's messages.
hack/olm.sh validate olm
timed "OLM bundle validation"

# The distribution tools (chart and image tests): helm and crane built from Go modules,
# cargo-cyclonedx, the aarch64 cross linker and qemu-aarch64; once, cached like the plane.
hack/tools.sh all
timed "distribution tools"

# The dependency tree against deny.toml: licences, banned crates and sources need no network and
# always run (cargo-deny is installed below when missing). Advisories need the
# RustSec database from GitHub: checked when it can be fetched, reported as skipped otherwise.
# Installed here on first use (pinned), cached outside the repository like the control plane.
CARGO_DENY_VERSION=0.20.2
TOOLS=${STORAGEOS_CACHE:-$HOME/.cache/storageos-operator}/tools
export PATH=$TOOLS/bin:$PATH
if ! command -v cargo-deny >/dev/null; then
  echo "installing cargo-deny $CARGO_DENY_VERSION into $TOOLS (first run only)" >&2
  cargo install --locked --quiet cargo-deny --version "$CARGO_DENY_VERSION" --root "$TOOLS"
fi
cargo deny check licenses bans sources
if cargo deny fetch db >/dev/null 2>&1; then
  cargo deny check advisories
else
  echo "cargo deny check advisories: skipped (the RustSec database cannot be fetched from here)" >&2
fi
timed "cargo deny"

# With the simulator, as the tests build them (the feature is off by default; Cargo.toml).
cargo build --bins --features simulator
cargo test --all-targets --no-run
# The release configuration (the default features: no simulator) compiles and lints clean too.
cargo clippy --lib --bins -- -D warnings
timed "builds and the release configuration's lints"

# Beside the shared plane's path (the unit tests, then the integration modules one at a time),
# lanes that wait rather than compute, all started with the unit tests; each prints its output
# after the rest:
# - The fault matrix (tests/k8s_faults.rs) restarts its kube-apiserver, so it runs on a control
#   plane of its own; then a short seeded chaos soak (tests/k8s_soak.rs, docs/reliability.md; a
#   fixed seed, SOAK_CI_MINUTES) on another plane of its own.
# - MODULE_LANES: integration modules on a private plane per lane (hack/k8s.sh on free ports,
#   three kwok nodes like the shared plane), one module at a time as on the shared plane. They
#   are the modules that mostly wait: `upgrade::` (ten scenarios that each build a Running
#   cluster under the cluster lock); the node-loss modules, whose scenarios hold the plane's
#   nodes one at a time (`support::exclusive`), the mirror's idle minute, and the plugin's
#   commands; `attach::` (a minute of polls) and the install.
# - LANE_TARGETS, the slow targets that use no plane (the image build and its checks, the
#   binary run as a user runs it), in a lane of their own.
# The lanes are chosen so that every path ends about together (the step times printed at the
# end show where a run spent its minutes). Any failure fails the run.
MODULE_LANES=("upgrade" "fencing drain out_of_service gc mirror plugin" "attach install")
LANE_TARGETS=(dist_image cli)
# The first of N consecutive loopback ports nothing listens on (for a lane's plane).
free_ports() {
  local base p
  for base in $(shuf -i 20000-29000 -n 40); do
    for ((p = base; p < base + $1; p++)); do
      if (: <"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then continue 2; fi
    done
    echo "$base"
    return 0
  done
  return 1
}
# One module lane: its plane started, the modules run on it, stopped (also when the run is
# interrupted). Run in a subshell: the plane's settings are that subshell's globals, which its
# EXIT trap reads.
module_lane() {
  local rc=0 attempt kubeconfig module lane_start
  lane_state=$(mktemp -d "${TMPDIR:-/tmp}/storageos-lane-plane.XXXXXX")
  lane_k8s_port='' lane_etcd_port=''
  plane() { K8S_STATE=$lane_state K8S_PORT=$lane_k8s_port ETCD_PORT=$lane_etcd_port NODES=3 hack/k8s.sh "$@"; }
  trap 'plane down >/dev/null 2>&1; rm -rf "$lane_state" "$lane_state.up.log"' EXIT
  # A component that fails to start on a loaded machine fails `up`; once more, on other ports.
  for attempt in 1 2; do
    lane_k8s_port=$(free_ports 4) && lane_etcd_port=$(free_ports 2) || return 1
    if plane up >"$lane_state.up.log" 2>&1; then break; fi
    echo "the lane's plane did not come up (attempt $attempt):" && cat "$lane_state.up.log"
    ((attempt == 2)) && return 1
  done
  kubeconfig=$(plane env | sed -n 's/^export KUBECONFIG=//p')
  for module in "$@"; do
    lane_start=$SECONDS
    KUBECONFIG=$kubeconfig cargo test --test k8s --no-fail-fast -- --test-threads "${TEST_THREADS:-4}" \
      "$module::" --skip "_$module::" || rc=1
    echo "(k8s $module:: took $((SECONDS - lane_start)) s)"
  done
  return "$rc"
}
lane_logs=() lane_pids=() lane_names=()
# Starts `$@` in the background, its output kept for the end.
in_lane() {
  local name=$1 log
  shift
  log=$(mktemp)
  ("$@") >"$log" 2>&1 &
  lane_pids+=($!) lane_logs+=("$log") lane_names+=("$name")
}
faults_lane() {
  local rc=0 lane_start=$SECONDS
  cargo test --test k8s_faults --no-fail-fast || rc=1
  echo "(the fault matrix took $((SECONDS - lane_start)) s)"
  echo "---- the seeded chaos soak (tests/k8s_soak.rs) ----"
  lane_start=$SECONDS
  SOAK_MINUTES=${SOAK_CI_MINUTES:-2} SOAK_SEED=1 cargo test --test k8s_soak -- --nocapture || rc=1
  echo "(the soak took $((SECONDS - lane_start)) s)"
  return "$rc"
}
targets_lane() {
  local lane=() name lane_start=$SECONDS
  for name in "${LANE_TARGETS[@]}"; do lane+=(--test "$name"); done
  cargo test "${lane[@]}" --no-fail-fast -- --test-threads "${TEST_THREADS:-4}" || return 1
  echo "(they took $((SECONDS - lane_start)) s)"
}
in_lane "the fault matrix (tests/k8s_faults.rs) and the soak" faults_lane
for lane in "${MODULE_LANES[@]}"; do
  # shellcheck disable=SC2086 # the lane's modules, one word each
  in_lane "the integration modules on a plane of their own ($lane)" module_lane $lane
done
in_lane "the targets without a plane (${LANE_TARGETS[*]})" targets_lane
# Every test target but the lane's and the integration binary: one file tests/NAME.rs each.
targets=()
for f in tests/*.rs; do
  name=$(basename "$f" .rs)
  [[ $name == k8s_faults || $name == k8s_soak || " ${LANE_TARGETS[*]} " == *" $name "* ]] || targets+=(--test "$name")
done
rest=0
cargo test --lib --bins "${targets[@]}" --no-fail-fast -- --test-threads "${TEST_THREADS:-4}" || rest=$?
timed "unit, API and single-file test targets"
# The integration binary (tests/k8s/main.rs, one module per scenario) runs one scenario at a
# time, as when each was a binary of its own: scenarios share the plane's cluster-scoped objects,
# its audit log and its webhook configurations, and the idle checks count every write of an
# identity. `--skip _NAME::` keeps `apply::` from also selecting `partial_apply::`.
for f in tests/k8s/*.rs; do
  module=$(basename "$f" .rs)
  [[ $module == main || " ${MODULE_LANES[*]} " == *" $module "* ]] && continue
  cargo test --test k8s --no-fail-fast -- --test-threads "${TEST_THREADS:-4}" "$module::" --skip "_$module::" || rest=$?
  timed "k8s $module::"
done
failed_lanes=()
for i in "${!lane_pids[@]}"; do
  wait "${lane_pids[$i]}" || failed_lanes+=("${lane_names[$i]}")
done
timed "waiting for the lanes (started with the unit tests)"
for i in "${!lane_pids[@]}"; do
  echo "---- the lane: ${lane_names[$i]} ----"
  cat "${lane_logs[$i]}"
  rm -f "${lane_logs[$i]}"
done
if [[ $rest != 0 || ${#failed_lanes[@]} != 0 ]]; then
  echo "FAILED: test targets exit $rest; lanes failed: ${failed_lanes[*]:-none}" >&2
  exit 1
fi
