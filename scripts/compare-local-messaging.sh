#!/usr/bin/env bash
# Runs Lazarus's rows of the local messaging bench (tell on one core, tell across cores,
# ask round trip across cores, spawn) with the bench binaries of two revisions,
# alternating, and prints per row the median of the rounds' criterion medians and the
# ratio candidate / baseline (criterion time per iteration: lower is better).
#
#   scripts/compare-local-messaging.sh BASE_REV [ROUNDS]
#   COMPARE_FILTER='tell_cross_core/lazarus$' scripts/compare-local-messaging.sh BASE_REV 10
#
# The baseline is built from BASE_REV in a git worktree under /tmp (its own target
# directory, shared with scripts/compare-revisions.sh); the candidate is the working
# tree. Needs the set-up of scripts/setup.sh (hwloc).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_REV=${1:?usage: scripts/compare-local-messaging.sh BASE_REV [ROUNDS]}
ROUNDS=${2:-5}
BASE_TREE=${COMPARE_BASE_TREE:-/tmp/lazarus-compare-base}
BASE_TARGET=${COMPARE_BASE_TARGET:-/tmp/lazarus-compare-base-target}
OUT=$(mktemp -d /tmp/lazarus-compare-local.XXXXXX)

if [ -d "$BASE_TREE" ]; then
    git -C "$BASE_TREE" checkout -q --detach "$BASE_REV"
else
    git worktree add -q --detach "$BASE_TREE" "$BASE_REV"
fi

# The path of the bench executable cargo builds in tree $1 with target directory $2.
bench_binary() {
    (cd "$1" && CARGO_TARGET_DIR=$2 cargo bench -p lazarus-benches --bench local_messaging \
        --no-run 2>&1) | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1
}
BASE_BIN=$(bench_binary "$BASE_TREE" "$BASE_TARGET")
CAND_BIN=$(bench_binary "$(pwd)" "$(pwd)/target")
[ -x "$BASE_BIN" ] && [ -x "$CAND_BIN" ] || { echo "bench binaries not built" >&2; exit 1; }

for round in $(seq 1 "$ROUNDS"); do
    for side in base cand; do
        bin=$BASE_BIN
        [ "$side" = cand ] && bin=$CAND_BIN
        echo "round $round/$ROUNDS: $side" >&2
        "$bin" --bench "${COMPARE_FILTER:-/lazarus$}" >"$OUT/$side.$round.txt" 2>&1
    done
done

python3 - "$OUT" "$ROUNDS" <<'EOF'
import re, statistics, sys, os
out, rounds = sys.argv[1], int(sys.argv[2])
unit = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
def medians(path):
    rows, name = {}, None
    for line in open(path, errors="replace"):
        m = re.match(r"^(\S+/lazarus)\b", line)
        if m:
            name = m.group(1)
        t = re.search(r"time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", line)
        if t and name:
            rows[name] = float(t.group(1)) * unit[t.group(2)]
            name = None
    return rows
runs = {"base": [], "cand": []}
for side in runs:
    for r in range(1, rounds + 1):
        runs[side].append(medians(os.path.join(out, f"{side}.{r}.txt")))
names = sorted({n for d in runs["base"] for n in d})
print(f"| bench (criterion time per iteration) | before | after | after / before | per-round ratios |")
print("|---|---|---|---|---|")
for n in names:
    b = [d[n] for d in runs["base"] if n in d]
    c = [d[n] for d in runs["cand"] if n in d]
    per = [cc / bb for bb, cc in zip(b, c)]
    mb, mc = statistics.median(b), statistics.median(c)
    fmt = lambda x: f"{x * 1e9:.1f} ns" if x < 1e-6 else f"{x * 1e6:.2f} µs"
    print(f"| {n} | {fmt(mb)} | {fmt(mc)} | {mc / mb:.3f} | {', '.join(f'{p:.2f}' for p in per)} |")
EOF
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "raw criterion output: $OUT" >&2
