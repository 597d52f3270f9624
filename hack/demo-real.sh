# The demo with real pods (sourced by hack/demo.sh where the host can run a real node): the local
# plane with three kwok nodes and a real kubelet node (REAL_NODES=1, docs/real-node.md); the
# operator's image built and imported into that node; the operator installed as a user installs
# it (`kubectl apply --server-side -f deploy/operator.yaml`), running as two real pods; the
# StorageOS API simulator as a pod behind the rendered `storageos` Service; the cluster of
# hack/real-node/storageoscluster.yaml until `kubectl get stos` shows 3/3 Running; the
# api-manager the operator renders, Ready on the real node. `hack/demo.sh down` stops it all.
# Its settings and helpers (ROOT, DEMO, ETCD_PORT, KUBECTL, say, kc, hack/lib.sh) are demo.sh's.
IMAGE=$(awk '$1 == "image:" && $2 != "" {print $2; exit}' deploy/operator.yaml)
ARCHIVE=$ROOT/target/image/storageos-operator-debug.oci.tar

# The name a runtime stores a Docker Hub image under.
qualified() {
  case $1 in
    */*) local first=${1%%/*}
      if [[ $first == *.* || $first == *:* || $first == localhost ]]; then echo "$1"; else echo "docker.io/$1"; fi ;;
    *) echo "docker.io/library/$1" ;;
  esac
}

say "building the operator's image (debug build with the simulator; hack/image.sh --debug)"
# The simulator pod runs from this image too, so the binary has the feature (off by default).
cargo build --bin storageos-operator --features simulator
hack/image.sh --debug --binary "amd64=$ROOT/target/debug/storageos-operator" --tag "$(qualified "$IMAGE")" --out "$ARCHIVE"
say "starting the local control plane with a real node (first run builds Kubernetes and CoreDNS from Go modules)"
eval "$(REAL_NODES=1 NODES=3 hack/k8s.sh up)"
export KUBECONFIG
hack/k8s.sh load-image "$ARCHIVE"

say "installing the operator: kubectl apply --server-side -f deploy/operator.yaml"
kc apply --server-side -f deploy/operator.yaml >/dev/null
kc wait --for condition=Established crd --all --timeout=60s >/dev/null
say "starting StorageOS's etcd at 10.200.0.1:$ETCD_PORT, as etcd.storageos-etcd.svc:2379 (hack/real-node/etcd.yaml)"
start_demo_etcd "$DEMO" 10.200.0.1 "$ETCD_PORT"
sed "s#port: ETCD_PORT#port: $ETCD_PORT#" hack/real-node/etcd.yaml | kc apply --server-side -f - >/dev/null
say "starting the StorageOS API simulator as a pod (hack/real-node/simulator.yaml)"
sed "s#image: IMAGE#image: $IMAGE#" hack/real-node/simulator.yaml | kc apply --server-side -f - >/dev/null
kc -n storageos-operator rollout status deployment/storageos-operator --timeout=180s
kc -n storageos-simulator rollout status deployment/storageos-simulator --timeout=120s

say "applying hack/real-node (Secret and StorageOSCluster)"
kc apply -f hack/real-node/storageos-secret.yaml -f hack/real-node/storageoscluster.yaml >/dev/null

say "waiting for the cluster to become Running"
wait_cluster_running 240 "kubectl -n storageos-operator logs deploy/storageos-operator" || exit 1
kc get stos -A
check_cluster_healthy || exit 1

say "waiting for the api-manager the operator rendered"
kc -n kube-system wait --for=create deployment/storageos-api-manager --timeout=120s >/dev/null
kc -n kube-system rollout status deployment/storageos-api-manager --timeout=180s
kc get pods -A -o wide --field-selector spec.nodeName=real-node-0

cat <<EOF

The demo is up, with real pods on real-node-0. Try:
  export KUBECONFIG=$KUBECONFIG
  $KUBECTL get stos -A
  $KUBECTL -n storageos-operator get pods -o wide
  $KUBECTL -n storageos-operator logs deploy/storageos-operator | tail
  $KUBECTL -n kube-system get pods -l app=storageos -o wide
  $KUBECTL describe stos -n storageos-operator storageos
StorageOS's etcd: $DEMO/etcd.log
Stop everything: hack/demo.sh down
EOF
