//! Connecting to Kubernetes, and saying where when it fails: the server, and the kubeconfig and
//! context (or the pod's ServiceAccount) the address came from, as kubectl does. A first request
//! (`/version`, which every identity may read) checks the connection at start-up, so a wrong
//! address is reported as such rather than as a leader-election or RBAC failure later.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Why no connection to Kubernetes could be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig named by a flag or `KUBECONFIG` is not there.
    #[error("{given} names {path}, which does not exist; point it at your kubeconfig, or run in a pod")]
    KubeconfigMissing { given: &'static str, path: String },
    /// No kubeconfig and not in a pod.
    #[error(
        "no Kubernetes configuration: KUBECONFIG is not set, {home} does not exist and this is not a pod; \
         set KUBECONFIG or pass --kubeconfig"
    )]
    NoConfig { home: String },
    /// The configuration could not be loaded.
    #[error("cannot load the Kubernetes configuration ({from}): {message}")]
    Config { from: String, message: String },
    /// The API server did not answer.
    #[error(
        "cannot reach the Kubernetes API server {server} ({from}): {message}; check the server address \
         and that the cluster is up"
    )]
    Unreachable {
        server: String,
        from: String,
        message: String,
    },
    /// The cluster runs a Kubernetes older than the oldest supported.
    #[error(
        "the Kubernetes API server {server} ({from}) runs Kubernetes {version}, older than the oldest this release \
         supports, {min}: upgrade the cluster, or run a release of the operator that supports {version}"
    )]
    Unsupported {
        server: String,
        from: String,
        version: String,
        min: semver::Version,
    },
    /// The API server answered with an error (for example bad credentials).
    #[error("the Kubernetes API server {server} refused the first request ({from}): {message}")]
    Refused {
        server: String,
        from: String,
        message: String,
        /// The HTTP status.
        code: u16,
    },
}

impl Error {
    /// Whether the API server may answer differently in a few seconds: it did not answer (a
    /// restart, a rolling control plane), or it refused with 403 (a restarted server refuses
    /// even `/version` until its RBAC cache is filled), 429 or a 5xx.
    pub fn transient(&self) -> bool {
        match self {
            Error::Unreachable { .. } => true,
            Error::Refused { code, .. } => matches!(code, 403 | 429 | 500..=599),
            _ => false,
        }
    }
}

/// A checked connection.
pub struct Connection {
    pub client: kube::Client,
    /// What `client` was made from: another client with connections of its own (a worker on a
    /// runtime of its own) is made from it.
    pub config: kube::Config,
    /// The API server's URL.
    pub server: String,
    /// Where the configuration came from, for messages (`kubeconfig PATH, context NAME` or
    /// `the pod's ServiceAccount`).
    pub from: String,
    /// The API server's `gitVersion` (`v1.36.3`, `v1.33.5-gke.1`).
    pub version: String,
}

impl Connection {
    /// Refuses a cluster older than `min` at start-up, with a message that says so, rather than
    /// failing later on an API the cluster lacks. A version that does not parse is let through.
    pub fn require(&self, min: &semver::Version) -> Result<(), Error> {
        match older_than(&self.version, min) {
            true => Err(Error::Unsupported {
                server: self.server.clone(),
                from: self.from.clone(),
                version: self.version.clone(),
                min: min.clone(),
            }),
            false => Ok(()),
        }
    }
}

/// Whether `git_version` (`v1.32.4-eks-1`) is a release older than `min` (its patch and any
/// suffix aside from the minor are compared as released versions).
fn older_than(git_version: &str, min: &semver::Version) -> bool {
    let core = git_version.trim_start_matches('v');
    let core = core.split(['-', '+']).next().unwrap_or_default();
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) < (min.major, min.minor),
        _ => false,
    }
}

/// A client for the kubeconfig at `kubeconfig`, else the environment (`KUBECONFIG`,
/// `~/.kube/config`, in-cluster), sending `user_agent` on every request; checked with one
/// request.
pub async fn connect(kubeconfig: Option<&Path>, user_agent: &str) -> Result<Connection, Error> {
    let (config, from) = load(kubeconfig).await?;
    let server = config.cluster_url.to_string();
    let config = crate::runtime::kube::identity::kube_config(config, user_agent);
    let client = super::http::client(config.clone()).map_err(|e| Error::Config {
        from: from.clone(),
        message: chain(&e),
    })?;
    match client.apiserver_version().await {
        Ok(info) => Ok(Connection {
            client,
            config,
            server,
            from,
            version: info.git_version,
        }),
        Err(kube::Error::Api(status)) => Err(Error::Refused {
            server,
            from,
            message: format!("{} ({})", status.message, status.code),
            code: status.code,
        }),
        Err(e) => Err(Error::Unreachable {
            server,
            from,
            message: chain(&e),
        }),
    }
}

/// How long a long-running command (`run`, `api-manager`) retries a transient failure of its
/// first request before it exits: long enough for an API server restart, so a replica started
/// meanwhile does not exit and wait out a CrashLoopBackOff; short enough that a wrong address
/// still fails the pod within its first minute.
pub const STARTUP_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// [`connect`], retrying a [`Error::transient`] failure with backoff (0.5 s doubling to 4 s)
/// for up to `patience`, each retry logged; any other failure, or one that outlasts `patience`,
/// is returned at once. For the long-running commands; the CLI's commands fail fast.
pub async fn connect_patiently(
    kubeconfig: Option<&Path>,
    user_agent: &str,
    patience: std::time::Duration,
) -> Result<Connection, Error> {
    let start = tokio::time::Instant::now();
    let mut delay = std::time::Duration::from_millis(500);
    loop {
        match connect(kubeconfig, user_agent).await {
            Err(e) if e.transient() && start.elapsed() + delay < patience => {
                tracing::warn!(error = %e, retry_in = ?delay, "the first request to Kubernetes failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(4));
            }
            done => return done,
        }
    }
}

async fn load(kubeconfig: Option<&Path>) -> Result<(kube::Config, String), Error> {
    let config_error = |from: &str, e: &dyn std::error::Error| Error::Config {
        from: from.to_string(),
        message: chain(e),
    };
    if let Some(path) = kubeconfig {
        if !path.exists() {
            return Err(Error::KubeconfigMissing {
                given: "--kubeconfig",
                path: path.display().to_string(),
            });
        }
        let from = describe(path);
        let kc = Kubeconfig::read_from(path).map_err(|e| config_error(&from, &e))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| config_error(&from, &e))?;
        return Ok((config, from));
    }
    let from = match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        Some(paths) => {
            let paths: Vec<PathBuf> = std::env::split_paths(&paths).collect();
            if let [only] = paths.as_slice()
                && !only.exists()
            {
                return Err(Error::KubeconfigMissing {
                    given: "KUBECONFIG",
                    path: only.display().to_string(),
                });
            }
            paths.first().map(|p| describe(p)).unwrap_or_default()
        }
        None => {
            let home = home_kubeconfig();
            match home {
                Some(h) if h.exists() => describe(&h),
                _ if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => "the pod's ServiceAccount".to_string(),
                _ => {
                    return Err(Error::NoConfig {
                        home: home
                            .map(|h| h.display().to_string())
                            .unwrap_or_else(|| "~/.kube/config".into()),
                    });
                }
            }
        }
    };
    let config = kube::Config::infer().await.map_err(|e| config_error(&from, &e))?;
    Ok((config, from))
}

fn home_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube/config"))
}

/// `kubeconfig PATH, context NAME` (the file's current context).
fn describe(path: &Path) -> String {
    let context = Kubeconfig::read_from(path)
        .ok()
        .and_then(|k| k.current_context)
        .unwrap_or_else(|| "none".into());
    format!("kubeconfig {}, context {context}", path.display())
}

/// An error and its causes, outermost first (a connection error's cause is what says why).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn only_what_may_pass_by_itself_is_retried() {
        let refused = |code| Error::Refused {
            server: "https://k8s:6443/".into(),
            from: "the pod's ServiceAccount".into(),
            message: "no".into(),
            code,
        };
        for code in [403, 429, 500, 503] {
            assert!(refused(code).transient(), "{code}");
        }
        // Bad credentials, or a request the server does not know, stay wrong.
        for code in [401, 404] {
            assert!(!refused(code).transient(), "{code}");
        }
        let unreachable = Error::Unreachable {
            server: "https://k8s:6443/".into(),
            from: "x".into(),
            message: "connection refused".into(),
        };
        assert!(unreachable.transient());
        let missing = Error::KubeconfigMissing {
            given: "KUBECONFIG",
            path: "/nope".into(),
        };
        assert!(!missing.transient());
    }

    #[tokio::test]
    async fn an_unreachable_server_is_retried_only_within_the_patience() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        // Port 1 on loopback: nothing listens, the connection is refused at once.
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n\
             users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
        )
        .unwrap();
        let started = std::time::Instant::now();
        let failed = connect_patiently(Some(&path), "an-operator/1.2", std::time::Duration::from_secs(2)).await;
        assert!(matches!(failed, Err(Error::Unreachable { .. })), "{:?}", failed.err());
        // Retried (waiting 0.5 s first) rather than failing on the first answer, and given up
        // once the next wait would outlast the patience. (How many retries fit depends on how
        // long each refused attempt takes on a loaded machine: at least one does.)
        assert!(started.elapsed() >= std::time::Duration::from_millis(500));
    }

    #[tokio::test]
    async fn a_cluster_older_than_the_minimum_is_refused_naming_both_versions() {
        let min = semver::Version::new(1, 33, 0);
        for old in ["v1.32.9", "v1.20.0-gke.1", "v0.99.0"] {
            assert!(older_than(old, &min), "{old}");
        }
        for fine in [
            "v1.33.0",
            "v1.33.5-eks-1",
            "v1.36.3",
            "v2.0.0",
            "v1.34.0+k3s1",
            "unknown",
        ] {
            assert!(!older_than(fine, &min), "{fine}");
        }
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let c = Connection {
            client: kube::Client::try_from(config.clone()).unwrap(),
            config,
            server: "https://k8s:6443/".into(),
            from: "kubeconfig /k, context c".into(),
            version: "v1.30.2".into(),
        };
        let e = c.require(&min).unwrap_err().to_string();
        assert!(
            e.contains("v1.30.2") && e.contains("1.33.0") && e.contains("https://k8s:6443/"),
            "{e}"
        );
    }

    fn kubeconfig(dir: &Path, server: &str) -> PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server}\"}}}}]\n\
                 users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: ctx, context: {{cluster: c, user: u}}}}]\n\
                 current-context: ctx\n"
            ),
        )
        .unwrap();
        path
    }

    #[tokio::test]
    async fn an_unreachable_server_is_named_with_its_kubeconfig_and_context() {
        let dir = tempfile::tempdir().unwrap();
        // A port nothing listens on: bind one and let it go.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let path = kubeconfig(dir.path(), &format!("http://127.0.0.1:{port}"));
        let message = connect(Some(&path), "an-operator/1.2")
            .await
            .err()
            .expect("no server")
            .to_string();
        assert!(message.contains(&format!("http://127.0.0.1:{port}")), "{message}");
        assert!(
            message.contains(&path.display().to_string()) && message.contains("context ctx"),
            "{message}"
        );
        assert!(
            message.to_lowercase().contains("refused"),
            "the cause is given: {message}"
        );
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_is_named() {
        let message = connect(Some(Path::new("/nonexistent/kubeconfig")), "an-operator/1.2")
            .await
            .err()
            .expect("missing")
            .to_string();
        assert!(
            message.starts_with("--kubeconfig names /nonexistent/kubeconfig, which does not exist"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_server_that_answers_is_a_connection() {
        let (url, _request) = crate::testing::answer_once(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 185\r\n\r\n{\"major\":\"1\",\"minor\":\"36\",\"gitVersion\":\"v1.36.3\",\"gitCommit\":\"x\",\"gitTreeState\":\"clean\",\"buildDate\":\"2026-01-01T00:00:00Z\",\"goVersion\":\"go1.26\",\"compiler\":\"gc\",\"platform\":\"linux/amd64\"}",
        )
        .await;
        let dir = tempfile::tempdir().unwrap();
        let path = kubeconfig(dir.path(), &url);
        let c = connect(Some(&path), "an-operator/1.2").await.unwrap();
        assert_eq!(c.server.trim_end_matches('/'), url);
        assert!(c.from.contains("context ctx"));
    }
}
