#!/usr/bin/env bash
# Installs what the ops tests (tests/it/ops.rs) need beyond cargo, idempotently:
# - Debian's `prometheus` package (prometheus + promtool): the scrape test and the exposition lint;
# - kubernetes-validate from PyPI, in a venv under the cargo target dir: offline manifest validation;
# - kubectl (Debian's kubernetes-client) for tests/it/kubectl.rs;
# - the Python `kubernetes` client (tests/python/requirements.txt) in target/py-venv for tests/it/python.rs.
# - bash, curl and python3 for the testbed's scripts, and the testbed's binaries built from Go modules
#   (testbed/build.sh: the real apiservers, etcd, informer-check, kube-proto), linked at $target/testbed-bin.
# Each step that cannot run (no apt, no network, no python venv) says why; the tests that need it then
# print SKIPPED with the reason, or fail under KACHE_REQUIRE_TOOLS=1 (CI), and so does this script.
# Nothing else on the machine is changed.
set -uo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
venv="$target/ops-venv"
status=0

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    echo "install-test-deps: prometheus present ($(prometheus --version 2>&1 | head -n1))"
elif command -v apt-get >/dev/null; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
    if $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq prometheus >/dev/null; then
        echo "install-test-deps: installed prometheus"
    else
        echo "install-test-deps: apt-get could not install prometheus; the Prometheus tests will be skipped" >&2
        status=1
    fi
else
    echo "install-test-deps: no apt-get; the Prometheus tests will be skipped" >&2
    status=1
fi

if [ -x "$venv/bin/kubernetes-validate" ]; then
    echo "install-test-deps: kubernetes-validate present in $venv"
elif command -v python3 >/dev/null; then
    mkdir -p "$target"
    if python3 -m venv "$venv" && "$venv/bin/pip" install -q kubernetes-validate; then
        echo "install-test-deps: installed kubernetes-validate in $venv"
    else
        echo "install-test-deps: could not install kubernetes-validate; schema validation will be skipped" >&2
        rm -rf "$venv"
        status=1
    fi
else
    echo "install-test-deps: no python3; schema validation will be skipped" >&2
    status=1
fi

# kubectl (tests/it/kubectl.rs): Debian's kubernetes-client where kubectl is missing.
if command -v kubectl >/dev/null; then
    echo "install-test-deps: kubectl present ($(kubectl version --client 2>/dev/null | head -n1))"
elif command -v apt-get >/dev/null; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
    if $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq kubernetes-client >/dev/null; then
        echo "install-test-deps: installed kubectl (kubernetes-client)"
    else
        echo "install-test-deps: apt-get could not install kubernetes-client; the kubectl tests will be skipped" >&2
        status=1
    fi
else
    echo "install-test-deps: no apt-get; the kubectl tests will be skipped" >&2
    status=1
fi

# The Python Kubernetes client (tests/it/python.rs), in a venv under the cargo target dir.
py_venv="$target/py-venv"
if [ -x "$py_venv/bin/python" ] && "$py_venv/bin/python" -c "import kubernetes" 2>/dev/null; then
    echo "install-test-deps: python kubernetes client present in $py_venv"
elif command -v python3 >/dev/null; then
    mkdir -p "$target"
    # Debian's python3 lacks ensurepip until python3-venv is installed.
    if ! python3 -m venv "$py_venv" && command -v apt-get >/dev/null; then
        rm -rf "$py_venv"
        sudo=""
        [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
        $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
    fi
    if python3 -m venv "$py_venv" && "$py_venv/bin/pip" install -q -r tests/python/requirements.txt; then
        echo "install-test-deps: installed the python kubernetes client in $py_venv"
    else
        echo "install-test-deps: could not install the python kubernetes client; tests/it/python.rs will skip" >&2
        rm -rf "$py_venv"
        status=1
    fi
else
    echo "install-test-deps: no python3; tests/it/python.rs will skip" >&2
    status=1
fi

# What testbed/apiserver's scripts run (tests/it/real_apiserver.rs): bash, curl, python3.
missing_debs=""
for tool in bash:bash curl:curl python3:python3; do
    command -v "${tool%%:*}" >/dev/null || missing_debs="$missing_debs ${tool#*:}"
done
if [ -z "$missing_debs" ]; then
    echo "install-test-deps: bash, curl, python3 present (testbed scripts)"
elif command -v apt-get >/dev/null; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
    # shellcheck disable=SC2086 # a list of package names
    if $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing_debs >/dev/null; then
        echo "install-test-deps: installed$missing_debs (testbed scripts)"
    else
        echo "install-test-deps: apt-get could not install$missing_debs; tests/it/real_apiserver.rs will skip" >&2
        status=1
    fi
else
    echo "install-test-deps: missing$missing_debs and no apt-get; tests/it/real_apiserver.rs will skip" >&2
    status=1
fi

# The testbed's binaries (testbed/build.sh: Go modules, cached outside the repository by go.sum's hash;
# a first build takes tens of minutes on two cores, a cached one a second).
if command -v go >/dev/null; then
    if bin=$(testbed/build.sh | tail -n 1) && [ -d "$bin" ]; then
        ln -sfn "$bin" "$target/testbed-bin"
        echo "install-test-deps: testbed binaries in $bin (linked at $target/testbed-bin)"
    else
        echo "install-test-deps: testbed/build.sh failed; the tests against the real apiservers will skip" >&2
        status=1
    fi
else
    echo "install-test-deps: no Go toolchain; the testbed cannot be built and the tests against the real apiservers will skip" >&2
    status=1
fi

# A missing tool only skips its tests; report, and fail the caller only when tools are required (CI).
if [ "$status" -ne 0 ]; then
    echo "install-test-deps: finished with missing tools (see above)" >&2
    case "${KACHE_REQUIRE_TOOLS:-}" in
        "" | 0 | false | FALSE | False) ;;
        *) echo "install-test-deps: KACHE_REQUIRE_TOOLS is set: failing" >&2; exit 1 ;;
    esac
fi
exit 0
