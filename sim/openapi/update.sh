#!/usr/bin/env bash
# Captures the OpenAPI v3 documents the sim serves from a real kube-apiserver: the testbed's (testbed/,
# started by scripts/cluster.sh with its default feature gates), one document per group-version the sim
# serves, as served (compact JSON), gzipped (-n: no name or time, so the bytes depend on the content only).
#
# Usage: sim/openapi/update.sh [RUN_DIR]   (default target/openapi-capture; a live RUN_DIR is reused and
# left running, one this script started is stopped again)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
run="${1:-${root}/target/openapi-capture}"
started=0
if ! "${root}/scripts/cluster.sh" env "${run}" >/dev/null 2>&1; then started=1; fi
"${root}/scripts/cluster.sh" up "${run}" --no-clients >/dev/null
# shellcheck disable=SC1091
source "${run}/env"
get() { "${KUBECTL}" --kubeconfig "${KUBE_ADMIN_KUBECONFIG}" get --raw "$1"; }
for gv in api/v1 apis/apps/v1 apis/coordination.k8s.io/v1; do
  get "/openapi/v3/${gv}" | gzip -9n > "${here}/$(echo "${gv}" | sed 's#/#__#g').json.gz"
done
get /version | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])' > "${here}/VERSION"
if [ "${started}" = 1 ]; then "${root}/scripts/cluster.sh" down "${run}" >/dev/null; fi
