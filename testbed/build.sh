#!/usr/bin/env bash
# Builds the testbed's binaries from Go modules (go.mod pins k8s.io/kubernetes v1.36.3 and every k8s.io
# staging module at v0.36.3) into a cache outside the repository, keyed by the hash of go.mod, go.sum and
# this module's own Go files: a second call with nothing changed only prints the directory.
#
#   testbed/build.sh            build what is missing; prints the binaries' directory on the last line
#
# KACHE_TESTBED_CACHE moves the cache (default ~/.cache/kache-testbed). The first build on two cores takes
# tens of minutes (README); later ones reuse Go's own build cache.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || { echo "testbed/build.sh: Go is not installed (go.mod names the version it needs)" >&2; exit 1; }
CACHE=${KACHE_TESTBED_CACHE:-${HOME:-/tmp}/.cache/kache-testbed}
KEY=$(cd "$HERE" && cat go.mod go.sum build.sh $(find cmd -name '*.go' | sort) | sha256sum | cut -c1-16)
OUT=$CACHE/$KEY
BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kwok etcd sample-apiserver crd-apiserver informer-check kube-proto)
missing=()
for b in "${BINS[@]}"; do [ -x "$OUT/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then echo "$OUT"; exit 0; fi
mkdir -p "$OUT"
V=v1.36.3
LDFLAGS="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS+=" -X $p.gitVersion=$V -X $p.gitMajor=1 -X $p.gitMinor=36 -X $p.gitTreeState=clean"
done
pkg() {
  case $1 in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) echo "k8s.io/kubernetes/cmd/$1" ;;
    kwok) echo sigs.k8s.io/kwok/cmd/kwok ;;
    sample-apiserver) echo k8s.io/sample-apiserver ;;
    *) echo "./cmd/$1" ;;
  esac
}
cd "$HERE"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
for b in "${missing[@]}"; do
  start=$(date +%s)
  echo "testbed: building $b ($(pkg "$b"))" >&2
  go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/$b.tmp" "$(pkg "$b")"
  mv "$OUT/$b.tmp" "$OUT/$b"
  echo "testbed: $b built in $(( $(date +%s) - start )) s" >&2
done
echo "$OUT"
