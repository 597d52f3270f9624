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
