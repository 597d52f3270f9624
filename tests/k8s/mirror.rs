//! Integration tier: the api-manager's shared StorageOS poll and the `api.storageos.com` mirror
//! (nodes and volumes in kubectl) on the real control plane with an in-process simulator.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use storageos_operator::apimanager::controllers::mirror;
use storageos_operator::crd::{StorageOSNode, StorageOSVolume};
use storageos_operator::sim::{SimHandle, VolumeSeed};
use storageos_operator::storageos::models::Health;
use support::evidence::{after_polls, after_polls_within, on_route};
use support::identity::{API_MANAGER, writes_by};
use support::{TestNamespace, from_json, logs, wait_for};

/// The plane's three kwok nodes, registered in the simulator as StorageOS nodes.
const NODES: [&str; 3] = support::KWOK_NODES;
/// The fencer's floor, and the default.
const NODE_POLL: Duration = Duration::from_secs(5);
/// The poll's node read and volume read, as the simulator records them.
const NODE_READ: &str = "GET /v2/nodes";
const VOLUME_READ: &str = "GET /v2/namespaces/{id}/volumes";
const FLAGS: &[&str] = &["-node-poll-interval", "5s", "-volume-poll-interval", "1s"];
const SETTLE: Duration = Duration::from_secs(60);

/// `kubectl get <what>` on the plane, as a user would type it.
fn kubectl_get(args: &[&str]) -> String {
    let out = std::process::Command::new(support::kubectl())
        .arg("--kubeconfig")
        .arg(support::kubeconfig_path())
        .arg("get")
        .args(args)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl get {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The row of `name` in kubectl's table output, split into columns.
fn row(table: &str, name: &str) -> Vec<String> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cols| cols.iter().any(|c| c == name))
        .unwrap_or_else(|| panic!("no row {name} in\n{table}"))
}

async fn node_mirror(api: &Api<StorageOSNode>, name: &str, health: &str) -> StorageOSNode {
    wait_for(
        &format!("nodes.api.storageos.com/{name} to be {health}"),
        SETTLE,
        || async {
            let n = api.get_opt(name).await.ok()??;
            (n.status.as_ref()?.health == health).then_some(n)
        },
    )
    .await
}

fn seed(sim: &SimHandle, ns: &TestNamespace, pv: &str, pvc: &str) {
    sim.add_volume(VolumeSeed {
        replicas: 1,
        size_bytes: 2 << 30,
        ..support::seed::volume(&ns.name, pv, pvc, NODES[0])
    })
    .unwrap();
}

/// The Must-show of the mirror: the three nodes with their health; a node marked offline in the
/// simulator shows within one poll; a volume seeded for a PVC appears in the PVC's namespace
/// (owned by it, with its master and replica health) and disappears when removed; an idle
/// minute makes no writes. The mirror runs as the api-manager's ServiceAccount.
#[tokio::test]
async fn nodes_and_volumes_show_in_kubectl_and_follow_storageos() {
    logs();
    let (client, sim) = support::sim_on_the_plane().await;
    let ns = TestNamespace::new("mirror").await;
    // The claim bound to the volume's PV, and one of another name that is not bound.
    let pv = format!("pvc-{}", support::suffix());
    let claim = |name: &str, pv: Option<&str>| -> PersistentVolumeClaim {
        from_json(json!({
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "t-mirror-none", "volumeName": pv,
                     "resources": {"requests": {"storage": "2Gi"}}}
        }))
    };
    let pvcs = ns.api::<PersistentVolumeClaim>();
    let pvc = pvcs
        .create(&PostParams::default(), &claim("data", Some(&pv)))
        .await
        .unwrap();
    pvcs.create(&PostParams::default(), &claim("unbound", None))
        .await
        .unwrap();
    let ctx = support::api_manager_context(&sim, FLAGS).await;
    let controller = tokio::spawn(mirror::run(ctx));
    let nodes: Api<StorageOSNode> = Api::all(client.clone());
    let k8s_nodes: Api<Node> = Api::all(client.clone());

    // The three nodes, online, each owned by its Kubernetes Node.
    for name in NODES {
        let m = node_mirror(&nodes, name, "online").await;
        let owner = &m.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", name));
        assert_eq!(Some(owner.uid.clone()), k8s_nodes.get(name).await.unwrap().uid());
        let status = m.status.unwrap();
        assert_eq!(status.capacity.unwrap().total, "100Gi");
        assert_eq!(status.last_seen_online, None);
        // From the Node's kubernetes.io/os and kubernetes.io/arch (linux, amd64 on kwok).
        assert_eq!((status.eligible, status.ineligible_because), (Some(true), None));
    }
    let table = kubectl_get(&["nodes.api.storageos.com"]);
    println!("$ kubectl get nodes.api.storageos.com\n{table}");
    for name in NODES {
        assert_eq!(row(&table, name)[1], "online", "{table}");
    }

    // Offline in StorageOS: shown at the first poll after it (healthSince is that poll's time).
    let marked = chrono::Utc::now();
    sim.set_health(NODES[2], Health::Offline).unwrap();
    let m = node_mirror(&nodes, NODES[2], "offline").await;
    let status = m.status.unwrap();
    let since: chrono::DateTime<chrono::Utc> = status.health_since.unwrap().parse().unwrap();
    let slack = chrono::Duration::from_std(NODE_POLL + Duration::from_secs(2)).unwrap();
    assert!(
        since <= marked + slack,
        "seen offline by the poll of {since}, marked at {marked}: more than one poll later"
    );
    assert!(status.last_seen_online.is_some(), "the last online poll is recorded");
    assert_eq!(row(&kubectl_get(&["nodes.api.storageos.com"]), NODES[2])[1], "offline");

    // A volume seeded for the PVC appears in its namespace, owned by it; one without a PVC does
    // not, nor one naming a PVC that is not bound to it.
    seed(&sim, &ns, &pv, "data");
    seed(&sim, &ns, &format!("{pv}-orphan"), "no-such-claim");
    seed(&sim, &ns, &format!("{pv}-unbound"), "unbound");
    let volumes: Api<StorageOSVolume> = ns.api();
    // Written in two steps (the object, then its status): wait for both.
    let v = wait_for("the volume mirror", SETTLE, || async {
        volumes.get_opt(&pv).await.ok()?.filter(|v| v.status.is_some())
    })
    .await;
    assert_eq!(v.owner_references()[0].uid, pvc.uid().unwrap());
    assert_eq!(v.owner_references()[0].kind, "PersistentVolumeClaim");
    let status = v.status.unwrap();
    assert_eq!((status.pvc.as_str(), status.master.node.as_str()), ("data", NODES[0]));
    assert_eq!(
        (status.health.as_str(), status.replicas_ready.as_str()),
        ("healthy", "1/1")
    );
    assert_eq!(
        status.replicas[0].node, NODES[1],
        "the replica is on the other online node"
    );
    assert_eq!(status.size, "2Gi");

    // The replica's node goes offline: the volume shows degraded, its master stays.
    sim.set_health(NODES[2], Health::Online).unwrap();
    node_mirror(&nodes, NODES[2], "online").await;
    sim.set_health(NODES[1], Health::Offline).unwrap();
    let degraded = wait_for("the volume to show degraded", SETTLE, || async {
        let v = volumes.get_opt(&pv).await.ok()??;
        (v.status.as_ref()?.health == "degraded").then_some(v)
    })
    .await;
    assert_eq!(degraded.status.unwrap().master.node, NODES[0]);
    let table = kubectl_get(&["volumes.api.storageos.com", "-A"]);
    println!("$ kubectl get volumes.api.storageos.com -A\n{table}");
    let cols = row(&table, &pv);
    assert_eq!(
        cols[..6],
        [ns.name.as_str(), pv.as_str(), "data", "degraded", NODES[0], "0/1"],
        "{table}"
    );
    assert!(
        !table.contains(&format!("{pv}-orphan")),
        "no mirror without a PVC: {table}"
    );
    assert!(
        !table.contains(&format!("{pv}-unbound")),
        "no mirror for a PVC not bound to the volume: {table}"
    );
    node_mirror(&nodes, NODES[1], "offline").await;

    // With its only replica offline, the master's node holds the last online copy of the
    // volume: not safe to drain, and the PVC is named.
    let blocked = format!("{}/data", ns.name);
    let holder = wait_for("the master's node to show it is not safe to drain", SETTLE, || async {
        let s = nodes.get(NODES[0]).await.ok()?.status?;
        (s.safe_to_drain == Some(false) && s.drain_blocked_by.contains(&blocked)).then_some(s)
    })
    .await;
    assert!(holder.drain_blocked_count >= Some(1));
    let table = kubectl_get(&["nodes.api.storageos.com"]);
    // The last two columns: Safe-To-Drain, then Unprotected (volumes with 0 replicas there).
    let cells = row(&table, NODES[0]);
    assert_eq!(
        cells.iter().rev().nth(1).map(String::as_str),
        Some("false"),
        "the Safe-To-Drain column: {table}"
    );
    assert!(
        cells.last().is_some_and(|c| c.parse::<u32>().is_ok()),
        "the Unprotected column: {table}"
    );
    assert_eq!(
        nodes.get(NODES[2]).await.unwrap().status.unwrap().safe_to_drain,
        Some(true),
        "a node holding no last copy"
    );

    // A node flap with more volumes than nodes writes the mirrors whose status changed, one
    // request each, and nothing else: the volumes mastered on the flapped node (no replicas, as
    // the bench's), that node's mirror, and no other.
    sim.set_health(NODES[1], Health::Online).unwrap();
    node_mirror(&nodes, NODES[1], "online").await;
    let flapped = NODES[2];
    let per_node = 8;
    for i in 0..per_node * NODES.len() {
        let (claim_name, volume) = (format!("flap-{i}"), format!("{pv}-flap-{i}"));
        pvcs.create(&PostParams::default(), &claim(&claim_name, Some(&volume)))
            .await
            .unwrap();
        sim.add_volume(support::seed::volume(
            &ns.name,
            &volume,
            &claim_name,
            NODES[i % NODES.len()],
        ))
        .unwrap();
    }
    let on_flapped = per_node;
    let blocked_by_all = || async {
        for name in NODES {
            // 0 replicas: unprotected (under the default drain policy no drain waits for them).
            let count = nodes.get(name).await.ok()?.status?.unprotected_count?;
            (count >= i64::try_from(per_node).unwrap()).then_some(())?;
        }
        let mirrored = volumes.list(&Default::default()).await.ok()?;
        (mirrored.items.iter().filter(|v| v.status.is_some()).count() > per_node * NODES.len()).then_some(())
    };
    wait_for(
        "every flap volume mirrored and every node showing its unprotected volumes",
        SETTLE,
        blocked_by_all,
    )
    .await;
    // A whole node poll more, so that nothing of the seeding is still to be written.
    after_polls(&sim, NODE_READ, 2).await;
    let flap_from = chrono::Utc::now();
    sim.set_health(flapped, Health::Offline).unwrap();
    node_mirror(&nodes, flapped, "offline").await;
    let unavailable = |health: &'static str| {
        let volumes = volumes.clone();
        move || {
            let volumes = volumes.clone();
            async move {
                let list = volumes.list(&Default::default()).await.ok()?;
                let n = list
                    .items
                    .iter()
                    .filter_map(|v| v.status.as_ref())
                    .filter(|s| s.master.node == flapped && s.health == health)
                    .count();
                (n == on_flapped).then_some(())
            }
        }
    };
    wait_for(
        "the flapped node's volumes unavailable",
        SETTLE,
        unavailable("unavailable"),
    )
    .await;
    sim.set_health(flapped, Health::Online).unwrap();
    node_mirror(&nodes, flapped, "online").await;
    wait_for("the flapped node's volumes healthy", SETTLE, unavailable("healthy")).await;
    // A whole node poll after the volumes' (the drain fields follow the volume read).
    after_polls(&sim, NODE_READ, 2).await;
    let writes = writes_by(API_MANAGER, flap_from);
    println!(
        "one flap of {flapped} ({on_flapped} of {} volumes on it): {writes:#?}",
        per_node * NODES.len()
    );
    let count = |prefix: &str| writes.iter().filter(|w| w.starts_with(prefix)).count();
    assert_eq!(
        count("patch volumes/status "),
        2 * on_flapped,
        "each volume on the node written once offline, once online: {writes:#?}"
    );
    assert_eq!(count("patch volumes "), 0, "no volume object rewritten: {writes:#?}");
    assert_eq!(count("patch nodes "), 0, "no node object rewritten: {writes:#?}");
    let node_writes = count("patch nodes/status ");
    assert!(
        (2..=4).contains(&node_writes)
            && writes
                .iter()
                .filter(|w| w.starts_with("patch nodes/status"))
                .all(|w| w.ends_with(&format!("/{flapped}"))),
        "only the flapped node's mirror, health and drain fields: {writes:#?}"
    );
    assert_eq!(writes.len(), 2 * on_flapped + node_writes, "nothing else: {writes:#?}");

    // An idle minute (as many node polls, and the volume polls between them): nothing is
    // written.
    let idle_from = chrono::Utc::now();
    sim.clear_requests();
    let polls = u32::try_from(Duration::from_secs(60).as_secs() / NODE_POLL.as_secs()).unwrap();
    after_polls_within(
        &sim,
        NODE_READ,
        polls as usize,
        NODE_POLL * polls + Duration::from_secs(30),
    )
    .await;
    let writes = writes_by(API_MANAGER, idle_from);
    let requests = sim.requests();
    let volume_reads = requests.iter().filter(|r| on_route(r, VOLUME_READ)).count();
    println!(
        "idle minute: {} writes, {} StorageOS requests ({volume_reads} volume reads)",
        writes.len(),
        requests.len()
    );
    assert!(
        volume_reads >= polls as usize,
        "the volumes were read through the idle minute: {volume_reads} reads"
    );
    assert!(writes.is_empty(), "writes at idle: {writes:#?}");

    // Removed from StorageOS: the mirror goes.
    sim.remove_volume(&ns.name, &pv).unwrap();
    wait_for("the volume mirror to be deleted", SETTLE, || async {
        volumes.get_opt(&pv).await.ok()?.is_none().then_some(())
    })
    .await;

    controller.abort();
    for name in NODES {
        let _ = nodes.delete(name, &DeleteParams::default()).await;
    }
}
