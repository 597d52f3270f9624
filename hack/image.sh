#!/usr/bin/env bash
# Builds the storageos-operator image as an OCI archive without a container engine (this machine
# has none, and no registry to pull a base image from). The Dockerfile's final stage is distroless
# `cc` + the binary as user 65532; this script makes the same thing from this machine's own
# files: the release binary, the shared libraries it links (found with ldd), CA certificates and a
# passwd/group naming the `nonroot` user. The layout is written by a short Python program
# (standard library only) and checked by running the binary from the unpacked root filesystem as
# user 65532 under chroot (when run as root).
#
#   hack/image.sh [--out FILE] [--tag TAG]
#
# Default output: target/image/storageos-operator.oci.tar (load it with
# `skopeo copy oci-archive:FILE docker-daemon:IMAGE` or `podman load -i FILE`).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

version=$(awk -F'"' '/^version *=/{print $2; exit}' Cargo.toml)
OUT=$ROOT/target/image/storageos-operator.oci.tar
TAG=storageos/storageos-operator:v$version
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    *) echo "usage: hack/image.sh [--out FILE] [--tag TAG]" >&2; exit 2 ;;
  esac
done

say() { printf '[image] %s\n' "$*" >&2; }

say "building the release binary"
cargo build --release --locked --bin storageos-operator
BIN_SRC=$ROOT/target/release/storageos-operator

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
fi

say "writing the OCI archive"
mkdir -p "$(dirname "$OUT")"
python3 - "$ROOTFS" "$OUT" "$TAG" <<'PY'
import gzip, hashlib, io, json, os, sys, tarfile

rootfs, out, tag = sys.argv[1:4]

def layer_tar(root):
    """The root filesystem as a reproducible tar (sorted, mtime 0, root-owned)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in [""] + sorted(filenames) + [d for d in dirnames]:
                path = os.path.join(dirpath, name) if name else dirpath
                if name and os.path.isdir(path) and not os.path.islink(path):
                    continue  # walked on its own
                arc = os.path.relpath(path, root)
                if arc == ".":
                    continue
                info = t.gettarinfo(path, arcname=arc)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if info.isreg():
                    with open(path, "rb") as f:
                        t.addfile(info, f)
                else:
                    t.addfile(info)
    return buf.getvalue()

blobs = {}
def blob(data, media_type):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}

raw = layer_tar(rootfs)
diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
layer = blob(gzip.compress(raw, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip")
config = {
    "architecture": "amd64", "os": "linux",
    "config": {
        "User": "65532:65532",
        "Entrypoint": ["/usr/local/bin/storageos-operator"],
        "Cmd": ["run"],
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
        "Labels": {"org.opencontainers.image.title": "storageos-operator",
                   "org.opencontainers.image.ref.name": tag},
    },
    "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    "history": [{"created_by": "hack/image.sh"}],
}
cfg = blob(json.dumps(config, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json")
manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": cfg, "layers": [layer]}
man = blob(json.dumps(manifest, sort_keys=True).encode(), "application/vnd.oci.image.manifest.v1+json")
man["annotations"] = {"org.opencontainers.image.ref.name": tag}
index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [man]}

with tarfile.open(out, "w") as t:
    def add(name, data):
        info = tarfile.TarInfo(name)
        info.size, info.mtime = len(data), 0
        t.addfile(info, io.BytesIO(data))
    add("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
    add("index.json", json.dumps(index, sort_keys=True).encode())
    for digest, data in sorted(blobs.items()):
        add("blobs/sha256/" + digest.split(":", 1)[1], data)
print(f"{out}: {tag}, layer {len(raw) // 1024} KiB uncompressed, {layer['size'] // 1024} KiB compressed")
PY
