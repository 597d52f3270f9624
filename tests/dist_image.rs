//! Distribution tier, no cluster: the image `hack/image.sh` builds. Two builds of one commit give
//! one digest; the archive is an OCI index of linux/amd64 and linux/arm64 (the arm64 binary
//! cross-compiled by the script); `--push` to a registry on loopback (`crane registry serve`)
//! keeps that digest, and a pull back by digest gives the same blobs; each image carries the
//! CycloneDX SBOM of its target's crates, which are those of Cargo.lock.
//!
//! The debug binaries stand in for the release ones (a release build takes ~14 min per
//! architecture here): packing, cross-linking, libraries, SBOM and push are the same code. The
//! arm64 build uses a target directory in the cache, so only this crate recompiles on a warm run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::dist::{cache, run};

fn root() -> PathBuf {
    support::repo_root()
}

fn crane() -> Command {
    support::dist::go_tool("crane")
}

const TAG: &str = "storageos/storageos-operator:test";

/// `hack/image.sh` for amd64 (this test's binary) and arm64 (cross-built), with the SBOM.
fn image_sh(out: &Path, extra: &[&str]) -> String {
    run(Command::new("bash")
        .arg(root().join("hack/image.sh"))
        .args(["--debug", "--arch", "amd64,arm64", "--sbom", "--tag", TAG, "--out"])
        .arg(out)
        .arg("--binary")
        .arg(format!("amd64={}", env!("CARGO_BIN_EXE_storageos-operator")))
        .args(extra)
        .env("CARGO_TARGET_DIR", cache().join("target-cross")))
}

/// The OCI layout of an archive, unpacked.
fn unpack(archive: &Path, into: &Path) {
    std::fs::create_dir_all(into).unwrap();
    run(Command::new("tar").arg("-xf").arg(archive).arg("-C").arg(into));
}

fn json_file(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))).unwrap()
}

fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    std::fs::read(layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))).unwrap()
}

/// Every blob of a layout, by digest.
fn blobs(layout: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(layout.join("blobs/sha256"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

struct Registry(Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// (name, version) -> checksum of every registry crate in Cargo.lock.
fn cargo_lock() -> BTreeMap<(String, String), Option<String>> {
    let lock: toml_like::Lock = toml_like::parse(&std::fs::read_to_string(root().join("Cargo.lock")).unwrap());
    lock.packages
        .into_iter()
        .map(|p| ((p.name, p.version), p.checksum))
        .collect()
}

/// Cargo.lock is TOML; its `[[package]]` tables are simple enough to read line by line.
mod toml_like {
    pub struct Package {
        pub name: String,
        pub version: String,
        pub checksum: Option<String>,
    }
    pub struct Lock {
        pub packages: Vec<Package>,
    }
    pub fn parse(text: &str) -> Lock {
        let mut packages: Vec<Package> = vec![];
        let value = |l: &str| l.split_once(" = ").map(|(_, v)| v.trim_matches('"').to_string());
        for line in text.lines() {
            if line == "[[package]]" {
                packages.push(Package {
                    name: String::new(),
                    version: String::new(),
                    checksum: None,
                });
            } else if let Some(p) = packages.last_mut() {
                if line.starts_with("name = ") {
                    p.name = value(line).unwrap();
                } else if line.starts_with("version = ") {
                    p.version = value(line).unwrap();
                } else if line.starts_with("checksum = ") {
                    p.checksum = value(line);
                }
            }
        }
        Lock { packages }
    }
}

/// The crates a target's binary is built from (normal and build dependencies), by `cargo tree`.
fn crates_for(target: &str) -> BTreeSet<(String, String)> {
    let out = run(Command::new("cargo").current_dir(root()).args([
        "tree",
        "--locked",
        "--edges",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
        "--target",
        target,
    ]));
    out.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next()?.to_string();
            let version = words.next()?.trim_start_matches('v').to_string();
            Some((name, version))
        })
        .filter(|(name, _)| name != "storageos-operator")
        .collect()
}

#[test]
fn the_image_is_reproducible_multi_arch_with_its_sbom_and_pushes_by_digest() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first.oci.tar"), dir.path().join("second.oci.tar"));

    // Two builds of this commit: one digest.
    image_sh(&first, &[]);
    let port = free_port();
    let registry = Registry(
        crane()
            .args(["registry", "serve", "--address", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "crane registry serve did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let repo = format!("127.0.0.1:{port}/storageos/storageos-operator");
    let digest_file = dir.path().join("pushed");
    // The second build pushes.
    let printed = image_sh(
        &second,
        &[
            "--push",
            &format!("{repo}:v-test"),
            "--digest-file",
            digest_file.to_str().unwrap(),
        ],
    );
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    unpack(&first, &a);
    unpack(&second, &b);
    let top = |layout: &Path| json_file(&layout.join("index.json"))["manifests"][0].clone();
    let digest = top(&a)["digest"].as_str().unwrap().to_string();
    assert_eq!(
        top(&b)["digest"],
        digest.as_str(),
        "two builds of one commit gave two digests"
    );
    assert_eq!(blobs(&a), blobs(&b));

    // An index of linux/amd64 and linux/arm64.
    assert_eq!(top(&a)["mediaType"], "application/vnd.oci.image.index.v1+json");
    let index: Value = serde_json::from_slice(&blob(&a, &digest)).unwrap();
    let platforms: Vec<String> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["platform"]["os"].as_str().unwrap(),
                m["platform"]["architecture"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(platforms, ["linux/amd64", "linux/arm64"]);
    assert!(index["annotations"]["org.opencontainers.image.revision"].is_string());

    // The push kept the digest, and a pull back by digest gives the same image.
    let pushed = format!("{repo}@{digest}");
    assert_eq!(printed.trim(), pushed);
    assert_eq!(std::fs::read_to_string(&digest_file).unwrap().trim(), pushed);
    assert_eq!(run(crane().args(["digest", &format!("{repo}:v-test")])).trim(), digest);
    let pulled = dir.path().join("pulled");
    run(crane().args(["pull", "--format", "oci", &pushed]).arg(&pulled));
    let pulled_top = top(&pulled);
    assert_eq!(pulled_top["digest"], digest.as_str());
    assert_eq!(blobs(&pulled), blobs(&a), "the pulled image differs from the one built");

    // Each platform's image: its binary for its architecture, the loader and libraries for it,
    // and the SBOM of its target.
    let lock = cargo_lock();
    for (platform, triple, machine, loader) in [
        (
            "linux/amd64",
            "x86_64-unknown-linux-gnu",
            62u16,
            "lib64/ld-linux-x86-64.so.2",
        ),
        (
            "linux/arm64",
            "aarch64-unknown-linux-gnu",
            183u16,
            "lib/ld-linux-aarch64.so.1",
        ),
    ] {
        let fs = dir.path().join(platform.replace('/', "-"));
        std::fs::create_dir_all(&fs).unwrap();
        let mut export = crane()
            .args(["export", "--platform", platform, &pushed, "-"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let status = Command::new("tar")
            .arg("-x")
            .arg("-C")
            .arg(&fs)
            .stdin(export.stdout.take().unwrap())
            .status()
            .unwrap();
        assert!(export.wait().unwrap().success(), "crane export {platform} failed");
        assert!(status.success(), "crane export {platform} | tar -x failed");
        let bin = std::fs::read(fs.join("usr/local/bin/storageos-operator")).unwrap();
        assert_eq!(&bin[..4], b"\x7fELF");
        assert_eq!(
            u16::from_le_bytes([bin[18], bin[19]]),
            machine,
            "{platform}: wrong ELF machine"
        );
        // No linker build ID (it hashes the unstripped binary, whose debug information names
        // the checkout's path) and no path of this checkout.
        assert!(
            !bin.windows(18).any(|w| w == b".note.gnu.build-id"),
            "{platform}: the binary has a build ID"
        );
        let checkout = root().to_str().unwrap().as_bytes().to_vec();
        assert!(
            !bin.windows(checkout.len()).any(|w| w == checkout),
            "{platform}: the binary names the checkout"
        );
        assert!(fs.join(loader).exists(), "{platform}: no {loader}");
        // It runs from the image's own root filesystem (loader and libraries): natively, or
        // under qemu-aarch64 (installed by hack/tools.sh qemu) for arm64.
        let binary = fs.join("usr/local/bin/storageos-operator");
        let version = if platform == "linux/arm64" {
            support::dist::tools("qemu");
            run(Command::new("qemu-aarch64")
                .arg("-L")
                .arg(&fs)
                .arg(&binary)
                .arg("--version"))
        } else {
            run(Command::new(fs.join(loader))
                .arg("--library-path")
                .arg(fs.join("lib/x86_64-linux-gnu"))
                .arg(&binary)
                .arg("--version"))
        };
        assert_eq!(
            version.trim(),
            format!("storageos-operator {}", env!("CARGO_PKG_VERSION")),
            "{platform}"
        );
        let config: Value =
            serde_json::from_str(&run(crane().args(["config", "--platform", platform, &pushed]))).unwrap();
        assert_eq!(config["architecture"], platform.split('/').nth(1).unwrap());
        assert_eq!(config["config"]["User"], "65532:65532");

        let sbom_text = std::fs::read_to_string(fs.join("usr/share/doc/storageos-operator/sbom.cdx.json")).unwrap();
        // Nothing in it names this checkout: another clone of the commit builds the same image.
        assert!(
            !sbom_text.contains(root().to_str().unwrap()),
            "{platform}: the SBOM names the checkout's path"
        );
        let sbom: Value = serde_json::from_str(&sbom_text).unwrap();
        assert_eq!(sbom["bomFormat"], "CycloneDX");
        assert_eq!(sbom["metadata"]["component"]["name"], "storageos-operator");
        let mut listed = BTreeSet::new();
        for c in sbom["components"].as_array().unwrap() {
            let key = (
                c["name"].as_str().unwrap().to_string(),
                c["version"].as_str().unwrap().to_string(),
            );
            let Some(checksum) = lock.get(&key) else {
                panic!("{platform}: the SBOM lists {key:?}, which Cargo.lock does not hold");
            };
            // The hash is Cargo.lock's checksum of the crate file.
            if let Some(sum) = checksum {
                assert_eq!(c["hashes"][0]["content"], sum.as_str(), "{key:?}");
            }
            listed.insert(key);
        }
        let expected = crates_for(triple);
        let missing: Vec<_> = expected.difference(&listed).collect();
        assert!(
            missing.is_empty(),
            "{platform}: crates of Cargo.lock that the binary is built from are missing from the SBOM: {missing:?}"
        );
        assert!(listed.len() > 100, "{platform}: only {} crates listed", listed.len());
    }
    drop(registry);
}
