//! The checks only a node itself can answer, run by `storageos-operator node-check` in a
//! short-lived pod that `kubectl storageos preflight --node-checks` pins to each node StorageOS
//! will use: the kernel modules StorageOS loads, the mount propagation of `/var/lib/storageos`,
//! the free space under it, and ports 5701-5711 (free here, and reachable on the other nodes).
//!
//! The pod runs privileged with the host's PID and network namespaces and the host's root
//! filesystem mounted read-only at `/host`: the host's mount table is read from
//! `/proc/1/mountinfo`, its files (`/lib/modules`, `/var/lib/storageos`) under `/host`, and the
//! ports are the host's. It prints [`Findings`] as one JSON line (and writes them to the
//! termination message); [`findings_checks`] turns them into preflight's [`Check`]s. Everything
//! that reads text is a pure function, tested here; only [`probe`] touches the node.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Check, HOST_PORTS, Verdict, check, pass};

/// The kernel modules StorageOS's init container loads (LIO, TCMU and UIO).
pub const MODULES: [&str; 5] = ["target_core_mod", "tcm_loop", "target_core_user", "configfs", "uio"];
/// Where StorageOS keeps its data on each node.
pub const DATA_DIR: &str = "/var/lib/storageos";
/// Below this much free space under [`DATA_DIR`], FAIL...
pub const MIN_FREE_BYTES: u64 = 1 << 30;
/// ...and below this, WARN.
pub const LOW_FREE_BYTES: u64 = 10 << 30;
/// The most unreachable addresses a report lists (the termination message holds 4 KiB).
const MAX_LISTED: usize = 12;

/// Arguments of the hidden `node-check` subcommand (set by the plugin, not typed by users).
#[derive(Debug, Clone, clap::Args)]
pub struct NodeCheckArgs {
    /// The node's name, echoed in the findings.
    #[arg(long, default_value = "")]
    pub node: String,
    /// The host's root filesystem as this process sees it (a hostPath volume of `/`).
    #[arg(long, default_value = "/host")]
    pub root: PathBuf,
    /// The host's mount table (`/proc/1/mountinfo` with the host's PID namespace).
    #[arg(long, default_value = "/proc/1/mountinfo")]
    pub mountinfo: PathBuf,
    /// The other nodes' addresses, to connect to on ports 5701-5711 (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<String>,
    /// How long to keep ports 5701-5711 open and to retry the other nodes.
    #[arg(long, default_value = "20s", value_parser = crate::duration::parse_flag)]
    pub window: Duration,
    /// Where to write the findings besides stdout (the pod's termination message).
    #[arg(long, default_value = "/dev/termination-log")]
    pub message_file: PathBuf,
}

/// What a node reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Findings {
    pub node: String,
    /// `uname -r` of the node.
    pub kernel: String,
    pub modules: Vec<Module>,
    pub mount: Mount,
    pub free: Free,
    pub ports: Ports,
}

/// One kernel module and how it was found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Module {
    pub name: String,
    pub state: ModuleState,
}

/// Loaded now, built into the kernel, on disk for the init container to load, or none of these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ModuleState {
    Loaded,
    Builtin,
    Available,
    Missing,
    /// Not loaded, and the module directory could not be read.
    #[default]
    Unknown,
}

impl std::fmt::Display for ModuleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Loaded => "loaded",
            Self::Builtin => "built in",
            Self::Available => "available",
            Self::Missing => "missing",
            Self::Unknown => "unknown",
        })
    }
}

/// The mount holding [`DATA_DIR`] on the host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Mount {
    pub mount_point: String,
    pub shared: bool,
    pub error: Option<String>,
}

/// Free space for unprivileged use under [`DATA_DIR`] (or its nearest existing parent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Free {
    pub path: String,
    pub available_bytes: Option<u64>,
    pub error: Option<String>,
}

/// Ports 5701-5711: those that could not be opened here, and the other nodes' that could not be
/// reached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Ports {
    pub not_listening: Vec<String>,
    pub peers: usize,
    pub unreachable: Vec<String>,
    pub unreachable_count: usize,
}

/// The state of `name` from `/proc/modules`, whether `/sys/module/NAME` exists, and the
/// kernel's `modules.builtin` and `modules.dep` (None when unreadable).
pub fn module_state(
    name: &str,
    proc_modules: &str,
    in_sys: bool,
    builtin: Option<&str>,
    dep: Option<&str>,
) -> ModuleState {
    let loaded = proc_modules.lines().any(|l| l.split_whitespace().next() == Some(name));
    // A module file named `target-core-mod.ko` loads as `target_core_mod`.
    let names_it = |path: &str| {
        let file = path.rsplit('/').next().unwrap_or_default();
        let stem = file.split(".ko").next().unwrap_or_default();
        file.contains(".ko") && stem.replace('-', "_") == name
    };
    let listed = |text: &str, field: fn(&str) -> &str| text.lines().any(|l| names_it(field(l)));
    if loaded {
        ModuleState::Loaded
    } else if builtin.is_some_and(|b| listed(b, str::trim)) {
        ModuleState::Builtin
    } else if dep.is_some_and(|d| listed(d, |l| l.split(':').next().unwrap_or_default())) {
        ModuleState::Available
    } else if in_sys {
        // Built in without a modules.builtin to say so (some distributions' kernels).
        ModuleState::Builtin
    } else if builtin.is_none() && dep.is_none() {
        ModuleState::Unknown
    } else {
        ModuleState::Missing
    }
}

/// The mount of `mountinfo` holding `path` (the longest mount point that is `path` or a parent
/// of it), and whether it propagates (`shared:N` among its optional fields).
pub fn mount_of(mountinfo: &str, path: &str) -> Option<(String, bool)> {
    let within = |mp: &str| mp == "/" || path == mp || path.starts_with(&format!("{mp}/"));
    mountinfo
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let mp = fields.get(4)?.replace("\\040", " ");
            let optional = fields.get(6..)?.iter().take_while(|f| **f != "-");
            let shared = optional.clone().any(|f| f.starts_with("shared:"));
            within(&mp).then_some((mp, shared))
        })
        // The last of equal mount points is the one on top.
        .fold(None, |best: Option<(String, bool)>, m| match &best {
            Some(b) if b.0.len() > m.0.len() => best,
            _ => Some(m),
        })
}

/// Runs every probe on this node and returns the findings.
pub fn probe(args: &NodeCheckArgs) -> Findings {
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let kernel = read(Path::new("/proc/sys/kernel/osrelease"))
        .unwrap_or_default()
        .trim()
        .to_string();
    let proc_modules = read(Path::new("/proc/modules")).unwrap_or_default();
    let lib = args.root.join("lib/modules").join(&kernel);
    let builtin = read(&lib.join("modules.builtin"));
    let dep = read(&lib.join("modules.dep"));
    let modules = MODULES
        .iter()
        .map(|name| Module {
            name: name.to_string(),
            state: module_state(
                name,
                &proc_modules,
                Path::new("/sys/module").join(name).exists(),
                builtin.as_deref(),
                dep.as_deref(),
            ),
        })
        .collect();
    let mount = match std::fs::read_to_string(&args.mountinfo) {
        Ok(text) => match mount_of(&text, DATA_DIR) {
            Some((mount_point, shared)) => Mount {
                mount_point,
                shared,
                error: None,
            },
            None => Mount {
                error: Some(format!("no mount in {} holds {DATA_DIR}", args.mountinfo.display())),
                ..Mount::default()
            },
        },
        Err(e) => Mount {
            error: Some(format!("cannot read {}: {e}", args.mountinfo.display())),
            ..Mount::default()
        },
    };
    Findings {
        node: args.node.clone(),
        kernel,
        modules,
        mount,
        free: free(&args.root),
        ports: ports(&args.peers, args.window),
    }
}

/// Free space under [`DATA_DIR`] of the host root `root`, or under its nearest existing parent.
fn free(root: &Path) -> Free {
    let mut path = PathBuf::from(DATA_DIR);
    while !root.join(path.strip_prefix("/").unwrap_or(&path)).exists() {
        if !path.pop() {
            break;
        }
    }
    let shown = path.display().to_string();
    match available_bytes(&root.join(path.strip_prefix("/").unwrap_or(&path))) {
        Ok(bytes) => Free {
            path: shown,
            available_bytes: Some(bytes),
            error: None,
        },
        Err(e) => Free {
            path: shown,
            available_bytes: None,
            error: Some(e.to_string()),
        },
    }
}

/// `statvfs(2)`: the bytes available to unprivileged users on the filesystem of `path`.
#[allow(unsafe_code, reason = "statvfs(2) on a NUL-terminated path into a zeroed struct")]
fn available_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `c` is a valid NUL-terminated string and `st` a zeroed statvfs the call fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pointers live for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::useless_conversion, reason = "the field types differ between targets")]
    Ok(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}

/// Opens ports 5701-5711 here and connects to each peer on each, retrying until `window` ends;
/// with peers, keeps the ports open until then so that they can connect back.
fn ports(peers: &[String], window: Duration) -> Ports {
    let deadline = Instant::now() + window;
    let mut not_listening = Vec::new();
    let mut listeners = Vec::new();
    for port in host_ports() {
        match TcpListener::bind(("0.0.0.0", port)).and_then(|l| l.set_nonblocking(true).map(|()| l)) {
            Ok(l) => listeners.push(l),
            Err(e) => not_listening.push(format!("{port}: {e}")),
        }
    }
    let accept = std::thread::spawn(move || {
        while Instant::now() < deadline {
            for l in &listeners {
                while l.accept().is_ok() {}
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let mut pending: Vec<SocketAddr> = peers
        .iter()
        .filter_map(|p| p.parse::<std::net::IpAddr>().ok())
        .flat_map(|ip| host_ports().map(move |port| SocketAddr::new(ip, port)))
        .collect();
    let mut errors: std::collections::BTreeMap<SocketAddr, String> = Default::default();
    while !pending.is_empty() && Instant::now() < deadline {
        pending.retain(
            |addr| match TcpStream::connect_timeout(addr, Duration::from_millis(500)) {
                Ok(_) => {
                    errors.remove(addr);
                    false
                }
                Err(e) => {
                    errors.insert(*addr, e.to_string());
                    true
                }
            },
        );
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    if !peers.is_empty() {
        let _ = accept.join();
    }
    let unreachable: Vec<String> = pending
        .iter()
        .map(|a| format!("{a}: {}", errors.get(a).map(String::as_str).unwrap_or("not tried")))
        .collect();
    Ports {
        not_listening,
        peers: peers.len(),
        unreachable_count: unreachable.len(),
        unreachable: unreachable.into_iter().take(MAX_LISTED).collect(),
    }
}

/// [`HOST_PORTS`] as port numbers.
fn host_ports() -> impl Iterator<Item = u16> + Clone {
    HOST_PORTS.filter_map(|p| u16::try_from(p).ok())
}

/// `node-check`: probes, prints the findings as one JSON line and writes them to
/// `--message-file` (best effort: the kubelet reads it as the termination message).
pub fn node_check(args: &NodeCheckArgs) -> Result<(), String> {
    let findings = probe(args);
    let line = serde_json::to_string(&findings).map_err(|e| format!("cannot print the findings: {e}"))?;
    println!("{line}");
    let _ = std::fs::write(&args.message_file, &line);
    Ok(())
}

/// The preflight checks of `node`'s findings: `node/NAME/modules`, `.../mount-propagation`,
/// `.../free-space` and `.../ports`.
pub fn findings_checks(node: &str, f: &Findings) -> Vec<Check> {
    let key = |what: &str| format!("node/{node}/{what}");
    let mut out = Vec::new();
    let with = |state| {
        f.modules
            .iter()
            .filter(|m| m.state == state)
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
    };
    let (missing, unknown) = (with(ModuleState::Missing), with(ModuleState::Unknown));
    let summary = f
        .modules
        .iter()
        .map(|m| format!("{} {}", m.name, m.state))
        .collect::<Vec<_>>()
        .join(", ");
    out.push(if !missing.is_empty() {
        check(
            key("modules"),
            Verdict::Fail,
            format!("kernel {}: not found: {} ({summary})", f.kernel, missing.join(", ")),
            "install the kernel's extra modules on the node (linux-modules-extra-$(uname -r) on Ubuntu, \
             linux-image-extra on older ones; kernel-modules-extra on RHEL-likes), or a kernel with LIO (CONFIG_TARGET_CORE, CONFIG_LOOPBACK_TARGET, CONFIG_TCM_USER2, CONFIG_CONFIGFS_FS, CONFIG_UIO)",
        )
    } else if !unknown.is_empty() {
        check(
            key("modules"),
            Verdict::Warn,
            format!(
                "kernel {}: not loaded, and /lib/modules/{} cannot be read: {}",
                f.kernel,
                f.kernel,
                unknown.join(", ")
            ),
            "check on the node: modprobe -n -v target_core_user tcm_loop uio",
        )
    } else {
        pass(
            key("modules"),
            format!("kernel {}: {summary} (StorageOS's init container loads those available)", f.kernel),
        )
    });
    out.push(match (&f.mount.error, f.mount.shared) {
        (Some(e), _) => check(
            key("mount-propagation"),
            Verdict::Warn,
            e.clone(),
            format!("check on the node: findmnt -o TARGET,PROPAGATION --target {DATA_DIR}"),
        ),
        (None, true) => pass(
            key("mount-propagation"),
            format!("{DATA_DIR} is on the shared mount {}", f.mount.mount_point),
        ),
        (None, false) => check(
            key("mount-propagation"),
            Verdict::Fail,
            format!(
                "{DATA_DIR} is on {}, a private mount: volumes StorageOS mounts would not reach the kubelet",
                f.mount.mount_point
            ),
            format!(
                "on the node: mount --make-rshared {} (systemd does this at boot; make it permanent in the node's init)",
                f.mount.mount_point
            ),
        ),
    });
    out.push(match (f.free.available_bytes, &f.free.error) {
        (Some(b), _) if b < MIN_FREE_BYTES => check(
            key("free-space"),
            Verdict::Fail,
            format!("{} free under {}", gib(b), f.free.path),
            format!("free space on the filesystem of {DATA_DIR} (at least 1 GiB; 10 GiB or more for volumes)"),
        ),
        (Some(b), _) if b < LOW_FREE_BYTES => check(
            key("free-space"),
            Verdict::Warn,
            format!("{} free under {}", gib(b), f.free.path),
            format!("StorageOS keeps volume data under {DATA_DIR}: give that filesystem 10 GiB or more"),
        ),
        (Some(b), _) => pass(key("free-space"), format!("{} free under {}", gib(b), f.free.path)),
        (None, e) => check(
            key("free-space"),
            Verdict::Warn,
            format!(
                "cannot read the free space under {}: {}",
                f.free.path,
                e.as_deref().unwrap_or("unknown error")
            ),
            format!("check on the node: df -h {DATA_DIR}"),
        ),
    });
    let p = &f.ports;
    out.push(if !p.not_listening.is_empty() {
        check(
            key("ports"),
            Verdict::Fail,
            format!("cannot listen on the node: {}", p.not_listening.join("; ")),
            "stop what holds these ports on the node (ss -ltnp 'sport >= 5701 and sport <= 5711'), unless it is StorageOS itself",
        )
    } else if p.unreachable_count > 0 {
        let more = p.unreachable_count.saturating_sub(p.unreachable.len());
        check(
            key("ports"),
            Verdict::Fail,
            format!(
                "listening on 5701-5711; cannot reach {}{}",
                p.unreachable.join("; "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            ),
            "allow TCP 5701-5711 between the nodes (firewall, security groups, NetworkPolicy on host networking)",
        )
    } else if p.peers == 0 {
        pass(key("ports"), "listening on 5701-5711; no other node to reach")
    } else {
        pass(
            key("ports"),
            format!("listening on 5701-5711 and reached {} other node(s) on each", p.peers),
        )
    });
    out
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const PROC_MODULES: &str = "tcm_loop 28672 0 - Live 0x0000000000000000\n\
        target_core_mod 417792 1 tcm_loop, Live 0x0000000000000000\n";
    const BUILTIN: &str = "kernel/fs/configfs/configfs.ko\nkernel/drivers/uio/uio.ko\n";
    const DEP: &str = "kernel/drivers/target/target_core_user.ko: kernel/drivers/uio/uio.ko\n\
        kernel/drivers/target/loopback/tcm_loop.ko.xz: kernel/drivers/target/target_core_mod.ko.xz\n";

    #[test]
    fn modules_loaded_builtin_available_missing_or_unknown() {
        let state = |name, dep| module_state(name, PROC_MODULES, false, Some(BUILTIN), dep);
        assert_eq!(state("tcm_loop", Some(DEP)), ModuleState::Loaded);
        assert_eq!(state("target_core_mod", None), ModuleState::Loaded);
        assert_eq!(state("configfs", Some(DEP)), ModuleState::Builtin);
        assert_eq!(state("target_core_user", Some(DEP)), ModuleState::Available);
        assert_eq!(state("target_core_user", Some("")), ModuleState::Missing);
        // A loaded name is not mistaken for a prefix of another.
        assert_eq!(
            module_state("uio", "uio_pdrv 1 0 - Live 0x0\n", false, Some(""), Some("")),
            ModuleState::Missing
        );
        assert_eq!(module_state("uio", "", true, None, None), ModuleState::Builtin);
        assert_eq!(module_state("uio", "", false, None, None), ModuleState::Unknown);
        assert_eq!(
            module_state(
                "target_core_mod",
                "",
                false,
                None,
                Some("kernel/x/target-core-mod.ko.zst:\n")
            ),
            ModuleState::Available
        );
    }

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:26 / /var rw,relatime - ext4 /dev/sdb1 rw
31 30 0:27 / /var/lib/storageos-old rw shared:9 - ext4 /dev/sdc1 rw
32 22 0:28 / /proc rw master:3 - proc proc rw";

    #[test]
    fn the_mount_holding_the_data_dir_and_its_propagation() {
        assert_eq!(mount_of(MOUNTINFO, DATA_DIR), Some(("/var".into(), false)));
        assert_eq!(mount_of(MOUNTINFO, "/srv/x"), Some(("/".into(), true)));
        assert_eq!(
            mount_of(MOUNTINFO, "/var/lib/storageos-old/a"),
            Some(("/var/lib/storageos-old".into(), true))
        );
        assert_eq!(mount_of("", DATA_DIR), None);
        assert_eq!(mount_of("garbage\n", DATA_DIR), None);
    }

    fn findings() -> Findings {
        Findings {
            node: "n1".into(),
            kernel: "6.1.0".into(),
            modules: MODULES
                .iter()
                .map(|n| Module {
                    name: n.to_string(),
                    state: ModuleState::Available,
                })
                .collect(),
            mount: Mount {
                mount_point: "/".into(),
                shared: true,
                error: None,
            },
            free: Free {
                path: DATA_DIR.into(),
                available_bytes: Some(50 << 30),
                error: None,
            },
            ports: Ports {
                peers: 2,
                ..Ports::default()
            },
        }
    }

    fn verdicts(f: &Findings) -> Vec<(String, Verdict)> {
        findings_checks("n1", f)
            .into_iter()
            .map(|c| (c.check, c.result))
            .collect()
    }

    #[test]
    fn healthy_findings_pass_and_round_trip_through_json() {
        let f = findings();
        let text = serde_json::to_string(&f).unwrap();
        assert!(text.len() < 4096, "fits a termination message: {}", text.len());
        assert_eq!(serde_json::from_str::<Findings>(&text).unwrap(), f);
        assert!(
            verdicts(&f).iter().all(|(_, v)| *v == Verdict::Pass),
            "{:?}",
            verdicts(&f)
        );
        // A report from an older or newer probe still parses.
        assert_eq!(serde_json::from_str::<Findings>("{}").unwrap(), Findings::default());
    }

    #[test]
    fn each_problem_fails_or_warns_with_its_fix() {
        let mut f = findings();
        f.modules[2].state = ModuleState::Missing;
        f.mount.shared = false;
        f.free.available_bytes = Some(5 << 30);
        f.ports.unreachable = vec!["10.0.0.2:5705: connection refused".into()];
        f.ports.unreachable_count = 3;
        let checks = findings_checks("n1", &f);
        let by = |name: &str| checks.iter().find(|c| c.check == format!("node/n1/{name}")).unwrap();
        assert_eq!(by("modules").result, Verdict::Fail);
        assert!(
            by("modules").message.contains("target_core_user"),
            "{}",
            by("modules").message
        );
        assert_eq!(by("mount-propagation").result, Verdict::Fail);
        assert!(by("mount-propagation").fix.contains("--make-rshared /"));
        assert_eq!(by("free-space").result, Verdict::Warn);
        assert_eq!(by("ports").result, Verdict::Fail);
        assert!(by("ports").message.contains("and 2 more"), "{}", by("ports").message);
        f.ports.not_listening = vec!["5705: Address in use".into()];
        f.free.available_bytes = Some(1 << 20);
        let v = verdicts(&f);
        assert!(v.contains(&("node/n1/ports".into(), Verdict::Fail)));
        assert!(v.contains(&("node/n1/free-space".into(), Verdict::Fail)));
    }

    #[test]
    fn free_space_walks_up_to_an_existing_parent() {
        let dir = tempfile::tempdir().unwrap();
        let f = free(dir.path());
        assert_eq!(f.path, "/");
        assert!(f.available_bytes.is_some(), "{f:?}");
        std::fs::create_dir_all(dir.path().join("var/lib")).unwrap();
        assert_eq!(free(dir.path()).path, "/var/lib");
    }
}
