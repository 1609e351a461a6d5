#!/usr/bin/env bash
# Sets up a fresh machine, builds the release binaries and runs the main job, the
# resilience demo (`lazarus demo`): jacobi2d on 4 nodes without failures for the reference
# answer, then again with recovery on while one node is SIGKILLed mid-run; the timeline of
# checkpoints, kill, restart, restore, replay and resume is printed as it happens, and the
# two answers are compared. Extra arguments go to `lazarus demo` (see `lazarus demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo build --release --quiet -p lazarus-cli -p lazarus-apps

exec target/release/lazarus demo "$@"
