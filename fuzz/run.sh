#!/usr/bin/env bash
# Runs every fuzz target for N seconds each (default 30). Installs cargo-fuzz when missing.
# cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP=1 enables them on the stable toolchain.
set -euo pipefail
secs="${1:-30}"
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
for t in label_selector field_selector continue_token list_options accept_header proto_transcode; do
    mkdir -p "corpus/$t"
    echo "== fuzzing $t for ${secs}s"
    # New inputs go to a scratch dir; corpus/<t> holds the committed seeds (read as well).
    mkdir -p "target/scratch/$t"
    cargo fuzz run "$t" "target/scratch/$t" "corpus/$t" -- -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048
done
