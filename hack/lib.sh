# Shell helpers shared by hack/demo.sh and hack/demo-real.sh (sourced; needs a `kc` kubectl function).

# A kubeconfig acting as a ServiceAccount (a 24 h TokenRequest token), so a local process works
# under exactly the RBAC a real install grants. Arguments: namespace, ServiceAccount, output file.
kubeconfig_for() {
  local token server ca
  token=$(kc -n "$1" create token "$2" --duration 24h)
  server=$(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kc config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  cat >"$3" <<EOC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: "$2", user: {token: "$token"}}]
contexts: [{name: "$2", context: {cluster: local, user: "$2", namespace: "$1"}}]
current-context: "$2"
EOC
}

# Waits until the StorageOSCluster `storageos` in storageos-operator is Running 3/3, printing each
# new line of `kubectl get stos`. Arguments: seconds, where to look when it does not.
wait_cluster_running() {
  local deadline=$((SECONDS + $1)) last="" line
  while :; do
    line=$(kc get stos storageos -n storageos-operator --no-headers 2>/dev/null || true)
    [[ $line != "$last" && -n $line ]] && echo "    $line"
    last=$line
    if [[ $(kc get stos storageos -n storageos-operator -o jsonpath='{.status.phase} {.status.ready}' 2>/dev/null) == "Running 3/3" ]]; then
      return 0
    fi
    if ((SECONDS > deadline)); then
      echo "the cluster did not become Running in $1 s; see $2" >&2
      return 1
    fi
    sleep 1
  done
}

# StorageOS's own etcd for the demo: the plane's build of etcd (hack/k8s.sh builds it), a second
# member-less instance beside the plane's, so the cluster's KVBackendReachable is a real answer.
# Arguments: state directory, listen host, client port. Writes etcd.pid and etcd.log there.
start_demo_etcd() {
  local dir=$1 host=$2 port=$3
  local etcd=${STORAGEOS_CACHE:-$HOME/.cache/storageos-operator}/bin/etcd-$ETCD_VERSION/etcd
  [[ -x $etcd ]] || { echo "etcd $ETCD_VERSION is not built: run hack/k8s.sh build" >&2; return 1; }
  mkdir -p "$dir/etcd"
  if [[ -f $dir/etcd.pid ]] && kill -0 "$(cat "$dir/etcd.pid")" 2>/dev/null; then
    return 0
  fi
  "$etcd" --data-dir "$dir/etcd" --name demo \
    --listen-client-urls "http://$host:$port" --advertise-client-urls "http://$host:$port" \
    --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
    --initial-cluster "demo=http://127.0.0.1:$((port + 1))" \
    --unsafe-no-fsync --log-level warn >"$dir/etcd.log" 2>&1 &
  echo $! >"$dir/etcd.pid"
  for _ in $(seq 100); do
    curl -fsS "http://$host:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$dir/etcd.pid")" 2>/dev/null || break
    sleep 0.2
  done
  tail -20 "$dir/etcd.log" >&2
  echo "the demo's etcd did not start on $host:$port (see $dir/etcd.log)" >&2
  return 1
}

# Prints the StorageOSCluster's conditions and its Warning events; fails when a condition is not
# the healthy way round (Degraded, Paused and Progressing False, every other True) or a Warning was recorded.
check_cluster_healthy() {
  local conds bad warnings
  conds=$(kc get stos storageos -n storageos-operator \
    -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}{"\n"}{end}')
  sed 's/^/    /' <<<"$conds"
  bad=$(awk '{split($1, c, "="); healthy = (c[1] == "Degraded" || c[1] == "Paused" || c[1] == "Progressing") ? "False" : "True";
              if (c[2] != healthy) print}' <<<"$conds")
  warnings=$(kc get events -n storageos-operator --field-selector type=Warning,involvedObject.kind=StorageOSCluster \
    -o custom-columns=REASON:.reason,MESSAGE:.message --no-headers 2>/dev/null || true)
  if [[ -n $bad || -n $warnings ]]; then
    [[ -n $bad ]] && printf 'conditions that are not healthy:\n%s\n' "$bad" >&2
    [[ -n $warnings ]] && printf 'Warning events on the cluster:\n%s\n' "$warnings" >&2
    return 1
  fi
  echo "    every condition healthy, no Warning event"
}
