#!/usr/bin/env bash
# A real Kubernetes 1.36 cluster in the box, on loopback only: etcd, kube-apiserver with real authentication
# (client certificates, a static token file, service-account tokens) and Node,RBAC authorization,
# kube-controller-manager and kube-scheduler with their own credentials, N kwok nodes (leases renewed every
# 10 s, bound pods moved to Running) and a workload. The binaries come from testbed/ (testbed/README.md).
#
#   scripts/cluster.sh up DIR [--nodes N] [--pods-per-node P] [--no-clients] [--via-url URL [--via-ca FILE]]
#       start what is not running (building what is missing), wait for the apiserver's /readyz, the N nodes
#       Ready and every Deployment's pods Running; write and print DIR/env. A live DIR is reused as it is.
#       --no-clients starts etcd and the apiserver only (their env is written; `clients` starts the rest).
#   scripts/cluster.sh clients DIR [--via-url URL [--via-ca FILE]]
#       (re)start kube-controller-manager, kube-scheduler and kwok with kubeconfigs whose server is URL
#       (default: the apiserver itself), e.g. a kache in front of the apiserver; then as `up`.
#   scripts/cluster.sh down DIR      stop exactly what `up` started (by PID) and wait for it to exit
#   scripts/cluster.sh stop DIR NAME stop one component (etcd, kube-apiserver, …) by PID; `up DIR` starts it again
#   scripts/cluster.sh env DIR       print DIR/env
#   scripts/cluster.sh stats DIR [S] each process's CPU use over S seconds (default 20) and its RSS
#
# Everything lives in DIR: pki/ (CA, certificates, keys, tokens.csv), kubeconfigs/, manifests/, etcd-data/,
# NAME.log and NAME.pid per process, state (ports, sizes), env. Needs: Go (for testbed/build.sh, which also
# builds the kubectl used here; KUBECTL=PATH picks another), openssl, python3 (free ports), curl, flock.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# kubectl: the testbed's own (the cluster's version) unless KUBECTL names another.
KUBECTL=${KUBECTL:-}
# The processes, in start order; `down` stops them in the reverse order.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
CLIENTS=(kube-controller-manager kube-scheduler kwok)
# Test users of the static token file: name and groups. Their RBAC is in manifests/rbac.yaml (rbac_manifest).
USERS=(admin alice bob carol dave)
declare -A USER_GROUPS=([admin]=system:masters [alice]= [bob]= [carol]=kache:readers [dave]=)
# The workload: namespaces and the Deployments in each (with a Service, ConfigMap, Secret and PDB apiece).
NAMESPACES=(team-a team-b team-c)
DEPLOYMENTS=(web api worker)
SERVICE_CIDR=10.96.0.0/16 # the `kubernetes` Service gets 10.96.0.1 (in the serving certificate)

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
die() { echo "cluster.sh: $*" >&2; exit 1; }

# === processes ===

# The PID of a component started for DIR, if it is still running: the PID file's process must be alive
# (not a zombie) and name DIR in its command line, so a reused PID is never taken for ours.
pid_of() {
  local f="$DIR/$1.pid" pid state
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ "$state" != Z ] || return 1
  tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$DIR/" || return 1
  echo "$pid"
}
alive() { pid_of "$1" >/dev/null; }

# Names the failing component, shows the end of its log and stops what this invocation started.
fail() {
  local comp=$1; shift
  echo "cluster.sh: $comp: $*" >&2
  if [ -f "$DIR/$comp.log" ]; then
    echo "--- last lines of $DIR/$comp.log:" >&2
    tail -n 25 "$DIR/$comp.log" >&2
  fi
  exit 1
}

STARTED=()
on_exit() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ ${#STARTED[@]} -gt 0 ] && [ -z "${KEEP_ON_FAILURE:-}" ]; then
    echo "cluster.sh: stopping what this run started (${STARTED[*]}); KEEP_ON_FAILURE=1 keeps it" >&2
    local i
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do stop "${STARTED[i]}"; done
  fi
}

# start NAME CMD...: in its own session (a Ctrl-C of the caller does not reach it), output in DIR/NAME.log,
# without DIR's lock (fd 9), which would otherwise stay held as long as the process runs.
start() {
  local name=$1; shift
  echo "cluster.sh: starting $name" >&2
  setsid "$@" >> "$DIR/$name.log" 2>&1 < /dev/null 9>&- &
  echo $! > "$DIR/$name.pid"
  STARTED+=("$name")
}

stop() {
  local name=$1 pid i
  if pid=$(pid_of "$name"); then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 200); do alive "$name" || break; sleep 0.1; done
    if alive "$name"; then
      echo "cluster.sh: $name (pid $pid) ignored SIGTERM for 20 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 1 50); do alive "$name" || break; sleep 0.1; done
    fi
  fi
  rm -f "$DIR/$name.pid"
}

# wait_for NAME SECONDS WHAT CMD...: until CMD succeeds (tried every POLL seconds, default 0.5); fails naming
# NAME if its process dies or time runs out.
wait_for() {
  local name=$1 secs=$2 what=$3; shift 3
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    alive "$name" || fail "$name" "exited while waiting for $what"
    [ $SECONDS -lt $deadline ] || fail "$name" "no $what after ${secs}s"
    sleep "${POLL:-0.5}"
  done
}

free_ports() {
  python3 -c '
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

https_ok() { [ "$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "$@")" = 200 ]; }

# === credentials ===

# sign NAME SUBJECT EXT [CA]: a key and a certificate signed by the testbed CA (or pki/CA.crt) (EXT: openssl x509v3 lines).
sign() {
  local p=$DIR/pki/$1 ca=${4:-ca}
  openssl req -new -newkey rsa:2048 -nodes -keyout "$p.key" -out "$p.csr" -subj "$2" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%b\n' "$3" > "$p.ext"
  openssl x509 -req -in "$p.csr" -CA "$DIR/pki/$ca.crt" -CAkey "$DIR/pki/$ca.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days 3650 -extfile "$p.ext" -out "$p.crt" 2>/dev/null
  rm -f "$p.csr" "$p.ext"
}

# Once per DIR: the CA, the apiserver's serving certificate, client certificates for the admin and each
# component, the service-account key pair and the static token file.
make_pki() {
  local P=$DIR/pki
  [ -f "$P/tokens.csv" ] && return 0
  echo "cluster.sh: generating the CA, certificates, service-account keys and user tokens in $P" >&2
  rm -rf "$P"; mkdir -p "$P"; chmod 700 "$P"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$P/ca.key" -out "$P/ca.crt" -days 3650 \
    -subj "/CN=kache-testbed-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  # The aggregation layer's own CA and client (front-proxy-client), as kubeadm sets them up: the
  # apiserver publishes the CA in kube-system/extension-apiserver-authentication for extension apiservers
  # and for the controller-manager's and scheduler's request-header authentication.
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$P/front-proxy-ca.key" -out "$P/front-proxy-ca.crt" -days 3650 \
    -subj "/CN=kache-testbed-front-proxy-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  sign apiserver "/CN=kube-apiserver" "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign front-proxy-client "/CN=front-proxy-client" "extendedKeyUsage=clientAuth" front-proxy-ca
  sign admin "/O=system:masters/CN=kubernetes-admin" "extendedKeyUsage=clientAuth"
  sign kube-controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
  sign kube-scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
  # kwok stands for the kubelets: in group system:nodes, so API Priority and Fairness puts its writes at the
  # kubelets' priority level (system-nodes); its user name is no node's, so the Node authorizer and
  # NodeRestriction leave it to RBAC (ClusterRole kache-testbed:kwok).
  sign kwok "/O=system:nodes/CN=kache-testbed:kwok" "extendedKeyUsage=clientAuth"
  openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
  openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
  # token,user,uid,"group1,group2" (--token-auth-file). The components' tokens are for --via-url, where a
  # proxy in front of the apiserver cannot pass their client certificates on.
  local u
  {
    for u in "${USERS[@]}"; do
      printf '%s,%s,uid-%s' "$(openssl rand -hex 16)" "$u" "$u"
      if [ -n "${USER_GROUPS[$u]}" ]; then printf ',"%s"\n' "${USER_GROUPS[$u]}"; else printf '\n'; fi
    done
    printf '%s,system:kube-controller-manager,uid-kube-controller-manager\n' "$(openssl rand -hex 16)"
    printf '%s,system:kube-scheduler,uid-kube-scheduler\n' "$(openssl rand -hex 16)"
    printf '%s,kache-testbed:kwok,uid-kwok,"system:nodes"\n' "$(openssl rand -hex 16)"
  } > "$P/tokens.csv.tmp"
  mv "$P/tokens.csv.tmp" "$P/tokens.csv"
}

token_of() { awk -F, -v u="$1" '$2 == u { print $1 }' "$DIR/pki/tokens.csv"; }

# kubeconfig FILE SERVER CA USER-FIELDS (YAML lines under `user:`)
kubeconfig() {
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: "$2"
    certificate-authority: "$3"
users:
- name: user
  user:
$4
contexts:
- name: testbed
  context: {cluster: testbed, user: user}
current-context: testbed
EOF
}
cert_user() { printf '    client-certificate: "%s"\n    client-key: "%s"' "$DIR/pki/$1.crt" "$DIR/pki/$1.key"; }
token_user() { printf '    token: %s' "$(token_of "$1")"; }

# The admin's and the test users' kubeconfigs (always the apiserver itself).
user_kubeconfigs() {
  local K=$DIR/kubeconfigs u
  mkdir -p "$K"
  kubeconfig "$K/admin.kubeconfig" "$API_URL" "$DIR/pki/ca.crt" "$(cert_user admin)"
  for u in "${USERS[@]}"; do
    kubeconfig "$K/$u-token.kubeconfig" "$API_URL" "$DIR/pki/ca.crt" "$(token_user "$u")"
  done
}

# The components' kubeconfigs: their client certificates against the apiserver, or their tokens against
# CLIENTS_URL when that is another server (--via-url), trusting CLIENTS_CA.
client_kubeconfigs() {
  local K=$DIR/kubeconfigs c user
  for c in "${CLIENTS[@]}"; do
    case $c in kwok) user=kache-testbed:kwok ;; *) user=system:$c ;; esac
    if [ "$CLIENTS_URL" = "$API_URL" ]; then
      kubeconfig "$K/$c.kubeconfig" "$API_URL" "$DIR/pki/ca.crt" "$(cert_user "$c")"
    else
      kubeconfig "$K/$c.kubeconfig" "$CLIENTS_URL" "$CLIENTS_CA" "$(token_user "$user")"
    fi
  done
}

# === manifests ===

# RBAC for kwok and the test users, and the workload's namespaces:
#   alice: view in team-a; bob: edit in team-b (secrets too); carol (group kache:readers): view in every
#   namespace; dave: authenticated only; ServiceAccount team-a/reader: view in team-a.
rbac_manifest() {
  local ns
  for ns in "${NAMESPACES[@]}"; do
    printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels: {kache-testbed/workload: "true"}\n' "$ns"
  done
  cat <<'EOF'
---
# What kwok does in place of kubelets: node status, its own node leases, pods' status, deletion of pods
# marked for deletion, events.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "kache-testbed:kwok"}
rules:
- {apiGroups: [""], resources: [nodes], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [nodes/status, pods/status], verbs: [patch, update]}
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch, patch, update, delete]}
- {apiGroups: [""], resources: [events], verbs: [create, patch, update]}
- {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, list, watch, create, update, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kache-testbed:kwok"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "kache-testbed:kwok"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "kache-testbed:kwok"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-view, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-edit, namespace: team-b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kache-testbed:readers-view"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "kache:readers"}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader, namespace: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader-view, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{kind: ServiceAccount, name: reader, namespace: team-a}]
EOF
}

# Nodes kwok-node-0..N-1, managed by kwok through the kwok.x-k8s.io/node annotation, in three zones, each with
# its own pod CIDR inside 10.128.0.0/9 (there is no node IPAM controller; kwok gives pods IPs from it).
# Sized like real nodes (8 CPUs unless the pods' requests need more), so that the scheduler's
# LeastAllocated score tells a node with fewer pods from a fuller one and the pods spread.
nodes_manifest() {
  local i cpu=$((PODS_PER_NODE > 40 ? PODS_PER_NODE / 5 : 8)) pods=$((PODS_PER_NODE > 100 ? PODS_PER_NODE + 10 : 110))
  for ((i = 0; i < NODES; i++)); do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: kwok
    topology.kubernetes.io/zone: zone-$((i % 3))
    kache-testbed/node: "true"
spec:
  podCIDR: 10.$((128 + i / 256)).$((i % 256)).0/24
  podCIDRs: [10.$((128 + i / 256)).$((i % 256)).0/24]
status:
  capacity: {cpu: "$cpu", memory: $((cpu * 4))Gi, pods: "$pods", ephemeral-storage: 100Gi}
  allocatable: {cpu: "$cpu", memory: $((cpu * 4))Gi, pods: "$pods", ephemeral-storage: 100Gi}
EOF
  done
}

# Per namespace and Deployment: a ConfigMap, a Secret, a Service, a PodDisruptionBudget and the Deployment;
# NODES * PODS_PER_NODE pods in all, spread over the Deployments. Plus a few ConfigMaps and Secrets that no
# pod uses.
workload_manifest() {
  local total=$((NODES * PODS_PER_NODE)) n=$((${#NAMESPACES[@]} * ${#DEPLOYMENTS[@]})) k=0 ns d i replicas
  for ns in "${NAMESPACES[@]}"; do
    for i in 1 2 3 4 5; do
      printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings-%s, namespace: %s}\ndata: {key: "value-%s", feature-flags: "a=1,b=0"}\n' "$i" "$ns" "$i"
    done
    printf -- '---\napiVersion: v1\nkind: Secret\nmetadata: {name: registry-token, namespace: %s}\ntype: Opaque\nstringData: {token: "%s"}\n' "$ns" "$(openssl rand -hex 12)"
    for d in "${DEPLOYMENTS[@]}"; do
      replicas=$((total / n + (k < total % n ? 1 : 0))); k=$((k + 1))
      cat <<EOF
---
apiVersion: v1
kind: ConfigMap
metadata: {name: $d-config, namespace: $ns, labels: {app: $d}}
data:
  LOG_LEVEL: info
  config.yaml: |
    listen: ":8080"
    upstream: "http://api.$ns.svc:80"
---
apiVersion: v1
kind: Secret
metadata: {name: $d-credentials, namespace: $ns, labels: {app: $d}}
type: Opaque
stringData: {username: $d, password: "$(openssl rand -hex 12)"}
---
apiVersion: v1
kind: Service
metadata: {name: $d, namespace: $ns, labels: {app: $d}}
spec:
  selector: {app: $d}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: $d, namespace: $ns}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: $d}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: $d, namespace: $ns, labels: {app: $d, kache-testbed/workload: "true"}}
spec:
  replicas: $replicas
  selector: {matchLabels: {app: $d}}
  template:
    metadata: {labels: {app: $d}}
    spec:
      containers:
      - name: $d
        image: registry.k8s.io/pause:3.10
        ports: [{containerPort: 8080, name: http}]
        envFrom: [{configMapRef: {name: $d-config}}]
        env: [{name: PASSWORD, valueFrom: {secretKeyRef: {name: $d-credentials, key: password}}}]
        resources: {requests: {cpu: 100m, memory: 64Mi}}
      # Spread over zones and nodes. Without a constraint on nodes the 1.36 scheduler's opportunistic
      # batching (beta, on) places a Deployment's pods on a few nodes.
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: $d}}}
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: $d}}}
EOF
    done
  done
}

# kwok's stages, as kwokctl configures them for a cluster with node leases: nodes initialised Ready,
# node status heartbeats every ~10 min beside the 10 s leases, pods bound to a node Running and Ready,
# finished pods Succeeded, deleted pods removed. The Stage files come from the kwok module itself.
kwok_config() {
  local dir par=$((NODES / 50 > 4 ? NODES / 50 : 4))
  # kwok renews leases and plays stages with 4 workers each by default: at 1000 nodes, 100 lease
  # renewals a second beside a burst of pods fall behind and nodes turn NotReady. One worker per 50 nodes.
  printf 'apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n'
  printf '  nodeLeaseParallelism: %d\n  nodePlayStageParallelism: %d\n  podPlayStageParallelism: %d\n' "$par" "$par" "$par"
  dir=$(cd "$ROOT/testbed" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/kwok) \
    || die "kwok: cannot find the sigs.k8s.io/kwok module (go list -m in testbed/)"
  local f
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [ -f "$dir/kustomize/stage/$f" ] || die "kwok: $dir/kustomize/stage/$f is missing"
    echo "---"; cat "$dir/kustomize/stage/$f"
  done
}

apply() { # FILE: server-side apply as the admin
  "$KUBECTL" --kubeconfig "$ADMIN_KC" apply --server-side --force-conflicts --field-manager=kache-testbed -f "$1" > "$1.out" 2>&1 \
    || { tail -n 20 "$1.out" >&2; die "kubectl apply -f $1 failed (output in $1.out)"; }
}
# apply_parallel FILE K: FILE (documents separated by ---) in K parts applied at once; kubectl applies
# one object after the other, which for 1000 nodes takes minutes.
apply_parallel() {
  local f=$1 k=$2 i pids=()
  rm -f "$f".part*
  awk -v k="$k" -v f="$f" '/^---$/ { n++ } { print > (f ".part" (n % k)) }' "$f"
  for i in "$f".part*; do apply "$i" & pids+=($!); done
  for i in "${pids[@]}"; do wait "$i" || die "kubectl apply -f $f failed"; done
}
kc() { "$KUBECTL" --kubeconfig "$ADMIN_KC" "$@"; }

# === steps ===

load_state() {
  # shellcheck disable=SC1091
  [ -f "$DIR/state" ] && . "$DIR/state"
  return 0
}

save_state() {
  {
    for v in ETCD_PORT ETCD_PEER_PORT API_PORT KCM_PORT SCHED_PORT NODES PODS_PER_NODE CLIENTS_URL CLIENTS_CA BIN; do
      printf '%s=%q\n' "$v" "${!v}"
    done
  } > "$DIR/state"
}

build() {
  command -v go >/dev/null || die "Go is not installed: testbed/build.sh builds the cluster's binaries with it"
  BIN=$("$ROOT/testbed/build.sh" | tail -n 1) || die "testbed/build.sh failed (its output is above)"
  [ -x "$BIN/kube-apiserver" ] || die "testbed/build.sh printed '$BIN', which holds no kube-apiserver"
  KUBECTL=${KUBECTL:-$BIN/kubectl}
}

etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }

start_etcd() {
  alive etcd && return 0
  mkdir -p "$DIR/etcd-data"; chmod 700 "$DIR/etcd-data"
  start etcd "$BIN/etcd" --name testbed --data-dir "$DIR/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "testbed=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
    --quota-backend-bytes 8589934592 --log-level warn
  wait_for etcd 60 "healthy /health" etcd_healthy
}

# The `kubernetes` Service has no endpoints (--endpoint-reconciler-type none): its only address would be
# the loopback one the apiserver listens on, which Endpoints reject (the reconciler would fail every 10 s).
start_apiserver() {
  alive kube-apiserver && return 0
  local P=$DIR/pki
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
    --client-ca-file "$P/ca.crt" --token-auth-file "$P/tokens.csv" \
    --service-account-issuer "$API_URL" --service-account-key-file "$P/sa.pub" \
    --service-account-signing-key-file "$P/sa.key" \
    --requestheader-client-ca-file "$P/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$P/front-proxy-client.crt" --proxy-client-key-file "$P/front-proxy-client.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --endpoint-reconciler-type none \
    --profiling=false
  wait_for kube-apiserver 180 "200 from /readyz" https_ok --cacert "$P/ca.crt" "$API_URL/readyz"
}

# The controller-manager runs every controller that needs neither a cloud provider nor node IPAM (the
# nodes' pod CIDRs are set when they are created), each with its own service account's token.
start_clients() {
  local K=$DIR/kubeconfigs P=$DIR/pki
  if ! alive kube-controller-manager; then
    start kube-controller-manager "$BIN/kube-controller-manager" \
      --kubeconfig "$K/kube-controller-manager.kubeconfig" \
      --authentication-kubeconfig "$K/kube-controller-manager.kubeconfig" \
      --authorization-kubeconfig "$K/kube-controller-manager.kubeconfig" \
      --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --cert-dir "$DIR/kube-controller-manager-serving" \
      --leader-elect=true --use-service-account-credentials=true \
      --service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" \
      --cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" \
      --service-cluster-ip-range "$SERVICE_CIDR" \
      --controllers '*,-node-ipam-controller,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller' \
      --kube-api-qps 100 --kube-api-burst 200 --profiling=false
  fi
  if ! alive kube-scheduler; then
    start kube-scheduler "$BIN/kube-scheduler" \
      --kubeconfig "$K/kube-scheduler.kubeconfig" \
      --authentication-kubeconfig "$K/kube-scheduler.kubeconfig" \
      --authorization-kubeconfig "$K/kube-scheduler.kubeconfig" \
      --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --cert-dir "$DIR/kube-scheduler-serving" \
      --leader-elect=true --profiling=false
  fi
  if ! alive kwok; then
    mkdir -p "$DIR/kwok"
    [ -s "$DIR/kwok/stages.yaml" ] || kwok_config > "$DIR/kwok/stages.yaml"
    # KWOK_WORKDIR keeps kwok from reading ~/.kwok/kwok.yaml. 40 s leases are renewed every 10 s, as
    # kubelets do. No --node-port/--server-address: kwok opens no port. At INFO it logs every lease
    # renewal (N/10 lines a second), hence WARN.
    start kwok env KWOK_WORKDIR="$DIR/kwok" "$BIN/kwok" \
      --kubeconfig "$K/kwok.kubeconfig" --config "$DIR/kwok/stages.yaml" \
      --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
      --node-lease-duration-seconds 40 --cidr 10.127.0.0/16 --v WARN
  fi
  wait_for kube-controller-manager 90 "200 from /healthz" https_ok -k "https://127.0.0.1:$KCM_PORT/healthz"
  wait_for kube-scheduler 90 "200 from /healthz" https_ok -k "https://127.0.0.1:$SCHED_PORT/healthz"
  sleep 1
  alive kwok || fail kwok "exited right after its start"
}

ready_nodes() {
  kc get nodes -l kache-testbed/node -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' \
    | grep -c '^True$' || true
}
nodes_ready() { [ "$(ready_nodes)" -ge "$NODES" ]; }

# Every workload Deployment has as many Running, Ready pods (not being deleted) as it wants. Counted on the
# pods, not from the Deployments' status: at 1000 nodes the controller-manager's ReplicaSet controller can
# leave readyReplicas behind for minutes after the pods are ready (1.36's StaleControllerConsistency-
# ReplicaSet check fails syncs until its pod informer has caught up with its own writes, and each failure
# backs the ReplicaSet off further).
workload_ready() {
  local want have
  want=$(kc get deploy -A -l kache-testbed/workload -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.spec.replicas}{"\n"}{end}') || return 1
  have=$(kc get pods -A -l "app in ($(IFS=,; echo "${DEPLOYMENTS[*]}"))" --chunk-size 1000 \
    -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.labels.app} {.status.phase} {.status.conditions[?(@.type=="Ready")].status} {.metadata.deletionTimestamp}{"\n"}{end}') || return 1
  [ -n "$want" ] && awk 'NR == FNR { want[$1] = $2; next }
    $2 == "Running" && $3 == "True" && $4 == "" { have[$1]++ }
    END { for (d in want) if (have[d] + 0 != want[d] + 0) exit 1 }' <(echo "$want") <(echo "$have")
}

nodes_and_workload() {
  local M=$DIR/manifests
  nodes_manifest > "$M/nodes.yaml"
  echo "cluster.sh: creating $NODES nodes" >&2
  apply_parallel "$M/nodes.yaml" 4
  wait_for kwok $((120 + NODES / 4)) "$NODES Ready nodes" nodes_ready
  if [ ! -f "$M/workload.applied" ]; then
    workload_manifest > "$M/workload.yaml"
    echo "cluster.sh: creating the workload ($((NODES * PODS_PER_NODE)) pods in ${#NAMESPACES[@]} namespaces)" >&2
    apply "$M/workload.yaml"
    touch "$M/workload.applied"
  fi
  POLL=3 wait_for kube-controller-manager $((300 + NODES * PODS_PER_NODE / 5)) "every Deployment's pods Running and Ready" workload_ready
}

pid_or_none() { pid_of "$1" || true; }

write_env() {
  local u U
  {
    printf '# scripts/cluster.sh up %q: a Kubernetes 1.36 cluster on loopback (testbed/README.md)\n' "$DIR"
    printf 'KUBE_APISERVER_URL=%q\n' "$API_URL"
    printf 'KUBE_APISERVER_PID=%q\n' "$(pid_or_none kube-apiserver)"
    printf 'KUBE_CA=%q\n' "$DIR/pki/ca.crt"
    printf 'KUBE_ADMIN_KUBECONFIG=%q\n' "$ADMIN_KC"
    printf 'KUBE_ADMIN_CERT=%q\nKUBE_ADMIN_KEY=%q\n' "$DIR/pki/admin.crt" "$DIR/pki/admin.key"
    printf 'KUBE_USER_TOKENS_FILE=%q\n' "$DIR/pki/tokens.csv"
    # KUBE_<USER>_TOKEN and a kubeconfig with it: KUBE_<USER>_KUBECONFIG (the admin's is KUBE_ADMIN_TOKEN_KUBECONFIG).
    for u in "${USERS[@]}"; do
      U=${u^^}
      printf 'KUBE_%s_TOKEN=%q\n' "$U" "$(token_of "$u")"
      if [ "$u" = admin ]; then U=ADMIN_TOKEN; fi
      printf 'KUBE_%s_KUBECONFIG=%q\n' "$U" "$DIR/kubeconfigs/$u-token.kubeconfig"
    done
    printf 'KUBE_SERVICE_ACCOUNT_KEY=%q\nKUBE_SERVICE_ACCOUNT_PUB=%q\n' "$DIR/pki/sa.key" "$DIR/pki/sa.pub"
    printf 'ETCD_URL=%q\nETCD_PID=%q\n' "http://127.0.0.1:$ETCD_PORT" "$(pid_or_none etcd)"
    printf 'CONTROLLER_MANAGER_PID=%q\nCONTROLLER_MANAGER_URL=%q\n' "$(pid_or_none kube-controller-manager)" "https://127.0.0.1:$KCM_PORT"
    printf 'SCHEDULER_PID=%q\nSCHEDULER_URL=%q\n' "$(pid_or_none kube-scheduler)" "https://127.0.0.1:$SCHED_PORT"
    printf 'KWOK_PID=%q\n' "$(pid_or_none kwok)"
    printf 'KUBE_CLIENTS_URL=%q\n' "$CLIENTS_URL"
    printf 'KUBE_NODES=%q\nKUBE_PODS_PER_NODE=%q\n' "$NODES" "$PODS_PER_NODE"
    printf 'TESTBED_BIN=%q\nKUBECTL=%q\nKUBE_RUN_DIR=%q\n' "$BIN" "$KUBECTL" "$DIR"
  } > "$DIR/env.tmp"
  mv "$DIR/env.tmp" "$DIR/env"
  cat "$DIR/env"
}

# Parses DIR and the options, takes DIR's lock and loads its state.
setup() {
  [ $# -ge 1 ] || usage
  mkdir -p "$1"
  DIR=$(cd "$1" && pwd)
  shift
  NODES_ARG= PPN_ARG= VIA_URL= VIA_CA= NO_CLIENTS=
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) NODES_ARG=${2:?--nodes needs a number}; shift 2 ;;
      --pods-per-node) PPN_ARG=${2:?--pods-per-node needs a number}; shift 2 ;;
      --via-url) VIA_URL=${2:?--via-url needs a URL}; shift 2 ;;
      --via-ca) VIA_CA=${2:?--via-ca needs a file}; shift 2 ;;
      --no-clients) NO_CLIENTS=1; shift ;;
      *) die "unknown option '$1' (see scripts/cluster.sh --help)" ;;
    esac
  done
  [[ -z $NODES_ARG || $NODES_ARG =~ ^[1-9][0-9]*$ ]] || die "--nodes wants a positive number, not '$NODES_ARG'"
  [[ -z $PPN_ARG || $PPN_ARG =~ ^[0-9]+$ ]] || die "--pods-per-node wants a number, not '$PPN_ARG'"
  [ -z "$VIA_CA" ] || [ -f "$VIA_CA" ] || die "--via-ca $VIA_CA: no such file"
  [ -z "$VIA_CA" ] || VIA_CA=$(cd "$(dirname "$VIA_CA")" && pwd)/$(basename "$VIA_CA")
  command -v openssl >/dev/null || die "openssl is not installed"
  command -v python3 >/dev/null || die "python3 is not installed (it picks free ports)"
  exec 9> "$DIR/.lock"
  flock -w 600 9 || die "another cluster.sh holds $DIR/.lock"
  load_state
}

any_alive() { local c; for c in "${COMPONENTS[@]}"; do alive "$c" && return 0; done; return 1; }
all_alive() { local c; for c in "$@"; do alive "$c" || return 1; done; }

cmd_up() {
  setup "$@"
  if [ -f "$DIR/env" ] && [ -n "${API_PORT:-}" ]; then
    local want=("${COMPONENTS[@]}")
    [ -n "$NO_CLIENTS" ] && want=(etcd kube-apiserver)
    if all_alive "${want[@]}"; then
      [ -z "$NODES_ARG" ] || [ "$NODES_ARG" = "$NODES" ] \
        || echo "cluster.sh: $DIR is live with $NODES nodes; reusing it as it is (down, then up to resize)" >&2
      cat "$DIR/env"; return 0
    fi
  fi
  trap on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  NODES=${NODES_ARG:-${NODES:-100}}
  PODS_PER_NODE=${PPN_ARG:-${PODS_PER_NODE:-5}}
  build
  make_pki
  mkdir -p "$DIR/kubeconfigs" "$DIR/manifests"
  if ! any_alive || [ -z "${API_PORT:-}" ]; then
    read -r ETCD_PORT ETCD_PEER_PORT API_PORT KCM_PORT SCHED_PORT <<< "$(free_ports 5)"
  fi
  API_URL=https://127.0.0.1:$API_PORT
  ADMIN_KC=$DIR/kubeconfigs/admin.kubeconfig
  if [ -n "$VIA_URL" ]; then CLIENTS_URL=$VIA_URL; CLIENTS_CA=${VIA_CA:-$DIR/pki/ca.crt}
  elif [ -z "${CLIENTS_URL:-}" ] || ! any_alive; then CLIENTS_URL=$API_URL; CLIENTS_CA=$DIR/pki/ca.crt
  fi
  save_state
  user_kubeconfigs
  client_kubeconfigs
  start_etcd
  start_apiserver
  rbac_manifest > "$DIR/manifests/rbac.yaml"
  apply "$DIR/manifests/rbac.yaml"
  if [ -z "$NO_CLIENTS" ]; then
    start_clients
    nodes_and_workload
  fi
  trap - EXIT
  write_env
}

cmd_clients() {
  setup "$@"
  [ -n "${API_PORT:-}" ] && all_alive etcd kube-apiserver || die "$DIR has no running apiserver: run 'scripts/cluster.sh up $DIR' first"
  API_URL=https://127.0.0.1:$API_PORT
  ADMIN_KC=$DIR/kubeconfigs/admin.kubeconfig
  build
  [ -n "$NODES_ARG" ] && NODES=$NODES_ARG
  [ -n "$PPN_ARG" ] && PODS_PER_NODE=$PPN_ARG
  CLIENTS_URL=${VIA_URL:-$API_URL}
  CLIENTS_CA=${VIA_CA:-$DIR/pki/ca.crt}
  local c
  for ((c = ${#CLIENTS[@]} - 1; c >= 0; c--)); do stop "${CLIENTS[c]}"; done
  trap on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  save_state
  client_kubeconfigs
  start_clients
  nodes_and_workload
  trap - EXIT
  write_env
}

cmd_down() {
  [ $# -eq 1 ] || usage
  [ -d "$1" ] || die "$1: no such directory"
  DIR=$(cd "$1" && pwd)
  exec 9> "$DIR/.lock"
  flock -w 600 9 || die "another cluster.sh holds $DIR/.lock"
  local i
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do stop "${COMPONENTS[i]}"; done
  rm -f "$DIR/env"
  echo "cluster.sh: stopped everything started in $DIR (its data stays; rm -rf it to start afresh)" >&2
}

cmd_stop() {
  [ $# -eq 2 ] || usage
  [ -d "$1" ] || die "$1: no such directory"
  DIR=$(cd "$1" && pwd)
  [[ " ${COMPONENTS[*]} " == *" $2 "* ]] || die "$2: not one of ${COMPONENTS[*]}"
  exec 9> "$DIR/.lock"
  flock -w 600 9 || die "another cluster.sh holds $DIR/.lock"
  stop "$2"
}

# CPU from /proc/PID/stat (utime + stime) over S seconds, as a share of one core; RSS from /proc/PID/status.
cmd_stats() {
  [ -d "${1:-}" ] || usage
  DIR=$(cd "$1" && pwd)
  local secs=${2:-20} c pid hz
  hz=$(getconf CLK_TCK)
  declare -A t0=()
  cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
  for c in "${COMPONENTS[@]}"; do pid=$(pid_of "$c") && t0[$c]=$(cpu_ticks "$pid"); done
  sleep "$secs"
  printf '%-24s %8s %10s %10s\n' component pid "cpu %" "rss MiB"
  for c in "${COMPONENTS[@]}"; do
    pid=$(pid_of "$c") && [ -n "${t0[$c]:-}" ] || continue
    awk -v c="$c" -v p="$pid" -v d="$(( $(cpu_ticks "$pid") - t0[$c] ))" -v hz="$hz" -v s="$secs" \
      '/^VmRSS:/ { printf "%-24s %8s %10.1f %10.0f\n", c, p, 100 * d / hz / s, $2 / 1024 }' "/proc/$pid/status"
  done
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  clients) shift; cmd_clients "$@" ;;
  down) shift; cmd_down "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  stats) shift; cmd_stats "$@" ;;
  env) [ -f "${2:?usage: cluster.sh env DIR}/env" ] || die "$2/env: no cluster running there"; cat "$2/env" ;;
  -h|--help|help) usage 0 ;;
  *) usage ;;
esac
