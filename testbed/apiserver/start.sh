#!/usr/bin/env bash
# Start a real Kubernetes 1.36 generic apiserver (k8s.io/sample-apiserver: the real registry,
# watch cache and etcd3 storage) on etcd 3.6.8, on free loopback ports.
#
#   start.sh RUN_DIR        start (or reuse) the servers whose state lives in RUN_DIR
#
# Prints and writes RUN_DIR/env (shell syntax):
#   APISERVER_URL=https://127.0.0.1:PORT   the apiserver (self-signed TLS, anonymous may do anything)
#   APISERVER_KUBECONFIG=RUN_DIR/kubeconfig a kubeconfig for it (insecure-skip-tls-verify, any token)
#   ETCD_URL=http://127.0.0.1:PORT         etcd's client URL (its HTTP/JSON gateway works: /v3/kv/...)
#   INFORMER_CHECK=PATH                    the client-go informer checker (see README.md)
#   KUBE_PROTO=PATH                        JSON <-> protobuf with the real Kubernetes types (kube-proto/README.md)
# Binaries: testbed/build.sh (TESTBED_BIN names a directory of them).
# Stop with stop.sh RUN_DIR. Needs: bash, curl, python3 (and Go for a first build).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RUN=${1:?usage: start.sh RUN_DIR}
mkdir -p "$RUN/certs"
RUN=$(cd "$RUN" && pwd)
# The binaries testbed/build.sh built from Go modules (TESTBED_BIN names their directory; otherwise
# build.sh is asked, which builds what is missing and prints the directory).
BIN=${TESTBED_BIN:-$("$HERE/../build.sh" | tail -n 1)}
for b in sample-apiserver etcd informer-check kube-proto crd-apiserver; do
  [ -x "$BIN/$b" ] || { echo "$BIN/$b is missing: run testbed/build.sh" >&2; exit 1; }
done
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
if alive "$RUN/apiserver.pid" && [ -f "$RUN/env" ]; then cat "$RUN/env"; exit 0; fi

ETCD_PORT=$(free_port); PEER_PORT=$(free_port); API_PORT=$(free_port); AUTHZ_PORT=$(free_port)
if ! alive "$RUN/etcd.pid"; then
  rm -rf "$RUN/etcd-data"
  nohup "$BIN/etcd" --name kache-test --data-dir "$RUN/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
    --initial-cluster "kache-test=http://127.0.0.1:$PEER_PORT" --initial-cluster-state new \
    --quota-backend-bytes 4294967296 --log-level warn > "$RUN/etcd.log" 2>&1 < /dev/null &
  echo $! > "$RUN/etcd.pid"; echo "$ETCD_PORT" > "$RUN/etcd.port"
fi
ETCD_PORT=$(cat "$RUN/etcd.port")
for i in $(seq 1 150); do
  curl -fsS "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"' && break
  alive "$RUN/etcd.pid" || { echo "etcd died:"; tail -20 "$RUN/etcd.log"; exit 1; }
  sleep 0.2
done
# The sample apiserver delegates authentication and authorization to a kube-apiserver; fake_authz.py
# stands in for those two endpoints and allows everything.
nohup python3 "$HERE/fake_authz.py" "$AUTHZ_PORT" > "$RUN/fake_authz.log" 2>&1 < /dev/null &
echo $! > "$RUN/fake_authz.pid"
cat > "$RUN/authz.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: authz, cluster: {server: "http://127.0.0.1:$AUTHZ_PORT"}}]
users: [{name: none, user: {}}]
contexts: [{name: authz, context: {cluster: authz, user: none}}]
current-context: authz
KC
cat > "$RUN/none.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: none, user: {}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
KC
nohup "$BIN/sample-apiserver" \
  --bind-address 127.0.0.1 --secure-port "$API_PORT" --cert-dir "$RUN/certs" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --kubeconfig "$RUN/none.kubeconfig" \
  --authentication-kubeconfig "$RUN/authz.kubeconfig" --authentication-skip-lookup \
  --authorization-kubeconfig "$RUN/authz.kubeconfig" --authorization-always-allow-paths '/*' \
  --disable-admission-plugins NamespaceLifecycle,MutatingAdmissionPolicy,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook,BanFlunder \
  --enable-priority-and-fairness=false ${EXTRA_APISERVER_FLAGS:-} \
  > "$RUN/apiserver.log" 2>&1 < /dev/null &
echo $! > "$RUN/apiserver.pid"
for i in $(seq 1 300); do
  [ "$(curl -ks -o /dev/null -w '%{http_code}' "https://127.0.0.1:$API_PORT/readyz")" = 200 ] && break
  alive "$RUN/apiserver.pid" || { echo "apiserver died:"; tail -30 "$RUN/apiserver.log"; exit 1; }
  sleep 0.3
done
[ "$(curl -ks -o /dev/null -w '%{http_code}' "https://127.0.0.1:$API_PORT/readyz")" = 200 ] || { echo "apiserver not ready; see $RUN/apiserver.log"; exit 1; }
cat > "$RUN/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: apiserver, cluster: {server: "https://127.0.0.1:$API_PORT", insecure-skip-tls-verify: true}}]
users: [{name: any, user: {token: any-token}}]
contexts: [{name: apiserver, context: {cluster: apiserver, user: any}}]
current-context: apiserver
KC
cat > "$RUN/env" <<ENV
APISERVER_URL=https://127.0.0.1:$API_PORT
APISERVER_KUBECONFIG=$RUN/kubeconfig
ETCD_URL=http://127.0.0.1:$ETCD_PORT
INFORMER_CHECK=$BIN/informer-check
KUBE_PROTO=$BIN/kube-proto
ENV
cat "$RUN/env"
