#!/usr/bin/env bash
# The project's test command (README): installs what the tests need (kubectl, Prometheus, a Python venv
# with the Kubernetes client; see scripts/install-test-deps.sh), then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")"
# Missing optional tools make the tests that need them say why they skip; they never fail the run here.
scripts/install-test-deps.sh || echo "test.sh: some test dependencies could not be installed (see above)"
cargo test --workspace --all-targets
