//! Integration tier: the Job controller (`jobs.storageos.com`) on the real control plane.
//!
//! kwok serves pod logs from files named by `Logs` objects (kwok.x-k8s.io/v1alpha1, one per
//! pod, enabled as CRDs by `hack/k8s.sh`): each test writes its pods' logs in CRI format to
//! files of its own and points the pods at them, so it decides when a pod prints the word.
//! Each test runs its own controller restricted to its own namespace.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use prometheus_client::registry::Registry;
use serde_json::json;
use storageos_operator::crd::{Job, JobStatus};
use storageos_operator::job;
use storageos_operator::reasons::{HOST_PATH_NOT_ALLOWED, NAMESPACE_NOT_ALLOWED};
use storageos_operator::runtime::kube::metrics::ReconcileMetrics;
use storageos_operator::runtime::kube::trusted::TrustedNamespaces;
use support::evidence::Reconciles;
use support::{TestNamespace, events, from_json, wait_for};

const SETTLE: Duration = Duration::from_secs(60);

/// Starts a Job controller for `ns` only; it stops when the test's runtime ends. Its reconcile
/// count is the proof it ran (a Job in progress is reconciled every `job::POLL`).
async fn controller(ns: &TestNamespace) -> Reconciles {
    support::install_crds(&ns.client).await;
    let (reconciles, metrics) = Reconciles::new(job::CONTROLLER);
    let ctx = Arc::new(job::Context::new(support::operator_client().await, metrics).in_namespace(&ns.name));
    tokio::spawn(job::run(ctx, std::future::pending()));
    reconciles
}

/// The cleanup Job of `deploy/examples` (the seed README's, mounting only
/// `/var/lib/storageos`), with `extra` merged into its spec.
fn cleanup_job(name: &str, extra: serde_json::Value) -> Job {
    let mut spec = json!({
        "image": "darkowlzz/cleanup:v0.0.2",
        "args": ["/var/lib/storageos"],
        "mountPath": "/var/lib/storageos",
        "hostPath": "/var/lib/storageos",
        "completionWord": "done"
    });
    spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    from_json(json!({
        "apiVersion": "storageos.com/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": spec
    }))
}

fn status(j: &Job) -> JobStatus {
    j.status.clone().unwrap_or_default()
}

async fn wait_progress(jobs: &Api<Job>, name: &str, progress: &str) -> JobStatus {
    wait_for(&format!("Job {name} to show progress {progress}"), SETTLE, || async {
        let s = status(&jobs.get(name).await.ok()?);
        (s.progress.as_deref() == Some(progress)).then_some(s)
    })
    .await
}

/// Waits until the Job's DaemonSet wants `n` pods and that many are Running, and returns them.
async fn running_pods(ns: &TestNamespace, job_name: &str, n: i32) -> Vec<Pod> {
    let ds_name = format!("{job_name}-daemonset-job");
    wait_for(&format!("{n} Running pods of {ds_name}"), SETTLE, || async {
        let ds = ns.api::<DaemonSet>().get_opt(&ds_name).await.ok()??;
        let desired = ds.status.as_ref()?.desired_number_scheduled;
        let sel = format!("storageos.com/job={job_name}");
        let pods = ns
            .api::<Pod>()
            .list(&ListParams::default().labels(&sel))
            .await
            .ok()?
            .items;
        let running = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (desired == n && pods.len() == n as usize && running == n as usize).then_some(pods)
    })
    .await
}

fn logs_api(ns: &TestNamespace) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("kwok.x-k8s.io", "v1alpha1", "Logs");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "logs");
    Api::namespaced_with(ns.client.clone(), &ns.name, &ar)
}

/// Appends lines to a CRI-format container log file, stamped now.
fn append_log(path: &Path, lines: &[&str]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for line in lines {
        let ts = k8s_openapi::jiff::Timestamp::now();
        writeln!(f, "{ts} stdout F {line}").unwrap();
    }
}

/// Makes kwok serve `pod`'s log from a file in `dir` holding `lines`; returns the file.
async fn serve_log(ns: &TestNamespace, dir: &Path, pod: &Pod, lines: &[&str]) -> PathBuf {
    let path = dir.join(format!("{}.log", pod.name_any()));
    append_log(&path, lines);
    let logs: DynamicObject = from_json(json!({
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
        "metadata": {"name": pod.name_any(), "namespace": ns.name},
        "spec": {"logs": [{"containers": ["job-container"], "logsFile": path.to_str().unwrap()}]}
    }));
    logs_api(ns).create(&PostParams::default(), &logs).await.unwrap();
    // kwok picks the object up from its watch; the log is served once it has.
    let pods = ns.api::<Pod>();
    let name = pod.name_any();
    wait_for(&format!("kwok to serve the log of {name}"), SETTLE, || async {
        pods.logs(&name, &Default::default()).await.ok()
    })
    .await;
    path
}

/// Adds or removes (`None`) a label on a node.
async fn label_node(client: &kube::Client, node: &str, key: &str, value: Option<&str>) {
    Api::<Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {key: value}}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn cleanup_job_completes_only_when_every_selected_pod_printed_the_word() {
    let test_start = chrono::Utc::now();
    let ns = TestNamespace::new("job-cleanup").await;
    let client = ns.client.clone();
    let reconciles = controller(&ns).await;
    let dir = tempfile::tempdir().unwrap();

    // Select two of the fake nodes, by a label only this test uses.
    let key = format!("job-test.storageos.com/{}", ns.name);
    let selected = ["kwok-node-0", "kwok-node-1"];
    for n in selected {
        label_node(&client, n, &key, Some("true")).await;
    }
    let jobs: Api<Job> = ns.api();
    let j = cleanup_job(
        "cleanup-job",
        json!({"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": ["true"]}]}]}),
    );
    let created = jobs.create(&PostParams::default(), &j).await.unwrap();

    // One pod per selected node, with the Job's own selector, owned through the DaemonSet.
    let pods = running_pods(&ns, "cleanup-job", 2).await;
    let nodes: BTreeSet<_> = pods
        .iter()
        .map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap())
        .collect();
    assert_eq!(nodes, selected.iter().map(|s| s.to_string()).collect());
    let ds = ns.api::<DaemonSet>().get("cleanup-job-daemonset-job").await.unwrap();
    let owner = &ds.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Job", "cleanup-job", Some(true))
    );
    let ds_spec = ds.spec.unwrap();
    assert_eq!(
        ds_spec.selector.match_labels.unwrap(),
        [("storageos.com/job".to_string(), "cleanup-job".to_string())].into()
    );
    let pod_spec = pods[0].spec.clone().unwrap();
    assert_eq!(
        pod_spec.containers[0].image.as_deref(),
        Some("darkowlzz/cleanup:v0.0.2")
    );
    assert_eq!(pod_spec.containers[0].args.clone().unwrap(), ["/var/lib/storageos"]);
    assert_eq!(pods[0].labels()["daemonset-job"], "true");
    let volume = &pod_spec.volumes.unwrap()[0];
    assert_eq!(volume.host_path.as_ref().unwrap().path, "/var/lib/storageos");

    // Nothing printed yet.
    let s = wait_progress(&jobs, "cleanup-job", "0/2").await;
    assert_eq!((s.completed, s.nodes_total), (Some(false), Some(2)));

    // One pod finished; the other printed something that merely contains the word.
    serve_log(&ns, dir.path(), &pods[0], &["removing /var/lib/storageos", "done"]).await;
    let slow = serve_log(
        &ns,
        dir.path(),
        &pods[1],
        &["rm: can't remove '/var/lib/storageos/abandoned'"],
    )
    .await;
    let s = wait_progress(&jobs, "cleanup-job", "1/2").await;
    assert_eq!(s.completed, Some(false));
    assert_eq!(
        support::condition(&s, "Ready").map(|c| c.status.as_str()),
        Some("False")
    );
    assert_eq!(
        support::condition(&s, "Progressing").map(|c| c.status.as_str()),
        Some("True")
    );
    // Two reconciles later it still waits for the second node.
    reconciles.after(2).await;
    let s = status(&jobs.get("cleanup-job").await.unwrap());
    assert_eq!((s.completed, s.progress.as_deref()), (Some(false), Some("1/2")));
    assert!(
        events(&ns.client, &ns.name, None, "cleanup-job", "JobCompleted")
            .await
            .is_empty()
    );

    // The second pod finishes: the Job completes, once.
    append_log(&slow, &["done"]);
    let s = wait_for("the Job to complete", SETTLE, || async {
        let s = status(&jobs.get("cleanup-job").await.ok()?);
        (s.completed == Some(true)).then_some(s)
    })
    .await;
    assert_eq!((s.nodes_completed, s.nodes_total), (Some(2), Some(2)));
    assert_eq!(s.progress.as_deref(), Some("2/2"));
    assert_eq!(support::condition(&s, "Ready").map(|c| c.status.as_str()), Some("True"));
    assert_eq!(
        support::condition(&s, "Progressing").map(|c| c.status.as_str()),
        Some("False")
    );
    let completed = wait_for("the JobCompleted event", Duration::from_secs(10), || async {
        let e = events(&ns.client, &ns.name, None, "cleanup-job", "JobCompleted").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(completed[0].message.as_deref(), Some("Job Completed. Safe to delete."));
    assert_eq!(completed[0].type_.as_deref(), Some("Normal"));

    // Idle: no more writes to the Job, no second event, the spec never written, and no pod log
    // read any more (docs/features.md: logs are no longer read once the Job is done).
    // A change of ours (an annotation) makes the controller reconcile the completed Job again:
    // it reads no log and writes nothing.
    let idle_from = chrono::Utc::now();
    let touched = json!({"metadata": {"annotations": {"storageos-operator-test/touched": "yes"}}});
    let since = reconciles.count();
    let before = jobs
        .patch("cleanup-job", &PatchParams::default(), &Patch::Merge(&touched))
        .await
        .unwrap();
    wait_for("a reconcile of the touched Job", SETTLE, || async {
        (reconciles.count() > since).then_some(())
    })
    .await;
    let log_reads: Vec<String> = support::identity::audited(support::identity::OPERATOR, idle_from)
        .into_iter()
        .filter(|r| r.starts_with("get pods/log") && r.contains(&format!(" {}/", ns.name)))
        .collect();
    assert_eq!(
        log_reads,
        [] as [String; 0],
        "a completed Job's pod logs are still read"
    );
    // Logs are read incrementally (docs/features.md): once a read of a pod's log returned lines, every
    // later read asks only for what came since (reads before the pod printed anything cannot).
    let mut reads: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for e in support::identity::audit_events(support::identity::OPERATOR, test_start) {
        if e["objectRef"]["subresource"] == "log" && e["objectRef"]["namespace"] == ns.name.as_str() {
            let pod = e["objectRef"]["name"].as_str().unwrap_or_default().to_string();
            reads
                .entry(pod)
                .or_default()
                .push(e["requestURI"].as_str().unwrap_or_default().to_string());
        }
    }
    assert!(
        reads.values().flatten().any(|uri| uri.contains("sinceTime=")),
        "no log read was incremental: {reads:?}"
    );
    for (pod, uris) in &reads {
        let first_incremental = uris.iter().position(|u| u.contains("sinceTime=")).unwrap_or(uris.len());
        for uri in &uris[first_incremental..] {
            assert!(
                uri.contains("sinceTime="),
                "a later read of {pod}'s log starts over: {uri}"
            );
        }
    }
    let after = jobs.get("cleanup-job").await.unwrap();
    assert_eq!(
        after.resource_version(),
        before.resource_version(),
        "a completed Job is written to"
    );
    assert_eq!(after.spec, created.spec, "the spec was written");
    assert_eq!(after.metadata.generation, Some(1));
    let completed = events(&ns.client, &ns.name, None, "cleanup-job", "JobCompleted").await;
    assert_eq!(completed.len(), 1);
    assert!(completed[0].count.unwrap_or(1) == 1 && completed[0].series.is_none());

    for n in selected {
        label_node(&client, n, &key, None).await;
    }
}

#[tokio::test]
async fn two_jobs_in_one_namespace_never_see_each_others_pods() {
    let ns = TestNamespace::new("job-two").await;
    let reconciles = controller(&ns).await;
    let dir = tempfile::tempdir().unwrap();
    let nodes = Api::<Node>::all(ns.client.clone())
        .list(&ListParams::default().labels("type=kwok"))
        .await
        .unwrap()
        .items
        .len() as i32;
    let jobs: Api<Job> = ns.api();
    // Same (default) labelSelector for both, as with the Go operator.
    for name in ["first", "second"] {
        jobs.create(&PostParams::default(), &cleanup_job(name, json!({})))
            .await
            .unwrap();
    }
    let first = running_pods(&ns, "first", nodes).await;
    let second = running_pods(&ns, "second", nodes).await;
    let owners =
        |pods: &[Pod]| -> BTreeSet<String> { pods.iter().map(|p| p.owner_references()[0].name.clone()).collect() };
    assert_eq!(owners(&first), ["first-daemonset-job".to_string()].into());
    assert_eq!(owners(&second), ["second-daemonset-job".to_string()].into());

    for p in &first {
        serve_log(&ns, dir.path(), p, &["done"]).await;
    }
    for p in &second {
        serve_log(&ns, dir.path(), p, &["still working"]).await;
    }
    let all = format!("{nodes}/{nodes}");
    let s = wait_progress(&jobs, "first", &all).await;
    assert_eq!(s.completed, Some(true));
    assert_eq!(s.nodes_total, Some(nodes), "the first Job counted the other Job's pods");
    reconciles.after(2).await;
    let s = status(&jobs.get("second").await.unwrap());
    assert_eq!(s.completed, Some(false));
    assert_eq!(s.progress, Some(format!("0/{nodes}")));
    assert!(
        events(&ns.client, &ns.name, None, "second", "JobCompleted")
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn deleting_a_job_removes_its_daemonset_and_pods() {
    let ns = TestNamespace::new("job-delete").await;
    controller(&ns).await;
    let nodes = Api::<Node>::all(ns.client.clone())
        .list(&ListParams::default().labels("type=kwok"))
        .await
        .unwrap()
        .items
        .len() as i32;
    let jobs: Api<Job> = ns.api();
    for name in ["doomed", "kept"] {
        jobs.create(&PostParams::default(), &cleanup_job(name, json!({})))
            .await
            .unwrap();
    }
    running_pods(&ns, "doomed", nodes).await;
    running_pods(&ns, "kept", nodes).await;
    // Only the status is ever written (the Go operator wrote labelSelector back into the spec
    // on every reconcile; here its default comes from the CRD schema).
    let live = jobs.get("doomed").await.unwrap();
    assert_eq!(live.spec.label_selector.as_deref(), Some("daemonset-job=true"));
    assert_eq!(live.metadata.generation, Some(1));
    let spec_writers: Vec<_> = live
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.subresource.as_deref() != Some("status"))
        .collect();
    assert_eq!(
        spec_writers.len(),
        1,
        "someone besides the creator wrote the Job: {spec_writers:?}"
    );
    assert_eq!(spec_writers[0].operation.as_deref(), Some("Update"));

    jobs.delete("doomed", &DeleteParams::background()).await.unwrap();
    let daemonsets = ns.api::<DaemonSet>();
    let pods = ns.api::<Pod>();
    wait_for("the DaemonSet and pods of the deleted Job to go", SETTLE, || async {
        let ds = daemonsets.get_opt("doomed-daemonset-job").await.ok()?;
        let left = pods
            .list(&ListParams::default().labels("storageos.com/job=doomed"))
            .await
            .ok()?
            .items;
        (ds.is_none() && left.is_empty()).then_some(())
    })
    .await;
    // The other Job is untouched.
    assert!(daemonsets.get_opt("kept-daemonset-job").await.unwrap().is_some());
    let kept = pods
        .list(&ListParams::default().labels("storageos.com/job=kept"))
        .await
        .unwrap()
        .items;
    assert_eq!(kept.len(), nodes as usize);
    assert!(kept.iter().all(|p| p.metadata.deletion_timestamp.is_none()));
}

/// With the operator's allow-list narrowed by its flag to one directory under
/// `/var/lib/storageos`, a Job that admission accepts (it mounts `/var/lib/storageos`) is refused
/// by the operator: Ready=False reason HostPathNotAllowed naming the allowed path, one Warning
/// event, and no DaemonSet. An allowed Job in the same namespace runs.
#[tokio::test]
async fn a_job_with_a_host_path_outside_the_operator_allow_list_gets_no_daemonset() {
    let ns = TestNamespace::new("job-hostpath").await;
    support::install_crds(&ns.client).await;
    let metrics = ReconcileMetrics::register(&mut Registry::default());
    let allow: job::hostpath::AllowList = "/var/lib/storageos/tasks".parse().unwrap();
    let ctx = Arc::new(
        job::Context::new(support::operator_client().await, metrics)
            .in_namespace(&ns.name)
            .with_host_paths(allow),
    );
    tokio::spawn(job::run(ctx, std::future::pending()));
    let jobs: Api<Job> = ns.api();
    jobs.create(&PostParams::default(), &cleanup_job("wide", json!({})))
        .await
        .unwrap();
    jobs.create(
        &PostParams::default(),
        &cleanup_job(
            "narrow",
            json!({"hostPath": "/var/lib/storageos/tasks", "mountPath": "/data"}),
        ),
    )
    .await
    .unwrap();
    let ready = wait_for("the Job to be refused", SETTLE, || async {
        let s = status(&jobs.get("wide").await.ok()?);
        s.conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "False" && c.reason == HOST_PATH_NOT_ALLOWED)
    })
    .await;
    assert!(
        ready.message.contains("\"/var/lib/storageos\"") && ready.message.contains("only /var/lib/storageos/tasks;"),
        "{}",
        ready.message
    );
    let daemonsets = ns.api::<DaemonSet>();
    wait_for("the allowed Job's DaemonSet", SETTLE, || async {
        daemonsets.get_opt("narrow-daemonset-job").await.ok()?
    })
    .await;
    assert!(daemonsets.get_opt("wide-daemonset-job").await.unwrap().is_none());
    let warnings = events(&ns.client, &ns.name, Some("Job"), "wide", HOST_PATH_NOT_ALLOWED.name()).await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}

/// A Job in a namespace the operator does not trust (its `--watch-namespaces` name another) gets
/// Ready=False with reason NamespaceNotAllowed, one Warning event, and no DaemonSet.
#[tokio::test]
async fn a_job_in_a_namespace_that_is_not_trusted_gets_no_daemonset() {
    let ns = TestNamespace::new("job-untrusted").await;
    support::install_crds(&ns.client).await;
    let (passes, metrics) = Reconciles::new(job::CONTROLLER);
    let ctx = Arc::new(
        job::Context::new(support::operator_client().await, metrics)
            .in_namespace(&ns.name)
            .with_trusted_namespaces(TrustedNamespaces::only("storageos-operator")),
    );
    tokio::spawn(job::run(ctx, std::future::pending()));
    let jobs: Api<Job> = ns.api();
    jobs.create(&PostParams::default(), &cleanup_job("tenant-job", json!({})))
        .await
        .unwrap();
    let ready = wait_for("the Job to be refused", SETTLE, || async {
        let s = status(&jobs.get("tenant-job").await.ok()?);
        s.conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "False" && c.reason == NAMESPACE_NOT_ALLOWED)
    })
    .await;
    assert!(ready.message.contains(&format!("{:?}", ns.name)), "{}", ready.message);
    // A pass over the refused Job (nudged by an annotation of the test's own) makes nothing.
    let before = passes.count();
    let nudge = json!({"metadata": {"annotations": {"example.com/nudge": "refused"}}});
    jobs.patch("tenant-job", &PatchParams::default(), &Patch::Merge(&nudge))
        .await
        .unwrap();
    wait_for("a pass over the refused Job", SETTLE, || async {
        (passes.count() > before).then_some(())
    })
    .await;
    assert!(
        ns.api::<DaemonSet>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let warnings = events(
        &ns.client,
        &ns.name,
        Some("Job"),
        "tenant-job",
        NAMESPACE_NOT_ALLOWED.name(),
    )
    .await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}
