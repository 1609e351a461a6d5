#!/usr/bin/env bash
# Sets up a fresh machine, builds the release binaries and runs the main job.
# For now that is the `ring` miniapp on all cores of this machine; it becomes the
# resilience demo (a cluster with a node SIGKILLed mid-run) when recovery lands.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo build --release --quiet -p lazarus-apps
exec target/release/ring "$@"
