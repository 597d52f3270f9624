//! What one cached object costs on the heap, as a whole k8s-openapi struct and as the view the
//! caches hold (`runtime::kube::view`): bytes the allocator takes (glibc: each block's usable
//! size and size word, not only the bytes asked for) while 1,000
//! objects shaped like the apiserver's answers are held, as a watch cache holds them (one `Arc`
//! each). The figures are printed (docs/benchmarks.md quotes them); the assertions are the point
//! of each view: it keeps under two thirds of what the whole object costs (most keep under a
//! third; an `ObjectMeta` alone is 360 bytes).
//!
//! One test function: the allocator counts the whole process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::core::PartialObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use storageos_operator::apimanager::cached_pvc::CachedPvc;
use storageos_operator::apimanager::controllers::mirror::cached::{CachedNodeMirror, CachedVolume};
use storageos_operator::apimanager::controllers::node_state::NodeState;
use storageos_operator::cluster::node_cache::{CachedNode, NodePod};
use storageos_operator::crd::{StorageOSNode, StorageOSVolume};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

/// What the allocator takes for the block at `ptr` of `size` requested bytes: with glibc, the
/// block's usable size plus its size word (a 6-byte string takes 32), so that sharing or
/// inlining small strings counts what it saves; elsewhere the requested size.
#[allow(unsafe_code)]
fn taken(ptr: *mut u8, size: usize) -> isize {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let _ = size;
        // SAFETY: `ptr` is a live block from the system allocator (malloc_usable_size(3)).
        (unsafe { libc::malloc_usable_size(ptr.cast()) } + std::mem::size_of::<usize>()) as isize
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = ptr;
        size as isize
    }
}

// SAFETY: every call is passed on to the system allocator unchanged; only the live byte count
// is kept beside it.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(taken(ptr, layout.size()), Ordering::Relaxed);
        }
        ptr
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(taken(ptr, layout.size()), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let before = taken(ptr, layout.size());
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            LIVE.fetch_add(taken(moved, new_size) - before, Ordering::Relaxed);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const N: usize = 1_000;

/// Heap bytes per object while `N` objects parsed as `K` from `make(i)` are held. The JSON is
/// serialized first and parsed from bytes, as a watch event is; a whole object drops its
/// `managedFields`, as the caches do.
fn per_object<K: DeserializeOwned>(make: impl Fn(usize) -> Value, strip: impl Fn(&mut K)) -> usize {
    let bytes: Vec<Vec<u8>> = (0..N).map(|i| serde_json::to_vec(&make(i)).unwrap()).collect();
    let mut held = Vec::with_capacity(N);
    let before = LIVE.load(Ordering::SeqCst);
    for b in &bytes {
        let mut k: K = serde_json::from_slice(b).unwrap();
        strip(&mut k);
        held.push(Arc::new(k));
    }
    let after = LIVE.load(Ordering::SeqCst);
    drop(held);
    ((after - before) as usize - N * std::mem::size_of::<usize>()) / N
}

fn managed_fields(manager: &str) -> Value {
    json!([{"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-11-27T00:00:00Z",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:pv.kubernetes.io/bind-completed": {}}},
        "f:spec": {"f:volumeName": {}}, "f:status": {"f:accessModes": {}, "f:capacity": {".": {}, "f:storage": {}}, "f:phase": {}}}}])
}

/// A bound StorageOS PVC as the apiserver returns it (the bench's workload).
fn pvc(i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": format!("data-{i}"), "namespace": format!("bench-{}", i % 50),
            "uid": format!("8d0e3f4a-1b2c-4d5e-8f90-{i:012}"), "resourceVersion": format!("{}", 100_000 + i),
            "creationTimestamp": "2026-11-27T00:00:00Z",
            "labels": {"app": "bench", "storageos.com/replicas": "1"},
            "annotations": {
                "pv.kubernetes.io/bind-completed": "yes",
                "pv.kubernetes.io/bound-by-controller": "yes",
                "volume.beta.kubernetes.io/storage-provisioner": "csi.storageos.com",
                "volume.kubernetes.io/storage-provisioner": "csi.storageos.com"},
            "finalizers": ["kubernetes.io/pvc-protection"],
            "managedFields": managed_fields("kube-controller-manager")},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "storageos", "volumeMode": "Filesystem", "volumeName": format!("pvc-{i:08}")},
        "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}
    })
}

/// A kwok Node as the apiserver returns it (the bench's nodes).
fn node(i: usize) -> Value {
    let conditions: Vec<Value> = [
        "Ready",
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "NetworkUnavailable",
    ]
    .iter()
    .map(|t| {
        json!({"type": t, "status": if *t == "Ready" { "True" } else { "False" },
                "lastHeartbeatTime": "2026-11-27T00:00:00Z", "lastTransitionTime": "2026-11-27T00:00:00Z",
                "reason": format!("Kubelet{t}"), "message": "kubelet is posting ready status"})
    })
    .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("kwok-node-{i}"), "uid": format!("1d0e3f4a-1b2c-4d5e-8f90-{i:012}"),
            "resourceVersion": format!("{}", 200_000 + i), "creationTimestamp": "2026-11-27T00:00:00Z",
            "labels": {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": format!("kwok-node-{i}"),
                "kubernetes.io/os": "linux", "kubernetes.io/role": "agent", "node-role.kubernetes.io/agent": "",
                "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0",
                "csi.volume.kubernetes.io/nodeid": format!("{{\"csi.storageos.com\":\"kwok-node-{i}\"}}")},
            "managedFields": managed_fields("kwok")},
        "spec": {"podCIDR": format!("10.{}.{}.0/24", i / 256, i % 256), "podCIDRs": [format!("10.{}.{}.0/24", i / 256, i % 256)],
            "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": format!("10.200.{}.{}", i / 256, i % 256)}],
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "kwok-v0.7.0",
                "kernelVersion": "", "kubeProxyVersion": "kwok-v0.7.0", "kubeletVersion": "kwok-v0.7.0",
                "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""},
            "phase": "Running"}
    })
}

/// A StorageOS node pod of the DaemonSet, as the apiserver returns it.
fn node_pod(i: usize) -> Value {
    let env: Vec<Value> = (0..12)
        .map(|e| json!({"name": format!("ENV_{e}"), "value": format!("value-{e}")}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("storageos-node-{i:05}"), "namespace": "storageos",
            "uid": format!("2d0e3f4a-1b2c-4d5e-8f90-{i:012}"), "resourceVersion": format!("{}", 300_000 + i),
            "creationTimestamp": "2026-11-27T00:00:00Z",
            "labels": {"app": "storageos", "app.kubernetes.io/component": "control-plane",
                "controller-revision-hash": "6d8f7c9b5", "pod-template-generation": "1"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "storageos-node",
                "uid": "3d0e3f4a-1b2c-4d5e-8f90-000000000000", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": managed_fields("kube-controller-manager")},
        "spec": {"nodeName": format!("kwok-node-{i}"), "serviceAccountName": "storageos-node",
            "containers": [{"name": "storageos", "image": "storageos/node:v2.4.2", "env": env,
                "volumeMounts": [{"name": "state", "mountPath": "/var/lib/storageos"}]}],
            "volumes": [{"name": "state", "hostPath": {"path": "/var/lib/storageos"}}]},
        "status": {"phase": "Running", "podIP": format!("10.200.{}.{}", i / 256, i % 256),
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}],
            "containerStatuses": [{"name": "storageos", "ready": true, "restartCount": 0, "image": "storageos/node:v2.4.2",
                "imageID": "", "state": {"running": {"startedAt": "2026-11-27T00:00:00Z"}}}]}
    })
}

/// A volume mirror as the api-manager writes it (one replica, attached).
fn volume_mirror(i: usize) -> Value {
    json!({
        "apiVersion": "api.storageos.com/v1", "kind": "Volume",
        "metadata": {"name": format!("pvc-{i:08}"), "namespace": format!("bench-{}", i % 50),
            "uid": format!("4d0e3f4a-1b2c-4d5e-8f90-{i:012}"), "resourceVersion": format!("{}", 400_000 + i),
            "creationTimestamp": "2026-11-27T00:00:00Z", "generation": 1,
            "ownerReferences": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": format!("data-{i}"),
                "uid": format!("8d0e3f4a-1b2c-4d5e-8f90-{i:012}")}],
            "managedFields": managed_fields("storageos-api-manager")},
        "spec": {},
        "status": {"id": format!("5d0e3f4a-1b2c-4d5e-8f90-{i:012}"), "pvc": format!("data-{i}"), "health": "healthy",
            "size": "1Gi", "sizeBytes": 1_073_741_824_i64,
            "master": {"node": format!("kwok-node-{}", i % 1000), "health": "online"},
            "replicasWanted": 1, "replicasReady": "1/1",
            "replicas": [{"node": format!("kwok-node-{}", (i + 1) % 1000), "health": "ready", "promotable": true}],
            "attachment": {"type": "host", "node": format!("kwok-node-{}", i % 1000)}}
    })
}

/// A node mirror as the api-manager writes it (online, with the StorageOS node's labels).
fn node_mirror(i: usize) -> Value {
    json!({
        "apiVersion": "api.storageos.com/v1", "kind": "Node",
        "metadata": {"name": format!("kwok-node-{i}"), "uid": format!("6d0e3f4a-1b2c-4d5e-8f90-{i:012}"),
            "resourceVersion": format!("{}", 500_000 + i), "creationTimestamp": "2026-11-27T00:00:00Z", "generation": 1,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": format!("kwok-node-{i}"),
                "uid": format!("1d0e3f4a-1b2c-4d5e-8f90-{i:012}")}],
            "managedFields": managed_fields("storageos-api-manager")},
        "spec": {},
        "status": {"id": format!("7d0e3f4a-1b2c-4d5e-8f90-{i:012}"), "health": "online",
            "healthSince": "2026-11-27T00:00:00Z",
            "capacity": {"total": "100Gi", "free": "90Gi", "available": "90Gi"},
            "labels": {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": format!("kwok-node-{i}"),
                "kubernetes.io/os": "linux", "type": "kwok"},
            "version": "3", "createdAt": "2026-11-27T00:00:00Z", "safeToDrain": true, "eligible": true}
    })
}

#[test]
fn each_cache_view_keeps_under_two_thirds_of_what_the_whole_object_costs() {
    let pvc_whole = per_object::<PersistentVolumeClaim>(pvc, |p| p.metadata.managed_fields = None);
    let pvc_view = per_object::<CachedPvc>(pvc, |_| {});
    let node_whole = per_object::<Node>(node, |n| n.metadata.managed_fields = None);
    let node_state = per_object::<NodeState>(node, |_| {});
    let cached_node = per_object::<CachedNode>(node, |_| {});
    // The api-manager's second Node cache until both became one `NodeState`: metadata only,
    // every annotation but the CSI driver's dropped.
    let node_meta = per_object::<PartialObjectMeta<Node>>(node, |n| {
        n.metadata.managed_fields = None;
        if let Some(a) = n.metadata.annotations.as_mut() {
            a.retain(|k, _| k == "csi.volume.kubernetes.io/nodeid");
        }
    });
    let pod_whole = per_object::<Pod>(node_pod, |p| p.metadata.managed_fields = None);
    let pod_view = per_object::<NodePod>(node_pod, |_| {});
    let mirror_whole = per_object::<StorageOSVolume>(volume_mirror, |v| v.metadata.managed_fields = None);
    let mirror_view = per_object::<CachedVolume>(volume_mirror, |_| {});
    let node_mirror_whole = per_object::<StorageOSNode>(node_mirror, |n| n.metadata.managed_fields = None);
    let node_mirror_view = per_object::<CachedNodeMirror>(node_mirror, |_| {});
    println!("heap bytes per cached object (whole struct without managedFields -> view):");
    println!("  PVC: {pvc_whole} -> CachedPvc {pvc_view}");
    println!(
        "  Node: {node_whole} -> NodeState {node_state}, CachedNode {cached_node} (metadata only, one annotation: {node_meta})"
    );
    println!("  StorageOS node pod: {pod_whole} -> NodePod {pod_view}");
    println!("  volume mirror: {mirror_whole} -> CachedVolume {mirror_view}");
    println!("  node mirror: {node_mirror_whole} -> CachedNodeMirror {node_mirror_view}");
    for (what, whole, view) in [
        ("CachedPvc", pvc_whole, pvc_view),
        ("NodeState", node_whole, node_state),
        ("CachedNode", node_whole, cached_node),
        ("NodePod", pod_whole, pod_view),
        ("CachedVolume", mirror_whole, mirror_view),
        ("CachedNodeMirror", node_mirror_whole, node_mirror_view),
    ] {
        assert!(
            view * 3 < whole * 2,
            "{what}: {view} bytes against {whole} for the whole object"
        );
    }
}
