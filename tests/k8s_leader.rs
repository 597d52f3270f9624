//! Integration tier: one leader at a time on a real Lease; the next takes over on release.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use storageos_operator::runtime::kube::leader::{Leadership, Timing};
use support::TestNamespace;

#[tokio::test]
async fn only_one_replica_leads_and_another_takes_over_on_release() {
    let ns = TestNamespace::new("lease").await;
    // A lease far longer than the 4 s check, so a slow renewal on a loaded machine cannot
    // hand it over early.
    let timing = Timing {
        duration_secs: 10,
        grace_secs: 3,
    };
    let first = Leadership::acquire(ns.client.clone(), &ns.name, "test-lease", "replica-a", timing)
        .await
        .unwrap();

    let client = ns.client.clone();
    let name = ns.name.clone();
    let second =
        tokio::spawn(async move { Leadership::acquire(client, &name, "test-lease", "replica-b", timing).await });
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !second.is_finished(),
        "a second replica became leader while the first held the lease"
    );

    drop(first); // releases the lease
    let second = tokio::time::timeout(Duration::from_secs(30), second)
        .await
        .expect("second replica never led");
    let _second = second
        .unwrap()
        .unwrap_or_else(|e| panic!("second replica failed: {e:?}"));
    let lease = ns
        .api::<k8s_openapi::api::coordination::v1::Lease>()
        .get("test-lease")
        .await
        .unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("replica-b"));
}
