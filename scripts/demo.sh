#!/usr/bin/env bash
# Sets up a fresh machine, builds the release binaries and runs the main job:
# the `ring` miniapp on all cores of this machine, the same ring across a 2-node cluster,
# then the jacobi2d stencil on 4 nodes started by `lazarus run` (QUIC between real
# processes), whose checksum matches a single-node run bit for bit. It becomes the
# resilience demo (a node SIGKILLed mid-run, recovered) when rollback recovery lands.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo build --release --quiet -p lazarus -p lazarus-apps

echo "== ring on all cores of one node"
target/release/ring "$@"
echo
echo "== ring across 2 nodes: lazarus run -n 2 -- ring --hops 20000"
target/release/lazarus run -n 2 -- target/release/ring --hops 20000
echo
echo "== jacobi2d on 1 node, then on 4 nodes: the checksums match"
target/release/jacobi2d --n 1024 --iters 200 | tail -1
exec target/release/lazarus run -n 4 -- target/release/jacobi2d --n 1024 --iters 200
