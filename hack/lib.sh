# Shell helpers shared by hack/demo.sh and hack/bench.sh (sourced; needs a `kc` kubectl function).

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
