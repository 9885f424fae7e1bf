#!/usr/bin/env bash
# Refreshes the OpenAPI v3 documents the sim serves from a Kubernetes release's published specs.
#
# k8s.io/kubernetes carries, in api/openapi-spec/v3/, the documents a kube-apiserver of that release serves
# at /openapi/v3/<group-version> (hack/update-openapi-spec.sh captures them from a running apiserver). This
# copies the group-versions the sim serves, compact and gzipped (-n: no name or time, so the bytes depend
# on the content only).
#
# Usage: sim/openapi/update.sh [VERSION]    (default v1.36.3; needs go, python3, gzip)
set -euo pipefail
version="${1:-v1.36.3}"
here="$(cd "$(dirname "$0")" && pwd)"
dir="$(go mod download -json "k8s.io/kubernetes@${version}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
for gv in api__v1 apis__apps__v1 apis__coordination.k8s.io__v1; do
  python3 -c 'import json,sys; sys.stdout.write(json.dumps(json.load(open(sys.argv[1])), separators=(",", ":")))' \
    "${dir}/api/openapi-spec/v3/${gv}_openapi.json" | gzip -9n > "${here}/${gv}.json.gz"
done
echo "${version}" > "${here}/VERSION"
