#!/usr/bin/env bash
# Start the real Kubernetes CustomResourceDefinition apiserver (k8s.io/apiextensions-apiserver v0.36.3,
# standalone, with root discovery served; see crd-apiserver/main.go) on etcd 3.6.8, on free loopback ports.
#
#   start-crd.sh RUN_DIR     start (or reuse) the servers whose state lives in RUN_DIR
#
# Prints and writes RUN_DIR/env (shell syntax):
#   CRD_APISERVER_URL=https://127.0.0.1:PORT      (self-signed TLS; anonymous may do anything)
#   CRD_APISERVER_KUBECONFIG=RUN_DIR/kubeconfig   (insecure-skip-tls-verify, any token)
#   ETCD_URL=http://127.0.0.1:PORT
# Extra apiserver flags: EXTRA_APISERVER_FLAGS (e.g. --feature-gates=CBORServingAndStorage=true).
# Stop with stop.sh RUN_DIR. Needs: bash, curl, python3 (and Go for a first build).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RUN=${1:?usage: start-crd.sh RUN_DIR}
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

if ! alive "$RUN/etcd.pid"; then
  ETCD_PORT=$(free_port); PEER_PORT=$(free_port)
  rm -rf "$RUN/etcd-data"
  nohup "$BIN/etcd" --name kache-crd --data-dir "$RUN/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
    --initial-cluster "kache-crd=http://127.0.0.1:$PEER_PORT" --initial-cluster-state new \
    --quota-backend-bytes 4294967296 --log-level warn > "$RUN/etcd.log" 2>&1 < /dev/null &
  echo $! > "$RUN/etcd.pid"; echo "$ETCD_PORT" > "$RUN/etcd.port"
fi
ETCD_PORT=$(cat "$RUN/etcd.port")
for i in $(seq 1 150); do
  curl -fsS "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"' && break
  alive "$RUN/etcd.pid" || { echo "etcd died:"; tail -20 "$RUN/etcd.log"; exit 1; }
  sleep 0.2
done
# fake_kube.py stands in for the kube-apiserver endpoints this server calls: delegated authn/authz
# (allows everything) and an always-empty core/v1 Services list/watch for its webhook-service informer.
if ! alive "$RUN/fake_kube.pid"; then
  KPORT=$(free_port)
  nohup python3 "$HERE/fake_kube.py" "$KPORT" > "$RUN/fake_kube.log" 2>&1 < /dev/null &
  echo $! > "$RUN/fake_kube.pid"; echo "$KPORT" > "$RUN/fake_kube.port"
fi
KPORT=$(cat "$RUN/fake_kube.port")
cat > "$RUN/kube.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: kube, cluster: {server: "http://127.0.0.1:$KPORT"}}]
users: [{name: none, user: {}}]
contexts: [{name: kube, context: {cluster: kube, user: none}}]
current-context: kube
KC
API_PORT=$(free_port)
nohup "$BIN/crd-apiserver" \
  --bind-address 127.0.0.1 --secure-port "$API_PORT" --cert-dir "$RUN/certs" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --kubeconfig "$RUN/kube.kubeconfig" \
  --authentication-kubeconfig "$RUN/kube.kubeconfig" --authentication-skip-lookup \
  --authorization-kubeconfig "$RUN/kube.kubeconfig" --authorization-always-allow-paths '/*' \
  --disable-admission-plugins NamespaceLifecycle,MutatingAdmissionPolicy,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook \
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
clusters: [{name: crd-apiserver, cluster: {server: "https://127.0.0.1:$API_PORT", insecure-skip-tls-verify: true}}]
users: [{name: any, user: {token: any-token}}]
contexts: [{name: crd-apiserver, context: {cluster: crd-apiserver, user: any}}]
current-context: crd-apiserver
KC
cat > "$RUN/env" <<ENV
CRD_APISERVER_URL=https://127.0.0.1:$API_PORT
CRD_APISERVER_KUBECONFIG=$RUN/kubeconfig
ETCD_URL=http://127.0.0.1:$ETCD_PORT
ENV
cat "$RUN/env"
