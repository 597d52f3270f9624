//! A watched namespace that does not exist is almost always a typo in `--watch-namespaces`
//! (`WATCH_NAMESPACES`), and otherwise shows only as clusters nothing happens to. Checked at
//! start and every five minutes: a WARN in the log and a Warning event `WatchedNamespaceMissing`
//! on the operator's pod, once for each namespace that goes missing.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube::Client;
use kube::api::Api;
use kube::runtime::events::{EventType, Reporter};

use crate::reasons::WATCHED_NAMESPACE_MISSING;
use crate::runtime::kube::events::Recorder;
use crate::runtime::kube::trusted::TrustedNamespaces;

const RECHECK: Duration = Duration::from_secs(300);

/// The namespaces of `trusted` that `exists` says are not there (none for `*`). A namespace whose
/// existence could not be read (`exists` gives None) is not reported.
pub fn missing(trusted: &TrustedNamespaces, exists: impl Fn(&str) -> Option<bool>) -> BTreeSet<String> {
    match trusted {
        TrustedNamespaces::Any => BTreeSet::new(),
        TrustedNamespaces::Only(names) => names.iter().filter(|ns| exists(ns) == Some(false)).cloned().collect(),
    }
}

/// The event's note: what is wrong and what to do.
pub fn note(namespace: &str, trusted: &TrustedNamespaces) -> String {
    format!(
        "namespace {namespace:?} is on --watch-namespaces ({trusted}) but does not exist: a StorageOSCluster, StorageOSUpgrade or Job there is never seen. \
         Create the namespace, or correct WATCH_NAMESPACES on the operator's Deployment (or the Helm value watchNamespaces)"
    )
}

/// Checks every [`RECHECK`] until the process ends; `pod` is the operator's own pod
/// (`POD_NAMESPACE`/`POD_NAME`), the object the events are about (None: log only).
pub async fn keep_checking(client: Client, trusted: TrustedNamespaces, pod: Option<(String, String)>) {
    let names = match &trusted {
        TrustedNamespaces::Any => return,
        TrustedNamespaces::Only(names) => names.clone(),
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "storageos-operator".into(),
            instance: pod.as_ref().map(|(_, name)| name.clone()),
        },
    );
    let regarding = pod.map(|(namespace, name)| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace),
        name: Some(name),
        ..Default::default()
    });
    let api: Api<Namespace> = Api::all(client);
    let mut reported = BTreeSet::new();
    loop {
        let mut found = std::collections::BTreeMap::new();
        for ns in &names {
            match api.get_metadata_opt(ns).await {
                Ok(meta) => {
                    found.insert(ns.clone(), meta.is_some());
                }
                Err(e) => {
                    tracing::debug!(namespace = %ns, error = %e, "cannot tell whether a watched namespace exists")
                }
            }
        }
        let now = missing(&trusted, |ns| found.get(ns).copied());
        for ns in now.difference(&reported) {
            let note = note(ns, &trusted);
            tracing::warn!(namespace = %ns, "{note}");
            if let Some(regarding) = &regarding {
                let published = recorder
                    .publish_reason(
                        EventType::Warning,
                        WATCHED_NAMESPACE_MISSING,
                        "WatchNamespaces",
                        note,
                        regarding,
                    )
                    .await;
                if let Err(e) = published {
                    tracing::warn!(error = %e, "cannot publish the WatchedNamespaceMissing event");
                }
            }
        }
        // Reported again should it come back and go missing once more.
        reported = now;
        tokio::time::sleep(RECHECK).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_namespaces_known_to_be_absent_are_missing() {
        let trusted: TrustedNamespaces = "storageos-operator,defualt,maybe"
            .parse()
            .unwrap_or(TrustedNamespaces::Any);
        let gone = missing(&trusted, |ns| match ns {
            "storageos-operator" => Some(true),
            "defualt" => Some(false),
            _ => None,
        });
        assert_eq!(gone, BTreeSet::from(["defualt".to_string()]));
        assert!(missing(&TrustedNamespaces::Any, |_| Some(false)).is_empty());
        let n = note("defualt", &trusted);
        assert!(n.contains("\"defualt\"") && n.contains("WATCH_NAMESPACES"), "{n}");
    }
}
