//! Integration tier: one leader at a time on a real Lease; the next takes over on release.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use storageos_operator::runtime::kube::leader::{Leadership, Timing};
use support::TestNamespace;

#[tokio::test]
async fn only_one_replica_leads_and_another_takes_over_on_release() {
    let ns = TestNamespace::new("lease").await;
    // The holder renews 3 s before its 10 s run out.
    let timing = Timing {
        duration_secs: 10,
        grace_secs: 3,
    };
    let first = Leadership::acquire(
        ns.client.clone(),
        (&ns.name, "test-lease"),
        ("replica-a", "storageos-operator"),
        timing,
    )
    .await
    .unwrap();

    let leases = ns.api::<Lease>();
    let renewed = || async { leases.get("test-lease").await.ok()?.spec?.renew_time };
    let acquired = renewed().await.expect("the holder's renewTime");

    let client = ns.client.clone();
    let name = ns.name.clone();
    let second = tokio::spawn(async move {
        Leadership::acquire(
            client,
            (&name, "test-lease"),
            ("replica-b", "storageos-operator"),
            timing,
        )
        .await
    });
    // Until the holder has renewed (so the second candidate has tried against a live lease for
    // most of a lease term), the second does not lead.
    support::wait_for("the holder to renew its lease", Duration::from_secs(30), || async {
        renewed().await.filter(|t| *t > acquired).map(|_| ())
    })
    .await;
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
    let lease = leases.get("test-lease").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("replica-b"));
}
