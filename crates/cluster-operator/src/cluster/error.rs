//! Why a cluster reconcile failed. Each Kubernetes or StorageOS failure names the step it
//! happened in, so a timeout or a refusal on the cluster's status says which read or write it
//! was, not only "Kubernetes API: …".

use crate::runtime::kube::apply;
use crate::runtime::kube::controller::{ReconcileError, category, kube_category};
use crate::storageos;

/// Why a reconcile failed; every variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read or write of the Kubernetes API failed in `step`.
    #[error("cannot {step}: {source}")]
    Kube {
        step: String,
        #[source]
        source: kube::Error,
    },
    /// Applying or pruning a child failed.
    #[error(transparent)]
    Apply(#[from] apply::Error),
    /// Some rendered objects were refused; the message names each one and why.
    #[error("{message}")]
    ApplyFailed { failed: usize, message: String },
    /// The StorageOS API refused a request made in `step`.
    #[error("cannot {step}: StorageOS API: {source}")]
    StorageOS {
        step: String,
        #[source]
        source: storageos::Error,
    },
}

impl Error {
    /// The HTTP status of the apiserver's refusal, when that is what this is.
    pub fn api_code(&self) -> Option<u16> {
        let source = match self {
            Error::Kube { source, .. } => source,
            Error::Apply(apply::Error::Kube { source, .. }) => source.as_ref(),
            _ => return None,
        };
        match source {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        }
    }
}

impl ReconcileError for Error {
    fn category(&self) -> &'static str {
        match self {
            Error::Kube { source, .. } => kube_category(source),
            Error::Apply(_) | Error::ApplyFailed { .. } if self.api_code() == Some(403) => category::FORBIDDEN,
            Error::Apply(_) | Error::ApplyFailed { .. } => category::APPLY,
            Error::StorageOS { .. } => category::STORAGEOS,
        }
    }

    /// Only a read or write of the pass's own (a status write, the finalizer) is guarded by the
    /// version it decided on; an apply's 409 is a field-manager conflict, reported.
    fn lost_to_a_newer_version(&self) -> bool {
        matches!(self, Error::Kube { .. }) && self.api_code() == Some(409)
    }
}

/// Names the step of a fallible call: `api.list(..).await.step("list the StorageOSClusters")?`.
pub trait Step<T> {
    /// The result, with an error that names `step`.
    fn step(self, step: impl Into<String>) -> Result<T, Error>;
}

impl<T> Step<T> for Result<T, kube::Error> {
    fn step(self, step: impl Into<String>) -> Result<T, Error> {
        self.map_err(|source| Error::Kube {
            step: step.into(),
            source,
        })
    }
}

impl<T> Step<T> for Result<T, storageos::Error> {
    fn step(self, step: impl Into<String>) -> Result<T, Error> {
        self.map_err(|source| Error::StorageOS {
            step: step.into(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("secrets \"s\" is forbidden", "Forbidden")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn the_message_names_the_step_and_keeps_the_apiserver_answer() {
        let e = Err::<(), _>(refused(403))
            .step("read Secret default/creds")
            .unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("cannot read Secret default/creds: "), "{text}");
        assert!(text.contains("forbidden"), "{text}");
        assert_eq!(e.api_code(), Some(403));
    }

    #[test]
    fn each_failure_has_its_category_and_only_a_guarded_write_lost_to_a_newer_version() {
        let kube = |code| Err::<(), _>(refused(code)).step("write the status").unwrap_err();
        assert_eq!(kube(500).category(), category::KUBERNETES);
        assert_eq!(kube(403).category(), category::FORBIDDEN);
        assert_eq!(kube(409).category(), category::CONFLICT);
        assert!(kube(409).lost_to_a_newer_version());
        assert!(!kube(500).lost_to_a_newer_version());
        let apply = |code| {
            Error::Apply(apply::Error::Kube {
                verb: "apply",
                kind: "DaemonSet".into(),
                name: "x".into(),
                source: Box::new(refused(code)),
            })
        };
        assert_eq!(apply(422).category(), category::APPLY);
        assert_eq!(apply(403).category(), category::FORBIDDEN);
        assert!(!apply(409).lost_to_a_newer_version());
        let failed = Error::ApplyFailed {
            failed: 1,
            message: "x".into(),
        };
        assert_eq!(failed.category(), category::APPLY);
        let invalid = storageos::Error::InvalidEndpoint {
            endpoint: "x".into(),
            reason: "y".into(),
        };
        let storageos = Err::<(), _>(invalid).step("read the nodes").unwrap_err();
        assert_eq!(storageos.category(), category::STORAGEOS);
    }
}
