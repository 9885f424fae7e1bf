#!/usr/bin/env bash
# The project's test command (README): installs what the tests need (kubectl, Prometheus, a Python venv
# with the Kubernetes client, the testbed's Go binaries; see scripts/install-test-deps.sh), then runs every
# test of the workspace, all of them even when one fails, and ends with a summary: passed, failed and
# ignored per suite, and every test that skipped for a missing tool, with the reason.
#
# Missing tools make the tests that need them skip (listed at the end), unless KACHE_REQUIRE_TOOLS=1 (CI):
# then the script and those tests fail (tests/common/tools.rs). No test installs anything: this script
# does, first. kache's integration tests are one binary (tests/it/main.rs lists its modules and the tools
# each needs); one area: `cargo test -p kache --test it watch::`. Extra arguments go to `cargo test`.
set -uo pipefail
cd "$(dirname "$0")"
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target"
deps_status=0
scripts/install-test-deps.sh || deps_status=$?

log="$target/test-output.log"
export KACHE_SKIP_LOG="$PWD/$target/test-skips.log"
: > "$KACHE_SKIP_LOG"
# The semantics crate on its own first: nothing in its graph turns on serde_json's `preserve_order` (the sim,
# a dev-dependency of kache, does in the workspace run), so its tests see the serde_json kache ships, and
# KACHE_SHIPPED_FEATURES=1 makes one of them prove it.
KACHE_SHIPPED_FEATURES=1 cargo test -p kache-k8s --no-fail-fast 2>&1 | tee "$log"
shipped_status=${PIPESTATUS[0]}
cargo test --workspace --all-targets --no-fail-fast "$@" 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && status=$shipped_status

python3 scripts/test-summary.py "$log" "$KACHE_SKIP_LOG" || status=1
if [ "$deps_status" -ne 0 ]; then
    echo "test.sh: some test dependencies could not be installed (see the first lines above)" >&2
    [ "$status" -eq 0 ] && status=$deps_status
fi
exit "$status"
