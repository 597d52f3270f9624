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
