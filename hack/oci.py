#!/usr/bin/env python3
"""Writes a one-layer OCI image archive from a root filesystem directory, reproducibly (sorted
entries, mtime 0, root-owned), with Python's standard library only: this machine has no
container engine and no registry to pull a base image from. Used by hack/image.sh (the
operator's image) and hack/realnode.sh (the node's sandbox image).

    hack/oci.py ROOTFS OUT TAG --entrypoint PATH [--cmd ARG ...] [--user UID:GID] [--env K=V ...]
                [--arch ARCH] [--platform ARCH=ROOTFS ...] [--annotation K=V ...]

ROOTFS is the image of --arch (default amd64). Each --platform adds the image of another
architecture: the archive then holds an OCI image index with one manifest per architecture
(linux/ARCH), which `crane push` and registries keep as one multi-arch tag. --annotation adds
OCI annotations (e.g. org.opencontainers.image.revision) to the index, or to the one manifest.
Nothing time- or host-dependent is written: the same inputs give the same digests.

TAG is written as the `org.opencontainers.image.ref.name` annotation; containerd's
`ctr images import` takes it as the image name, so give it fully qualified
(`docker.io/storageos/storageos-operator:v0.1.0`) when the archive is for a node."""
import argparse
import gzip
import hashlib
import io
import json
import os
import tarfile


def layer_tar(root):
    """The root filesystem as a reproducible tar (sorted, mtime 0, root-owned)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in [""] + sorted(filenames) + list(dirnames):
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rootfs")
    p.add_argument("out")
    p.add_argument("tag")
    p.add_argument("--entrypoint", required=True)
    p.add_argument("--cmd", action="append", default=[])
    p.add_argument("--user", default="")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--title", default="")
    p.add_argument("--arch", default="amd64")
    p.add_argument("--platform", action="append", default=[])
    p.add_argument("--annotation", action="append", default=[])
    a = p.parse_args()

    blobs = {}

    def blob(data, media_type):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    annotations = dict(kv.split("=", 1) for kv in a.annotation)

    def image(arch, rootfs):
        raw = layer_tar(rootfs)
        diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
        layer = blob(gzip.compress(raw, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip")
        config = {
            "architecture": arch, "os": "linux",
            "config": {
                "Entrypoint": [a.entrypoint],
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + a.env,
                "Labels": {"org.opencontainers.image.ref.name": a.tag},
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": "hack/oci.py"}],
        }
        if arch == "arm64":
            config["variant"] = "v8"
        if a.cmd:
            config["config"]["Cmd"] = a.cmd
        if a.user:
            config["config"]["User"] = a.user
        if a.title:
            config["config"]["Labels"]["org.opencontainers.image.title"] = a.title
        cfg = blob(json.dumps(config, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json")
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": cfg, "layers": [layer]}
        if annotations and not a.platform:
            manifest["annotations"] = annotations
        man = blob(json.dumps(manifest, sort_keys=True).encode(), "application/vnd.oci.image.manifest.v1+json")
        print(f"{arch}: {man['digest']}, layer {len(raw) // 1024} KiB uncompressed, "
              f"{layer['size'] // 1024} KiB compressed")
        return man, config

    images = [(a.arch, a.rootfs)] + [tuple(p.split("=", 1)) for p in a.platform]
    if len(images) == 1:
        top, _ = image(*images[0])
    else:
        manifests = []
        for arch, rootfs in images:
            man, config = image(arch, rootfs)
            platform = {"architecture": arch, "os": "linux"}
            if "variant" in config:
                platform["variant"] = config["variant"]
            manifests.append(dict(man, platform=platform))
        nested = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                  "manifests": manifests}
        if annotations:
            nested["annotations"] = annotations
        top = blob(json.dumps(nested, sort_keys=True).encode(), "application/vnd.oci.image.index.v1+json")
    top["annotations"] = {"org.opencontainers.image.ref.name": a.tag}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [top]}

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, "w") as t:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            t.addfile(info, io.BytesIO(data))
        add("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add("index.json", json.dumps(index, sort_keys=True).encode())
        for digest, data in sorted(blobs.items()):
            add("blobs/sha256/" + digest.split(":", 1)[1], data)
    os.replace(tmp, a.out)
    print(f"{a.out}: {a.tag} ({top['digest']})")


if __name__ == "__main__":
    main()
