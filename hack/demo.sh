#!/usr/bin/env bash
# The demo: a local Kubernetes control plane with three fake nodes, the StorageOS API simulator,
# the operator installed as a user installs it (`kubectl apply --server-side -f
# deploy/operator.yaml`), then the example StorageOSCluster until `kubectl get stos` shows 3/3
# Running, then the api-manager (controllers and webhooks).
#
# Where the host can run a real node (hack/k8s.sh real-node-check; docs/real-node.md), the plane
# gets one and the operator, the api-manager and the simulator run on it as real pods from the
# project's image (the debug build, packed by hack/image.sh --debug). Elsewhere kwok's pods run
# nothing, so the operator and the api-manager run as local processes, each with a kubeconfig
# holding a token of its own ServiceAccount: they work under exactly the RBAC a real install
# grants. REAL_NODES=0 asks for local processes on any host.
#
#   hack/demo.sh        build what is needed, start everything, apply the example, wait
#   hack/demo.sh down   stop everything the demo started (the control plane too)
#
# The local simulator listens on 127.0.0.1:5705 unless STORAGEOS_SIM_ADDR says otherwise.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
source hack/versions.env
CACHE=${STORAGEOS_CACHE:-$HOME/.cache/storageos-operator}
DEMO=$CACHE/demo
SIM_ADDR=${STORAGEOS_SIM_ADDR:-127.0.0.1:5705}
METRICS_ADDR=${DEMO_METRICS_ADDR:-127.0.0.1:18080}
API_MANAGER_METRICS_ADDR=${DEMO_API_MANAGER_METRICS_ADDR:-127.0.0.1:18081}
WEBHOOK_ADDR=${DEMO_WEBHOOK_ADDR:-127.0.0.1:19443}
ETCD_PORT=${DEMO_ETCD_PORT:-22379}
KUBECTL=$CACHE/bin/k8s-$K8S_VERSION/kubectl
# STORAGEOS_OPERATOR_BIN runs another build (for example target/release/storageos-operator).
BIN=${STORAGEOS_OPERATOR_BIN:-$ROOT/target/debug/storageos-operator}

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
kc() { "$KUBECTL" "$@"; }
# shellcheck source=hack/lib.sh
source hack/lib.sh

stop_pid() {
  local f=$DEMO/$1.pid pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

if [[ ${1:-} == down ]]; then
  for p in api-manager operator simulator etcd; do stop_pid "$p"; done
  hack/k8s.sh down
  rm -rf "$DEMO"
  say "demo stopped"
  exit 0
fi

# Real pods where the host can run a real node; otherwise local processes, and the reason.
real=0
if [[ ${REAL_NODES:-} != 0 ]]; then
  if hack/k8s.sh status >/dev/null 2>&1 && ! [[ -f $CACHE/plane/real-node ]]; then
    say "a control plane without a real node already runs here: operator and api-manager as local processes"
  elif why=$(hack/k8s.sh real-node-check 2>&1); then
    real=1
  else
    say "this host cannot run a real node ($(grep -- '- ' <<<"$why" | sed 's/^\[k8s\] *- //' | paste -sd ';' -)): operator and api-manager as local processes"
  fi
fi
if [[ $real == 1 ]]; then
  # shellcheck source=hack/demo-real.sh
  source hack/demo-real.sh
  exit 0
fi

say "building storageos-operator"
cargo build --bin storageos-operator --features simulator
say "starting the local control plane (first run builds Kubernetes from Go modules)"
eval "$(NODES=3 hack/k8s.sh up)"
export KUBECONFIG
mkdir -p "$DEMO"

say "installing the operator: kubectl apply --server-side -f deploy/operator.yaml"
kc apply --server-side -f deploy/operator.yaml >/dev/null
kc wait --for condition=Established crd --all --timeout=60s >/dev/null
# Its pods would be kwok fakes here; the same binary runs locally instead, as its ServiceAccount.
kc -n storageos-operator scale deployment storageos-operator --replicas=0 >/dev/null

kubeconfig_for storageos-operator storageos-operator "$DEMO/operator.kubeconfig"

start() { # name, command...
  local name=$1
  shift
  if [[ -f $DEMO/$name.pid ]] && kill -0 "$(cat "$DEMO/$name.pid")" 2>/dev/null; then
    return 0
  fi
  "$@" >"$DEMO/$name.log" 2>&1 &
  echo $! >"$DEMO/$name.pid"
}

say "starting the StorageOS API simulator on $SIM_ADDR"
start simulator "$BIN" simulate --listen "$SIM_ADDR" --kubeconfig "$KUBECONFIG"
KUBECONFIG=$DEMO/operator.kubeconfig POD_NAMESPACE=storageos-operator POD_NAME=demo \
  start operator "$BIN" run --storageos-endpoint "http://$SIM_ADDR" --metrics-addr "$METRICS_ADDR"
sleep 1
for p in simulator operator; do
  kill -0 "$(cat "$DEMO/$p.pid")" 2>/dev/null || { tail -20 "$DEMO/$p.log"; echo "$p did not start" >&2; exit 1; }
done

# The local operator process cannot resolve the example's in-cluster name, so the demo's etcd
# listens on loopback and the example CR is applied with that address.
say "starting StorageOS's etcd on 127.0.0.1:$ETCD_PORT (the plane's build of etcd)"
start_demo_etcd "$DEMO" 127.0.0.1 "$ETCD_PORT"

say "applying deploy/examples (Secret and StorageOSCluster, kvBackend.address http://127.0.0.1:$ETCD_PORT)"
kc apply -f deploy/examples/storageos-secret.yaml >/dev/null
sed "s#address: http://etcd.storageos-etcd.svc:2379#address: http://127.0.0.1:$ETCD_PORT#" \
  deploy/examples/storageoscluster.yaml | kc apply -f - >/dev/null

say "waiting for the cluster to become Running"
wait_cluster_running 180 "$DEMO/operator.log" || exit 1

kc get stos -A
check_cluster_healthy || exit 1

# In a real cluster the api-manager is the operator's Deployment; here its pods are kwok fakes,
# so the same binary runs as a local process against the simulator. The webhook Service still
# routes to the fake pods, so admissions reach it only in the tests (which point the Service at
# this machine); the controllers (fencing, shared volumes, label sync, node and namespace delete)
# work as in a cluster.
say "starting the api-manager (leader-elected controllers, webhooks on $WEBHOOK_ADDR)"
mkdir -p "$DEMO/api-secret"
printf storageos >"$DEMO/api-secret/username"
printf storageos >"$DEMO/api-secret/password"
cluster_ns=$(kc get stos storageos -n storageos-operator -o jsonpath='{.spec.namespace}')
# The ServiceAccount and ClusterRole the operator rendered for the api-manager.
kubeconfig_for "${cluster_ns:-kube-system}" storageos-api-manager-sa "$DEMO/api-manager.kubeconfig"
start api-manager "$BIN" api-manager -kubeconfig "$DEMO/api-manager.kubeconfig" -api-endpoint "http://$SIM_ADDR" \
  -api-secret-path "$DEMO/api-secret" -namespace "${cluster_ns:-kube-system}" -enable-leader-election \
  -metrics-addr "$API_MANAGER_METRICS_ADDR" --webhook-addr "$WEBHOOK_ADDR"
for _ in $(seq 100); do
  curl -sf "http://$API_MANAGER_METRICS_ADDR/readyz" >/dev/null 2>&1 && break
  kill -0 "$(cat "$DEMO/api-manager.pid")" 2>/dev/null || { tail -20 "$DEMO/api-manager.log"; echo "api-manager did not start" >&2; exit 1; }
  sleep 0.2
done
curl -sf "http://$API_MANAGER_METRICS_ADDR/readyz" >/dev/null || { tail -20 "$DEMO/api-manager.log"; echo "api-manager is not ready" >&2; exit 1; }
echo "    api-manager ready (Lease ${cluster_ns:-kube-system}/storageos-api-manager-lease)"

cat <<EOF

The demo is up. Try:
  export KUBECONFIG=$KUBECONFIG
  $KUBECTL get stos -A
  $KUBECTL -n kube-system get pods -l app=storageos -o wide
  $KUBECTL describe stos storageos
  curl -s http://$METRICS_ADDR/metrics | grep controller_runtime
  curl -s http://$API_MANAGER_METRICS_ADDR/metrics | grep storageos_api_helper
  curl -s http://$SIM_ADDR/_sim/requests | head
Logs: $DEMO/operator.log, $DEMO/api-manager.log, $DEMO/simulator.log, $DEMO/etcd.log
Stop everything: hack/demo.sh down
EOF
