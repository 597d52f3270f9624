//! What the distribution tests share (`dist_chart`, `dist_image`, `k8s/helm`): running a tool
//! and failing with its output, and the tools the project's scripts build or install
//! (`hack/tools.sh`), found where those scripts cache them.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::repo_root;

/// Runs `cmd` and returns its stdout; panics with its output when it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `hack/tools.sh WHAT`: builds or installs a tool on first use; returns what it prints.
pub fn tools(what: &str) -> String {
    run(Command::new("bash").arg(repo_root().join("hack/tools.sh")).arg(what))
}

/// The project's cache directory (`STORAGEOS_CACHE`, default `~/.cache/storageos-operator`).
pub fn cache() -> PathBuf {
    std::env::var_os("STORAGEOS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/storageos-operator"))
}

/// helm or crane, as `hack/tools.sh go` built them.
pub fn go_tool(name: &str) -> Command {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    Command::new(DIR.get_or_init(|| PathBuf::from(tools("go").trim())).join(name))
}

/// `helm uninstall RELEASE -n NAMESPACE` with `extra` flags, for clean-up on drop: runs the helm
/// of `hack/tools.sh go` through bash, never panics, and ignores the outcome (the release may
/// be gone already).
pub fn helm_uninstall_quietly(release: &str, namespace: &str, extra: &str) {
    let _ = std::panic::catch_unwind(|| {
        let _ = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "helm=$(hack/tools.sh go)/helm && $helm --kubeconfig {k} uninstall {release} -n {namespace} {extra} >/dev/null 2>&1; true",
                k = super::kubeconfig_path().display()
            ))
            .current_dir(repo_root())
            .status();
    });
}

/// Runs helm (of `hack/tools.sh go`) against the plane as admin; returns its stdout, panics with
/// its output when it fails.
pub fn helm(args: &[&str]) -> String {
    run(go_tool("helm")
        .arg("--kubeconfig")
        .arg(super::kubeconfig_path())
        .args(args))
}
