#!/usr/bin/env bash
# The project's test command (README): installs what the tests need (kubectl, Prometheus, a Python venv
# with the Kubernetes client; see scripts/install-test-deps.sh), then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")"
# Missing tools make the tests that need them say why they skip, unless KACHE_REQUIRE_TOOLS=1 (CI): then
# the script and those tests fail (tests/common/tools.rs). No test installs anything: this script does, first.
# kache's integration tests are one binary (tests/it/main.rs lists its modules and the tools each needs);
# one area: `cargo test -p kache --test it watch::`.
scripts/install-test-deps.sh
cargo test --workspace --all-targets
