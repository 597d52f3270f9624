#!/usr/bin/env bash
# OLM's own tools, built once from Go modules and cached like the control plane (hack/k8s.sh):
# our bundle validator around github.com/operator-framework/api (hack/olm-tools/validate) and
# OLM's `olm` operator, compiled together in one `go build` of the module hack/olm-tools, so the
# Kubernetes libraries they share compile once. Versions: hack/olm-tools/go.mod.
#
#   hack/olm.sh build          build both into the cache (first time only)
#   hack/olm.sh validate DIR   validate the bundle in DIR (e.g. olm): the default validators and
#                              those of `operator-sdk bundle validate --select-optional
#                              suite=operatorframework`; any error or warning fails, with its message
#   hack/olm.sh crds           print OLM's CRDs (operators.coreos.com) of the same OLM version
#   hack/olm.sh bin            print the directory holding `olm`, `olm-validate` and `crds.yaml`
#
# Environment: STORAGEOS_CACHE (default ~/.cache/storageos-operator).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=$ROOT/hack/olm-tools
CACHE=${STORAGEOS_CACHE:-$HOME/.cache/storageos-operator}

log() { printf '[olm] %s\n' "$*" >&2; }
die() { printf '[olm] error: %s\n' "$*" >&2; exit 1; }

OLM_MODULE=github.com/operator-framework/operator-lifecycle-manager
olm_version() { awk -v m="$OLM_MODULE" '$1 == m {print $2; exit}' "$SRC/go.mod"; }
api_version() { awk '$1 == "github.com/operator-framework/api" {print $2; exit}' "$SRC/go.mod"; }

# The cache directory is named after the versions and a hash of our sources, so a change to the
# validator or go.mod builds a new one.
bin_dir() {
  local sum
  sum=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC"/validate/*.go | sha256sum | cut -c1-12)
  echo "$CACHE/bin/olm-$(olm_version)-api-$(api_version)-$sum"
}

go_env() {
  # As hack/k8s.sh: no stray GOFLAGS or toolchain switch; go.sum is committed, so read-only.
  export GOFLAGS="-buildvcs=false -mod=readonly" CGO_ENABLED=0 GOTOOLCHAIN=local
}

cmd_build() {
  local bin
  bin=$(bin_dir)
  [[ -x $bin/olm && -x $bin/olm-validate && -s $bin/crds.yaml ]] && return 0
  command -v go >/dev/null || die "Go is not installed; install Go 1.26 or newer"
  log "building olm $(olm_version) and the bundle validator (api $(api_version)) from Go modules (first time only)"
  rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
  local start=$SECONDS
  (
    cd "$SRC"
    go_env
    go build -p 2 -trimpath -ldflags "-s -w" -o "$bin.tmp/" ./validate "$OLM_MODULE/cmd/olm"
  ) || die "building the OLM tools failed (see the Go output above)"
  mv "$bin.tmp/validate" "$bin.tmp/olm-validate"
  # OLM's CRDs, from the same module version as the binary.
  local mod
  mod=$(cd "$SRC" && go_env && go list -m -f '{{.Dir}}' "$OLM_MODULE") || die "cannot locate the $OLM_MODULE module"
  local f
  for f in "$mod"/deploy/chart/crds/*.crd.yaml; do printf -- '---\n' && cat "$f"; done >"$bin.tmp/crds.yaml"
  [[ -s $bin.tmp/crds.yaml ]] || die "no CRDs found in $mod/deploy/chart/crds"
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
  log "built in $((SECONDS - start))s: $bin"
}

cmd_validate() {
  [[ $# == 1 ]] || die "usage: hack/olm.sh validate BUNDLE_DIR"
  cmd_build
  "$(bin_dir)/olm-validate" "$1"
}

case ${1:-} in
  build) cmd_build ;;
  validate) shift; cmd_validate "$@" ;;
  crds) cmd_build; cat "$(bin_dir)/crds.yaml" ;;
  bin) cmd_build; bin_dir ;;
  *) die "usage: hack/olm.sh build | validate DIR | crds | bin" ;;
esac
