#!/usr/bin/env bash
# A real Kubernetes control plane on this machine, with no Docker:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (fake nodes whose pods run).
#
#   hack/k8s.sh build    build the pinned binaries into the cache (first time only)
#   hack/k8s.sh up       build if needed, then start everything (a no-op when already running)
#   hack/k8s.sh down     stop every process `up` started (by PID) and remove its state
#   hack/k8s.sh env      print the `export KUBECONFIG=...` line
#   hack/k8s.sh status   say what runs
#   hack/k8s.sh restart-apiserver   stop and start only the kube-apiserver (a fault for tests)
#   hack/k8s.sh load-image FILE     import an image archive into the real node's runtime
#   hack/k8s.sh real-node-check     say whether this host can run a real node, and why not
#
# Environment: NODES (fake nodes, default 3), STORAGEOS_CACHE (default ~/.cache/storageos-operator),
# K8S_STATE (runtime state dir, default $STORAGEOS_CACHE/plane), K8S_PORT (apiserver, default 16443),
# K8S_AUDIT_POLICY (an audit policy file used instead of the built-in one), REAL_NODES=1 (add a
# real kubelet node, real-node-0, that runs pods: hack/realnode.sh, docs/real-node.md).
#
# The apiserver presents a client certificate to every admission webhook ($K8S_STATE/pki/
# webhook-client.crt, issued by pki/webhook-client-ca.crt; docs/security.md), as a cluster whose
# webhooks authenticate their caller is configured.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/versions.env
source "$ROOT/hack/versions.env"

CACHE=${STORAGEOS_CACHE:-$HOME/.cache/storageos-operator}
BIN=$CACHE/bin/k8s-$K8S_VERSION
ETCD_BIN=$CACHE/bin/etcd-$ETCD_VERSION
KWOK_BIN=$CACHE/bin/kwok-$KWOK_VERSION
STATE=${K8S_STATE:-$CACHE/plane}
NODES=${NODES:-3}
K8S_PORT=${K8S_PORT:-16443}
ETCD_PORT=${ETCD_PORT:-23790}
KUBECONFIG_OUT=$STATE/kubeconfig
# A plane started with a real node remembers it, so `down` and `status` need no environment.
REAL_NODES=${REAL_NODES:-0}
[[ -f $STATE/real-node ]] && REAL_NODES=1

log() { printf '[k8s] %s\n' "$*" >&2; }
die() { printf '[k8s] error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- build

go_env() {
  # Never let a stray GOFLAGS (e.g. -mod=vendor) or GOTOOLCHAIN switch break the pinned build.
  export GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOTOOLCHAIN=local
}

build_k8s() {
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
    [[ -x $BIN/$b ]] || break
  done
  [[ -x $BIN/$b ]] && return 0
  log "building Kubernetes $K8S_VERSION from Go modules (first time only; ~30 min on 2 cores)"
  local src=$CACHE/src/k8s-$K8S_VERSION minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  mkdir -p "$src" "$BIN.tmp"
  local mod
  mod=$(curl -fsSL "https://proxy.golang.org/k8s.io/kubernetes/@v/$K8S_VERSION.mod") \
    || die "cannot fetch k8s.io/kubernetes@$K8S_VERSION go.mod from the Go module proxy"
  {
    printf 'module storageos-operator.local/k8s-build\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\n' \
      "$(awk '/^go /{print $2; exit}' <<<"$mod")" "$K8S_VERSION"
    # Each staging module of the tag, replaced by its published mirror (v1.Y.Z <-> v0.Y.Z).
    sed -n "s#^[[:space:]]*\\(k8s.io/[^ ]*\\) => ./staging/.*#replace \\1 => \\1 v0.${K8S_VERSION#v1.}#p" <<<"$mod"
  } >"$src/go.mod"
  # `go build` of packages of a dependency needs a package in the main module to anchor go.sum.
  printf 'package build\n' >"$src/doc.go"
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
  ld+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  ld+=" -X k8s.io/component-base/version.gitTreeState=clean"
  ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  (
    cd "$src"
    go_env
    go build -mod=mod -p 2 -trimpath -ldflags "$ld" -o "$BIN.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl \
      k8s.io/kubernetes/cmd/kubelet \
      k8s.io/kubernetes/cmd/kube-proxy
  ) || die "building Kubernetes $K8S_VERSION failed (see the Go output above)"
  rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
}

# Builds BIN/NAME from the main package on stdin, in a module of its own that requires MODULE at
# VERSION (a published module, so its own replace directives do not matter), in $CACHE/src.
go_main() { # name bin module version go-version < main.go
  local src=$CACHE/src/$1-$4
  mkdir -p "$src" "$2.tmp"
  printf 'module storageos-operator.local/%s\n\ngo %s\n\nrequire %s %s\n' "$1" "$5" "$3" "$4" >"$src/go.mod"
  cat >"$src/main.go"
  (cd "$src" && go_env && go build -mod=mod -p 2 -trimpath -ldflags "-s -w" -o "$2.tmp/$1" .) \
    || die "building $1 $4 failed (see the Go output above)"
  rm -rf "$2" && mv "$2.tmp" "$2"
}

build_etcd() {
  [[ -x $ETCD_BIN/etcd ]] && return 0
  log "building etcd $ETCD_VERSION from Go modules"
  go_main etcd "$ETCD_BIN" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" 1.24.0 <<'EOF'
// etcd built from its published server module (the root module has replace directives).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
}

build_kwok() {
  [[ -x $KWOK_BIN/kwok && -s $KWOK_BIN/stages.yaml && -s $KWOK_BIN/log-crds.yaml ]] && return 0
  log "building kwok $KWOK_VERSION from Go modules"
  mkdir -p "$KWOK_BIN.tmp"
  (go_env && GOBIN="$KWOK_BIN.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION") \
    || die "building kwok $KWOK_VERSION failed"
  local mod
  mod=$(go_env && go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize
  # kwok ships no stages in its binary: take the "fast" node and pod stages and the lease
  # heartbeat from its module source, as kwokctl does.
  yaml_docs "$mod/stage" node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml >"$KWOK_BIN.tmp/stages.yaml"
  # Pod logs: kwok serves the kubelet API (`kubectl logs`) from files named by its `Logs` (per
  # pod) and `ClusterLogs` (by namespace/name) resources. They are enabled as CRDs, so a test can
  # point a pod it created at a log file it writes.
  yaml_docs "$mod/crd/bases" kwok.x-k8s.io_logs.yaml kwok.x-k8s.io_clusterlogs.yaml >"$KWOK_BIN.tmp/log-crds.yaml"
  rm -rf "$KWOK_BIN" && mv "$KWOK_BIN.tmp" "$KWOK_BIN"
}

yaml_docs() { # dir files...: the files of kwok's module source as one YAML stream
  local dir=$1 f
  shift
  for f in "$@"; do
    [[ -f $dir/$f ]] || die "$f not found in $dir"
    printf -- '---\n' && cat "$dir/$f"
  done
}

cmd_build() {
  command -v go >/dev/null || die "Go is not installed; install Go 1.26 or newer"
  build_etcd
  build_kwok
  build_k8s
  if [[ $REAL_NODES == 1 ]]; then
    realnode_build || die "REAL_NODES=1 needs a host that can run a real node (reasons above)"
  fi
  log "binaries ready in $CACHE/bin"
}

# shellcheck source=hack/realnode.sh
source "$ROOT/hack/realnode.sh"
# The apiserver's address: loopback, or with a real node the node's bridge address, which pods
# reach through the `kubernetes` Service (a loopback address cannot be a Service endpoint).
API_HOST=127.0.0.1
[[ $REAL_NODES == 1 ]] && API_HOST=$RN_IP

# ---------------------------------------------------------------- certificates

# A key and certificate DIR/NAME.{key,crt} for SUBJECT with the extensions EXT (printf %b),
# signed by the CA $STATE/pki/CA.{crt,key} (default ca).
cert() { # dir name subject ext [ca]
  local d=$1 ca=$STATE/pki/${5:-ca}
  printf '%b' "$4" >"$d/$2.ext"
  { openssl req -newkey rsa:2048 -nodes -keyout "$d/$2.key" -out "$d/$2.csr" -subj "$3" \
    && openssl x509 -req -in "$d/$2.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial \
      -out "$d/$2.crt" -days 3650 -extfile "$d/$2.ext"; } 2>/dev/null || die "openssl: the certificate $d/$2 failed"
}

# A kubeconfig for the plane with the client certificate DIR/NAME.{crt,key}, written to OUT
# (default DIR/NAME.kubeconfig).
kubeconfig() { # dir name [out]
  local b64='base64 -w0'
  cat >"${3:-$1/$2.kubeconfig}" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://$API_HOST:$K8S_PORT", certificate-authority-data: $($b64 "$STATE/pki/ca.crt")}}]
users: [{name: $2, user: {client-certificate-data: $($b64 "$1/$2.crt"), client-key-data: $($b64 "$1/$2.key")}}]
contexts: [{name: local, context: {cluster: local, user: $2}}]
current-context: local
EOF
}

CLIENT_EXT='basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n'

gen_pki() {
  local d=$STATE/pki
  mkdir -p "$d"
  ca() { openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/$1.key" -out "$d/$1.crt" -days 3650 -subj "/CN=$2" 2>/dev/null || die "openssl: the CA $1 failed"; }
  ca ca storageos-operator-test-ca
  cert "$d" apiserver /CN=kube-apiserver "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n\
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,IP:$RN_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
  cert "$d" admin /O=system:masters/CN=admin "$CLIENT_EXT"
  # The apiserver's client certificate for kubelets (logs, exec, port-forward on a real node).
  cert "$d" apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client "$CLIENT_EXT"
  # The client certificate the apiserver presents to admission webhooks (see admission.yaml
  # below), from a CA of its own: a webhook that requires it (the api-manager with
  # spec.apiManager.webhookClientCAConfigMap) serves the apiserver and nobody else.
  ca webhook-client-ca storageos-operator-test-webhook-client-ca
  cert "$d" webhook-client /CN=kube-apiserver-webhook-client "$CLIENT_EXT" webhook-client-ca
  { openssl genrsa -out "$d/sa.key" 2048 && openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub"; } 2>/dev/null \
    || die "openssl: the ServiceAccount signing key failed"
  cat >"$STATE/webhook-kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate: $d/webhook-client.crt
      client-key: $d/webhook-client.key
EOF
  local plugin
  {
    printf 'apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n'
    for plugin in MutatingAdmissionWebhook ValidatingAdmissionWebhook; do
      printf '  - name: %s\n    configuration:\n      apiVersion: apiserver.config.k8s.io/v1\n' "$plugin"
      printf '      kind: WebhookAdmissionConfiguration\n      kubeConfigFile: %s\n' "$STATE/webhook-kubeconfig"
    done
  } >"$STATE/admission.yaml"
  kubeconfig "$d" admin "$KUBECONFIG_OUT"
}

# ---------------------------------------------------------------- processes

pid_alive() { [[ -f $STATE/$1.pid ]] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }

start() { # name, command...
  local name=$1
  shift
  "$@" >>"$STATE/logs/$name.log" 2>&1 &
  echo $! >"$STATE/$name.pid"
}

wait_for() { # description, seconds, command...
  local secs=$2 i
  shift 2
  for ((i = 0; i < secs * 5; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}

kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_OUT" "$@"; }

components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
[[ $REAL_NODES == 1 ]] && components+=(containerd kubelet kube-proxy coredns)

running() {
  local c
  for c in "${components[@]}"; do pid_alive "$c" || return 1; done
}

fail_up() {
  local c=$1
  log "$c did not start; last lines of $STATE/logs/$c.log:"
  tail -n 30 "$STATE/logs/$c.log" >&2 || true
  cmd_down
  exit 1
}

# The nodes carry the labels a kubelet registers with, beta ones included: otherwise
# kube-controller-manager adds those to every node, a few a second, and at 1,000 nodes the
# operator's Node watch sees a label change on each for minutes after the plane is up.
create_nodes() {
  local i manifest="" taints=""
  # Beside a real node, only pods that tolerate fake nodes land on them.
  [[ $REAL_NODES == 1 ]] && taints="spec:
  taints: [{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]"
  for ((i = 0; i < NODES; i++)); do
    manifest+="---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    beta.kubernetes.io/os: linux
    beta.kubernetes.io/arch: amd64
    type: kwok
$taints
status:
  allocatable: {cpu: \"32\", memory: 256Gi, pods: \"110\"}
  capacity: {cpu: \"32\", memory: 256Gi, pods: \"110\"}
  # What a real Debian node reports (kwok keeps it): \`kubectl storageos preflight\` reads it.
  nodeInfo: {architecture: amd64, operatingSystem: linux, kernelVersion: 6.1.0-28-amd64,
    osImage: \"Debian GNU/Linux 12 (bookworm)\", containerRuntimeVersion: \"containerd://1.7.24\"}
"
  done
  kc apply -f - <<<"$manifest" >/dev/null
}

cmd_up() {
  if running; then
    log "already running"
    cmd_env
    return 0
  fi
  # A half-started or crashed plane is cleaned before starting afresh.
  [[ -d $STATE ]] && cmd_down >/dev/null 2>&1
  if [[ $REAL_NODES == 1 ]]; then
    realnode_check_host || die "REAL_NODES=1 needs a host that can run a real node (reasons above)"
  fi
  cmd_build
  mkdir -p "$STATE/logs" "$STATE/etcd"
  if [[ $REAL_NODES == 1 ]]; then
    touch "$STATE/real-node"
    realnode_network
  fi
  gen_pki
  local p=$STATE/pki t0=$SECONDS

  start etcd "$ETCD_BIN/etcd" --data-dir "$STATE/etcd" --name local \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "local=http://127.0.0.1:$((ETCD_PORT + 1))" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296 --log-level warn
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health" || fail_up etcd

  # Audit: every write and pod-log read made by a ServiceAccount (the operator and the
  # api-manager run as theirs in the tests), so a test can count exactly what its code under
  # test did. K8S_AUDIT_POLICY names another policy file (the bench command audits more).
  if [[ -n ${K8S_AUDIT_POLICY:-} ]]; then
    cp "$K8S_AUDIT_POLICY" "$STATE/audit-policy.yaml" || die "cannot read K8S_AUDIT_POLICY=$K8S_AUDIT_POLICY"
  else
    cat >"$STATE/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
    resources: [{group: "", resources: ["pods/log"]}]
  - level: None
EOF
  fi
  local apiserver=("$BIN/kube-apiserver" \
    --audit-policy-file "$STATE/audit-policy.yaml" --audit-log-path "$STATE/logs/audit.log" \
    --audit-log-format json --audit-log-maxsize 200 --audit-log-maxbackup 1 \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address "$API_HOST" --advertise-address "$API_HOST" --secure-port "$K8S_PORT" \
    --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --client-ca-file "$p/ca.crt" \
    --service-cluster-ip-range 10.0.0.0/16 \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --authorization-mode Node,RBAC \
    --admission-control-config-file "$STATE/admission.yaml" \
    --enable-admission-plugins NamespaceLifecycle,ServiceAccount,DefaultStorageClass,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,ResourceQuota,OwnerReferencesPermissionEnforcement \
    --allow-privileged=true \
    --enable-aggregator-routing=true \
    --kubelet-preferred-address-types InternalIP \
    --profiling=false --v=1)
  # Recorded, so that `restart-apiserver` starts exactly the same command line again.
  printf '%s\0' "${apiserver[@]}" >"$STATE/kube-apiserver.cmd"
  start kube-apiserver "${apiserver[@]}"
  wait_for kube-apiserver 90 kc get --raw /readyz || fail_up kube-apiserver

  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$KUBECONFIG_OUT" \
    --authentication-kubeconfig "$KUBECONFIG_OUT" --authorization-kubeconfig "$KUBECONFIG_OUT" \
    --bind-address 127.0.0.1 --secure-port $((K8S_PORT + 1)) \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
    --leader-elect=false --controllers '*' \
    --node-monitor-grace-period 40s --profiling=false --v=1
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$KUBECONFIG_OUT" \
    --authentication-kubeconfig "$KUBECONFIG_OUT" --authorization-kubeconfig "$KUBECONFIG_OUT" \
    --bind-address 127.0.0.1 --secure-port $((K8S_PORT + 2)) \
    --leader-elect=false --profiling=false --v=1
  # The CA of the apiserver's webhook client certificate, published where a StorageOSCluster can
  # name it (spec.apiManager.webhookClientCAConfigMap), as kube-root-ca.crt publishes the
  # cluster's CA.
  kc -n kube-system create configmap apiserver-webhook-client-ca --from-file=ca.crt="$p/webhook-client-ca.crt" \
    --dry-run=client -o yaml | kc apply --server-side -f - >/dev/null || fail_up kube-apiserver
  # kwok watches its log CRDs from the start, so they must be served first.
  kc apply --server-side -f "$KWOK_BIN/log-crds.yaml" >/dev/null || fail_up kube-apiserver
  wait_for kwok-crds 30 kc wait --for condition=Established --timeout 1s \
    crd/logs.kwok.x-k8s.io crd/clusterlogs.kwok.x-k8s.io || fail_up kube-apiserver
  # kwok's stages make a pod Ready once, while Pending. When its node misses heartbeats (an
  # apiserver restart, etcd paused), the node lifecycle controller marks a Running pod not Ready,
  # and a kubelet would mark it Ready again at its next status sync; kwok never would. This
  # stage does what the kubelet does, a second after.
  cat "$KWOK_BIN/stages.yaml" - >"$STATE/kwok-stages.yaml" <<'STAGE'
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values:
      - 'True'
  delay:
    durationMilliseconds: 1000
  next:
    statusTemplate: |
      {{ $now := Now }}

      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
      {{ range .spec.readinessGates }}
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: {{ .conditionType | Quote }}
      {{ end }}
STAGE
  start kwok "$KWOK_BIN/kwok" \
    --kubeconfig "$KUBECONFIG_OUT" --config "$STATE/kwok-stages.yaml" \
    --enable-crds Logs,ClusterLogs \
    --node-lease-duration-seconds 40 \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-ip "$API_HOST" --node-port $((K8S_PORT + 3)) \
    --server-address "$API_HOST:$((K8S_PORT + 3))" \
    --cidr 10.244.0.1/16

  for c in kube-controller-manager kube-scheduler kwok; do
    sleep 0.2
    pid_alive "$c" || fail_up "$c"
  done
  create_nodes
  [[ $REAL_NODES == 1 ]] && realnode_up
  wait_for nodes 60 bash -c "[[ \$('$BIN/kubectl' --kubeconfig '$KUBECONFIG_OUT' get nodes --no-headers 2>/dev/null | grep -cw Ready) -ge $NODES ]]" \
    || fail_up kwok
  # Pods in a namespace need its default ServiceAccount; wait for the controller to make one.
  wait_for serviceaccount 60 kc -n default get serviceaccount default || fail_up kube-controller-manager
  # The marker the tests look for before they touch a cluster: only a plane made here may be
  # filled with test Nodes, PVs and webhook configurations.
  echo "https://$API_HOST:$K8S_PORT" >"$STATE/storageos-test-plane"
  local real=""
  [[ $REAL_NODES == 1 ]] && real=" and the real node $RN_NODE"
  log "control plane $K8S_VERSION up with $NODES Ready nodes$real in $((SECONDS - t0))s"
  cmd_env
}

stop() { # name: SIGTERM, then SIGKILL after 5 s
  pid_alive "$1" || return 0
  local pid i
  pid=$(cat "$STATE/$1.pid")
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

cmd_down() {
  local c
  [[ $REAL_NODES == 1 ]] && realnode_down
  for ((c = ${#components[@]} - 1; c >= 0; c--)); do stop "${components[c]}"; done
  rm -rf "$STATE"
  log "control plane stopped"
}

cmd_env() { echo "export KUBECONFIG=$KUBECONFIG_OUT"; }

# A fault for the tests: stop only the kube-apiserver (SIGTERM) and start it again from the
# command line `up` recorded; returns once it is ready. Everything else keeps running and has
# to reconnect, as after an apiserver restart in a real cluster.
cmd_restart_apiserver() {
  [[ -s $STATE/kube-apiserver.cmd ]] || die "no recorded kube-apiserver command in $STATE; start the plane with this hack/k8s.sh up"
  local apiserver=()
  mapfile -d '' apiserver <"$STATE/kube-apiserver.cmd"
  stop kube-apiserver
  start kube-apiserver "${apiserver[@]}"
  wait_for kube-apiserver 90 kc get --raw /readyz || die "kube-apiserver did not come back; see $STATE/logs/kube-apiserver.log"
  log "kube-apiserver restarted"
}

cmd_status() {
  local c ok=0
  for c in "${components[@]}"; do
    if pid_alive "$c"; then echo "$c: running (pid $(cat "$STATE/$c.pid"))"; else echo "$c: stopped"; ok=1; fi
  done
  [[ $ok == 0 ]] && kc get nodes
  return $ok
}

case ${1:-} in
  build) cmd_build ;;
  up) cmd_up ;;
  down) cmd_down ;;
  env) cmd_env ;;
  status) cmd_status ;;
  restart-apiserver) cmd_restart_apiserver ;;
  load-image) [[ -n ${2:-} ]] || die "usage: $0 load-image FILE"; realnode_load_image "$2" ;;
  real-node-check) realnode_check_host ;;
  *) echo "usage: $0 build|up|down|env|status|restart-apiserver|load-image FILE|real-node-check" >&2; exit 2 ;;
esac
