#!/usr/bin/env bash
# The distribution tools, built or installed once and cached outside the repository like the
# control plane (hack/k8s.sh) and OLM's tools (hack/olm.sh):
#
#   helm, crane   built from Go modules in one `go build` of the module hack/dist-tools
#                 (versions and go.sum there): helm for the chart tests, crane to write and push
#                 the image and to serve a registry on loopback in the tests
#   actionlint    built from its Go module (hack/lint-tools, versions and go.sum there): lints the
#                 release workflow in .github/workflows
#   cargo-cyclonedx   the SBOM of the Rust dependencies, `cargo install --locked` pinned below
#   aarch64 linker    Debian's gcc-aarch64-linux-gnu (with libc6-arm64-cross, whose shared
#                     libraries go into the arm64 image), and the Rust target
#
#   hack/tools.sh go        build helm and crane (first time only); prints their directory
#   hack/tools.sh oci OUT TAG ARCH=ROOTFS[,...] [crane mutate flags]   an OCI image archive
#                           written with crane (hack/image.sh, the real node's pause image)
#   hack/tools.sh actionlint  build actionlint (first time only); prints the binary's path
#   hack/tools.sh sbom      install cargo-cyclonedx (first time only); prints its bin directory
#   hack/tools.sh cross     make sure the aarch64 cross toolchain is installed
#   hack/tools.sh qemu      make sure qemu-aarch64 (Debian's qemu-user) is installed: runs the
#                           arm64 binary from its image's root filesystem in the image test
#   hack/tools.sh all       all of them
#
# Environment: STORAGEOS_CACHE (default ~/.cache/storageos-operator).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=$ROOT/hack/dist-tools
CACHE=${STORAGEOS_CACHE:-$HOME/.cache/storageos-operator}
CARGO_CYCLONEDX_VERSION=0.5.9

log() { printf '[tools] %s\n' "$*" >&2; }
die() { printf '[tools] error: %s\n' "$*" >&2; exit 1; }

mod_version() { awk -v m="$2" '$1 == m {print $2; exit}' "$1/go.mod"; }

# `go build` of PACKAGES of the Go module in DIR (versions and go.sum there), once, into
# $CACHE/bin/NAME-<hash of go.mod and go.sum>: a version change builds anew. Prints that directory.
go_build() { # dir name ldflags packages...
  local dir=$1 bin ld=$3 p start=$SECONDS
  bin=$CACHE/bin/$2-$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-12)
  shift 3
  for p in "$@"; do
    [[ -x $bin/${p##*/} ]] && continue
    command -v go >/dev/null || die "Go is not installed; install Go 1.26 or newer"
    log "building ${*##*/} from Go modules into $bin (first time only)"
    rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
    # As hack/k8s.sh: no stray GOFLAGS or toolchain switch; go.sum is committed, so read-only.
    (cd "$dir" && GOFLAGS="-buildvcs=false -mod=readonly" CGO_ENABLED=0 GOTOOLCHAIN=local \
      go build -p 2 -trimpath -ldflags "-s -w $ld" -o "$bin.tmp/" "$@") \
      || die "building ${*##*/} failed (see the Go output above)"
    rm -rf "$bin" && mv "$bin.tmp" "$bin"
    log "built in $((SECONDS - start))s: $bin"
    break
  done
  echo "$bin"
}

cmd_go() {
  local helm_v
  helm_v=$(mod_version "$SRC" helm.sh/helm/v4)
  go_build "$SRC" "dist-helm-$helm_v-crane-$(mod_version "$SRC" github.com/google/go-containerregistry)" \
    "-X helm.sh/helm/v4/internal/version.version=$helm_v" helm.sh/helm/v4/cmd/helm github.com/google/go-containerregistry/cmd/crane
}

# An OCI image archive of one layer per root filesystem, written with crane into a registry on
# loopback (crane edits images in a registry only) and pulled back as an OCI layout, tarred. The
# layer is a reproducible tar (sorted, mtime 0, owner root, gzip without name or time) and crane
# writes no time or host into the config (created is the zero time), so the same inputs give the
# same digests. Two or more ARCH=ROOTFS give an OCI index of linux/ARCH images (jq, curl), with the
# annotations of its first image. TAG is the archive's `org.opencontainers.image.ref.name`: the
# name `ctr images import` gives the image, so fully qualified when it is for a node. FLAGS go to
# `crane mutate` (--entrypoint, --cmd, --user, -e K=V, -l K=V, -a K=V); PATH is set.
cmd_oci() { # OUT TAG ARCH=ROOTFS[,ARCH=ROOTFS...] [FLAGS...]
  local out=$1 tag=$2 images bin work reg="" ref refs=() platform top
  IFS=, read -r -a images <<<"$3"
  shift 3
  bin=$(cmd_go)/crane
  work=$(mktemp -d)
  "$bin" registry serve --address 127.0.0.1:0 2>"$work/registry.log" &
  # shellcheck disable=SC2064 # expanded now: the registry's PID and the directory of this call
  trap "kill $!; rm -rf '$work'" EXIT
  crane() { "$bin" "$@" 2>>"$work/crane.log" || { cat "$work/crane.log" >&2; die "crane $1 failed"; }; }
  until [[ -n $reg ]]; do
    sleep 0.1
    kill -0 $! 2>/dev/null || { cat "$work/registry.log" >&2; die "crane registry serve failed"; }
    reg=$(sed -n 's/.*serving on port /127.0.0.1:/p' "$work/registry.log")
  done
  for image in "${images[@]}"; do
    platform=linux/${image%%=*}
    [[ $platform == linux/arm64 ]] && platform+=/v8
    (cd "${image#*=}" && LC_ALL=C tar --format=gnu --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -c -- *) \
      | gzip -9n >"$work/layer.tar.gz"
    ref=$(crane append --oci-empty-base -f "$work/layer.tar.gz" -t "$reg/image:base")
    ref=$(crane mutate "$ref" --set-platform "$platform" -l "org.opencontainers.image.ref.name=$tag" \
      -e PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@")
    refs+=(-m "$ref")
  done
  top=${refs[1]}
  if [[ ${#images[@]} -gt 1 ]]; then
    top=$reg/image:index
    crane index append "${refs[@]}" -t "$top" >/dev/null
    crane manifest "$top" | jq -c --argjson a "$(crane manifest "${refs[1]}" | jq .annotations)" '.annotations = $a' \
      | curl -fsS -X PUT -H "Content-Type: application/vnd.oci.image.index.v1+json" --data-binary @- "http://$reg/v2/image/manifests/index"
  fi
  crane pull --format oci --annotate-ref "$top" "$work/layout"
  sed -i "s|\"$top\"|\"$tag\"|" "$work/layout/index.json"
  mkdir -p "$(dirname "$out")"
  tar --format=gnu --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$out.tmp" -C "$work/layout" oci-layout index.json blobs
  mv "$out.tmp" "$out"
  echo "$out: $tag ($(crane digest "$top"))"
}

cmd_actionlint() {
  local src=$ROOT/hack/lint-tools
  echo "$(go_build "$src" "actionlint-$(mod_version "$src" github.com/rhysd/actionlint)" "" github.com/rhysd/actionlint/cmd/actionlint)/actionlint"
}

cmd_sbom() {
  local root=$CACHE/tools/cargo-cyclonedx-$CARGO_CYCLONEDX_VERSION
  if [[ ! -x $root/bin/cargo-cyclonedx ]]; then
    log "installing cargo-cyclonedx $CARGO_CYCLONEDX_VERSION into $root (first time only)"
    cargo install --locked --quiet cargo-cyclonedx --version "$CARGO_CYCLONEDX_VERSION" --root "$root.tmp" \
      || die "cargo install cargo-cyclonedx failed"
    rm -rf "$root" && mv "$root.tmp" "$root"
  fi
  echo "$root/bin"
}

# Installs a Debian package (as root); the second argument says what it is for.
apt_install() {
  [[ $(id -u) == 0 ]] || die "$2 needs Debian's $1 (apt-get install $1, as root)"
  log "installing Debian's $1 ($2; first time only)"
  apt-get install -y -qq "$1" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null && apt-get install -y -qq "$1" >/dev/null; } \
    || die "apt-get install $1 failed"
}

cmd_cross() {
  if ! command -v aarch64-linux-gnu-gcc >/dev/null || [[ ! -d /usr/aarch64-linux-gnu/lib ]]; then
    apt_install gcc-aarch64-linux-gnu "the arm64 build (its linker and C library)"
  fi
  if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
    log "adding the Rust target aarch64-unknown-linux-gnu (first time only)"
    rustup target add aarch64-unknown-linux-gnu >&2 || die "rustup target add aarch64-unknown-linux-gnu failed"
  fi
}

# qemu-aarch64 runs the arm64 binary from its image's root filesystem (image.sh, the image test).
cmd_qemu() { command -v qemu-aarch64 >/dev/null || apt_install qemu-user "the arm64 image check"; }

case ${1:-} in
  go) cmd_go ;;
  oci) shift; cmd_oci "$@" ;;
  actionlint) cmd_actionlint ;;
  qemu) cmd_qemu ;;
  sbom) cmd_sbom ;;
  cross) cmd_cross ;;
  all) cmd_go >/dev/null && cmd_actionlint >/dev/null && cmd_sbom >/dev/null && cmd_cross && cmd_qemu ;;
  *) die "usage: hack/tools.sh go | oci OUT TAG ARCH=ROOTFS[,...] [FLAGS] | actionlint | sbom | cross | qemu | all" ;;
esac
