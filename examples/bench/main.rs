//! The benchmark at scale (results in docs/benchmarks.md): for each node count, a fresh local
//! control plane with that many kwok nodes, the StorageOS simulator, and the operator and the
//! api-manager, each a process acting as its own ServiceAccount. A cargo example, so it is
//! never part of the shipped binary:
//!
//! ```sh
//! cargo run --release --features simulator --example bench -- --nodes 1000
//! ```
//!
//! It builds the operator binary of its own profile (`--release`: the release build, which is
//! what the figures are about) with the simulator, unless `--no-build`: a build of its own, not
//! the one cargo made for this example, so the dev-dependencies' features (tokio's test-util)
//! stay out of the binary measured, as out of the one shipped. What it measures per
//! size is in `size.rs`; docs/benchmarks.md says how each figure is taken. It writes
//! OUT/results.json, OUT/table.md, PNG plots (when gnuplot is installed) and, unless
//! `--no-doc`, the generated part of docs/benchmarks.md (between its bench markers) and
//! docs/benchmarks/*.png. Everything it starts (processes, the plane) is stopped on exit,
//! Ctrl-C and errors included.
//!
//! Its plane is its own (K8S_STATE, K8S_PORT, ETCD_PORT default to `<cache>/bench-plane`,
//! 17443, 25790, apart from the test plane); ports K8S_PORT+10..+13 serve the simulator, the
//! metrics and the webhook.

mod audit;
mod load;
mod measure;
mod mirrors;
mod plane;
mod processes;
mod report;
mod results;
mod size;
mod webhook_direct;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::json;

/// How the bench builds the operator binary it runs: with the simulator (`simulate`), which
/// a plain build lacks (tests/release_features.rs checks this line).
const BUILD_OPERATOR: [&str; 6] = [
    "build",
    "--quiet",
    "--features",
    "simulator",
    "--bin",
    "storageos-operator",
];

/// The kubelet's default --max-pods.
const KUBELET_MAX_PODS: usize = 110;

/// Benchmarks at scale; see docs/benchmarks.md.
#[derive(Parser, Clone)]
#[command(name = "bench")]
pub struct Args {
    /// Node counts, one fresh plane each.
    #[arg(long, value_delimiter = ',', default_value = "3,100,1000")]
    pub nodes: Vec<usize>,
    /// Pods per node at every size (a realistic density well below the kubelet's 110).
    #[arg(long, default_value_t = 10)]
    pub pods_per_node: usize,
    /// Pods at the largest size instead (smaller sizes get as many per node).
    #[arg(long)]
    pub pods: Option<usize>,
    /// StorageOS volumes at the largest size (smaller in proportion); default 2 per 10 pods.
    #[arg(long)]
    pub volumes: Option<usize>,
    /// Namespaces at the largest size (smaller in proportion); default one per 100 pods.
    #[arg(long)]
    pub namespaces: Option<usize>,
    /// Allow more than 110 pods a node (fencing and memory figures of a density no kubelet runs).
    #[arg(long)]
    pub force_density: bool,
    /// Output directory (default target/bench/<date>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Leave docs/benchmarks.md and docs/benchmarks/ alone.
    #[arg(long)]
    pub no_doc: bool,
    #[arg(long, default_value_t = 20)]
    pub fence_trials: usize,
    /// Skip fencing while the api-manager is busy.
    #[arg(long)]
    pub no_fence_busy: bool,
    /// Fresh clusters at ≤ 100 nodes (one above: each costs minutes of DaemonSet pod churn).
    #[arg(long, default_value_t = 10)]
    pub cluster_trials: usize,
    /// Shared volumes of the shared-volume pass at the largest size (0: none).
    #[arg(long, default_value_t = 1000)]
    pub shared: usize,
    /// Webhook load, requests a second.
    #[arg(long, default_value_t = 200)]
    pub rps: u64,
    #[arg(long, default_value_t = 30)]
    pub webhook_seconds: u64,
    /// At most this long for the api-manager to settle before the idle minute, s.
    #[arg(long, default_value_t = 1800)]
    pub settle_max: u64,
    /// Only write the report from OUT.
    #[arg(long)]
    pub report_only: bool,
    /// Use the operator binary already built.
    #[arg(long)]
    pub no_build: bool,
}

impl Args {
    pub fn max_nodes(&self) -> usize {
        self.nodes.iter().copied().max().unwrap_or(1).max(1)
    }

    /// Pods at size `n` (see --pods, --pods-per-node); at least 10.
    pub fn pods_at(&self, n: usize) -> usize {
        let p = match self.pods {
            Some(p) => p * n / self.max_nodes(),
            None => self.pods_per_node * n,
        };
        p.max(10)
    }

    /// StorageOS volumes at size `n` with `pods` pods (see --volumes); at least 1.
    pub fn volumes_at(&self, n: usize, pods: usize) -> usize {
        match self.volumes {
            Some(v) => v * n / self.max_nodes(),
            None => pods / 5,
        }
        .max(1)
    }

    /// Namespaces at size `n` with `pods` pods (see --namespaces).
    pub fn namespaces_at(&self, n: usize, pods: usize) -> usize {
        match self.namespaces {
            Some(ns) => (ns * n).div_ceil(self.max_nodes()),
            None => pods.div_ceil(100),
        }
    }
}

/// Progress on stderr, with the seconds since the start.
pub fn step(t0: Instant, msg: &str) {
    eprintln!("[bench {:4}s] {msg}", t0.elapsed().as_secs());
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = tokio::select! {
        r = run(args) => r,
        // Dropping `run` kills every child and stops the plane.
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("[bench] error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<()> {
    let t0 = Instant::now();
    let root = root();
    for &n in &args.nodes {
        let p = args.pods_at(n);
        if p > KUBELET_MAX_PODS * n && !args.force_density {
            bail!(
                "{p} pods on {n} nodes is {} a node, more than the kubelet's default maximum of \
                 {KUBELET_MAX_PODS}; lower --pods or --pods-per-node, or pass --force-density",
                p / n.max(1)
            );
        }
    }
    let out = match &args.out {
        Some(o) => std::path::absolute(o)?,
        None => root
            .join("target/bench")
            .join(chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string()),
    };
    if args.report_only {
        return report_step(t0, &out, &root, !args.no_doc);
    }
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;

    let bin = operator_binary()?;
    if !args.no_build {
        let release = !cfg!(debug_assertions);
        step(
            t0,
            &format!(
                "building the operator binary (cargo build{} --features simulator)",
                if release { " --release" } else { "" }
            ),
        );
        let mut cargo = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cargo.current_dir(&root).args(BUILD_OPERATOR);
        if release {
            cargo.arg("--release");
        }
        let status = cargo.status().context("run cargo build")?;
        if !status.success() {
            bail!("cargo build failed ({status})");
        }
    }
    if !bin.is_file() {
        bail!("{} missing (run without --no-build)", bin.display());
    }

    let versions = plane::versions(&root)?;
    let v = |k: &str| versions.get(k).cloned().unwrap_or_default();
    write_machine(&args, &out, &root, &bin, &v)?;
    let policy = out.join("audit-policy.yaml");
    std::fs::write(&policy, audit::POLICY)?;

    let mut plane = plane::Plane::from_env(&root, &v("K8S_VERSION"))?;
    for &n in &args.nodes {
        size::run(&args, t0, &mut plane, &policy, &bin, &out, n).await?;
    }
    report_step(t0, &out, &root, !args.no_doc)?;
    step(t0, &format!("finished in {} s", t0.elapsed().as_secs()));
    Ok(())
}

/// The operator binary beside this example's directory (target/<profile>/examples/bench →
/// target/<profile>/storageos-operator): the same profile as the bench itself.
fn operator_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("this executable's path")?;
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .context("this executable's profile directory")?;
    Ok(profile.join("storageos-operator"))
}

fn report_step(t0: Instant, out: &Path, root: &Path, doc: bool) -> Result<()> {
    step(t0, &format!("report: {0}/results.json, {0}/table.md", out.display()));
    let table = report::write(out, root, doc)?;
    print!("{table}");
    Ok(())
}

fn command_line(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The machine, versions and load, for the report.
fn write_machine(args: &Args, out: &Path, root: &Path, bin: &Path, v: &dyn Fn(&str) -> String) -> Result<()> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let root_s = root.to_string_lossy();
    let mut commit = command_line("git", &["-C", &root_s, "rev-parse", "--short", "HEAD"]);
    let clean = std::process::Command::new("git")
        .args(["-C", &root_s, "diff", "--quiet", "HEAD", "--", "src"])
        .status()
        .is_ok_and(|s| s.success());
    if !clean {
        commit.push_str("-dirty");
    }
    let sizes: Vec<String> = args.nodes.iter().map(ToString::to_string).collect();
    let machine = json!({
        "date": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "memory_gib": (mem_kib / 1_048_576.0 * 10.0).round() / 10.0,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "rustc": command_line("rustc", &["--version"]),
        "operator": command_line(&bin.to_string_lossy(), &["--version"]),
        "commit": commit,
        "kubernetes": v("K8S_VERSION"), "etcd": v("ETCD_VERSION"), "kwok": v("KWOK_VERSION"),
        "sizes": sizes.join(","),
        "pods_at_largest": args.pods_at(args.max_nodes()),
        "pods_flag": args.pods.map(|p| p.to_string()).unwrap_or_default(),
        "volumes_flag": args.volumes.map(|p| p.to_string()).unwrap_or_default(),
        "namespaces_flag": args.namespaces.map(|p| p.to_string()).unwrap_or_default(),
        "pods_per_node": args.pods_per_node,
        "load_at_start": measure::loadavg(),
    });
    std::fs::write(out.join("machine.json"), serde_json::to_string_pretty(&machine)?)?;
    Ok(())
}
