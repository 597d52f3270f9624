//! `install --wait` and an operator image that cannot be pulled: the kubelet retries an
//! ImagePullBackOff for ever, so without this a wrong `--image` (or the default image before it
//! is published) spins until the timeout. A pull that keeps failing stops the wait with the fix.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// How long a pull may keep failing before the wait gives up: long enough for a registry's
/// passing hiccup, well inside a minute and a half from the install.
pub const GRACE: Duration = Duration::from_secs(30);

/// The kubelet's reasons for a container waiting on its image.
const PULL_REASONS: [&str; 3] = ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"];

/// A container of a pod that waits on an image it cannot pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullFailure {
    pub pod: String,
    pub image: String,
    pub reason: String,
    pub message: String,
}

impl PullFailure {
    /// Whether retrying cannot help (the reference itself is invalid).
    pub fn is_final(&self) -> bool {
        self.reason == "InvalidImageName"
    }

    /// What went wrong and what to do next.
    pub fn explain(&self, waited: Duration) -> String {
        let message = crate::text::truncated(&self.message, 300);
        format!(
            "the operator's image {} cannot be pulled ({} for {} s on pod {}: {message}). Push it to a registry the nodes can reach (hack/image.sh --push {}; docs/release.md) or run install again with --image naming an image that exists",
            self.image,
            self.reason,
            waited.as_secs(),
            self.pod,
            self.image
        )
    }
}

/// The first container (init containers included) of `pods` that waits on an image it cannot
/// pull.
pub fn pull_failure(pods: &[Pod]) -> Option<PullFailure> {
    pods.iter().find_map(|pod| {
        let status = pod.status.as_ref()?;
        let statuses = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        statuses.into_iter().find_map(|c| {
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.as_deref()?;
            PULL_REASONS.contains(&reason).then(|| PullFailure {
                pod: pod.name_any(),
                image: c.image.clone(),
                reason: reason.to_string(),
                message: waiting.message.clone().unwrap_or_default(),
            })
        })
    })
}

/// Follows pull failures over successive looks: `Some` once one has lasted [`GRACE`] (or at once
/// when retrying cannot help).
#[derive(Debug, Default)]
pub struct PullWatch {
    since: Option<std::time::Instant>,
}

impl PullWatch {
    /// Records what one look saw; returns the failure to stop on, with how long it lasted.
    pub fn saw(&mut self, failure: Option<PullFailure>) -> Option<(PullFailure, Duration)> {
        let Some(failure) = failure else {
            self.since = None;
            return None;
        };
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        let lasted = since.elapsed();
        (failure.is_final() || lasted >= GRACE).then_some((failure, lasted))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).unwrap()
    }

    const BACKING_OFF: &str = r#"
metadata: {name: storageos-operator-abc}
status:
  containerStatuses:
  - name: operator
    image: registry.invalid/storageos-operator:v0.1.0
    imageID: ""
    ready: false
    restartCount: 0
    state:
      waiting: {reason: ImagePullBackOff, message: 'Back-off pulling image "registry.invalid/storageos-operator:v0.1.0"'}
"#;

    #[test]
    fn a_container_backing_off_on_its_image_is_found_and_a_running_one_is_not() {
        let running = pod(
            "metadata: {name: ok}\nstatus:\n  containerStatuses:\n  - {name: operator, image: i, imageID: x, ready: true, restartCount: 0, state: {running: {}}}\n",
        );
        let crashing = pod(
            "metadata: {name: crash}\nstatus:\n  containerStatuses:\n  - {name: operator, image: i, imageID: x, ready: false, restartCount: 3, state: {waiting: {reason: CrashLoopBackOff}}}\n",
        );
        assert_eq!(pull_failure(&[running.clone(), crashing]), None);
        let failure = pull_failure(&[running, pod(BACKING_OFF)]).unwrap();
        assert_eq!(failure.pod, "storageos-operator-abc");
        assert_eq!(failure.image, "registry.invalid/storageos-operator:v0.1.0");
        assert_eq!(failure.reason, "ImagePullBackOff");
        let text = failure.explain(Duration::from_secs(31));
        for part in [
            "registry.invalid/storageos-operator:v0.1.0",
            // The script's --push takes the destination itself (`--push --tag X` is refused).
            "hack/image.sh --push registry.invalid/storageos-operator:v0.1.0;",
            "--image",
            "31 s",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }

    #[test]
    fn a_failure_stops_the_wait_only_once_it_has_lasted_or_cannot_be_retried() {
        let failure = pull_failure(&[pod(BACKING_OFF)]);
        let mut watch = PullWatch::default();
        assert_eq!(watch.saw(failure.clone()), None, "a first failure may pass");
        assert_eq!(watch.saw(None), None);
        watch.since = Some(std::time::Instant::now() - GRACE);
        assert!(watch.saw(failure).is_some(), "lasted the grace");

        let invalid = pod(&BACKING_OFF.replace("ImagePullBackOff", "InvalidImageName"));
        assert!(PullWatch::default().saw(pull_failure(&[invalid])).is_some());
    }
}
