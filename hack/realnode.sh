# A real Kubernetes node for the local plane of hack/k8s.sh (sourced by it when REAL_NODES=1):
# kubelet and kube-proxy built from the plane's own Kubernetes module, Debian's containerd and
# runc, the CNI bridge and host-local plugins, and CoreDNS (a build of only the plugins used) so
# pods resolve Services by name. Pods get addresses on the bridge $RN_BRIDGE (10.200.0.0/24); the
# host side, 10.200.0.1, is the node's address and the address the apiserver binds to and
# advertises, so pods reach it through the `kubernetes` Service. Nothing listens on an external
# interface. docs/real-node.md has the recipe and every host requirement.
#
# The kwok nodes of such a plane carry the taint kwok.x-k8s.io/node=fake:NoSchedule, so a pod
# lands on a fake node only when it tolerates that (the StorageOS data plane, whose images cannot
# be pulled here); everything else runs for real on $RN_NODE.
#
# Only one real node can run on a host at a time (one bridge, one pod network, one cgroup root);
# realnode_up refuses a second one and names the plane that holds it.

RN_NODE=real-node-0
RN_BRIDGE=rn0
RN_IP=10.200.0.1
RN_CIDR=10.200.0.0/24
RN_LABEL=storageos-operator.dev/real-node
RN_CGROUP=storageos-real-node
RN_KUBELET_PORT=$((K8S_PORT + 10))
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
COREDNS_BIN=$CACHE/bin/coredns-$COREDNS_VERSION
PAUSE_IMAGE=localhost/storageos-operator-pause:$K8S_VERSION
PAUSE_ARCHIVE=$CACHE/bin/pause-$K8S_VERSION/pause.oci.tar
RN_DIR=$STATE/node
# Which plane holds the host's one real node (its state directory).
RN_LOCK=${STORAGEOS_REAL_NODE_LOCK:-/run/storageos-operator-real-node}
RN_PACKAGES=(containerd runc containernetworking-plugins conntrack iptables iproute2)

rn_log() { printf '[k8s] real node: %s\n' "$*" >&2; }

# ---------------------------------------------------------------- host requirements

# Says why this host cannot run a real node (one line per reason) and fails, or installs what is
# missing from Debian's packages and succeeds.
realnode_check_host() {
  local why=()
  [[ $(uname -s) == Linux ]] || why+=("not Linux ($(uname -s))")
  [[ $(id -u) == 0 ]] || why+=("not root: a node needs namespaces, a bridge, iptables and cgroups")
  [[ -d /sys/fs/cgroup ]] || why+=("no cgroup filesystem at /sys/fs/cgroup")
  if ((${#why[@]} == 0)); then
    local missing=()
    command -v containerd >/dev/null || missing+=(containerd)
    command -v runc >/dev/null || missing+=(runc)
    [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] || missing+=(containernetworking-plugins)
    command -v conntrack >/dev/null || missing+=(conntrack)
    command -v iptables >/dev/null || missing+=(iptables)
    command -v ip >/dev/null || missing+=(iproute2)
    if ((${#missing[@]})); then
      if command -v apt-get >/dev/null; then
        rn_log "installing ${missing[*]} from Debian's packages"
        mkdir -p "$CACHE"
        # A fresh machine may have no package lists yet: update once and try again.
        { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
          || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; }; } \
          >"$CACHE/apt-real-node.log" 2>&1 \
          || why+=("apt-get install ${missing[*]} failed (see $CACHE/apt-real-node.log)")
      else
        why+=("missing ${missing[*]} and no apt-get to install them (Debian packages: ${RN_PACKAGES[*]})")
      fi
    fi
  fi
  if ((${#why[@]} == 0)); then
    # The bridge is the first thing a node needs; a host that refuses it refuses the rest.
    if ! ip link show "$RN_BRIDGE" >/dev/null 2>&1; then
      if ip link add rn-probe0 type bridge 2>/dev/null; then
        ip link delete rn-probe0
      else
        why+=("cannot create a network bridge (needs CAP_NET_ADMIN and a kernel with bridge support)")
      fi
    fi
    local sub
    sub=$(mktemp -d /sys/fs/cgroup/"$(rn_cgroup_probe_dir)"/rn-probe.XXXX 2>/dev/null) && rmdir "$sub" \
      || why+=("cannot create cgroups under /sys/fs/cgroup (needs a writable cgroup filesystem)")
    command -v gcc >/dev/null || [[ -s $PAUSE_ARCHIVE ]] || why+=("no gcc to build the sandbox (pause) program")
  fi
  if ((${#why[@]})); then
    rn_log "this host cannot run a real node:"
    printf '[k8s]   - %s\n' "${why[@]}" >&2
    return 1
  fi
}

rn_cgroup_v2() { [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; }
rn_cgroup_probe_dir() { if rn_cgroup_v2; then echo .; else echo memory; fi; }

# ---------------------------------------------------------------- build (cached)

# CoreDNS with only the plugins a node here needs: a custom main, the way CoreDNS documents
# builds with a chosen plugin set (plugin.cfg would compile in every cloud SDK).
build_coredns() {
  [[ -x $COREDNS_BIN/coredns ]] && return 0
  rn_log "building CoreDNS $COREDNS_VERSION from Go modules (first time only)"
  go_main coredns "$COREDNS_BIN" github.com/coredns/coredns "$COREDNS_VERSION" 1.26.0 <<'EOF'
// CoreDNS with the plugins the local plane's real node uses: cluster.local from the Kubernetes
// API, bound to the node's bridge address.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "health", "ready", "errors", "kubernetes"}
}

func main() { coremain.Run() }
EOF
}

# The sandbox ("pause") image: Kubernetes' own pause.c from the module source the plane was built
# from, linked statically, in a one-layer image written with crane (hack/tools.sh oci).
build_pause() {
  [[ -s $PAUSE_ARCHIVE ]] && return 0
  rn_log "building the sandbox image $PAUSE_IMAGE (Kubernetes' pause.c)"
  local mod c
  mod=$(go_env && cd "$CACHE/src/k8s-$K8S_VERSION" && go list -m -f '{{.Dir}}' k8s.io/kubernetes) \
    || die "cannot find the k8s.io/kubernetes $K8S_VERSION module source (run hack/k8s.sh build)"
  c=$mod/build/pause/linux/pause.c
  [[ -f $c ]] || die "no $c in the Kubernetes module source"
  local work
  work=$(mktemp -d)
  mkdir -p "$work/rootfs" "$(dirname "$PAUSE_ARCHIVE")"
  gcc -Os -static -DVERSION="$K8S_VERSION" -o "$work/rootfs/pause" "$c" \
    || { rm -rf "$work"; die "gcc -static of pause.c failed (needs Debian's libc6-dev)"; }
  strip "$work/rootfs/pause"
  "$ROOT/hack/tools.sh" oci "$PAUSE_ARCHIVE" "$PAUSE_IMAGE" "amd64=$work/rootfs" --entrypoint /pause --user 65535:65535 >/dev/null
  rm -rf "$work"
}

realnode_build() {
  realnode_check_host || return 1
  build_coredns
  build_pause
}

# ---------------------------------------------------------------- network (before the apiserver)

# The bridge exists before the apiserver starts: the apiserver binds to its address.
realnode_network() {
  if [[ -s $RN_LOCK ]] && [[ $(cat "$RN_LOCK") != "$STATE" ]] && [[ -d $(cat "$RN_LOCK") ]]; then
    die "the real node of this host belongs to the plane in $(cat "$RN_LOCK"); stop it first (K8S_STATE=$(cat "$RN_LOCK") hack/k8s.sh down)"
  fi
  echo "$STATE" >"$RN_LOCK"
  mkdir -p "$RN_DIR"
  # What the node changes on the host, to restore it at realnode_down.
  {
    echo "ip_forward=$(cat /proc/sys/net/ipv4/ip_forward)"
    echo "route_localnet=$(cat /proc/sys/net/ipv4/conf/all/route_localnet)"
    echo "nft_tables=$(nft list tables 2>/dev/null | tr '\n' ',')"
  } >"$RN_DIR/host-before"
  ip link show "$RN_BRIDGE" >/dev/null 2>&1 || ip link add "$RN_BRIDGE" type bridge
  ip addr replace "$RN_IP/24" dev "$RN_BRIDGE"
  ip link set "$RN_BRIDGE" up
}

# ---------------------------------------------------------------- certificates and kubeconfigs

rn_certs() {
  local d=$RN_DIR/pki
  mkdir -p "$d"
  # The kubelet as a node, under the Node authorizer and NodeRestriction.
  cert "$d" kubelet "/O=system:nodes/CN=system:node:$RN_NODE" "$CLIENT_EXT"
  kubeconfig "$d" kubelet
  cert "$d" kubelet-serving "/CN=$RN_NODE" \
    "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:$RN_IP,DNS:$RN_NODE\n"
  # kube-proxy: the built-in binding system:node-proxier names this user.
  cert "$d" kube-proxy /CN=system:kube-proxy "$CLIENT_EXT"
  kubeconfig "$d" kube-proxy
  # CoreDNS: the rules of the upstream system:coredns ClusterRole, bound below.
  cert "$d" coredns /CN=system:storageos-operator-coredns "$CLIENT_EXT"
  kubeconfig "$d" coredns
}

# ---------------------------------------------------------------- cgroups

rn_cgroup_dirs() {
  if rn_cgroup_v2; then
    echo "/sys/fs/cgroup/$RN_CGROUP"
    return
  fi
  local c
  for c in /sys/fs/cgroup/*/; do
    c=${c%/}
    [[ -L $c ]] && continue
    echo "$c/$RN_CGROUP"
  done
}

rn_cgroups() {
  local d
  while read -r d; do
    mkdir -p "$d" 2>/dev/null || continue
    # A new cpuset cgroup starts with no CPUs and no memory nodes.
    if [[ -f $d/cpuset.cpus && -z $(cat "$d/cpuset.cpus") ]]; then
      cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"
      cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"
    fi
  done < <(rn_cgroup_dirs)
  if rn_cgroup_v2; then
    local ctl
    for ctl in cpu cpuset memory pids io hugetlb; do
      echo "+$ctl" >"/sys/fs/cgroup/$RN_CGROUP/cgroup.subtree_control" 2>/dev/null || true
    done
  fi
}

# Removes a cgroup tree depth-first (rmdir: the kernel refuses while a process is in it).
rn_rm_cgroup() {
  local d=$1
  [[ -d $d ]] || return 0
  find "$d" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null || true
  rmdir "$d" 2>/dev/null || true
}

# ---------------------------------------------------------------- processes

rn_containerd() {
  local d=$RN_DIR/containerd
  mkdir -p "$d/root" "$d/state" "$d/opt" "$RN_DIR/cni/net.d" "$RN_DIR/cni/ipam"
  # Each change is checked: a containerd whose default config differs fails here, by name. (The
  # VM lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj, so containerd clamps it.)
  local conf re to
  conf=$(containerd config default)
  while IFS='|' read -r re to; do
    grep -qE "$re" <<<"$conf" \
      || die "containerd's default configuration has no line matching $re; this recipe knows containerd 1.6 (Debian 12)"
    conf=$(sed -E "0,\\#$re#s##$to#" <<<"$conf")
  done <<EOF
^root = ".*"\$|root = "$d/root"
^state = ".*"\$|state = "$d/state"
^(\s*)address = "/run/containerd/containerd.sock"\$|\1address = "$d/containerd.sock"
^(\s*)restrict_oom_score_adj = false\$|\1restrict_oom_score_adj = true
^(\s*)sandbox_image = ".*"\$|\1sandbox_image = "$PAUSE_IMAGE"
^(\s*)bin_dir = "/opt/cni/bin"\$|\1bin_dir = "/usr/lib/cni"
^(\s*)conf_dir = "/etc/cni/net.d"\$|\1conf_dir = "$RN_DIR/cni/net.d"
^(\s*)BinaryName = ""\$|\1BinaryName = "/usr/sbin/runc"
^(\s*)path = "/opt/containerd"\$|\1path = "$d/opt"
EOF
  echo "$conf" >"$d/config.toml"
  cat >"$RN_DIR/cni/net.d/10-real-node.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "real-node",
  "plugins": [
    {
      "type": "bridge", "bridge": "$RN_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$RN_CIDR", "gateway": "$RN_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$RN_DIR/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  start containerd containerd --config "$d/config.toml"
  wait_for containerd 30 ctr --address "$d/containerd.sock" version || fail_up containerd
}

rn_ctr() { ctr --address "$RN_DIR/containerd/containerd.sock" -n k8s.io "$@"; }

# Imports an OCI or docker archive into the node's runtime, so pods run it with
# imagePullPolicy IfNotPresent and no registry.
realnode_load_image() {
  [[ -S $RN_DIR/containerd/containerd.sock ]] || die "no real node runs in $STATE (start the plane with REAL_NODES=1)"
  [[ -s $1 ]] || die "no image archive at $1"
  rn_ctr images import --no-unpack=false "$1" >&2 || die "importing $1 into the node's containerd failed"
}

rn_kubelet() {
  local d=$RN_DIR
  mkdir -p "$d/kubelet" "$d/pod-logs"
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 ("hybrid") hosts are still supported by 1.36 when asked; no systemd here.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cgroupRoot: /$RN_CGROUP
containerRuntimeEndpoint: unix://$d/containerd/containerd.sock
imageServiceEndpoint: unix://$d/containerd/containerd.sock
# Bound to the node's bridge address only. The apiserver authenticates with its kubelet client
# certificate; every other caller is checked by the apiserver (webhook).
address: $RN_IP
port: $RN_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $((RN_KUBELET_PORT + 1))
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization:
  mode: Webhook
tlsCertFile: $d/pki/kubelet-serving.crt
tlsPrivateKeyFile: $d/pki/kubelet-serving.key
registerNode: true
clusterDomain: cluster.local
clusterDNS: [$RN_IP]
resolvConf: /etc/resolv.conf
staticPodPath: ""
serializeImagePulls: false
# Two cores and a shared disk: do not evict pods (or delete their images) for the host's own
# disk use. Absolute amounts: a percentage of a large shared disk is gigabytes that a build in
# the same checkout uses up (a CI run failed that way at 1%).
evictionHard: {memory.available: "100Mi", nodefs.available: "512Mi", imagefs.available: "512Mi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
enforceNodeAllocatable: ["pods"]
maxPods: 30
nodeStatusUpdateFrequency: 10s
syncFrequency: 10s
podLogsDir: $d/pod-logs
# The VM cannot lower OOM scores (no CAP_SYS_RESOURCE).
oomScoreAdj: 0
EOF
  start kubelet "$BIN/kubelet" --config "$d/kubelet.yaml" --kubeconfig "$d/pki/kubelet.kubeconfig" \
    --root-dir "$d/kubelet" --cert-dir "$d/kubelet/pki" --hostname-override "$RN_NODE" --node-ip "$RN_IP" \
    --node-labels "$RN_LABEL=true" --v=1
}

rn_kube_proxy() {
  cat >"$RN_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $RN_DIR/pki/kube-proxy.kubeconfig}
hostnameOverride: $RN_NODE
mode: iptables
clusterCIDR: $RN_CIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:$((RN_KUBELET_PORT + 2))
metricsBindAddress: 127.0.0.1:$((RN_KUBELET_PORT + 3))
# Leave the host's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0}
nodePortAddresses: ["127.0.0.0/8"]
EOF
  start kube-proxy "$BIN/kube-proxy" --config "$RN_DIR/kube-proxy.yaml" --v=1
}

rn_coredns() {
  kc apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:storageos-operator-coredns"}
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:storageos-operator-coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:storageos-operator-coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:storageos-operator-coredns"}]
EOF
  cat >"$RN_DIR/Corefile" <<EOF
cluster.local:53 {
  bind $RN_IP
  errors
  health 127.0.0.1:$((RN_KUBELET_PORT + 4))
  ready 127.0.0.1:$((RN_KUBELET_PORT + 5))
  kubernetes cluster.local {
    kubeconfig $RN_DIR/pki/coredns.kubeconfig local
  }
}
EOF
  start coredns "$COREDNS_BIN/coredns" -conf "$RN_DIR/Corefile"
  wait_for coredns 30 curl -fsS "http://127.0.0.1:$((RN_KUBELET_PORT + 5))/ready" || fail_up coredns
}

# Starts the node once the plane runs; returns when the Node is Ready.
realnode_up() {
  rn_certs
  rn_cgroups
  rn_containerd
  realnode_load_image "$PAUSE_ARCHIVE"
  rn_kubelet
  wait_for "node $RN_NODE" 90 bash -c "'$BIN/kubectl' --kubeconfig '$KUBECONFIG_OUT' get node $RN_NODE --no-headers 2>/dev/null | grep -qw Ready" \
    || fail_up kubelet
  rn_kube_proxy
  wait_for kube-proxy 30 curl -fsS "http://127.0.0.1:$((RN_KUBELET_PORT + 2))/healthz" || fail_up kube-proxy
  rn_coredns
}

# ---------------------------------------------------------------- teardown

# Everything realnode_up and the pods changed on the host, undone: pods and containers, the
# runtime, mounts, network namespaces, the bridge, iptables chains and empty tables, sysctls,
# cgroups. Safe to run on a half-started node; never stops half-way (each step may find nothing).
realnode_down() {
  [[ -d $RN_DIR ]] || return 0
  stop coredns
  stop kube-proxy
  [[ -x $BIN/kube-proxy ]] && "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  stop kubelet
  if [[ -S $RN_DIR/containerd/containerd.sock ]] && pid_alive containerd; then
    local t
    for t in $(rn_ctr tasks ls -q 2>/dev/null); do rn_ctr tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    for t in $(rn_ctr tasks ls -q 2>/dev/null); do
      for _ in 1 2 3 4 5 6 7 8 9 10; do rn_ctr tasks delete "$t" >/dev/null 2>&1 && break; sleep 0.2; done
    done
    for t in $(rn_ctr containers ls -q 2>/dev/null); do rn_ctr containers delete "$t" >/dev/null 2>&1 || true; done
  fi
  stop containerd
  # Shims outlive containerd: find those of this node by the socket they were given.
  local pid
  for pid in $(pgrep -f "containerd-shim.*-address $RN_DIR/containerd/containerd.sock" || true); do kill -9 "$pid" 2>/dev/null || true; done
  # Network namespaces of pods (the CNI veth pairs go with them).
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}' || true); do ip netns delete "$ns" 2>/dev/null || true; done
  # Mounts under the node's directory, deepest first.
  { awk -v d="$RN_DIR" '$2 ~ "^"d {print $2}' /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  ip link delete "$RN_BRIDGE" 2>/dev/null || true
  rn_iptables_clean
  if [[ -s $RN_DIR/host-before ]]; then
    local ip_forward route_localnet nft_tables
    # shellcheck disable=SC1090
    source "$RN_DIR/host-before"
    echo "$ip_forward" >/proc/sys/net/ipv4/ip_forward 2>/dev/null || true
    echo "$route_localnet" >/proc/sys/net/ipv4/conf/all/route_localnet 2>/dev/null || true
    rn_nft_clean "$nft_tables"
  fi
  local d
  while read -r d; do rn_rm_cgroup "$d"; done < <(rn_cgroup_dirs)
  # The kubelet also makes its cgroup root in the unified hierarchy of a hybrid host.
  [[ -d /sys/fs/cgroup/unified ]] && rn_rm_cgroup "/sys/fs/cgroup/unified/$RN_CGROUP"
  [[ -s $RN_LOCK && $(cat "$RN_LOCK") == "$STATE" ]] && rm -f "$RN_LOCK"
  rm -rf "$RN_DIR" 2>/dev/null || true
}

# Chains the kubelet, kube-proxy and the CNI plugins added (KUBE-*, CNI-*), with the rules that
# jump to them; nothing else is touched.
rn_iptables_clean() {
  local ipt t op chain
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for t in filter nat mangle; do
      "$ipt" -t "$t" -S >/dev/null 2>&1 || continue
      # Rules jumping to our chains, deleted by spec.
      { "$ipt" -t "$t" -S 2>/dev/null | grep -E -- '^-A .* -j (KUBE|CNI)-' || true; } | sed 's/^-A /-D /' | while read -r rule; do
        eval "$ipt -t $t $rule" 2>/dev/null || true
      done
      for op in -F -X; do # every chain flushed before any is deleted: they jump to each other
        for chain in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}'); do
          "$ipt" -t "$t" "$op" "$chain" 2>/dev/null || true
        done
      done
    done
  done
}

# nftables tables that did not exist before the node and are empty of rules now (iptables-nft
# makes them on first use, kube-proxy's nftables probe makes its own).
rn_nft_clean() {
  command -v nft >/dev/null || return 0
  local before=",$1" fam name
  nft list tables 2>/dev/null | while read -r _ fam name; do
    [[ $before == *",table $fam $name,"* ]] && continue
    if [[ $name == kube-proxy ]] || ! nft list table "$fam" "$name" 2>/dev/null | grep -qE '^\s+(meta|ip|tcp|udp|ct|counter|jump|goto|iifname|oifname|mark)'; then
      nft delete table "$fam" "$name" 2>/dev/null || true
    fi
  done
}
