#!/usr/bin/env bash
# Builds the storageos-operator image as an OCI archive without a container engine (this machine
# has none, and no registry to pull a base image from), and pushes it to a registry. The
# Dockerfile's final stage is distroless `cc` + the binary as user 65532; this script makes the
# same thing from this machine's own files: the release binary, the shared libraries it links,
# CA certificates, a passwd/group naming the `nonroot` user and the SBOM of its Rust
# dependencies. The archive is written with crane (`hack/tools.sh oci`), reproducibly: the same
# commit, toolchain and Debian packages give the same digest. docs/release.md.
#
#   hack/image.sh [--out FILE] [--tag TAG] [--arch amd64,arm64] [--debug] [--binary [ARCH=]FILE]
#                 [--sbom | --no-sbom] [--push REGISTRY/IMAGE:TAG] [--digest-file FILE]
#
# Default output: target/image/storageos-operator.oci.tar (load it with
# `skopeo copy oci-archive:FILE docker-daemon:IMAGE`, `podman load -i FILE`, or into a node's
# containerd with `ctr -n k8s.io images import FILE`).
#
# --arch: the release image holds amd64 and arm64 (an OCI image index; arm64 cross-compiled with
# Debian's gcc-aarch64-linux-gnu as linker, installed by hack/tools.sh cross). --debug and
# --binary default to amd64 only.
#
# --debug packs the debug binary (target/debug, built with `cargo build`) in the same layout, to
# target/image/storageos-operator-debug.oci.tar: a release build with fat LTO takes ~14 minutes on
# two cores, so the tests and the demo run this one. Users get the release image. --binary packs
# a binary already built (the tests pass the one cargo built for them) instead of building;
# ARCH=FILE for another architecture.
#
# --sbom (default for the release image) writes a CycloneDX SBOM of the Rust dependencies of the
# binary of each architecture (cargo-cyclonedx, hack/tools.sh sbom) into its image at
# /usr/share/doc/storageos-operator/sbom.cdx.json.
#
# --push copies the image (all architectures) to a registry with crane (hack/tools.sh go) and
# prints the pushed reference with its digest, REGISTRY/IMAGE@sha256:... (also written to
# --digest-file). Credentials: crane's, i.e. ~/.docker/config.json (`crane auth login`).
#
# Cross builds use CARGO_TARGET_DIR when set (the tests keep one in the cache for warm runs).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

version=$(awk -F'"' '/^version *=/{print $2; exit}' Cargo.toml)
OUT=
TAG=storageos/storageos-operator:v$version
PROFILE=release
ARCHES=
SBOM=
PUSH=
DIGEST_FILE=
declare -A BIN_SRC=()
usage() {
  echo "usage: hack/image.sh [--out FILE] [--tag TAG] [--arch amd64,arm64] [--debug] [--binary [ARCH=]FILE]" >&2
  echo "                     [--sbom|--no-sbom] [--push REGISTRY/IMAGE:TAG] [--digest-file FILE]" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --arch) ARCHES=$2; shift 2 ;;
    --debug) PROFILE=debug; shift ;;
    --binary)
      if [[ $2 == *=* ]]; then BIN_SRC[${2%%=*}]=${2#*=}; else BIN_SRC[amd64]=$2; fi
      shift 2 ;;
    --sbom) SBOM=1; shift ;;
    --no-sbom) SBOM=0; shift ;;
    --push) PUSH=$2; shift 2 ;;
    --digest-file) DIGEST_FILE=$2; shift 2 ;;
    *) usage ;;
  esac
done
if [[ -z $OUT ]]; then
  OUT=$ROOT/target/image/storageos-operator.oci.tar
  [[ $PROFILE == debug ]] && OUT=$ROOT/target/image/storageos-operator-debug.oci.tar
fi
if [[ -z $ARCHES ]]; then
  ARCHES=amd64,arm64
  [[ $PROFILE == debug || ${#BIN_SRC[@]} -gt 0 ]] && ARCHES=amd64
fi
if [[ -z $SBOM ]]; then
  SBOM=0
  [[ $PROFILE == release && ${#BIN_SRC[@]} == 0 ]] && SBOM=1
fi
IFS=, read -r -a arches <<<"$ARCHES"
# Images are built without the StorageOS simulator (feature `simulator`, off by default); the
# SBOM lists the crates of the same feature set. (The demo and the tests pack a binary built
# with it, through --binary.)
FEATURES=()

say() { printf '[image] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[[ $(uname -m) == x86_64 ]] || die "this script builds on an x86_64 host (arm64 is cross-compiled)"
triple() {
  case $1 in
    amd64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    *) die "unsupported architecture $1 (amd64, arm64)" ;;
  esac
}

# The binary of each architecture: given, or built (amd64 natively, arm64 cross-compiled).
build_binary() { # arch -> path of the binary
  local arch=$1 flags=(--locked --bin storageos-operator "${FEATURES[@]}")
  [[ $PROFILE == release ]] && flags+=(--release)
  if [[ $arch == amd64 ]]; then
    say "building the $PROFILE binary (amd64)"
    cargo build "${flags[@]}" >&2
    echo "${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE/storageos-operator"
  else
    "$ROOT/hack/tools.sh" cross
    say "building the $PROFILE binary (arm64, cross-compiled)"
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
      CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
      cargo build "${flags[@]}" --target aarch64-unknown-linux-gnu >&2
    echo "${CARGO_TARGET_DIR:-$ROOT/target}/aarch64-unknown-linux-gnu/$PROFILE/storageos-operator"
  fi
}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The shared libraries an arm64 binary needs (the closure of DT_NEEDED), from Debian's
# libc6-arm64-cross, at the multiarch paths the arm64 loader searches, and the loader itself.
arm64_libs() { # binary rootfs
  local bin=$1 rootfs=$2 sysroot=/usr/aarch64-linux-gnu/lib
  local interp
  interp=$(readelf -l "$bin" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
  [[ -n $interp ]] || die "no program interpreter in $bin"
  mkdir -p "$rootfs$(dirname "$interp")" "$rootfs/lib/aarch64-linux-gnu"
  cp -L "$sysroot/$(basename "$interp")" "$rootfs$interp"
  local queue=("$bin") seen=" " f lib
  while [[ ${#queue[@]} -gt 0 ]]; do
    f=${queue[0]}
    queue=("${queue[@]:1}")
    for lib in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      [[ $seen == *" $lib "* ]] && continue
      seen+="$lib "
      [[ -f $sysroot/$lib ]] || die "$lib (needed by $(basename "$f")) is not in $sysroot"
      cp -L "$sysroot/$lib" "$rootfs/lib/aarch64-linux-gnu/$lib"
      queue+=("$sysroot/$lib")
    done
  done
}

rootfs_for() { # arch binary rootfs
  local arch=$1 bin=$2 rootfs=$3
  mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$rootfs/home/nonroot"
  cp "$bin" "$rootfs/usr/local/bin/storageos-operator"
  # Stripped, and without the linker's build ID: that is a hash of the unstripped binary, whose
  # debug information names the checkout's path, so it would differ between two clones of one
  # commit while every other byte is the same.
  if [[ $arch == amd64 ]]; then
    strip --remove-section=.note.gnu.build-id "$rootfs/usr/local/bin/storageos-operator"
    say "collecting shared libraries (amd64)"
    # Every library the binary needs, and the dynamic loader, at their own paths.
    ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u | while read -r lib; do
      mkdir -p "$rootfs$(dirname "$lib")"
      cp -L "$lib" "$rootfs$lib"
    done
  else
    aarch64-linux-gnu-strip --remove-section=.note.gnu.build-id "$rootfs/usr/local/bin/storageos-operator"
    say "collecting shared libraries (arm64)"
    arm64_libs "$bin" "$rootfs"
  fi
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
  chmod 1777 "$rootfs/tmp"
  chmod 755 "$rootfs/usr/local/bin/storageos-operator"
  if [[ $SBOM == 1 ]]; then
    local tool
    tool=$("$ROOT/hack/tools.sh" sbom)
    say "writing the SBOM of the Rust dependencies ($arch)"
    mkdir -p "$rootfs/usr/share/doc/storageos-operator"
    sbom "$tool" "$(triple "$arch")" "$rootfs/usr/share/doc/storageos-operator/sbom.cdx.json"
  fi
  local run=()
  if [[ $arch == amd64 && $(id -u) == 0 ]] && command -v chroot >/dev/null; then
    say "checking the image's root filesystem: the binary runs as 65532"
    run=(chroot --userspec=65532:65532 "$rootfs" /usr/local/bin/storageos-operator)
  elif [[ $arch == arm64 ]] && command -v qemu-aarch64 >/dev/null; then
    say "checking the arm64 root filesystem: the binary runs under qemu-aarch64 with its own loader and libraries"
    run=(qemu-aarch64 -L "$rootfs" "$rootfs/usr/local/bin/storageos-operator")
  fi
  if [[ ${#run[@]} -gt 0 ]]; then
    "${run[@]}" --version >&2
  elif [[ $PROFILE == release && -z ${BIN_SRC[$arch]:-} && $arch == amd64 ]]; then
    # Not root: the binary runs on this (x86_64) host all the same, for the check below.
    run=("$rootfs/usr/local/bin/storageos-operator")
  fi
  # A release binary built here must not answer `simulate`; the check is never skipped quietly.
  if [[ $PROFILE == release && -z ${BIN_SRC[$arch]:-} ]]; then
    [[ ${#run[@]} -gt 0 ]] \
      || die "cannot run the $arch binary to check that it has no simulate subcommand: install qemu-user (hack/tools.sh qemu)"
    if "${run[@]}" simulate --help >/dev/null 2>&1; then
      die "the release binary ($arch) has the simulate subcommand; it must be built without feature simulator"
    fi
    say "the release binary ($arch) has no simulate subcommand"
  fi
}

# CycloneDX JSON of the binary's dependencies for one target. cargo-cyclonedx writes no serial
# number and takes its timestamp from SOURCE_DATE_EPOCH (the commit's time): reproducible, also
# from another checkout (below).
sbom() { # tool-bin-dir triple out
  local name epoch
  name=$(basename "$WORK")-sbom-$2
  epoch=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)
  SOURCE_DATE_EPOCH=$epoch PATH=$1:$PATH cargo cyclonedx "${FEATURES[@]}" --format json --target "$2" --spec-version 1.5 \
    --override-filename "$name" >&2
  # Its references to this crate name the checkout (path+file:///path/to/clone): written
  # relative, as its purls already are, so that the clone's path is not in the image.
  # (The workspace's own crates, such as crates/storageos-client, are named below the root.)
  sed "s|file://$ROOT\([/#\"]\)|file://.\1|g" "$ROOT/$name.json" >"$3"
  # cargo-cyclonedx writes one file per workspace member: only the operator's goes in the image.
  rm -f "$ROOT/$name.json" "$ROOT"/crates/*/"$name.json"
}

images=()
for arch in "${arches[@]}"; do
  triple "$arch" >/dev/null
  bin=${BIN_SRC[$arch]:-}
  if [[ -n $bin ]]; then
    [[ -x $bin ]] || die "no executable at $bin"
  else
    bin=$(build_binary "$arch")
  fi
  rootfs_for "$arch" "$bin" "$WORK/rootfs-$arch"
  images+=("$arch=$WORK/rootfs-$arch")
done

revision=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
say "writing the OCI archive (${arches[*]})"
"$ROOT/hack/tools.sh" oci "$OUT" "$TAG" "$(IFS=,; echo "${images[*]}")" -l org.opencontainers.image.title=storageos-operator \
  --entrypoint /usr/local/bin/storageos-operator --cmd run --user 65532:65532 -e SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  -a "org.opencontainers.image.version=$version" -a "org.opencontainers.image.revision=$revision" \
  -a org.opencontainers.image.title=storageos-operator >&2

if [[ -n $PUSH ]]; then
  crane=$("$ROOT/hack/tools.sh" go)/crane
  mkdir -p "$WORK/layout"
  tar -xf "$OUT" -C "$WORK/layout"
  say "pushing to $PUSH"
  ref=$("$crane" push "$WORK/layout" "$PUSH")
  say "pushed $ref"
  [[ -n $DIGEST_FILE ]] && echo "$ref" >"$DIGEST_FILE"
  echo "$ref"
fi
