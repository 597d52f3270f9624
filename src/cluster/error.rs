//! Why a cluster reconcile failed. Each Kubernetes or StorageOS failure names the step it
//! happened in, so a timeout or a refusal on the cluster's status says which read or write it
//! was, not only "Kubernetes API: …".

use crate::runtime::kube::apply;
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
}
