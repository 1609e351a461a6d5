#!/usr/bin/env bash
# Runs the measurement suite on this machine and writes the results report into
# docs/results/: README.md (tables, with machine, commit and repetitions) and SVG plots.
#
#   scripts/report.sh           full report: 5 repetitions, NPB class W (about 15 min on
#                               a 2-core machine, plus the first build)
#   scripts/report.sh --quick   smoke test: 1 repetition, class S, short criterion runs
#                               (a few minutes); its numbers are not meant to be read
#
# Other arguments go to the generator (see `--help`: --reps N, --only SECTION, --out DIR).
# Run it on an otherwise idle machine: every number is measured by this invocation.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "report: building the release binaries and the benchmarks" >&2
# The same build as scripts/demo.sh and the recovery bench: the binaries measured.
cargo build --release --quiet -p lazarus-cli -p lazarus-apps --bins
cargo build --release --quiet -p lazarus-benches --bin lazarus-report
# Compile the criterion benchmarks last, so that the generator's `cargo bench` finds them
# up to date and only runs them.
cargo bench --quiet -p lazarus-benches --no-run \
    --bench local_messaging --bench checkpoint_coordination --bench internode
# The generator finds the release binaries in the target directory the same way:
# CARGO_TARGET_DIR, else what cargo reports.
target_dir="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}"
exec "$target_dir/release/lazarus-report" "$@"
