//! `storageos-operator simulate` runs as a process and answers on the address it was given.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code may fail loudly

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

/// Kills the child even if an assertion fails.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn simulate_serves_login_on_the_given_address() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut child = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
            .args([
                "simulate",
                "--listen",
                &addr,
                "--username",
                "admin",
                "--password",
                "s3cret",
                "--token-ttl",
                "2m",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let resp = loop {
        let attempt = http
            .post(format!("http://{addr}/v2/auth/login"))
            .json(&json!({"username": "admin", "password": "s3cret"}))
            .send()
            .await;
        match attempt {
            Ok(r) => break r,
            Err(e) => {
                assert!(child.0.try_wait().unwrap().is_none(), "simulate exited early");
                assert!(Instant::now() < deadline, "simulate never answered: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(resp.status().as_u16(), 200);
    let auth = resp.headers()["authorization"].to_str().unwrap().to_string();
    assert!(auth.starts_with("Bearer "), "{auth}");
    assert_eq!(resp.headers()["authorization-expires-seconds"], "120");
    let nodes = http
        .get(format!("http://{addr}/v2/nodes"))
        .header("authorization", auth)
        .send()
        .await
        .unwrap();
    assert_eq!(nodes.status().as_u16(), 200);
    child.0.kill().unwrap();
    let status = child.0.wait().unwrap();
    assert!(!status.success());
}

#[test]
fn simulate_refuses_a_bad_token_ttl() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_storageos-operator"))
        .args(["simulate", "--listen", "127.0.0.1:0", "--token-ttl", "soon"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid duration"), "{stderr}");
}
