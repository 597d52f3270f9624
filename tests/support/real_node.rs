//! A plane with a real kubelet node (tests/k8s_real_node.rs): `hack/k8s.sh up` with
//! `REAL_NODES=1`, on ports and in a state directory of this process, stopped when it ends. The
//! operator's image (the debug build, packed by `hack/image.sh --debug`) is imported into the
//! node's runtime under the name `deploy/operator.yaml` gives it, so the install applies as a
//! user applies it.
//!
//! A host that cannot run a real node (not root, no bridge, no cgroups, ...) is named by
//! `hack/k8s.sh real-node-check`; only then are these tests reported as not run, with its reasons
//! (docs/real-node.md lists every requirement). Anything else that goes wrong fails them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::faults::OwnPlane;
use super::repo_root;

static REAL: OnceLock<OwnPlane> = OnceLock::new();

/// The kubeconfig of this process's real-node plane, once [`plane`] has started it.
pub fn own_plane_kubeconfig() -> Option<PathBuf> {
    REAL.get().map(|p| p.state().join("kubeconfig"))
}

/// Why this host cannot run a real node, when it cannot (the output of
/// `hack/k8s.sh real-node-check`); `None` when it can.
pub fn host_cannot_run_a_real_node() -> Option<String> {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/k8s.sh"))
        .arg("real-node-check")
        .output()
        .expect("run hack/k8s.sh real-node-check");
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The plane with its real node, started on first use, with the operator's image in the node's
/// runtime.
pub fn plane() -> &'static OwnPlane {
    REAL.get_or_init(|| {
        let image = build_image();
        let plane = OwnPlane::start_with("real-node", true);
        let out = plane
            .k8s_sh("load-image")
            .arg(&image)
            .output()
            .expect("run hack/k8s.sh load-image");
        assert!(
            out.status.success(),
            "importing {} into the real node failed:\n{}",
            image.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        plane
    })
}

/// The operator's image as a user's `kubectl apply -f deploy/operator.yaml` names it.
pub fn operator_image() -> String {
    storageos_operator::render::DEFAULT_OPERATOR_IMAGE.to_string()
}

/// `hack/image.sh --debug` of the binary cargo built for the tests, tagged fully qualified (`docker.io/...`: the name the kubelet asks
/// the runtime for when a pod names `storageos/storageos-operator:TAG`).
fn build_image() -> PathBuf {
    let out_file = repo_root().join("target/image/storageos-operator-debug.oci.tar");
    let out = Command::new("bash")
        .arg(repo_root().join("hack/image.sh"))
        .args(["--debug", "--tag", &qualified(&operator_image()), "--out"])
        .arg(&out_file)
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_storageos-operator"))
        .output()
        .expect("run hack/image.sh --debug");
    assert!(
        out.status.success(),
        "hack/image.sh --debug failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out_file
}

/// `name` as container runtimes store it: `docker.io/` for a Docker Hub name without a registry,
/// `library/` for an official image.
pub fn qualified(name: &str) -> String {
    let first = name.split('/').next().unwrap_or_default();
    if name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost") {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    }
}

/// The node runtime's socket (for `ctr`).
pub fn containerd_socket() -> PathBuf {
    plane().state().join("node/containerd/containerd.sock")
}

/// The host PID of the container `container_id` (a pod status' `containerd://ID`, without the
/// prefix), from the node's runtime.
pub fn container_pid(container_id: &str) -> u32 {
    let out = Command::new("ctr")
        .arg("--address")
        .arg(containerd_socket())
        .args(["-n", "k8s.io", "tasks", "ls"])
        .output()
        .expect("run ctr tasks ls");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(container_id)).then(|| f.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no task {container_id} in the node's runtime:\n{text}"))
}

/// A file of the repository with `IMAGE` replaced by the operator's image.
pub fn manifest(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path))
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
        .replace("image: IMAGE", &format!("image: {}", operator_image()))
}

/// `kubectl` against the real-node plane.
pub fn kubectl(args: &[&str]) -> std::process::Output {
    Command::new(super::kubectl())
        .arg("--kubeconfig")
        .arg(plane().state().join("kubeconfig"))
        .args(args)
        .output()
        .expect("run kubectl")
}

/// `kubectl apply --server-side -f -` of `yaml`; panics with kubectl's answer on failure.
pub fn apply_yaml(yaml: &str) {
    use std::io::Write;
    let mut child = Command::new(super::kubectl())
        .arg("--kubeconfig")
        .arg(plane().state().join("kubeconfig"))
        .args(["apply", "--server-side", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kubectl apply");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(yaml.as_bytes())
        .expect("write manifest");
    let out = child.wait_with_output().expect("kubectl apply");
    assert!(
        out.status.success(),
        "kubectl apply failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The last `n` lines of a plane log (`kubelet`, `containerd`, ...).
pub fn plane_log(name: &str, n: usize) -> String {
    let path: &Path = &plane().state().join("logs").join(format!("{name}.log"));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
