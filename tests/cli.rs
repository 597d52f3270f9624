//! The binary as a kubectl user runs it: connection failures name the server, the kubeconfig and
//! its context; output directories are created and nothing is written outside them; a closed pipe
//! ends the output quietly; the plugin takes the Go plugin's flags or refuses them naming the
//! replacement.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn bin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run the binary")
}

fn kubeconfig(dir: &Path, server: &str) -> String {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server}\"}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: my-context, context: {{cluster: c, user: u}}}}]\n\
             current-context: my-context\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn run_with_an_unreachable_server_names_it_with_the_kubeconfig_and_context() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = format!("https://127.0.0.1:{port}");
    let path = kubeconfig(dir.path(), &server);
    for args in [
        vec!["run", "--kubeconfig", path.as_str(), "--metrics-addr", "127.0.0.1:0"],
        vec!["api-manager", "-kubeconfig", path.as_str(), "-metrics-addr=127.0.0.1:0"],
    ] {
        let out = bin(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr.contains(&format!("cannot reach the Kubernetes API server {server}")),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("kubeconfig {path}, context my-context")),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("leader election"),
            "not blamed on leader election: {stderr}"
        );
    }
}

#[test]
fn a_kubeconfig_that_does_not_exist_is_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
        .args(["run", "--metrics-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("KUBECONFIG names /nonexistent/kubeconfig, which does not exist"),
        "{stderr}"
    );
}

#[test]
fn output_directories_are_created_and_nothing_is_written_outside() {
    let dir = tempfile::tempdir().unwrap();
    let crds = dir.path().join("a/b/crds");
    let out = bin(&["crds", "--out-dir", crds.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(crds.join("storageos.com_storageosclusters.yaml").is_file());

    let deploy = dir.path().join("x/deploy");
    let out = bin(&["manifests", "--out-dir", deploy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written: Vec<_> = std::fs::read_dir(dir.path().join("x"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(written, vec!["deploy"], "only the --out-dir itself");
    assert!(deploy.join("operator.yaml").is_file());

    let olm = dir.path().join("bundle");
    let out = bin(&[
        "manifests",
        "--out-dir",
        deploy.to_str().unwrap(),
        "--olm-dir",
        olm.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(olm.join("metadata/annotations.yaml").is_file());
}

#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    for args in [
        &["crds"][..],
        &["manifests"][..],
        &["render", "-f", "deploy/examples/storageoscluster.yaml"][..],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 64];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // The read end is closed here, as `| head -c 64` would.
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}

#[test]
fn the_drain_guard_waits_for_sigterm_and_exits_zero() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
        .arg("drain-guard")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the drain guard");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "the guard waits");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn the_plugin_takes_a_go_flag_with_a_notice_and_refuses_one_naming_the_replacement() {
    let plugin = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kubectl-storageos"))
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .expect("run the plugin")
    };
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-kubeconfig").display().to_string();
    // Parsed: the notice, then the command runs (and stops at the missing kubeconfig).
    let out = plugin(&["--kubeconfig", &missing, "install", "--skip-stos-cluster", "--dry-run"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("note: --skip-stos-cluster is the Go plugin's spelling; this plugin's is --skip-cluster\n"),
        "{stderr}"
    );
    assert!(stderr.contains("no-kubeconfig"), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // Refused before anything runs, naming what to use.
    let out = plugin(&["--kubeconfig", &missing, "install", "--stos-version", "v2.5.0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --stos-version is a flag of the Go kubectl-storageos plugin;")
            && stderr.contains("kubectl storageos upgrade --version VERSION"),
        "{stderr}"
    );
}
