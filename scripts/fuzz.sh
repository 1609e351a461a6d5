#!/usr/bin/env bash
# Runs the frame-decoder fuzz target (runtime/fuzz) with cargo-fuzz / libFuzzer for a
# bounded time.
#
#   scripts/fuzz.sh [SECONDS] [extra libFuzzer flags...]     (default: 60 seconds)
#
# Environment: FUZZ_TARGET (default frame_decoder), FUZZ_SANITIZER (cargo fuzz -s:
# address (default), none, ...; `none` runs several times faster).
#
# Works on a stable toolchain: cargo-fuzz passes -Z flags, which stable rustc accepts with
# RUSTC_BOOTSTRAP=1. Installs cargo-fuzz if it is missing. Exits non-zero if the fuzzer
# finds a crash (panic, timeout, OOM, leak), printing the path and hex of the input.
set -euo pipefail

DURATION="${1:-60}"
shift || true
if ! [[ "$DURATION" =~ ^[0-9]+$ ]] || [ "$DURATION" -eq 0 ]; then
    echo "usage: $0 [SECONDS] [libFuzzer flags...]" >&2
    exit 2
fi
TARGET="${FUZZ_TARGET:-frame_decoder}"
SANITIZER="${FUZZ_SANITIZER:-address}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ_DIR="$ROOT/runtime/fuzz"
CORPUS="$FUZZ_DIR/corpus/$TARGET"
ARTIFACTS="$FUZZ_DIR/artifacts/$TARGET"
LOG="$FUZZ_DIR/artifacts/fuzz-$TARGET.log"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz (cargo install cargo-fuzz --locked)"
    cargo install cargo-fuzz --locked
fi

# cargo-fuzz needs nightly-only flags (-Zsanitizer, -Cpasses=sancov-module, ...).
if ! rustc --version | grep -q nightly; then
    export RUSTC_BOOTSTRAP=1
fi

mkdir -p "$CORPUS" "$ARTIFACTS"
if [ "$TARGET" = frame_decoder ] && [ -z "$(ls -A "$CORPUS")" ]; then
    echo "== corpus empty: generating seeds"
    (cd "$FUZZ_DIR" && cargo run --quiet --example gen_seeds -- "$CORPUS")
fi

# Artifacts already present before this run are not counted as new findings.
before="$(ls -1 "$ARTIFACTS")"

echo "== fuzzing $TARGET for ${DURATION}s (sanitizer: $SANITIZER); log: $LOG"
cd "$FUZZ_DIR"
set +e
cargo fuzz run -s "$SANITIZER" "$TARGET" "$CORPUS" -- \
    -max_total_time="$DURATION" \
    -timeout=10 \
    -print_final_stats=1 \
    -artifact_prefix="$ARTIFACTS/" \
    "$@" 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
set -e

new=()
while IFS= read -r f; do
    [ -n "$f" ] && ! grep -qxF "$f" <<<"$before" && new+=("$ARTIFACTS/$f")
done < <(ls -1 "$ARTIFACTS")

echo
echo "== summary"
grep -E '^#[0-9]+[[:space:]]+(INITED|DONE|pulse)' "$LOG" | tail -n 1 || true
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$LOG" || true

if [ ${#new[@]} -gt 0 ] || [ "$status" -ne 0 ]; then
    echo "== FAILURE: fuzzer exit status $status"
    for f in "${new[@]}"; do
        echo "crash input: $f"
        od -An -tx1 -v "$f" | tr -d ' \n' | head -c 2000
        echo
    done
    grep -m1 -A1 'panicked at' "$LOG" || true
    echo "reproduce: (cd runtime/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run $TARGET <crash file>)"
    echo "minimize:  (cd runtime/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz tmin $TARGET <crash file>)"
    exit 1
fi
echo "== no crash found in ${DURATION}s"
