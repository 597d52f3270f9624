//! The Go plugin's flags (storageos/kubectl-storageos), which former users type from habit and
//! from old runbooks. Before clap parses the command line, each Go flag that means something
//! here is rewritten to this plugin's spelling, with a one-line notice on stderr; any other is
//! refused with what to use instead (or why nothing is needed), rather than clap's bare
//! "unexpected argument". docs/plugin.md has the same table.

use std::ffi::OsString;

/// The name of the TLS Secret the Go plugin's `--etcd-tls-enabled` used by default.
pub const GO_ETCD_SECRET: &str = "storageos-etcd-secret";

/// What a Go flag becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Meaning {
    /// This flag of ours, with the Go flag's value when it takes one.
    Flag(&'static str),
    /// `--namespace`: the Go plugin's operator and cluster namespaces, which are one here.
    Namespace,
    /// `--etcd-tls-enabled`: `--etcd-tls-secret` with `--etcd-secret-name`'s value, or
    /// [`GO_ETCD_SECRET`].
    EtcdTlsEnabled,
    /// `--etcd-secret-name`: used by `--etcd-tls-enabled`, ignored without it (as in Go).
    EtcdSecretName,
    /// preflight's `--format human|json|yaml`: `--output table|json|yaml`.
    Format,
    /// Refused; the text says what to use instead, or why nothing is needed.
    Refused(&'static str),
}

/// One Go flag of some Go commands.
#[derive(Clone, Copy, Debug)]
pub struct GoFlag {
    /// The Go flag's name, without `--`.
    pub name: &'static str,
    /// The commands (of this plugin, named as in Go) the row is for.
    pub commands: &'static [&'static str],
    /// Whether it takes a value (a Go string flag) rather than being a switch.
    pub takes_value: bool,
    /// What it becomes.
    pub meaning: Meaning,
}

const fn row(name: &'static str, commands: &'static [&'static str], takes_value: bool, meaning: Meaning) -> GoFlag {
    GoFlag {
        name,
        commands,
        takes_value,
        meaning,
    }
}

const INSTALL: &[&str] = &["install"];
const UNINSTALL: &[&str] = &["uninstall"];
const UPGRADE: &[&str] = &["upgrade"];
const PREFLIGHT: &[&str] = &["preflight"];
const BUNDLE: &[&str] = &["bundle"];
const CHANGES: &[&str] = &["install", "uninstall", "upgrade"];
const INSTALLS: &[&str] = &["install", "upgrade"];
const BUILT_IN: Meaning = Meaning::Refused(
    "not needed: the operator's objects are built into this plugin (another operator image: install --image, upgrade --operator --operator-image)",
);
const ETCD_BUILT_IN: Meaning = Meaning::Refused(
    "not needed: the evaluation etcd of --include-etcd is built in, without an etcd operator; for your own etcd pass --etcd-endpoints",
);
const ETCD_SIZING: Meaning = Meaning::Refused(
    "not available: the evaluation etcd of --include-etcd is one member and not for production; run your own etcd and pass --etcd-endpoints",
);
const PORTAL: Meaning = Meaning::Refused("not available: this operator does not run the StorageOS portal manager");
const UPGRADE_KEEPS: Meaning =
    Meaning::Refused("not needed: an upgrade keeps the cluster's etcd and credentials as they are");
const UPGRADE_IN_PLACE: Meaning =
    Meaning::Refused("use -n NAMESPACE: the upgrade happens in place, in the operator's namespace");
const ETCD_IMAGE: Meaning = Meaning::Refused("use --etcd-image REPOSITORY:TAG");
const NO_LOGS: Meaning = Meaning::Refused("not needed: preflight reads no logs");
const LOCAL_PATH: Meaning = Meaning::Refused(
    "not available: install a storage provisioner yourself and give the evaluation etcd its class with --etcd-storage-class",
);

/// Every Go flag this plugin knows of, by command.
pub const GO_FLAGS: &[GoFlag] = &[
    // Spelled differently here.
    row(
        "stos-operator-namespace",
        &["install", "uninstall", "bundle"],
        true,
        Meaning::Namespace,
    ),
    row(
        "stos-cluster-namespace",
        &["install", "bundle"],
        true,
        Meaning::Namespace,
    ),
    row("skip-stos-cluster", INSTALL, false, Meaning::Flag("--skip-cluster")),
    row("skip-stos-cluster", UPGRADE, false, Meaning::Flag("--operator")),
    row("stos-cluster-yaml", INSTALL, true, Meaning::Flag("--filename")),
    row("etcd-tls-enabled", INSTALL, false, Meaning::EtcdTlsEnabled),
    row("etcd-secret-name", INSTALL, true, Meaning::EtcdSecretName),
    row(
        "skip-existing-workload-check",
        UNINSTALL,
        false,
        Meaning::Flag("--force"),
    ),
    row("stos-version", UPGRADE, true, Meaning::Flag("--version")),
    row("format", PREFLIGHT, true, Meaning::Format),
    row("collector-image", PREFLIGHT, true, Meaning::Flag("--image")),
    row("selector", PREFLIGHT, true, Meaning::Flag("--node-selector")),
    // Refused, with what to do instead.
    row(
        "stos-version",
        INSTALL,
        true,
        Meaning::Refused(
            "this plugin installs its own release's StorageOS (the operator image is --image); for another StorageOS version install, then run `kubectl storageos upgrade --version VERSION`, or set spec.images.nodeContainer in the cluster file (-f)",
        ),
    ),
    row(
        "k8s-version",
        INSTALLS,
        true,
        Meaning::Refused("not needed: the plugin reads the cluster's Kubernetes version"),
    ),
    row(
        "etcd-operator-version",
        INSTALL,
        true,
        Meaning::Refused(
            "not needed: the evaluation etcd runs without an etcd operator; pick its image with --etcd-image",
        ),
    ),
    row("stos-operator-yaml", &["install", "uninstall"], true, BUILT_IN),
    row("stos-portal-config-yaml", &["install", "uninstall"], true, BUILT_IN),
    row(
        "stos-portal-client-secret-yaml",
        &["install", "uninstall"],
        true,
        BUILT_IN,
    ),
    row("resource-quota-yaml", &["install", "uninstall"], true, BUILT_IN),
    row("etcd-cluster-yaml", &["install", "uninstall"], true, ETCD_BUILT_IN),
    row("etcd-operator-yaml", &["install", "uninstall"], true, ETCD_BUILT_IN),
    row(
        "stos-cluster-yaml",
        UNINSTALL,
        true,
        Meaning::Refused("not needed: uninstall finds the StorageOSCluster in -n NAMESPACE"),
    ),
    row("etcd-docker-repository", INSTALL, true, ETCD_IMAGE),
    row("etcd-version-tag", INSTALL, true, ETCD_IMAGE),
    row("etcd-replicas", INSTALL, true, ETCD_SIZING),
    row("etcd-cpu-limit", INSTALL, true, ETCD_SIZING),
    row("etcd-memory-limit", INSTALL, true, ETCD_SIZING),
    row("etcd-topology-key", INSTALL, true, ETCD_SIZING),
    row(
        "stos-config-path",
        CHANGES,
        true,
        Meaning::Refused("not available: give the settings as flags (see --help)"),
    ),
    row("enable-portal-manager", INSTALLS, false, PORTAL),
    row("portal-client-id", INSTALLS, true, PORTAL),
    row("portal-secret", INSTALLS, true, PORTAL),
    row("portal-tenant-id", INSTALLS, true, PORTAL),
    row("portal-api-url", INSTALLS, true, PORTAL),
    row(
        "include-local-path-storage-class",
        &["install", "uninstall"],
        false,
        LOCAL_PATH,
    ),
    row(
        "local-path-provisioner-yaml",
        &["install", "uninstall"],
        true,
        LOCAL_PATH,
    ),
    row(
        "enable-metrics",
        INSTALLS,
        false,
        Meaning::Refused(
            "not available: spec.metrics (the Go operator v2.5's metrics exporter) is not supported; the operator's and the api-manager's own metrics are always served (docs/observability.md)",
        ),
    ),
    row(
        "stack-trace",
        CHANGES,
        false,
        Meaning::Refused("not needed: every error is printed with its cause"),
    ),
    row(
        "verbose",
        CHANGES,
        false,
        Meaning::Refused("not needed: progress is always printed on stderr"),
    ),
    row(
        "skip-namespace-deletion",
        UNINSTALL,
        false,
        Meaning::Refused(
            "not needed: uninstall deletes a namespace only when `kubectl storageos install` created it; any other is kept",
        ),
    ),
    row(
        "skip-namespace-deletion",
        UPGRADE,
        false,
        Meaning::Refused("not needed: an upgrade deletes no namespace"),
    ),
    row(
        "skip-stos-cluster",
        UNINSTALL,
        false,
        Meaning::Refused(
            "not available: uninstall removes the StorageOSCluster before the operator; to replace only the operator, run `kubectl storageos upgrade --operator`",
        ),
    ),
    row(
        "skip-existing-workload-check",
        UPGRADE,
        false,
        Meaning::Refused(
            "not needed: the upgrade scales the workloads that use StorageOS volumes to 0 and back itself",
        ),
    ),
    row("install-stos-operator-namespace", UPGRADE, true, UPGRADE_IN_PLACE),
    row("uninstall-stos-operator-namespace", UPGRADE, true, UPGRADE_IN_PLACE),
    row("install-stos-cluster-namespace", UPGRADE, true, UPGRADE_IN_PLACE),
    row("install-stos-operator-yaml", UPGRADE, true, BUILT_IN),
    row("install-stos-cluster-yaml", UPGRADE, true, BUILT_IN),
    row("install-stos-portal-config-yaml", UPGRADE, true, BUILT_IN),
    row("install-stos-portal-client-secret-yaml", UPGRADE, true, BUILT_IN),
    row("install-resource-quota-yaml", UPGRADE, true, BUILT_IN),
    row("uninstall-stos-operator-yaml", UPGRADE, true, BUILT_IN),
    row("uninstall-stos-cluster-yaml", UPGRADE, true, BUILT_IN),
    row("uninstall-stos-portal-config-yaml", UPGRADE, true, BUILT_IN),
    row("uninstall-stos-portal-client-secret-yaml", UPGRADE, true, BUILT_IN),
    row("uninstall-resource-quota-yaml", UPGRADE, true, BUILT_IN),
    row("etcd-endpoints", UPGRADE, true, UPGRADE_KEEPS),
    row("etcd-secret-name", UPGRADE, true, UPGRADE_KEEPS),
    row("etcd-tls-enabled", UPGRADE, false, UPGRADE_KEEPS),
    row("skip-etcd-endpoints-validation", UPGRADE, false, UPGRADE_KEEPS),
    row("admin-username", UPGRADE, true, UPGRADE_KEEPS),
    row("admin-password", UPGRADE, true, UPGRADE_KEEPS),
    row(
        "interactive",
        &["preflight", "bundle"],
        false,
        Meaning::Refused("not needed: the output is never interactive (preflight: -o table|json|yaml)"),
    ),
    row(
        "collector-pullpolicy",
        PREFLIGHT,
        true,
        Meaning::Refused("not needed: the --node-checks pods pull --image only when the node lacks it"),
    ),
    row(
        "collect-without-permissions",
        &["preflight", "bundle"],
        false,
        Meaning::Refused(
            "not needed: what cannot be read is reported (preflight: as a check; bundle: in warnings.txt)",
        ),
    ),
    row("since", PREFLIGHT, true, NO_LOGS),
    row("since-time", PREFLIGHT, true, NO_LOGS),
    row(
        "since-time",
        BUNDLE,
        true,
        Meaning::Refused("use --since DURATION (for example 2h)"),
    ),
    row(
        "redact",
        BUNDLE,
        false,
        Meaning::Refused("not needed: the bundle is always redacted"),
    ),
    row(
        "redactors",
        BUNDLE,
        true,
        Meaning::Refused("not available: the bundle's redaction is built in (docs/plugin.md, bundle)"),
    ),
];

/// A Go flag that is refused, or cannot be rewritten as given.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Go flag with no meaning here.
    #[error("--{flag} is a flag of the Go kubectl-storageos plugin; {why}")]
    Refused { flag: String, why: &'static str },
    /// A Go flag that takes a value, given none.
    #[error("--{flag} needs a value")]
    NoValue { flag: String },
    /// A Go switch given a value other than true or false.
    #[error("--{flag} takes no value other than true or false, not {value:?}")]
    BadSwitch { flag: String, value: String },
    /// The Go operator and cluster namespaces given as two namespaces.
    #[error(
        "--stos-operator-namespace and --stos-cluster-namespace name {first} and {second}: here the operator and its StorageOSCluster share one namespace; give it with -n NAMESPACE"
    )]
    TwoNamespaces { first: String, second: String },
}

/// The command line with every Go flag rewritten, and a notice for each rewrite.
#[derive(Debug, PartialEq, Eq)]
pub struct Translated {
    /// The arguments for clap.
    pub args: Vec<OsString>,
    /// One line each, for stderr.
    pub notices: Vec<String>,
}

/// Global flags of ours that take a value, to skip before the command's name.
const GLOBAL_WITH_VALUE: [&str; 4] = ["--kubeconfig", "--context", "-n", "--namespace"];

/// The commands of this plugin.
const COMMANDS: [&str; 9] = [
    "preflight",
    "install",
    "status",
    "plan",
    "bundle",
    "upgrade",
    "uninstall",
    "version",
    "completion",
];

/// The index and name of the command in `args` (after the program's name).
fn command(args: &[OsString]) -> Option<(usize, &'static str)> {
    let mut i = 1;
    while let Some(arg) = args.get(i) {
        let arg = arg.to_str()?;
        if arg == "--" {
            return None;
        }
        if GLOBAL_WITH_VALUE.contains(&arg) {
            i += 2;
            continue;
        }
        if arg.starts_with('-') {
            i += 1;
            continue;
        }
        return COMMANDS.iter().find(|c| **c == arg).map(|c| (i, *c));
    }
    None
}

/// Rewrites the Go flags of `args` (the program's name first).
pub fn translate(args: impl IntoIterator<Item = OsString>) -> Result<Translated, Error> {
    let args: Vec<OsString> = args.into_iter().collect();
    let Some((at, cmd)) = command(&args) else {
        return Ok(Translated {
            args,
            notices: Vec::new(),
        });
    };
    let mut out: Vec<OsString> = args[..=at].to_vec();
    let mut notices = Vec::new();
    let mut namespaces: Vec<String> = Vec::new();
    let (mut tls_enabled, mut secret_name) = (false, None::<String>);
    let mut rest = args[at + 1..].iter();
    while let Some(arg) = rest.next() {
        let Some(text) = arg.to_str() else {
            out.push(arg.clone());
            continue;
        };
        if text == "--" {
            out.push(arg.clone());
            out.extend(rest.by_ref().cloned());
            break;
        }
        let Some((name, inline)) = text
            .strip_prefix("--")
            .map(|t| t.split_once('=').map_or((t, None), |(n, v)| (n, Some(v.to_string()))))
        else {
            out.push(arg.clone());
            continue;
        };
        let Some(flag) = GO_FLAGS.iter().find(|f| f.name == name && f.commands.contains(&cmd)) else {
            out.push(arg.clone());
            continue;
        };
        if let Meaning::Refused(why) = flag.meaning {
            return Err(Error::Refused {
                flag: name.to_string(),
                why,
            });
        }
        let value = if flag.takes_value {
            match inline {
                Some(v) => Some(v),
                None => Some(
                    rest.next()
                        .and_then(|v| v.to_str())
                        .map(str::to_string)
                        .ok_or_else(|| Error::NoValue { flag: name.to_string() })?,
                ),
            }
        } else {
            match inline.as_deref() {
                None | Some("true") => None,
                Some("false") => {
                    notices.push(format!("note: --{name}=false is the Go plugin's default; ignored"));
                    continue;
                }
                Some(other) => {
                    return Err(Error::BadSwitch {
                        flag: name.to_string(),
                        value: other.to_string(),
                    });
                }
            }
        };
        match flag.meaning {
            Meaning::Flag(ours) => {
                notices.push(format!(
                    "note: --{name} is the Go plugin's spelling; this plugin's is {ours}"
                ));
                out.push(ours.into());
                out.extend(value.map(OsString::from));
            }
            Meaning::Namespace => {
                notices.push(format!(
                    "note: --{name} is the Go plugin's spelling; this plugin's is -n/--namespace"
                ));
                namespaces.extend(value);
            }
            Meaning::EtcdTlsEnabled => tls_enabled = true,
            Meaning::EtcdSecretName => secret_name = value,
            Meaning::Format => {
                notices.push(format!(
                    "note: --{name} is the Go plugin's spelling; this plugin's is -o/--output"
                ));
                let value = value.unwrap_or_default();
                out.push("--output".into());
                out.push(if value == "human" { "table".into() } else { value.into() });
            }
            Meaning::Refused(_) => {}
        }
    }
    if let [first, others @ ..] = namespaces.as_slice() {
        if let Some(second) = others.iter().find(|n| *n != first) {
            return Err(Error::TwoNamespaces {
                first: first.clone(),
                second: second.clone(),
            });
        }
        out.push("--namespace".into());
        out.push(first.into());
    }
    match (tls_enabled, secret_name) {
        (true, name) => {
            let given = if name.is_some() {
                "--etcd-tls-enabled with --etcd-secret-name"
            } else {
                "--etcd-tls-enabled (with the Go plugin's default Secret)"
            };
            let name = name.unwrap_or_else(|| GO_ETCD_SECRET.to_string());
            notices.push(format!(
                "note: {given} is the Go plugin's spelling; this plugin's is --etcd-tls-secret {name}"
            ));
            out.push("--etcd-tls-secret".into());
            out.push(name.into());
        }
        (false, Some(name)) => notices.push(format!(
            "note: --etcd-secret-name is ignored without --etcd-tls-enabled, as in the Go plugin; for an https etcd use --etcd-tls-secret {name}"
        )),
        (false, None) => {}
    }
    Ok(Translated { args: out, notices })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Command};

    fn args(line: &str) -> Vec<OsString> {
        std::iter::once("kubectl-storageos")
            .chain(line.split_whitespace())
            .map(OsString::from)
            .collect()
    }

    /// The parsed command line and the notices.
    fn parse(line: &str) -> (Cli, Vec<String>) {
        let t = translate(args(line)).unwrap_or_else(|e| panic!("{line}: {e}"));
        let cli = Cli::try_parse_from(&t.args).unwrap_or_else(|e| panic!("{line} as {:?}: {e}", t.args));
        (cli, t.notices)
    }

    fn refused(line: &str) -> String {
        translate(args(line)).expect_err(line).to_string()
    }

    #[test]
    fn every_alias_parses_with_a_notice_naming_the_new_spelling() {
        for flag in GO_FLAGS.iter().filter(|f| !matches!(f.meaning, Meaning::Refused(_))) {
            for cmd in flag.commands {
                let value = match (flag.meaning, flag.takes_value) {
                    (Meaning::Format, _) => " json",
                    (_, true) => " x",
                    (_, false) => "",
                };
                let line = format!("{cmd} --{}{value}", flag.name);
                let (_, notices) = parse(&line);
                assert_eq!(notices.len(), 1, "{line}: {notices:?}");
                assert!(notices[0].starts_with("note: --"), "{line}: {notices:?}");
                if let Meaning::Flag(ours) = flag.meaning {
                    assert!(notices[0].ends_with(ours), "{line}: {notices:?}");
                }
            }
        }
    }

    #[test]
    fn aliases_mean_what_they_meant_in_go() {
        let (cli, _) = parse(
            "install --stos-operator-namespace storageos --stos-cluster-namespace=storageos --skip-stos-cluster --etcd-tls-enabled --stos-cluster-yaml c.yaml",
        );
        assert_eq!(cli.connection.namespace, "storageos");
        let Command::Install(install) = cli.command else {
            panic!("not install")
        };
        assert!(install.skip_cluster);
        assert_eq!(install.etcd_tls_secret.as_deref(), Some(GO_ETCD_SECRET));
        assert_eq!(install.filename.as_deref(), Some(std::path::Path::new("c.yaml")));

        let (cli, _) = parse("install --etcd-secret-name mine --etcd-tls-enabled=true");
        let Command::Install(install) = cli.command else {
            panic!("not install")
        };
        assert_eq!(install.etcd_tls_secret.as_deref(), Some("mine"));
        let (cli, notices) = parse("install --etcd-secret-name mine");
        let Command::Install(install) = cli.command else {
            panic!("not install")
        };
        assert_eq!(install.etcd_tls_secret, None);
        assert!(notices[0].contains("ignored without --etcd-tls-enabled"), "{notices:?}");

        let (cli, _) = parse("uninstall --skip-existing-workload-check");
        assert!(matches!(cli.command, Command::Uninstall(u) if u.force));
        let (cli, _) = parse("upgrade --skip-stos-cluster");
        assert!(matches!(cli.command, Command::Upgrade(u) if u.operator));
        let (cli, _) = parse("upgrade --stos-version 2.5.0");
        assert!(matches!(cli.command, Command::Upgrade(u) if u.version.as_deref() == Some("2.5.0")));
        let (cli, _) = parse("preflight --format human");
        assert!(matches!(cli.command, Command::Preflight(p) if matches!(p.output, crate::preflight::Output::Table)));
        let (cli, notices) = parse("install --skip-stos-cluster=false");
        assert!(matches!(cli.command, Command::Install(i) if !i.skip_cluster));
        assert!(notices[0].contains("ignored"), "{notices:?}");
        // Global flags before the command, and anything after `--`, are left alone.
        let (cli, _) = parse("--context c -n ns bundle --since 1h");
        assert_eq!(cli.connection.namespace, "ns");
        assert!(matches!(cli.command, Command::Bundle(b) if b.since == Some(std::time::Duration::from_secs(3600))));
    }

    #[test]
    fn every_refused_flag_names_its_replacement_or_why_none_is_needed() {
        for flag in GO_FLAGS {
            let Meaning::Refused(why) = flag.meaning else { continue };
            for cmd in flag.commands {
                let line = format!("{cmd} --{} x", flag.name);
                let message = refused(&line);
                assert!(
                    message.contains(&format!("--{} is a flag of the Go kubectl-storageos plugin", flag.name))
                        && message.ends_with(why),
                    "{line}: {message}"
                );
                assert!(
                    why.starts_with("not needed")
                        || why.starts_with("not available")
                        || why.starts_with("use ")
                        || why.contains("--"),
                    "{line}: {why}"
                );
            }
        }
        assert!(refused("install --stos-version v2.5.0").contains("kubectl storageos upgrade --version VERSION"));
        assert!(refused("uninstall --skip-namespace-deletion").contains("deletes a namespace only when"));
        assert!(refused("bundle --since-time 2024-01-01T00:00:00Z").contains("--since DURATION"));
        assert!(
            refused("install --stos-operator-namespace a --stos-cluster-namespace b").contains("share one namespace")
        );
        assert!(refused("install --stos-cluster-yaml").contains("needs a value"));
        assert!(refused("install --wait=yes --skip-stos-cluster=maybe").contains("true or false"));
    }

    #[test]
    fn docs_plugin_md_lists_every_go_flag() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/plugin.md")).unwrap();
        for flag in GO_FLAGS {
            let listed = doc.contains(&format!("`--{}`", flag.name)) || doc.contains(&format!("`--{} ", flag.name));
            assert!(listed, "docs/plugin.md lacks --{}", flag.name);
        }
    }
}
