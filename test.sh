#!/usr/bin/env bash
# The project's test command (README): installs what the tests need, then runs every test.
set -euo pipefail
cd "$(dirname "$0")"
cargo test --workspace --all-targets
