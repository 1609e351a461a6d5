#!/usr/bin/env bash
# Sets up a fresh machine and runs every check and test of the workspace:
# formatting, clippy (all targets, warnings are errors), unit, integration, macro UI,
# doc, miniapp, cluster (lazarus run, SIGKILL detection, authentication), Slurm (srun)
# and multi-host (network namespaces) tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's heading says how long the run has taken so far: the suite has a time budget.
step() { echo "== $* (at $((SECONDS / 60))m$((SECONDS % 60))s)"; }

step "set-up"

# With headless Chromium and chromedriver for the dashboard's browser test, and what the
# `rdma` feature builds with.
scripts/setup.sh --browser --rdma
# A real single-host Slurm for the srun integration tests.
scripts/slurm-setup.sh
export LAZARUS_TEST_SLURM=1
# Emulated hosts (network namespaces) for the multi-host tests.
scripts/netns-setup.sh
export LAZARUS_TEST_NETNS=1
# The Slurm and multi-host tests fail instead of skipping if their set-up is missing.
export LAZARUS_TEST_REQUIRE_ALL=1

# A clean build gains nothing from incremental caches, which double target/'s size.
export CARGO_INCREMENTAL=0

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (workspace, all targets)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "the runtime as users build it, without the rdma feature: clippy"
# The tests build it with the feature (tests/Cargo.toml), whose device-free parts
# `cargo test` runs: the exchange format and its checks, the ring accounting, the
# registry, work requests and queue-pair attributes, and the fall-back of a node without
# a device to shared memory and QUIC.
cargo clippy -p lazarus --lib --quiet -- -D warnings

step "the sans-IO core depends on no I/O crate"
# Its clippy.toml refuses clocks, locks, threads, sockets and files in its own code;
# this keeps them out of its dependencies.
io_deps=$(cargo tree -p lazarus-proto -e normal --prefix none --quiet \
    | grep -E '^(tokio|quinn|quinn-proto|rustls|rcgen|ring|hwloc2|socket2|libc|metrics|tracing|crossbeam[a-z-]*|dashmap|rdma-sys) ' || true)
if [ -n "$io_deps" ]; then
    echo "lazarus-proto must not depend on: $io_deps" >&2
    exit 1
fi

step "cargo doc (broken or private intra-doc links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

step "cargo test"
cargo test --quiet
step "done"
