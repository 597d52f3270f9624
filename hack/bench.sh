#!/usr/bin/env bash
# Benchmarks at scale (results in docs/benchmarks.md): for each node count, a fresh local
# control plane with that many kwok nodes, the StorageOS simulator, and the release build of
# the operator and of the api-manager, each a process acting as its own ServiceAccount. It
# measures
#
#   - RSS (VmRSS, VmHWM) of both after a steady idle minute, and their CPU seconds in it (the
#     minute starts once the api-manager has written nothing for 15 s after the workload, at most
#     --settle-max s later; how long that took is reported);
#   - writes to the apiserver in that minute by verb and resource (audit log, filtered by the
#     `storageos-operator/...` user agent) and StorageOS API requests by route (simulator log);
#   - StorageOSCluster created → every child applied (audit log), over fresh clusters;
#   - fencing latency: node offline in the simulator → fenced pod deleted, at a random point
#     of the poll cycle, and the api-manager's apiserver writes per node flap (audit log);
#   - pod and PVC mutating webhook latency at a fixed rate through the real apiserver
#     (dry-run creates: the webhooks run, nothing is stored);
#   - one shared-volume pass (NFS volumes → Services, Endpoints, mount endpoints published);
#   - a fresh api-manager on the full cluster with its mirrors deleted: its apiserver writes from
#     its first StorageOS poll on, in its first 35 s (the first pass) and in the minute after
#     (idle: nothing may be written), so a backlog or a loop cannot hide behind a warm-up;
#
# and writes OUT/results.json, OUT/table.md, PNG plots (gnuplot) and, unless --no-doc, the
# generated part of docs/benchmarks.md (between its bench markers) and docs/benchmarks/*.png.
#
#   hack/bench.sh [--nodes 3,100,1000] [--pods-per-node 10] [--pods N] [--volumes N] [--namespaces N]
#                 [--force-density]
#                 [--out DIR] [--no-doc] [--fence-trials 20] [--no-fence-busy] [--cluster-trials 10]
#                 [--shared 1000] [--rps 200] [--webhook-seconds 30] [--settle-max 1800]
#                 [--report-only] [--no-build]
#
# Pods follow the sizes: --pods-per-node (default 10, a realistic density well below the
# kubelet's default maximum of 110 pods a node) at every size; --pods N instead sets the count at
# the largest size (smaller sizes get as many per node). More than 110 pods a node is refused
# unless --force-density (a density no kubelet runs by default makes fencing and memory figures
# that mean nothing). Each size gets 2 StorageOS volumes per 10 pods (--volumes N instead sets the
# count at the largest size, smaller sizes in proportion: 5,000 volumes for 50,000 pods is one in
# ten pods on a volume), and one namespace per 100 pods (half of them hold the StorageOS volumes
# and the pods using them; --namespaces N instead sets the count at the largest size, smaller
# sizes in proportion: 500 keeps 50,000 pods' spread with fewer pods). Loopback only, except
# the webhook listener: the apiserver reaches webhooks through a Service, and Endpoints may not
# point at loopback, so it listens on this machine's own address. Everything it starts is
# stopped on exit.
#
# Its plane is its own (K8S_STATE, K8S_PORT, ETCD_PORT default to bench values, apart from
# hack/test.sh's); ports K8S_PORT+10..+13 serve the simulator, metrics and the webhook.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=hack/versions.env
source hack/versions.env
CACHE=${STORAGEOS_CACHE:-$HOME/.cache/storageos-operator}
export K8S_STATE=${K8S_STATE:-$CACHE/bench-plane}
export K8S_PORT=${K8S_PORT:-17443}
export ETCD_PORT=${ETCD_PORT:-25790}
KUBECTL=$CACHE/bin/k8s-$K8S_VERSION/kubectl

SIZES=3,100,1000
# Pods per node at every size (--pods-per-node), unless --pods sets the count at the largest.
PODS_PER_NODE=10
PODS=
# StorageOS volumes at the largest size (--volumes); empty: 2 per 10 pods at every size.
VOLUMES=
# Namespaces at the largest size (--namespaces); empty: one per 100 pods at every size.
NAMESPACES=
# The kubelet's default --max-pods.
KUBELET_MAX_PODS=110
FORCE_DENSITY=0
# Before the idle minute: the api-manager quiet this long (its first pass done), at most
# SETTLE_MAX s (--settle-max).
SETTLE_QUIET=15
SETTLE_MAX=1800
# The fresh api-manager's first pass and the idle minute after it, from its first poll.
FRESH_FIRST_PASS=35
FRESH_IDLE=60
OUT=$ROOT/target/bench/$(date -u +%Y%m%dT%H%M%SZ)
DOC=1
FENCE_TRIALS=20
# Fencing trials again while the api-manager is busy (--no-fence-busy skips them).
FENCE_BUSY=1
CLUSTER_TRIALS=10
# Fresh clusters at larger sizes cost minutes of DaemonSet pod churn each (controller-manager
# at its default 20 requests/s): above this size one cluster is measured.
CLUSTER_TRIALS_MAX_NODES=100
SHARED=1000
RPS=200
WEBHOOK_SECONDS=30
REPORT_ONLY=0
BUILD=1
while (($#)); do
  case $1 in
    --nodes) SIZES=$2; shift 2 ;;
    --pods) PODS=$2; shift 2 ;;
    --pods-per-node) PODS_PER_NODE=$2; shift 2 ;;
    --volumes) VOLUMES=$2; shift 2 ;;
    --namespaces) NAMESPACES=$2; shift 2 ;;
    --force-density) FORCE_DENSITY=1; shift ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --no-doc) DOC=0; shift ;;
    --fence-trials) FENCE_TRIALS=$2; shift 2 ;;
    --no-fence-busy) FENCE_BUSY=0; shift ;;
    --cluster-trials) CLUSTER_TRIALS=$2; shift 2 ;;
    --shared) SHARED=$2; shift 2 ;;
    --rps) RPS=$2; shift 2 ;;
    --webhook-seconds) WEBHOOK_SECONDS=$2; shift 2 ;;
    --settle-max) SETTLE_MAX=$2; shift 2 ;;
    --report-only) REPORT_ONLY=1; shift ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,44p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a NODE_SIZES <<<"$SIZES"
MAX_NODES=$(printf '%s\n' "${NODE_SIZES[@]}" | sort -n | tail -1)
# Pods at size $1 (see --pods, --pods-per-node).
pods_at() {
  local n=$1 p
  if [[ -n $PODS ]]; then p=$((PODS * n / MAX_NODES)); else p=$((PODS_PER_NODE * n)); fi
  ((p >= 10)) || p=10
  echo "$p"
}
# StorageOS volumes at size $1 with $2 pods (see --volumes).
volumes_at() {
  local n=$1 pods=$2 v
  if [[ -n $VOLUMES ]]; then v=$((VOLUMES * n / MAX_NODES)); else v=$((pods / 5)); fi
  ((v >= 1)) || v=1
  echo "$v"
}
for n in "${NODE_SIZES[@]}"; do
  p=$(pods_at "$n")
  if ((p > KUBELET_MAX_PODS * n && !FORCE_DENSITY)); then
    echo "[bench] error: $p pods on $n nodes is $((p / n)) a node, more than the kubelet's default maximum of $KUBELET_MAX_PODS; lower --pods or --pods-per-node, or pass --force-density" >&2
    exit 2
  fi
done
POLL=5
SIM_ADDR=127.0.0.1:$((K8S_PORT + 10))
SIM=http://$SIM_ADDR
OP_METRICS=127.0.0.1:$((K8S_PORT + 11))
AM_METRICS=127.0.0.1:$((K8S_PORT + 12))
WEBHOOK_PORT=$((K8S_PORT + 13))
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/release/storageos-operator
TOOL=$TARGET/release/examples/bench_load
T0=$SECONDS

step() { printf '[bench %4ds] %s\n' "$((SECONDS - T0))" "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }
kc() { "$KUBECTL" "$@"; }

report() {
  step "report: $OUT/results.json, $OUT/table.md"
  local plots=1
  if ! command -v gnuplot >/dev/null; then
    step "gnuplot missing; installing the Debian package gnuplot-nox (if apt-get may)"
    { apt-get install -y -qq gnuplot-nox >/dev/null 2>&1 || sudo -n apt-get install -y -qq gnuplot-nox >/dev/null 2>&1; } || true
    command -v gnuplot >/dev/null || { plots=0; step "no gnuplot: the report has no plots"; }
  fi
  python3 hack/bench_report.py "$OUT" --plots "$plots" --doc "$DOC" --root "$ROOT"
  cat "$OUT/table.md"
}

if ((REPORT_ONLY)); then
  report
  exit 0
fi

command -v python3 >/dev/null || die "python3 is needed for the report"
command -v curl >/dev/null || die "curl is needed"
mkdir -p "$OUT"

# ---------------------------------------------------------------- processes and cleanup

PIDS=()
start() { # name, command... (environment as given by the caller)
  local name=$1
  shift
  "$@" >"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
  PIDS+=("$!")
}
stop_all() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  PIDS=()
}
# The busy load of fence_busy (its loops, their kubectl, the webhook load).
BUSY=()
stop_busy() {
  local p
  # `wait` with no operand would wait for every child (the simulator, the processes under test).
  ((${#BUSY[@]})) || return 0
  for p in "${BUSY[@]}"; do
    pkill -P "$p" 2>/dev/null || true
    kill "$p" 2>/dev/null || true
  done
  wait "${BUSY[@]}" 2>/dev/null || true
  BUSY=()
}
cleanup() {
  stop_busy
  stop_all
  hack/k8s.sh down >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- build

if ((BUILD)); then
  step "building the release binary and the load tool (cargo build --release)"
  cargo build --release --quiet --features simulator --bin storageos-operator --example bench_load
fi
[[ -x $BIN && -x $TOOL ]] || die "$BIN or $TOOL missing (run without --no-build)"

# The machine, versions and load, for the report.
{
  echo "{"
  echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
  echo "  \"cpu\": \"$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)\","
  echo "  \"cores\": $(nproc),"
  echo "  \"memory_gib\": $(awk '/MemTotal/{printf "%.1f", $2/1048576}' /proc/meminfo),"
  echo "  \"kernel\": \"$(uname -r)\","
  echo "  \"rustc\": \"$(rustc --version)\","
  echo "  \"operator\": \"$("$BIN" --version 2>/dev/null || echo unknown)\","
  echo "  \"commit\": \"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo -dirty)\","
  echo "  \"kubernetes\": \"$K8S_VERSION\", \"etcd\": \"$ETCD_VERSION\", \"kwok\": \"$KWOK_VERSION\","
  echo "  \"sizes\": \"$SIZES\", \"pods_at_largest\": $(pods_at "$MAX_NODES"), \"pods_flag\": \"$PODS\", \"volumes_flag\": \"$VOLUMES\", \"namespaces_flag\": \"$NAMESPACES\", \"pods_per_node\": $PODS_PER_NODE,"
  echo "  \"load_at_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\""
  echo "}"
} >"$OUT/machine.json"

# Audit policy of the bench plane: the default (every ServiceAccount write), plus reads by
# ServiceAccounts (re-lists show there) and StorageOSCluster creates by anyone (the start of
# the cluster-apply measure).
cat >"$OUT/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: ["create", "delete"]
    resources: [{group: "storageos.com", resources: ["storageosclusters"]}]
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
    verbs: ["create", "update", "patch", "delete", "deletecollection", "get", "list"]
  - level: None
EOF

# shellcheck source=hack/lib.sh
source hack/lib.sh

host_ip() { # this machine's primary non-loopback IPv4 address
  ip -4 route get 10.255.255.255 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1
}

wait_until() { # description, seconds, command...
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 4; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  die "$what: not within ${secs}s (logs in $DIR)"
}

# /proc figures of a process: "VmRSS_KiB VmHWM_KiB cpu_seconds"
proc_stats() {
  local pid=$1 tck rss hwm cpu
  tck=$(getconf CLK_TCK)
  rss=$(awk '/^VmRSS/{print $2}' "/proc/$pid/status")
  hwm=$(awk '/^VmHWM/{print $2}' "/proc/$pid/status")
  cpu=$(awk -v t="$tck" '{sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / t}' "/proc/$pid/stat")
  echo "$rss $hwm $cpu"
}

# Every mirror deleted: the volume mirrors with one delete-collection request per namespace
# (four at a time, each tried three times), the node mirrors with one for all (below).
# `kubectl delete --all` deletes object by object, about 3 a second on a loaded 5,000-node
# plane, so 10,000 mirrors took a quarter of an hour; it deletes only the volume mirrors whose
# namespace's requests all failed.
delete_mirrors() {
  local namespaces
  namespaces=$(kc get volumes.api.storageos.com -A -o jsonpath='{range .items[*]}{.metadata.namespace}{"\n"}{end}' | sort -u) ||
    namespaces=
  # shellcheck disable=SC2016 # expanded by the inner bash
  printf '%s\n' "$namespaces" | grep -v '^$' | xargs -r -P 4 -I{} bash -c '
    for _ in 1 2 3; do "$0" delete --raw "/apis/api.storageos.com/v1/namespaces/$1/volumes" >/dev/null 2>&1 && exit 0; sleep 2; done
    echo "bench: could not delete the volume mirrors of namespace $1 in one request; deleting them one by one" >&2' "$KUBECTL" {}
  # Node mirrors are cluster-scoped: one request for all 5,000 outlasts the apiserver's 60 s
  # request timeout on a loaded plane (~4,600 deleted in three timed-out tries), but what it
  # deleted stays deleted; what is left after five goes by name, 250 a request, four at a time.
  local _i
  for _i in 1 2 3 4 5; do kc delete --raw /apis/api.storageos.com/v1/nodes >/dev/null 2>&1 && break; done
  kc get nodes.api.storageos.com -o name 2>/dev/null | xargs -r -n 250 -P 4 "$KUBECTL" delete --wait=false >/dev/null 2>&1 || true
  kc delete volumes.api.storageos.com --all -A --wait=false >/dev/null 2>&1 || true
}

# Waits until the api-manager has written nothing but Lease renewals and Events for
# $SETTLE_QUIET s (its first pass over the new workload is done), at most $SETTLE_MAX s, reading
# the audit log from its end on; prints how long that took and the writes it saw. At 5,000 nodes
# the first pass over 10,000 new mirrors takes minutes, and an idle minute inside it measures
# the pass, not the steady state (the fresh step measures a first pass from its first poll).
settle() {
  python3 - "$ROOT/hack" "$1" "$SETTLE_QUIET" "$SETTLE_MAX" <<'PY'
import json, sys, time
sys.path.insert(0, sys.argv[1])
from bench_report import api_manager_write
path, quiet, limit = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
start = last = time.time()
writes, buf = 0, ""
with open(path) as f:
    f.seek(0, 2)
    while True:
        chunk = f.read()
        buf += chunk
        *done, buf = buf.split("\n")
        for line in done:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if api_manager_write(ev) and (ev.get("objectRef") or {}).get("resource") != "events":
                writes += 1
                last = time.time()
        now = time.time()
        if now - last >= quiet or now - start >= limit:
            break
        if not chunk:
            time.sleep(1)
print(json.dumps({"seconds": round(time.time() - start, 1), "writes": writes,
                  "timed_out": time.time() - last < quiet}))
PY
}

# A fresh api-manager on the full cluster whose mirrors are deleted, as on a first install: its
# apiserver writes are counted (by the report, from the audit log) from its first StorageOS poll
# on, in the first $FRESH_FIRST_PASS s and in the $FRESH_IDLE s after. Its first poll is the
# first node list the simulator answers after it starts.
fresh_api_manager() {
  local n=$1 pid
  step "n=$n: fresh api-manager, mirrors deleted: writes from its first poll on (${FRESH_FIRST_PASS} s + ${FRESH_IDLE} s)"
  pid=$(cat "$DIR/api-manager.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  local volume_mirrors node_mirrors
  volume_mirrors=$(kc get volumes.api.storageos.com -A --no-headers 2>/dev/null | wc -l)
  node_mirrors=$(kc get nodes.api.storageos.com --no-headers 2>/dev/null | wc -l)
  delete_mirrors
  wait_until "mirrors deleted" 600 bash -c "[[ -z \$('$KUBECTL' get volumes.api.storageos.com,nodes.api.storageos.com -A -o name 2>/dev/null | head -1) ]]"
  curl -sf -X DELETE "$SIM/_sim/requests" >/dev/null
  local started
  started=$(date -u +%s.%N)
  start api-manager-fresh "$BIN" api-manager -kubeconfig "$DIR/api-manager.kubeconfig" -api-endpoint "$SIM" \
    -api-secret-path "$DIR/api-secret" -namespace "$AM_NAMESPACE" -enable-leader-election \
    -metrics-addr "$AM_METRICS" --webhook-addr "$(host_ip):$WEBHOOK_PORT" -node-poll-interval "${POLL}s"
  wait_until "the fresh api-manager's first node list" 120 bash -c "curl -sf $SIM/_sim/requests | jq -e 'any(.[]; .method == \"GET\" and .path == \"/v2/nodes\")'"
  local first
  first=$(curl -sf "$SIM/_sim/requests" | jq -r '[.[] | select(.method == "GET" and .path == "/v2/nodes") | .time] | min')
  sleep $((FRESH_FIRST_PASS + FRESH_IDLE + 2))
  echo "{\"started\": $started, \"first_poll\": \"$first\", \"first_pass_s\": $FRESH_FIRST_PASS, \"idle_s\": $FRESH_IDLE, \"node_mirrors\": $node_mirrors, \"volume_mirrors\": $volume_mirrors}" >"$DIR/fresh.json"
}

# Fencing while the same api-manager is busy: the trials of the quiet step run again while
# (a) the pod webhook takes $RPS rps, (b) every volume mirror is deleted over and over, so the
# mirror rewrites them all (a mirror pass over every volume), and (c) every PVC's labels change
# over and over, so the PVC label sync writes every volume's labels to StorageOS (a first pass).
# The busy work runs from the trials' start to their end; its own rounds are counted.
fence_busy() {
  local n=$1
  ((FENCE_BUSY)) || return 0
  step "n=$n: fencing while busy, $FENCE_TRIALS trials: pod webhook at $RPS rps, mirror passes, label-sync passes"
  # Straight to the api-manager's webhook: through the apiserver, minutes of dry-run creates at
  # this rate saturate a 2-core plane, and the trials would measure the apiserver instead.
  python3 hack/bench_webhook_direct.py "https://$(host_ip):$WEBHOOK_PORT/mutate-pods" "$RPS" bench-0 data-0 \
    >"$DIR/fence-busy-webhook.json" &
  BUSY+=($!)
  (
    i=0
    while :; do
      i=$((i + 1))
      kc delete volumes.api.storageos.com --all -A --wait=false >/dev/null 2>&1 || true
      echo "mirror $i $(date -u +%s.%N)"
      sleep 5
    done
  ) >"$DIR/fence-busy-mirror.log" &
  BUSY+=($!)
  (
    i=0
    while :; do
      i=$((i + 1))
      kc label pvc -A -l bench.storageos.com/workload "bench.storageos.com/busy=round-$i" --overwrite >/dev/null 2>&1 || true
      echo "labels $i $(date -u +%s.%N)"
    done
  ) >"$DIR/fence-busy-labels.log" &
  BUSY+=($!)
  local load0 f0
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  f0=$(date -u +%s.%N)
  "$TOOL" fence --sim "$SIM" --nodes "$n" --trials "$FENCE_TRIALS" --poll "$POLL" --namespace bench-fence-busy >"$DIR/fence-busy.json"
  stop_busy
  echo "{\"from\": $f0, \"to\": $(date -u +%s.%N), \"load_before\": \"$load0\", \"load_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"mirror_rounds\": $(wc -l <"$DIR/fence-busy-mirror.log"), \"label_rounds\": $(wc -l <"$DIR/fence-busy-labels.log")}" >"$DIR/fence-busy-window.json"
  # Every mirror back before the next step.
  sleep $((POLL * 3))
}

# ---------------------------------------------------------------- one size

run_size() {
  local n=$1
  DIR=$OUT/n$n
  mkdir -p "$DIR"
  local pods
  pods=$(pods_at "$n")
  local volumes namespaces=$(((pods + 99) / 100))
  if [[ -n $NAMESPACES ]]; then namespaces=$(((NAMESPACES * n + MAX_NODES - 1) / MAX_NODES)); fi
  volumes=$(volumes_at "$n" "$pods")

  step "n=$n: control plane with $n kwok nodes"
  hack/k8s.sh down >/dev/null 2>&1 || true
  NODES=$n K8S_AUDIT_POLICY=$OUT/audit-policy.yaml hack/k8s.sh up >/dev/null
  eval "$(hack/k8s.sh env)"
  export KUBECONFIG
  local audit=$K8S_STATE/logs/audit.log

  step "n=$n: install (deploy/operator.yaml), simulator, operator"
  kc apply --server-side -f deploy/operator.yaml >/dev/null
  kc wait --for condition=Established crd --all --timeout=60s >/dev/null
  kc -n storageos-operator scale deployment storageos-operator --replicas=0 >/dev/null
  # kwok's api-manager pods would receive the webhook calls (their IPs are not on this machine):
  # refuse them, so the webhook Service routes only to the local api-manager below.
  kc apply -f - >/dev/null <<'EOF'
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: bench-no-api-manager-pods}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
    objectSelector: {matchLabels: {app.kubernetes.io/component: storageos-api-manager}}
  validations:
    - expression: "false"
      message: "hack/bench.sh runs the api-manager as a local process"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: bench-no-api-manager-pods}
spec:
  policyName: bench-no-api-manager-pods
  validationActions: [Deny]
EOF
  start simulator "$BIN" simulate --listen "$SIM_ADDR" --kubeconfig "$KUBECONFIG"
  kubeconfig_for storageos-operator storageos-operator "$DIR/operator.kubeconfig"
  KUBECONFIG=$DIR/operator.kubeconfig POD_NAMESPACE=storageos-operator POD_NAME=bench \
    start operator "$BIN" run --storageos-endpoint "$SIM" --metrics-addr "$OP_METRICS"
  wait_until "simulator" 30 curl -sf "$SIM/_sim/nodes"
  wait_until "operator /healthz" 60 curl -sf "http://$OP_METRICS/healthz"
  kc apply -f deploy/examples/storageos-secret.yaml >/dev/null

  local trials=$CLUSTER_TRIALS
  ((n <= CLUSTER_TRIALS_MAX_NODES)) || trials=1
  step "n=$n: StorageOSCluster applied → children applied, $trials fresh cluster(s)"
  "$TOOL" cluster --file deploy/examples/storageoscluster.yaml --trials "$trials" --keep-last >"$DIR/cluster.json"
  step "n=$n: waiting for $n StorageOS nodes online in the simulator"
  wait_until "simulator nodes" 600 bash -c "[[ \$(curl -sf $SIM/_sim/nodes | jq '[.[] | select(.health == \"online\")] | length') -ge $n ]]"

  step "n=$n: api-manager"
  local cns
  cns=$(kc get stos storageos -n storageos-operator -o jsonpath='{.spec.namespace}')
  cns=${cns:-kube-system}
  AM_NAMESPACE=$cns
  mkdir -p "$DIR/api-secret"
  printf storageos >"$DIR/api-secret/username"
  printf storageos >"$DIR/api-secret/password"
  kubeconfig_for "$cns" storageos-api-manager-sa "$DIR/api-manager.kubeconfig"
  local hip
  hip=$(host_ip)
  [[ -n $hip ]] || die "no non-loopback IPv4 address for the webhook listener"
  start api-manager "$BIN" api-manager -kubeconfig "$DIR/api-manager.kubeconfig" -api-endpoint "$SIM" \
    -api-secret-path "$DIR/api-secret" -namespace "$cns" -enable-leader-election \
    -metrics-addr "$AM_METRICS" --webhook-addr "$hip:$WEBHOOK_PORT" -node-poll-interval "${POLL}s"
  # The rendered webhook Service's endpoints: this process (an EndpointSlice the slice
  # controller leaves alone).
  kc apply -f - >/dev/null <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: storageos-webhook-bench
  namespace: $cns
  labels: {kubernetes.io/service-name: storageos-webhook, endpointslice.kubernetes.io/managed-by: bench.storageos.com}
addressType: IPv4
endpoints: [{addresses: ["$hip"], conditions: {ready: true}}]
ports: [{name: webhooks, port: $WEBHOOK_PORT, protocol: TCP}]
EOF
  wait_until "api-manager /readyz" 120 curl -sf "http://$AM_METRICS/readyz"
  wait_until "webhook caBundle" 60 bash -c "[[ -n \$('$KUBECTL' get mutatingwebhookconfiguration storageos-mutating-webhook -o jsonpath='{.webhooks[0].clientConfig.caBundle}') ]]"

  step "n=$n: workload: $pods pods ($((pods / 2)) on StorageOS PVCs), $volumes volumes, $namespaces namespaces"
  "$TOOL" workload --sim "$SIM" --nodes "$n" --pods "$pods" --volumes "$volumes" --namespaces "$namespaces" >"$DIR/workload.json"

  step "n=$n: settling (15 s without an api-manager write, at most ${SETTLE_MAX} s), then the idle minute (RSS, CPU, writes, StorageOS requests)"
  settle "$audit" >"$DIR/settle.json"
  local op_pid am_pid
  op_pid=$(cat "$DIR/operator.pid")
  am_pid=$(cat "$DIR/api-manager.pid")
  local a0 op0 am0
  a0=$(wc -l <"$audit")
  read -r _ _ op0 <<<"$(proc_stats "$op_pid")"
  read -r _ _ am0 <<<"$(proc_stats "$am_pid")"
  curl -sf -X DELETE "$SIM/_sim/requests" >/dev/null
  local load0
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  sleep 60
  local op1 am1 op_rss op_hwm am_rss am_hwm
  read -r op_rss op_hwm op1 <<<"$(proc_stats "$op_pid")"
  read -r am_rss am_hwm am1 <<<"$(proc_stats "$am_pid")"
  # Where the memory is (anonymous heap, each malloc arena, code), for the report's notes.
  cp "/proc/$op_pid/smaps" "$DIR/operator.smaps" 2>/dev/null || true
  cp "/proc/$am_pid/smaps" "$DIR/api-manager.smaps" 2>/dev/null || true
  tail -n +"$((a0 + 1))" "$audit" >"$DIR/idle-audit.jsonl"
  curl -sf "$SIM/_sim/requests" >"$DIR/idle-sim.json"
  cat >"$DIR/idle.json" <<EOF
{"seconds": 60, "load_before": "$load0", "load_after": "$(cut -d' ' -f1-3 /proc/loadavg)",
 "operator": {"vmrss_kib": $op_rss, "vmhwm_kib": $op_hwm, "cpu_s": $(awk "BEGIN{print $op1 - $op0}")},
 "api_manager": {"vmrss_kib": $am_rss, "vmhwm_kib": $am_hwm, "cpu_s": $(awk "BEGIN{print $am1 - $am0}")}}
EOF

  step "n=$n: fencing, $FENCE_TRIALS trials (poll ${POLL}s)"
  local f0
  f0=$(date -u +%s.%N)
  "$TOOL" fence --sim "$SIM" --nodes "$n" --trials "$FENCE_TRIALS" --poll "$POLL" >"$DIR/fence.json"
  # The flaps' window, for the writes per flap (audit log): the last trial's node is back
  # online and polled; one more poll of each kind lets its writes land.
  sleep $((POLL * 2))
  echo "{\"from\": $f0, \"to\": $(date -u +%s.%N), \"trials\": $FENCE_TRIALS, \"pods_per_node\": $((pods / n))}" >"$DIR/fence-window.json"

  fence_busy "$n"

  step "n=$n: baseline: pods without a PVC (no webhook), $RPS rps for ${WEBHOOK_SECONDS}s (dry-run creates)"
  "$TOOL" webhook --kind pod-baseline --namespace bench-0 --claim data-0 --rps "$RPS" --seconds "$WEBHOOK_SECONDS" >"$DIR/webhook-baseline.json"
  step "n=$n: pod webhook, $RPS rps for ${WEBHOOK_SECONDS}s (dry-run creates through the apiserver)"
  "$TOOL" webhook --kind pod --namespace bench-0 --claim data-0 --rps "$RPS" --seconds "$WEBHOOK_SECONDS" --metrics "http://$AM_METRICS/metrics" >"$DIR/webhook-pod.json"
  step "n=$n: PVC webhook, $RPS rps for ${WEBHOOK_SECONDS}s"
  "$TOOL" webhook --kind pvc --namespace bench-0 --claim data-0 --rps "$RPS" --seconds "$WEBHOOK_SECONDS" --metrics "http://$AM_METRICS/metrics" >"$DIR/webhook-pvc.json"

  if ((n == MAX_NODES && SHARED > 0)); then
    step "n=$n: shared-volume pass with $SHARED shared volumes"
    "$TOOL" shared --sim "$SIM" --nodes "$n" --count "$SHARED" >"$DIR/shared.json"
  fi

  read -r op_rss op_hwm _ <<<"$(proc_stats "$op_pid")"
  read -r am_rss am_hwm _ <<<"$(proc_stats "$am_pid")"
  fresh_api_manager "$n"
  echo "{\"operator_vmhwm_kib\": $op_hwm, \"api_manager_vmhwm_kib\": $am_hwm, \"load\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >"$DIR/end.json"
  cp "$audit" "$DIR/audit.jsonl"
  step "n=$n: done; stopping"
  stop_all
  hack/k8s.sh down >/dev/null 2>&1 || true
}

for n in "${NODE_SIZES[@]}"; do
  run_size "$n"
done
report
step "finished in $((SECONDS - T0)) s"
