#!/usr/bin/env bash
# Builds the storageos-operator image as an OCI archive without a container engine (this machine
# has none, and no registry to pull a base image from). The Dockerfile's final stage is distroless
# `cc` + the binary as user 65532; this script makes the same thing from this machine's own
# files: the release binary, the shared libraries it links (found with ldd), CA certificates and a
# passwd/group naming the `nonroot` user. The layout is written by a short Python program
# (standard library only) and checked by running the binary from the unpacked root filesystem as
# user 65532 under chroot (when run as root). The archive itself is written by hack/oci.py.
#
#   hack/image.sh [--out FILE] [--tag TAG] [--debug] [--binary FILE]
#
# Default output: target/image/storageos-operator.oci.tar (load it with
# `skopeo copy oci-archive:FILE docker-daemon:IMAGE`, `podman load -i FILE`, or into a node's
# containerd with `ctr -n k8s.io images import FILE`).
#
# --debug packs the debug binary (target/debug, built with `cargo build`) in the same layout, to
# target/image/storageos-operator-debug.oci.tar: a release build with fat LTO takes ~14 minutes on
# two cores, so the tests and the demo run this one. Users get the release image. --binary packs
# a binary already built (the tests pass the one cargo built for them) instead of building.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

version=$(awk -F'"' '/^version *=/{print $2; exit}' Cargo.toml)
OUT=
TAG=storageos/storageos-operator:v$version
PROFILE=release
BIN_SRC=
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --debug) PROFILE=debug; shift ;;
    --binary) BIN_SRC=$2; BIN_GIVEN=1; shift 2 ;;
    *) echo "usage: hack/image.sh [--out FILE] [--tag TAG] [--debug] [--binary FILE]" >&2; exit 2 ;;
  esac
done
if [[ -z $OUT ]]; then
  OUT=$ROOT/target/image/storageos-operator.oci.tar
  [[ $PROFILE == debug ]] && OUT=$ROOT/target/image/storageos-operator-debug.oci.tar
fi

say() { printf '[image] %s\n' "$*" >&2; }

if [[ -n $BIN_SRC ]]; then
  [[ -x $BIN_SRC ]] || { say "no executable at $BIN_SRC"; exit 1; }
elif [[ $PROFILE == release ]]; then
  say "building the release binary"
  # Without the StorageOS simulator (feature `simulator`): not in a published image.
  cargo build --release --locked --no-default-features --bin storageos-operator
  BIN_SRC=$ROOT/target/release/storageos-operator
else
  say "building the debug binary"
  cargo build --locked --bin storageos-operator
  BIN_SRC=$ROOT/target/debug/storageos-operator
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ROOTFS=$WORK/rootfs
mkdir -p "$ROOTFS/usr/local/bin" "$ROOTFS/etc/ssl/certs" "$ROOTFS/tmp" "$ROOTFS/home/nonroot"
cp "$BIN_SRC" "$ROOTFS/usr/local/bin/storageos-operator"
strip "$ROOTFS/usr/local/bin/storageos-operator" 2>/dev/null || true

say "collecting shared libraries"
# Every library the binary needs, and the dynamic loader, at their own paths.
ldd "$BIN_SRC" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u | while read -r lib; do
  mkdir -p "$ROOTFS$(dirname "$lib")"
  cp -L "$lib" "$ROOTFS$lib"
done
[[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ROOTFS/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$ROOTFS/etc/group"
chmod 1777 "$ROOTFS/tmp"

if [[ $(id -u) == 0 ]] && command -v chroot >/dev/null; then
  say "checking the image's root filesystem: the binary runs as 65532"
  chroot --userspec=65532:65532 "$ROOTFS" /usr/local/bin/storageos-operator --version >&2
  if [[ $PROFILE == release && -z ${BIN_GIVEN:-} ]] &&
    chroot --userspec=65532:65532 "$ROOTFS" /usr/local/bin/storageos-operator simulate --help >/dev/null 2>&1; then
    say "the release binary has the simulate subcommand; it must be built without feature simulator"
    exit 1
  fi
fi

say "writing the OCI archive"
python3 "$ROOT/hack/oci.py" "$ROOTFS" "$OUT" "$TAG" --title storageos-operator \
  --entrypoint /usr/local/bin/storageos-operator --cmd run --user 65532:65532 \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
