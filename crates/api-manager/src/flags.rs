//! The flags of the Go api-manager v1.2.12, with the same names and defaults, so existing
//! Deployments keep working (`-flag` is rewritten to `--flag` by `go_flag`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

use crate::controllers::config::{
    Config, DeleteSyncConfig, DrainConfig, DrainGuardConfig, FencerConfig, LabelSyncConfig, Loop, OutOfServiceConfig,
    SharedVolumeConfig,
};
use crate::crd::DrainPolicy;
use crate::crd::contract::{DEFAULT_COOL_DOWN, DEFAULT_OFFLINE_POLLS};
use crate::duration::{parse_flag as duration, parse_interval_flag as interval};
use crate::rbac::components::DRAIN_GUARD_NAMESPACE;
use crate::storageos_poll::{MIN_VOLUME_POLL, PollConfig};

/// Arguments of `storageos-operator api-manager`.
#[derive(Args, Debug, Clone)]
pub struct ApiManagerArgs {
    /// StorageOS API endpoint (host, host:port or URL; port 5705 and http are the defaults).
    #[arg(long, default_value = "storageos")]
    pub api_endpoint: String,
    /// PEM file of the CA an `https://` API endpoint is verified against (besides the system's),
    /// so the credentials need not travel in plain HTTP.
    #[arg(long, env = "API_CA_FILE")]
    pub api_ca_file: Option<PathBuf>,
    /// Directory holding the `username` and `password` files of the StorageOS API credentials.
    #[arg(long, default_value = "/etc/storageos/secrets/api")]
    pub api_secret_path: PathBuf,
    /// How often the API token is refreshed.
    #[arg(long, default_value = "1m", value_parser = interval)]
    pub api_refresh_interval: Duration,
    /// How long to wait between attempts to connect to the StorageOS API at start-up.
    #[arg(long, default_value = "5s", value_parser = interval)]
    pub api_retry_interval: Duration,
    /// Elect a leader so that only one replica runs the controllers (webhooks run on all).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, value_parser = go_bool, default_value = "false", default_missing_value = "true")]
    pub enable_leader_election: bool,
    /// Fence pods on nodes StorageOS reports offline (false for `spec.disableFencing`).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, value_parser = go_bool, default_value = "true", default_missing_value = "true")]
    pub enable_node_fencing: bool,
    /// Taint nodes StorageOS reports offline and Kubernetes NotReady with
    /// `node.kubernetes.io/out-of-service` (`spec.nodeOutOfService.automatic`; docs/api-manager.md).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, value_parser = go_bool, default_value = "false", default_missing_value = "true")]
    pub enable_node_out_of_service: bool,
    /// Consecutive node polls reporting a node offline before it is tainted out of service.
    #[arg(long, default_value_t = DEFAULT_OFFLINE_POLLS, value_parser = clap::value_parser!(u16).range(1..))]
    pub node_out_of_service_offline_polls: u16,
    /// How long a node tainted out of service must be online and Ready before the taint goes.
    #[arg(long, default_value = DEFAULT_COOL_DOWN, value_parser = duration)]
    pub node_out_of_service_cool_down: Duration,
    /// Delete StorageOS VolumeAttachments that StorageOS contradicts, for every pod
    /// (`spec.attachRecovery`, which the operator renders; off when the flag is absent, as the
    /// Go api-manager has no such controller; docs/api-manager.md, "Attach recovery").
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, value_parser = go_bool, default_value = "false", default_missing_value = "true")]
    pub enable_attach_recovery: bool,
    /// Sync Kubernetes node labels to StorageOS nodes.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, value_parser = go_bool, default_value = "true", default_missing_value = "true")]
    pub enable_node_label_sync: bool,
    /// Sync PVC labels to StorageOS volumes.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, value_parser = go_bool, default_value = "true", default_missing_value = "true")]
    pub enable_pvc_label_sync: bool,
    /// How often to check whether an object the shared volume controller created exists yet.
    #[arg(long, default_value = "1s", value_parser = interval)]
    pub k8s_create_poll_interval: Duration,
    /// How long to wait for an object the shared volume controller created.
    #[arg(long, default_value = "20s", value_parser = duration)]
    pub k8s_create_wait_duration: Duration,
    /// Path to a kubeconfig; empty means in-cluster configuration or `$KUBECONFIG`.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the metrics endpoint.
    #[arg(long, default_value = ":8080")]
    pub metrics_addr: String,
    /// Namespace the api-manager runs in; empty means auto-detect from the service account.
    #[arg(long, default_value = "")]
    pub namespace: String,
    /// Delay before the namespace-delete garbage collection first runs (0s means 10s).
    #[arg(long, default_value = "20s", value_parser = duration)]
    pub namespace_delete_gc_delay: Duration,
    /// How often namespace-delete garbage collection runs (0s disables it).
    #[arg(long, default_value = "1h", value_parser = duration)]
    pub namespace_delete_gc_interval: Duration,
    /// Concurrent namespace-delete workers.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub namespace_delete_workers: u16,
    /// Delay before the node-delete garbage collection first runs (0s means 10s).
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub node_delete_gc_delay: Duration,
    /// How often node-delete garbage collection runs (0s disables it).
    #[arg(long, default_value = "1h", value_parser = duration)]
    pub node_delete_gc_interval: Duration,
    /// Concurrent node-delete workers.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub node_delete_workers: u16,
    /// How long the fencer caches a node's state.
    #[arg(long, default_value = "1h", value_parser = duration)]
    pub node_expiry_interval: Duration,
    /// How long the fencer waits before retrying a node.
    #[arg(long, default_value = "5s", value_parser = interval)]
    pub node_fencer_retry_interval: Duration,
    /// How long one fencing attempt may take.
    #[arg(long, default_value = "25s", value_parser = duration)]
    pub node_fencer_timeout: Duration,
    /// Concurrent fencer workers.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub node_fencer_workers: u16,
    /// Delay before the node label resync first runs (0s means 10s).
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub node_label_resync_delay: Duration,
    /// How often all node labels are resynced (0s disables it).
    #[arg(long, default_value = "1h", value_parser = duration)]
    pub node_label_resync_interval: Duration,
    /// Concurrent node label sync workers.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub node_label_sync_workers: u16,
    /// How often StorageOS node health is polled (at least 5s).
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub node_poll_interval: Duration,
    /// Delay before the PVC label resync first runs (0s means 10s).
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub pvc_label_resync_delay: Duration,
    /// How often all PVC labels are resynced (0s disables it).
    #[arg(long, default_value = "1h", value_parser = duration)]
    pub pvc_label_resync_interval: Duration,
    /// Concurrent PVC label sync workers.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub pvc_label_sync_workers: u16,
    /// Scheduler set on pods that use StorageOS volumes; empty disables the pod mutator.
    #[arg(long, default_value = "storageos-scheduler")]
    pub scheduler_name: String,
    /// How often StorageOS volumes are polled by the shared volume controller.
    #[arg(long, default_value = "5s", value_parser = interval)]
    pub volume_poll_interval: Duration,
    /// How often the webhook certificate is checked and re-issued if needed.
    #[arg(long, default_value = "30m", value_parser = interval)]
    pub webhook_cert_refresh_interval: Duration,
    /// Validity of the webhook serving certificate (re-issued at half-life).
    #[arg(long, default_value = "8760h", value_parser = duration)]
    pub webhook_cert_validity: Duration,
    /// Name of the MutatingWebhookConfiguration whose caBundle is managed.
    #[arg(long, default_value = "storageos-mutating-webhook")]
    pub webhook_config_mutating: String,
    /// Path of the pod mutating webhook.
    #[arg(long, default_value = "/mutate-pods")]
    pub webhook_mutate_pods_path: String,
    /// Path of the PVC mutating webhook.
    #[arg(long, default_value = "/mutate-pvcs")]
    pub webhook_mutate_pvcs_path: String,
    /// Name of the Secret holding the webhook CA and serving certificate.
    #[arg(long, default_value = "storageos-webhook")]
    pub webhook_secret_name: String,
    /// Namespace of the webhook Secret; empty means the api-manager's namespace.
    #[arg(long, default_value = "")]
    pub webhook_secret_namespace: String,
    /// Name of the webhook Service (the certificate's DNS name).
    #[arg(long, default_value = "storageos-webhook")]
    pub webhook_service_name: String,
    /// Namespace of the webhook Service; empty means the api-manager's namespace.
    #[arg(long, default_value = "")]
    pub webhook_service_namespace: String,
    /// PEM file of the CA(s) whose client certificates the webhook server requires. Unset, any
    /// caller is served (docs/security.md); set it, and give the apiserver a client certificate
    /// for the webhook in its admission configuration, so that only the apiserver is.
    #[arg(long, env = "WEBHOOK_CLIENT_CA_FILE")]
    pub webhook_client_ca_file: Option<PathBuf>,
    /// With `--webhook-client-ca-file`: the names (subject common name or DNS name) a client
    /// certificate must carry, comma-separated. Unset, any certificate of that CA is served, so
    /// use a CA dedicated to the webhook (the cluster's CA also signs every kubelet's).
    #[arg(long, value_delimiter = ',')]
    pub webhook_client_names: Vec<String>,
    /// Address the webhook server listens on (the Go api-manager used port 9443).
    #[arg(long, default_value = "0.0.0.0:9443")]
    pub webhook_addr: String,
    /// The StorageOSCluster (`namespace/name`) this api-manager belongs to: only its pause
    /// annotation can signal maintenance. The operator sets it (env `STORAGEOS_CLUSTER`); unset,
    /// every cluster's annotation counts, as with the Go api-manager.
    #[arg(long, env = "STORAGEOS_CLUSTER", value_parser = crate::maintenance::parse_cluster)]
    pub storageos_cluster: Option<(String, String)>,
    /// Image of the drain gate's guard pods (this api-manager's own image, which the operator
    /// renders here); unset or empty, the drain gate shows on `nodes.api.storageos.com` but
    /// places no guards (docs/api-manager.md, "Drain gate").
    #[arg(long, env = "DRAIN_GUARD_IMAGE")]
    pub drain_guard_image: Option<String>,
    /// The namespace of the guard pods and their budgets; the operator makes it (Pod Security
    /// restricted) and grants pods and budgets there only.
    #[arg(long, default_value = DRAIN_GUARD_NAMESPACE)]
    pub drain_guard_namespace: String,
    /// Which volumes make a node's drain wait: BlockIfReplicatedVolumeAtRisk (volumes with
    /// replicas that would lose their last ready copy), BlockLastCopy (any last online copy, 0
    /// replicas included) or AllowAlways (none; the mirrors still show what is at risk).
    #[arg(long, default_value = "BlockIfReplicatedVolumeAtRisk", value_parser = str::parse::<DrainPolicy>)]
    pub drain_policy: DrainPolicy,
    /// The longest a drain of a guarded node waits (from when the node is first seen cordoned);
    /// then its guard lets the drain proceed. Unset: until it is safe.
    #[arg(long, value_parser = duration)]
    pub drain_max_hold: Option<Duration>,
    /// Accepted for compatibility and ignored (a warning names the replacement): use
    /// --log-format console --log-level debug.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, value_parser = go_bool, default_value = "false", default_missing_value = "true")]
    pub zap_devel: bool,
    /// Accepted for compatibility and ignored (a warning names the replacement): use --log-format.
    #[arg(long, value_enum)]
    pub zap_encoder: Option<ZapEncoder>,
    /// Accepted for compatibility and ignored (a warning names the replacement): use --log-level.
    /// zap's values: debug, info, error, panic or an integer above 0.
    #[arg(long, value_parser = zap_level)]
    pub zap_log_level: Option<String>,
    /// Accepted for compatibility and ignored (a warning says so).
    #[arg(long, value_parser = zap_level)]
    pub zap_stacktrace_level: Option<String>,
    /// Accepted for compatibility with Go api-managers before v1.2 and ignored (a warning says
    /// so): the shared volume controller keeps no volume cache.
    #[arg(long, value_parser = duration)]
    pub volume_expiry_interval: Option<Duration>,
}

/// A Go `strconv.ParseBool` flag value (`1`, `t`, `True`, ... as the Go binary accepts).
fn go_bool(value: &str) -> Result<bool, String> {
    crate::go::parse_bool(value).ok_or_else(|| {
        format!(
            "invalid boolean {value:?}: use true or false (Go's 1, t, T, TRUE, True, 0, f, F, FALSE, False work too)"
        )
    })
}

/// A zap level: a name, or an integer above 0 (zap's custom verbosity).
fn zap_level(value: &str) -> Result<String, String> {
    let named = ["debug", "info", "warn", "error", "dpanic", "panic", "fatal"].contains(&value);
    if named || value.parse::<u32>().is_ok_and(|n| n > 0) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "invalid zap level {value:?}: use debug, info, error, panic or an integer above 0"
        ))
    }
}

/// zap's log encoders.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZapEncoder {
    /// One JSON object per line.
    Json,
    /// Human-readable.
    Console,
}

/// The floor of the fencer's poll interval.
pub const MIN_NODE_POLL: Duration = Duration::from_secs(5);

impl ApiManagerArgs {
    /// What each controller is told; the only place controllers' flags are read.
    pub fn controllers(&self) -> Config {
        Config {
            poll: PollConfig {
                nodes: self.node_poll(),
                volumes: self.volume_poll_interval.max(MIN_VOLUME_POLL),
            },
            fencer: self.enable_node_fencing.then_some(FencerConfig {
                retry: self.node_fencer_retry_interval,
                timeout: self.node_fencer_timeout,
                workers: self.node_fencer_workers,
                expiry: self.node_expiry_interval,
            }),
            node_label: self.enable_node_label_sync.then_some(LabelSyncConfig {
                workers: self.node_label_sync_workers,
                resync: self.node_label_resync(),
            }),
            pvc_label: self.enable_pvc_label_sync.then_some(LabelSyncConfig {
                workers: self.pvc_label_sync_workers,
                resync: self.pvc_label_resync(),
            }),
            node_delete: DeleteSyncConfig {
                workers: self.node_delete_workers.max(1),
                gc: self.node_delete_gc(),
            },
            namespace_delete: DeleteSyncConfig {
                workers: self.namespace_delete_workers.max(1),
                gc: self.namespace_delete_gc(),
            },
            shared_volume: SharedVolumeConfig {
                read_back_every: self.k8s_create_poll_interval.max(Duration::from_millis(10)),
                read_back_for: self.k8s_create_wait_duration,
            },
            maintenance_of: self.storageos_cluster.clone(),
            drain: DrainConfig {
                policy: self.drain_policy,
                max_hold: self.drain_max_hold.filter(|d| !d.is_zero()),
            },
            drain_guard: self
                .drain_guard_image
                .as_deref()
                .map(str::trim)
                .filter(|i| !i.is_empty())
                .map(|image| DrainGuardConfig {
                    image: image.into(),
                    namespace: self.drain_guard_namespace.clone(),
                }),
            attach_recovery: self.enable_attach_recovery,
            out_of_service: self.enable_node_out_of_service.then_some(OutOfServiceConfig {
                offline_polls: self.node_out_of_service_offline_polls,
                cool_down: self.node_out_of_service_cool_down,
            }),
        }
    }

    /// Node-delete garbage collection.
    pub fn node_delete_gc(&self) -> Loop {
        Loop::new(self.node_delete_gc_delay, self.node_delete_gc_interval)
    }
    /// Namespace-delete garbage collection.
    pub fn namespace_delete_gc(&self) -> Loop {
        Loop::new(self.namespace_delete_gc_delay, self.namespace_delete_gc_interval)
    }
    /// Node label resync.
    pub fn node_label_resync(&self) -> Loop {
        Loop::new(self.node_label_resync_delay, self.node_label_resync_interval)
    }
    /// PVC label resync.
    pub fn pvc_label_resync(&self) -> Loop {
        Loop::new(self.pvc_label_resync_delay, self.pvc_label_resync_interval)
    }
    /// The fencer's poll interval, never below [`MIN_NODE_POLL`].
    pub fn node_poll(&self) -> Duration {
        self.node_poll_interval.max(MIN_NODE_POLL)
    }
    /// The scheduler the pod mutator sets, or None when it is disabled (empty flag).
    pub fn scheduler(&self) -> Option<&str> {
        let s = self.scheduler_name.trim();
        (!s.is_empty()).then_some(s)
    }
    /// The compatibility flags that were given and have no effect, each with what to use
    /// instead, for a warning at start-up: a user who had debug logging on must not lose it
    /// without notice.
    pub fn ignored_flags(&self) -> Vec<String> {
        let mut ignored = Vec::new();
        if self.zap_devel {
            ignored.push("-zap-devel is ignored; use --log-format=console --log-level=debug".to_string());
        }
        if let Some(e) = self.zap_encoder {
            let format = match e {
                ZapEncoder::Json => "json",
                ZapEncoder::Console => "console",
            };
            ignored.push(format!("-zap-encoder={format} is ignored; use --log-format={format}"));
        }
        if let Some(level) = &self.zap_log_level {
            let instead = match level.as_str() {
                "debug" | "info" | "warn" | "error" => level.clone(),
                "dpanic" | "panic" | "fatal" => "error".to_string(),
                // zap's integer verbosity is debug and finer.
                _ => "trace".to_string(),
            };
            ignored.push(format!("-zap-log-level={level} is ignored; use --log-level={instead}"));
        }
        if let Some(level) = &self.zap_stacktrace_level {
            ignored.push(format!(
                "-zap-stacktrace-level={level} is ignored; errors carry their causes instead"
            ));
        }
        if self.volume_expiry_interval.is_some() {
            ignored.push(
                "-volume-expiry-interval is ignored; the shared volume controller keeps no volume cache (as since the Go api-manager v1.2); remove it"
                    .to_string(),
            );
        }
        ignored
    }

    /// The metrics address with an empty host meaning all interfaces (`:8080` → `0.0.0.0:8080`).
    pub fn metrics_socket_addr(&self) -> String {
        crate::runtime::process::addr::listen_addr(&self.metrics_addr)
    }
}

/// The Go flag spelling `-flag[=value]` as `--flag[=value]`; a lone `-`, a negative number and
/// anything already `--` are returned unchanged.
pub fn go_flag(arg: String) -> String {
    let is_go_flag = arg.len() > 2
        && arg.starts_with('-')
        && !arg.starts_with("--")
        && arg[1..].starts_with(|c: char| c.is_ascii_alphabetic());
    if is_go_flag { format!("-{arg}") } else { arg }
}

/// The api-manager's flags on their own, for [`ApiManagerArgs::from_flags`].
#[derive(clap::Parser)]
#[command(name = "api-manager")]
struct Standalone {
    #[command(flatten)]
    args: ApiManagerArgs,
}

impl ApiManagerArgs {
    /// Parses api-manager flags as the Go api-manager took them (`-flag value`, `--flag=value`),
    /// for embedding the controllers (tests, tools).
    pub fn from_flags<I, S>(flags: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        use clap::Parser;

        let argv = std::iter::once("api-manager".to_string()).chain(flags.into_iter().map(|f| go_flag(f.into())));
        Ok(Standalone::try_parse_from(argv)?.args)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    fn parse(args: &str) -> Result<super::ApiManagerArgs, clap::Error> {
        super::ApiManagerArgs::from_flags(args.split_whitespace())
    }

    #[test]
    fn defaults_match_the_go_api_manager() {
        let a = parse("").unwrap();
        assert_eq!(a.api_endpoint, "storageos");
        assert_eq!(a.api_secret_path.to_str(), Some("/etc/storageos/secrets/api"));
        assert_eq!(a.api_refresh_interval.as_secs(), 60);
        assert_eq!(a.api_retry_interval.as_secs(), 5);
        assert!(!a.enable_leader_election);
        assert!(a.enable_node_label_sync && a.enable_pvc_label_sync);
        assert_eq!(a.metrics_addr, ":8080");
        assert_eq!(a.metrics_socket_addr(), "0.0.0.0:8080");
        assert_eq!(a.scheduler(), Some("storageos-scheduler"));
        assert_eq!(a.webhook_cert_validity.as_secs(), 8760 * 3600);
        assert_eq!(a.webhook_cert_refresh_interval.as_secs(), 1800);
        assert_eq!(a.webhook_config_mutating, "storageos-mutating-webhook");
        assert_eq!(
            (a.webhook_mutate_pods_path.as_str(), a.webhook_mutate_pvcs_path.as_str()),
            ("/mutate-pods", "/mutate-pvcs")
        );
        assert_eq!(
            (a.webhook_secret_name.as_str(), a.webhook_service_name.as_str()),
            ("storageos-webhook", "storageos-webhook")
        );
        assert_eq!((a.node_fencer_workers, a.node_fencer_timeout.as_secs()), (5, 25));
        assert_eq!(a.k8s_create_wait_duration.as_secs(), 20);
    }

    #[test]
    fn attach_recovery_is_off_unless_the_operator_renders_it_on() {
        assert!(
            !parse("").unwrap().controllers().attach_recovery,
            "a Go-style command line"
        );
        assert!(parse("--enable-attach-recovery").unwrap().controllers().attach_recovery);
        assert!(
            parse("--enable-attach-recovery=true")
                .unwrap()
                .controllers()
                .attach_recovery
        );
        assert!(
            !parse("-enable-attach-recovery=false")
                .unwrap()
                .controllers()
                .attach_recovery
        );
    }

    #[test]
    fn the_out_of_service_controller_is_off_unless_enabled_and_takes_its_rules_from_two_flags() {
        assert_eq!(parse("").unwrap().controllers().out_of_service, None);
        let on = parse("-enable-node-out-of-service")
            .unwrap()
            .controllers()
            .out_of_service
            .unwrap();
        assert_eq!(
            (on.offline_polls, on.cool_down.as_secs()),
            (3, 300),
            "the CR's defaults"
        );
        let tuned = parse(
            "--enable-node-out-of-service=true --node-out-of-service-offline-polls=6 --node-out-of-service-cool-down=90s",
        )
        .unwrap()
        .controllers()
        .out_of_service
        .unwrap();
        assert_eq!((tuned.offline_polls, tuned.cool_down.as_secs()), (6, 90));
        assert!(
            parse("--node-out-of-service-offline-polls=0").is_err(),
            "at least one poll"
        );
        assert!(parse("--node-out-of-service-cool-down=soon").is_err());
    }

    /// The flags of the Go api-manager v1.2.12 with their defaults (None: no default to compare,
    /// such as the zap logging flags); docs/api-manager.md.
    const GO_FLAGS: &[(&str, Option<&str>)] = &[
        ("api-endpoint", Some("storageos")),
        ("api-secret-path", Some("/etc/storageos/secrets/api")),
        ("api-refresh-interval", Some("1m")),
        ("api-retry-interval", Some("5s")),
        ("enable-leader-election", Some("false")),
        ("metrics-addr", Some(":8080")),
        ("namespace", Some("")),
        ("k8s-create-poll-interval", Some("1s")),
        ("k8s-create-wait-duration", Some("20s")),
        ("volume-poll-interval", Some("5s")),
        ("node-poll-interval", Some("5s")),
        ("node-expiry-interval", Some("1h")),
        ("node-fencer-workers", Some("5")),
        ("node-fencer-retry-interval", Some("5s")),
        ("node-fencer-timeout", Some("25s")),
        ("node-delete-workers", Some("5")),
        ("node-delete-gc-interval", Some("1h")),
        ("node-delete-gc-delay", Some("30s")),
        ("namespace-delete-workers", Some("5")),
        ("namespace-delete-gc-interval", Some("1h")),
        ("namespace-delete-gc-delay", Some("20s")),
        ("enable-node-label-sync", Some("true")),
        ("node-label-sync-workers", Some("5")),
        ("node-label-resync-interval", Some("1h")),
        ("node-label-resync-delay", Some("10s")),
        ("enable-pvc-label-sync", Some("true")),
        ("pvc-label-sync-workers", Some("5")),
        ("pvc-label-resync-interval", Some("1h")),
        ("pvc-label-resync-delay", Some("5s")),
        ("scheduler-name", Some("storageos-scheduler")),
        ("webhook-cert-refresh-interval", Some("30m")),
        ("webhook-cert-validity", Some("8760h")),
        ("webhook-config-mutating", Some("storageos-mutating-webhook")),
        ("webhook-secret-name", Some("storageos-webhook")),
        ("webhook-secret-namespace", Some("")),
        ("webhook-service-name", Some("storageos-webhook")),
        ("webhook-service-namespace", Some("")),
        ("webhook-mutate-pods-path", Some("/mutate-pods")),
        ("webhook-mutate-pvcs-path", Some("/mutate-pvcs")),
        ("kubeconfig", None),
        ("zap-devel", None),
        ("zap-encoder", None),
        ("zap-log-level", None),
        ("zap-stacktrace-level", None),
        // Go api-managers before v1.2 (removed in v1.2.12): accepted, ignored.
        ("volume-expiry-interval", None),
    ];

    #[test]
    fn every_go_flag_exists_with_the_go_default() {
        use clap::CommandFactory;
        let cmd = super::Standalone::command();
        let mut wrong = Vec::new();
        for (flag, go_default) in GO_FLAGS {
            let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(*flag)) else {
                wrong.push(format!("-{flag} is missing"));
                continue;
            };
            let Some(go_default) = go_default else { continue };
            let ours: Vec<_> = arg.get_default_values().iter().map(|v| v.to_string_lossy()).collect();
            let ours = ours.join(",");
            // Durations compare by value (Go prints 1m0s where we write 1m).
            let same = match (crate::duration::parse(&ours), crate::duration::parse(go_default)) {
                (Ok(a), Ok(b)) if !go_default.chars().all(|c| c.is_ascii_digit()) => a == b,
                _ => ours == *go_default,
            };
            if !same {
                wrong.push(format!("-{flag}: default {ours:?}, Go's is {go_default:?}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn go_spellings_are_accepted() {
        let a = parse("-api-endpoint=http://sos.kube-system.svc:5705 -enable-leader-election -enable-node-label-sync=false -scheduler-name= -webhook-cert-refresh-interval=30m0s -zap-encoder=json -metrics-addr 127.0.0.1:9090").unwrap();
        assert_eq!(a.api_endpoint, "http://sos.kube-system.svc:5705");
        assert!(a.enable_leader_election);
        assert!(!a.enable_node_label_sync);
        assert_eq!(a.scheduler(), None, "an empty scheduler name disables the mutator");
        assert_eq!(a.webhook_cert_refresh_interval.as_secs(), 1800);
        assert_eq!(a.metrics_socket_addr(), "127.0.0.1:9090");
        let b = parse("--enable-leader-election=true --api-retry-interval 2s").unwrap();
        assert!(b.enable_leader_election);
        assert_eq!(b.api_retry_interval.as_secs(), 2);
    }

    #[test]
    fn interval_rules_of_the_go_api_manager() {
        let a = parse("-node-delete-gc-interval=0s -node-delete-gc-delay=0s -node-poll-interval=1s").unwrap();
        assert_eq!(a.node_delete_gc().every, None, "0s disables the loop");
        assert_eq!(a.node_delete_gc().delay.as_secs(), 10, "a 0s delay becomes 10s");
        assert_eq!(a.node_poll().as_secs(), 5, "the fencer polls at most every 5s");
        assert_eq!(a.pvc_label_resync().every.map(|d| d.as_secs()), Some(3600));
    }

    #[test]
    fn values_the_go_binary_accepts_are_accepted() {
        let a = parse(
            "-enable-leader-election=1 -enable-node-fencing=False -enable-pvc-label-sync=t \
             -zap-log-level=5 -webhook-cert-validity=1.5h -node-poll-interval=500us -volume-expiry-interval=1m",
        )
        .unwrap();
        assert!(a.enable_leader_election && !a.enable_node_fencing && a.enable_pvc_label_sync);
        assert_eq!(a.webhook_cert_validity.as_secs(), 5400);
        assert_eq!(a.zap_log_level.as_deref(), Some("5"));
        let e = parse("-enable-leader-election=yes").unwrap_err().to_string();
        assert!(e.contains("invalid boolean \"yes\""), "{e}");
        assert!(parse("-zap-log-level=0").is_err(), "zap's integer levels are above 0");
    }

    #[test]
    fn ignored_compatibility_flags_name_their_replacement() {
        assert!(parse("").unwrap().ignored_flags().is_empty());
        let a = parse("-zap-log-level=debug -zap-encoder=json -zap-devel -volume-expiry-interval=1m").unwrap();
        let warnings = a.ignored_flags().join("\n");
        assert!(
            warnings.contains("-zap-log-level=debug is ignored; use --log-level=debug"),
            "{warnings}"
        );
        assert!(
            warnings.contains("-zap-encoder=json is ignored; use --log-format=json"),
            "{warnings}"
        );
        assert!(warnings.contains("-zap-devel is ignored"), "{warnings}");
        assert!(warnings.contains("-volume-expiry-interval is ignored"), "{warnings}");
    }

    #[test]
    fn invalid_values_are_rejected_with_a_clear_message() {
        let e = parse("-api-retry-interval=5minutes").unwrap_err().to_string();
        assert!(e.contains("api-retry-interval") && e.contains("unknown unit"), "{e}");
        // Durations that would overflow clock arithmetic, or spin, are refused.
        let e = parse("-webhook-cert-validity=99999999h").unwrap_err().to_string();
        assert!(e.contains("webhook-cert-validity") && e.contains("ten years"), "{e}");
        let e = parse("-node-fencer-retry-interval=0s").unwrap_err().to_string();
        assert!(e.contains("more than 0s"), "{e}");
        let e = parse("-node-fencer-workers=0").unwrap_err().to_string();
        assert!(e.contains("node-fencer-workers"), "{e}");
        let e = parse("-enable-leader-election=maybe").unwrap_err().to_string();
        assert!(e.contains("enable-leader-election"), "{e}");
        let e = parse("-zap-encoder=xml").unwrap_err().to_string();
        assert!(e.contains("zap-encoder"), "{e}");
        assert!(parse("-no-such-flag").is_err());
    }
}
