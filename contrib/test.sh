#!/usr/bin/env bash
# Run every test: unit and in-memory tests of each crate, then the live-cluster scenarios
# (tests/live), which start a throwaway Slurm cluster and fail (never skip) if it cannot start.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

contrib/install-deps.sh

# The live tests load a plugin built with the test-only panic trigger; the production build
# (which must not contain it) is built afterwards and checked by the tests too.
cargo build --release --locked -p job-submit-teamshare --features test-panic
mkdir -p target/live-plugin
cp target/release/libjob_submit_teamshare.so target/live-plugin/libjob_submit_teamshare.so
cargo build --release --locked --workspace

export TEAMSHARE_PLUGIN="$PWD/target/live-plugin/libjob_submit_teamshare.so"
cargo test --release --locked --workspace -- "$@"
