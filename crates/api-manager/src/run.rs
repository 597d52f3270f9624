//! `storageos-operator api-manager`: the process.
//!
//! Every replica first ensures the shared webhook certificate, injects the CA and serves the
//! webhooks (and is ready: the webhook Service routes to it); they need no StorageOS. Leader
//! election and the controllers then wait until a StorageOS login succeeds (retrying every
//! `-api-retry-interval`, never crash-looping); the token is refreshed on
//! `-api-refresh-interval`.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use prometheus_client::registry::Registry;

use std::sync::Arc;

use super::controllers::{self, Context, fencing};
use super::flags::ApiManagerArgs;
use super::metrics::{ApiManagerMetrics, error_kind};
use super::polls::{self, Polls};
use super::webhook::{self, CachedLookups, WebhookMetrics, WebhookState};
use crate::runtime::kube::leader::{self, Leadership};
use crate::runtime::kube::metrics::ReconcileMetrics;
use crate::runtime::kube::webhook_certs::{CertManager, ConfigKind};
use crate::runtime::process::health::HealthServer;
use crate::runtime::process::https::{self, CertSlot};
use crate::runtime::process::signal;
use crate::storageos::{self, ApiMetrics};

/// The Lease the api-manager's replicas elect a leader on (the Go api-manager's LeaderElectionID;
/// its RBAC grants exactly this name).
pub use crate::rbac::components::API_MANAGER_LEASE as LEASE_NAME;

const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Why the api-manager stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable Kubernetes configuration, or no API server there.
    #[error(transparent)]
    Connect(#[from] crate::runtime::kube::connect::Error),
    /// A listen address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The webhook server could not start.
    #[error(transparent)]
    Tls(#[from] https::Error),
    /// `--webhook-client-ca-file` cannot be read or holds no CA certificate.
    #[error(
        "cannot use --webhook-client-ca-file {path}: {why}; give a PEM file with the CA of the apiserver's client certificate"
    )]
    ClientCa { path: String, why: String },
    /// Leadership was lost; the process exits so that it restarts clean.
    #[error(transparent)]
    Leader(#[from] leader::Error),
    /// The webhook server ended while the process ran: without it every admission would fail
    /// open, so the process exits and is restarted instead of running on without webhooks.
    #[error("the webhook server stopped unexpectedly ({0}); exiting so that the api-manager restarts")]
    WebhookServerStopped(String),
    /// The fencer's worker could not start.
    #[error(transparent)]
    FencerWorker(#[from] fencing::worker::Error),
    /// The fencer's worker ended while the process ran: the process exits and is restarted
    /// instead of running on without fencing or node polls.
    #[error("the fencer's worker stopped unexpectedly ({0}); exiting so that the api-manager restarts")]
    FencerStopped(String),
}

/// Why the webhook server task ended, as the error the process exits with. It never ends on its
/// own while the process runs: any end is unexpected.
pub fn webhook_server_ended(ended: Result<Result<(), https::Error>, tokio::task::JoinError>) -> Error {
    let why = match ended {
        Ok(Ok(())) => "it returned".to_string(),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    tracing::error!(reason = %why, "the webhook server stopped; exiting");
    Error::WebhookServerStopped(why)
}

/// The namespace to run in: the flag, else the service account's, else `POD_NAMESPACE`, else default.
pub fn resolve_namespace(flag: &str, service_account_file: &Path) -> String {
    if !flag.is_empty() {
        return flag.to_string();
    }
    std::fs::read_to_string(service_account_file)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("POD_NAMESPACE").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "default".into())
}

/// Reads the `username` and `password` files (whitespace trimmed).
pub fn read_credentials(dir: &Path) -> Result<(String, String), String> {
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("cannot read {}: {e}", dir.join(name).display()))
    };
    Ok((read("username")?, read("password")?))
}

/// The client, and the configuration it was made from (the fencer's worker makes its own).
async fn kube_client(args: &ApiManagerArgs) -> Result<(kube::Client, kube::Config), Error> {
    use crate::runtime::kube::connect::{STARTUP_PATIENCE, connect_patiently};
    let c = connect_patiently(
        args.kubeconfig.as_deref(),
        &crate::crd::contract::user_agent(Some(API_MANAGER_COMPONENT)),
        STARTUP_PATIENCE,
    )
    .await?;
    c.require(&crate::crd::contract::MIN_KUBERNETES)?;
    tracing::info!(server = %c.server, from = %c.from, version = %c.version, "connected to Kubernetes");
    Ok((c.client, c.config))
}

/// The scheduler extender's Deployment, as the operator renders it.
const SCHEDULER_DEPLOYMENT: &str = "storageos-scheduler";

/// How the api-manager names itself in its User-Agent.
const API_MANAGER_COMPONENT: &str = "api-manager";

/// Logs in to StorageOS, retrying every `-api-retry-interval` until it works.
async fn connect(args: &ApiManagerArgs, metrics: &ApiMetrics, helper: &ApiManagerMetrics) -> storageos::Client {
    loop {
        let attempt = read_credentials(&args.api_secret_path).and_then(|(user, pass)| {
            let mut config = storageos::Config::new(&args.api_endpoint, user, pass)
                .with_user_agent(crate::crd::contract::user_agent(Some(API_MANAGER_COMPONENT)));
            if let Some(path) = &args.api_ca_file {
                let pem =
                    std::fs::read(path).map_err(|e| format!("cannot read --api-ca-file {}: {e}", path.display()))?;
                config = config.with_ca_pem(pem);
            }
            storageos::Client::with_shared_metrics(config, metrics.clone()).map_err(|e| e.to_string())
        });
        match attempt {
            Ok(client) => match client.login().await {
                Ok(_) => {
                    helper.count("setup", "");
                    tracing::info!(endpoint = %args.api_endpoint, "connected to the StorageOS API");
                    return client;
                }
                Err(e) => {
                    helper.count("setup", error_kind(&e));
                    tracing::warn!(endpoint = %args.api_endpoint, error = %e, retry_in = ?args.api_retry_interval,
                    "cannot log in to the StorageOS API; retrying")
                }
            },
            Err(e) => {
                helper.count("setup", "credentials");
                tracing::warn!(error = %e, retry_in = ?args.api_retry_interval, "cannot set up the StorageOS API client; retrying")
            }
        }
        tokio::time::sleep(args.api_retry_interval).await;
    }
}

/// Every metric family the api-manager serves on `/metrics`.
pub struct Metrics {
    pub api: ApiMetrics,
    pub webhook: WebhookMetrics,
    pub helper: ApiManagerMetrics,
    pub reconcile: ReconcileMetrics,
}

/// Registers every metric family of the api-manager in `registry` (also used by the test that
/// checks the dashboard and alerts name only metrics that exist).
pub fn register_metrics(registry: &mut Registry) -> Metrics {
    Metrics {
        api: ApiMetrics::register(registry),
        webhook: WebhookMetrics::register(registry),
        helper: ApiManagerMetrics::register(registry),
        reconcile: ReconcileMetrics::register(registry),
    }
}

/// The webhook serving certificate's manager: the Secret and Service of the flags (in the
/// api-manager's own namespace unless named), shared by every replica.
fn cert_manager(args: &ApiManagerArgs, client: &kube::Client, namespace: &str) -> CertManager {
    let or_ns = |s: &str| {
        if s.is_empty() {
            namespace.to_string()
        } else {
            s.to_string()
        }
    };
    CertManager {
        client: client.clone(),
        secret_namespace: or_ns(&args.webhook_secret_namespace),
        secret_name: args.webhook_secret_name.clone(),
        service_namespace: or_ns(&args.webhook_service_namespace),
        service_name: args.webhook_service_name.clone(),
        webhook_config: args.webhook_config_mutating.clone(),
        kind: ConfigKind::Mutating,
        component: "storageos-api-manager".into(),
        validity: chrono::Duration::from_std(args.webhook_cert_validity).unwrap_or(chrono::Duration::days(365)),
    }
}

/// The webhook's client authentication, when `--webhook-client-ca-file` is given: the CA (then
/// followed, so a changed ConfigMap is taken without a restart) and the allowed names.
fn client_auth(args: &ApiManagerArgs) -> Result<Option<https::ClientAuth>, Error> {
    let Some(path) = &args.webhook_client_ca_file else {
        return Ok(None);
    };
    let pem = std::fs::read(path).map_err(|source| Error::ClientCa {
        path: path.display().to_string(),
        why: source.to_string(),
    })?;
    let names: Vec<String> = args
        .webhook_client_names
        .iter()
        .filter(|n| !n.is_empty())
        .cloned()
        .collect();
    if names.is_empty() {
        tracing::warn!(ca = %path.display(), "any client certificate of the webhook client CA is served: give --webhook-client-names (spec.webhookClientNames), or use a CA dedicated to the webhook");
    }
    let invalid = |e: https::Error| Error::ClientCa {
        path: path.display().to_string(),
        why: e.to_string(),
    };
    let clients = https::ClientAuth::from_pem(&pem)
        .and_then(|c| c.with_names(names))
        .map_err(invalid)?;
    // A ConfigMap volume is updated in place: a new CA is taken without a restart.
    tokio::spawn(https::client_ca::follow(path.clone(), pem, clients.clone()));
    Ok(Some(clients))
}

/// Runs the api-manager until SIGTERM/SIGINT.
pub async fn run(args: ApiManagerArgs) -> Result<(), Error> {
    for warning in args.ignored_flags() {
        tracing::warn!("{warning}");
    }
    let (client, kube_config) = kube_client(&args).await?;
    let namespace = resolve_namespace(&args.namespace, Path::new(SERVICE_ACCOUNT_NAMESPACE));
    let mut registry = Registry::default();
    let Metrics {
        api: api_metrics,
        webhook: webhook_metrics,
        helper: helper_metrics,
        reconcile: reconcile_metrics,
    } = register_metrics(&mut registry);
    let health = HealthServer::new(registry);

    let metrics_addr = args.metrics_socket_addr();
    health
        .spawn_server(&metrics_addr)
        .await
        .map_err(|source| Error::Listen {
            addr: metrics_addr.clone(),
            source,
        })?;

    // 1. Certificates shared by every replica, then the webhook server: the webhooks need no
    // StorageOS, so they serve while it is down (an upgrade restarts every node pod).
    let manager = cert_manager(&args, &client, &namespace);
    // The StorageOS login (for the controllers) goes on meanwhile, whatever the certificates do.
    health.set_waiting_for(format!(
        "the webhook serving certificate (Secret {}/{}) and the webhook server; the log says what holds them up",
        manager.secret_namespace, manager.secret_name
    ));
    let login = connect(&args, &api_metrics, &helper_metrics);
    tokio::pin!(login);
    let mut api = None;
    let cert = loop {
        tokio::select! {
            cert = manager.ensure_until_ready(args.api_retry_interval) => break cert,
            logged_in = &mut login, if api.is_none() => api = Some(logged_in),
            () = signal::shutdown() => return Ok(()),
        }
    };
    helper_metrics.set_cert_expiry(cert.not_after);
    let slot = CertSlot::new(&cert.cert_pem, &cert.key_pem)?;
    let pvcs = controllers::pvc_cache();
    // The scheduler extender the operator renders next to the api-manager (`storageos-scheduler`,
    // in this namespace), watched only while the pod mutator is on.
    let scheduler = args.scheduler().map(|_| (namespace.as_str(), SCHEDULER_DEPLOYMENT));
    let (lookups, caches) = CachedLookups::start(client.clone(), &pvcs, scheduler);
    tokio::spawn(caches);
    let state = WebhookState::new(lookups, args.scheduler().map(str::to_string), webhook_metrics);
    let router = webhook::router(state, &args.webhook_mutate_pods_path, &args.webhook_mutate_pvcs_path);
    let webhook_listener = crate::runtime::process::addr::bind(&args.webhook_addr)
        .await
        .map_err(|source| Error::Listen {
            addr: args.webhook_addr.clone(),
            source,
        })?;
    let clients = client_auth(&args)?;
    let server_slot = slot.clone();
    let mut webhook_server = tokio::spawn(https::serve_for(
        webhook_listener,
        server_slot,
        clients,
        router,
        std::future::pending(),
        https::Limits::default(),
    ));
    health.set_ready();
    tracing::info!(addr = %args.webhook_addr, namespace = %namespace, "serving webhooks");

    // 2. No leader election and no controllers until the StorageOS API answers.
    let api = match api {
        Some(api) => api,
        None => tokio::select! {
            api = &mut login => api,
            () = signal::shutdown() => return Ok(()),
            ended = &mut webhook_server => return Err(webhook_server_ended(ended)),
        },
    };

    // 3. Controllers, on the leader only.
    let (ctx, polls) = polls::wire(
        client.clone(),
        api.clone(),
        args.controllers(),
        namespace.clone(),
        reconcile_metrics,
        helper_metrics.clone(),
        pvcs,
    );
    let controllers = lead(ctx, polls, kube_config, args.enable_leader_election);
    tokio::pin!(controllers);
    let mut controllers_done = false;

    // 4. Keep the certificate and the token fresh until told to stop.
    let mut cert_tick = tokio::time::interval(args.webhook_cert_refresh_interval.max(Duration::from_secs(1)));
    let mut token_tick = tokio::time::interval(args.api_refresh_interval.max(Duration::from_secs(1)));
    cert_tick.tick().await;
    token_tick.tick().await;
    let mut current = cert;
    let stop = signal::shutdown();
    tokio::pin!(stop);
    // The webhook configuration, watched by name: one re-created by the operator (or that gained
    // a webhook) gets the CA within seconds, not at the next refresh.
    let config_changes = webhook_config_changes(client.clone(), &args.webhook_config_mutating);
    tokio::pin!(config_changes);
    loop {
        let mut refresh_now = false;
        tokio::select! {
            () = &mut stop => break,
            ended = &mut webhook_server => return Err(webhook_server_ended(ended)),
            result = &mut controllers, if !controllers_done => {
                controllers_done = true;
                result?;
            }
            Some(()) = config_changes.next() => refresh_now = true,
            _ = cert_tick.tick() => refresh_now = true,
            _ = token_tick.tick() => {
                match api.refresh().await {
                    Ok(_) => helper_metrics.count("refresh_token", ""),
                    Err(e) => {
                        helper_metrics.count("refresh_token", error_kind(&e));
                        tracing::warn!(error = %e, "token refresh failed; logging in again");
                        if let Err(e) = api.login().await {
                            tracing::warn!(error = %e, "StorageOS login failed; will retry");
                        }
                    }
                }
            }
        }
        if refresh_now {
            match manager.refresh(&slot, &current).await {
                Ok(Some(new)) => {
                    helper_metrics.set_cert_expiry(new.not_after);
                    current = new;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "webhook certificate refresh failed; will retry"),
            }
        }
    }
    tracing::info!("api-manager stopped");
    Ok(())
}

/// One item each time the MutatingWebhookConfiguration `name` is created or changed (our own
/// caBundle writes included: the refresh they cause writes nothing). A deletion yields nothing:
/// there is nothing to inject into until the operator re-creates it.
fn webhook_config_changes(client: kube::Client, name: &str) -> impl futures::Stream<Item = ()> + use<> {
    use futures::StreamExt;
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use kube::runtime::{WatchStreamExt, watcher};

    let api: kube::Api<MutatingWebhookConfiguration> = kube::Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(api, config)
        .default_backoff()
        .applied_objects()
        .filter_map(|r| async move {
            match r {
                Ok(_) => Some(()),
                Err(e) => {
                    tracing::debug!(error = %e, "watching the webhook configuration");
                    None
                }
            }
        })
}

/// The StorageOS poll and the controllers that subscribe to it, until dropped: the node poll
/// and the fencer on their own worker ([`fencing::worker`]), the rest here. `Err` if the worker
/// stops by itself.
async fn with_poll(ctx: Arc<Context>, polls: Arc<Polls>, kube_config: kube::Config) -> Result<(), Error> {
    let mut worker = fencing::worker::start(&ctx, kube_config, polls.clone())?;
    tokio::select! {
        _ = async { tokio::join!(polls.run_volumes(ctx.api.clone()), controllers::run(ctx.clone())) } => Ok(()),
        why = worker.ended() => {
            tracing::error!(reason = %why, "the fencer's worker stopped; exiting");
            Err(Error::FencerStopped(why))
        }
    }
}

/// Waits for leadership (when `-enable-leader-election`), then runs the controllers until they
/// end; `Err` when leadership is lost.
async fn lead(ctx: Arc<Context>, polls: Arc<Polls>, kube_config: kube::Config, elect: bool) -> Result<(), Error> {
    if !elect {
        tracing::info!("leader election disabled: running the controllers");
        return with_poll(ctx, polls, kube_config).await;
    }
    let identity = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("storageos-api-manager-{}", rand::random::<u32>()));
    // The lease keeps the field manager it has always been written with, so replicas of an
    // older release and this one share it during a rolling update.
    let mut leadership = Leadership::acquire(
        ctx.kube.clone(),
        (&ctx.namespace, LEASE_NAME),
        (&identity, crate::crd::contract::OPERATOR_FIELD_MANAGER),
        Default::default(),
    )
    .await?;
    tokio::select! {
        done = with_poll(ctx, polls, kube_config) => done,
        e = leadership.lost() => Err(e.into()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A webhook server task that ends, however it ends, is an error the process exits
    /// with (non-zero, via main), naming why.
    #[tokio::test]
    async fn a_webhook_server_that_ends_makes_the_process_exit_with_an_error() {
        let returned = tokio::spawn(async { Ok::<(), https::Error>(()) }).await;
        let e = webhook_server_ended(returned);
        assert!(matches!(e, Error::WebhookServerStopped(_)), "{e:?}");
        assert!(e.to_string().contains("webhook server stopped unexpectedly"), "{e}");

        let panicked = tokio::spawn(async {
            panic!("boom");
            #[allow(unreachable_code)]
            Ok::<(), https::Error>(())
        })
        .await;
        let e = webhook_server_ended(panicked);
        assert!(e.to_string().contains("panicked"), "{e}");

        let aborted = tokio::spawn(std::future::pending::<Result<(), https::Error>>());
        aborted.abort();
        let e = webhook_server_ended(aborted.await);
        assert!(e.to_string().contains("cancelled"), "{e}");
    }

    #[test]
    fn namespace_comes_from_the_flag_then_the_service_account() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("namespace");
        assert_eq!(resolve_namespace("storageos", &file), "storageos");
        std::fs::write(&file, "kube-system\n").unwrap();
        assert_eq!(resolve_namespace("", &file), "kube-system");
    }

    #[test]
    fn credentials_are_read_trimmed_and_missing_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_credentials(dir.path()).unwrap_err();
        assert!(err.contains("username"), "{err}");
        std::fs::write(dir.path().join("username"), "storageos\n").unwrap();
        std::fs::write(dir.path().join("password"), " secret ").unwrap();
        assert_eq!(
            read_credentials(dir.path()).unwrap(),
            ("storageos".into(), "secret".into())
        );
    }
}
