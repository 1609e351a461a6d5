#!/usr/bin/env bash
# Runs the same app runs with the binaries of two revisions, alternating, and prints
# per run the medians of one RESULT field and their ratio (candidate / baseline).
#
#   scripts/compare-revisions.sh BASE_REV [ROUNDS]
#   COMPARE_ONLY='pingpong' scripts/compare-revisions.sh BASE_REV 10
#
# The baseline is built from BASE_REV in a git worktree under /tmp (release, its own
# target directory); the candidate is the working tree. Each round runs every case
# once with each build, in turn, so drifts of the machine hit both alike. Needs the
# set-up of scripts/setup.sh (hwloc).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_REV=${1:?usage: scripts/compare-revisions.sh BASE_REV [ROUNDS]}
ROUNDS=${2:-5}
ROOT=$(pwd)
BASE_TREE=${COMPARE_BASE_TREE:-/tmp/lazarus-compare-base}
BASE_TARGET=${COMPARE_BASE_TARGET:-/tmp/lazarus-compare-base-target}
CKPT=$(mktemp -d /tmp/lazarus-compare-ckpt.XXXXXX)
trap 'rm -rf "$CKPT"' EXIT

if [ -d "$BASE_TREE" ]; then
    git -C "$BASE_TREE" checkout -q --detach "$BASE_REV"
else
    git worktree add -q --detach "$BASE_TREE" "$BASE_REV"
fi
# The launcher was in package `lazarus` before it moved to `lazarus-cli`.
launcher_pkg=lazarus-cli
[ -d "$BASE_TREE/runtime/cli" ] || launcher_pkg=lazarus
(cd "$BASE_TREE" && CARGO_TARGET_DIR=$BASE_TARGET cargo build --release --quiet \
    -p "$launcher_pkg" -p lazarus-apps --bins)
cargo build --release --quiet -p lazarus-cli -p lazarus-apps --bins
BASE_BIN=$BASE_TARGET/release
CAND_BIN=$ROOT/target/release

# name | field | lazarus run options | app and its arguments
CASES=(
    "pingpong 8 B, recovery on|min_latency_us|-n 2 --ft on --checkpoint-every 1s|pingpong --min-size 8 --max-size 8 --iters 20000"
    "pingpong 1 MiB, recovery on|max_bandwidth_MBps|-n 2 --ft on --checkpoint-every 1s|pingpong --min-size 1048576 --max-size 1048576 --iters 327680000"
    "pingpong 8 B, recovery off|min_latency_us|-n 2|pingpong --min-size 8 --max-size 8 --iters 20000"
    "jacobi2d, recovery on|elapsed_s|-n 2 --ft on --checkpoint-every 1s|jacobi2d --n 1024 --iters 300"
    "jacobi2d, recovery off|elapsed_s|-n 2|jacobi2d --n 1024 --iters 300"
    "bank, order-sensitive, recovery on|elapsed_s|-n 4 --ft on --checkpoint-every 1s|bank --transfers 1000 --measure"
)

# One run: prints the field's value from the RESULT line, or fails.
run() {
    local bin=$1 opts=$2 app=$3 field=$4
    local out dir=()
    # A checkpoint directory is an option of recovery: refused without it.
    [[ $opts == *"--ft on"* ]] && dir=(--checkpoint-dir "$CKPT")
    # shellcheck disable=SC2086
    out=$("$bin/lazarus" run $opts "${dir[@]}" -- "$bin"/$app 2>/dev/null) || {
        echo "run failed: $bin/lazarus run $opts -- $app" >&2
        return 1
    }
    echo "$out" | grep -o "RESULT .*" | tr ' ' '\n' | sed -n "s/^$field=//p" | head -1
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# COMPARE_ONLY=REGEX keeps the cases whose name matches.
if [ -n "${COMPARE_ONLY:-}" ]; then
    kept=()
    for c in "${CASES[@]}"; do
        [[ ${c%%|*} =~ $COMPARE_ONLY ]] && kept+=("$c")
    done
    CASES=("${kept[@]}")
fi

declare -A values
for round in $(seq 1 "$ROUNDS"); do
    for i in "${!CASES[@]}"; do
        IFS='|' read -r _ field opts app <<<"${CASES[$i]}"
        for side in base cand; do
            bin=$BASE_BIN
            [ "$side" = cand ] && bin=$CAND_BIN
            v=$(run "$bin" "$opts" "$app" "$field")
            values[$i,$side]+="$v "
        done
    done
    echo "round $round of $ROUNDS done" >&2
done

echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "Baseline $(git rev-parse --short "$BASE_REV"), candidate $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty); $ROUNDS rounds, alternating"
echo
echo "| run | field | baseline median | candidate median | candidate / baseline |"
echo "|---|---|---|---|---|"
for i in "${!CASES[@]}"; do
    IFS='|' read -r name field _ _ <<<"${CASES[$i]}"
    b=$(tr ' ' '\n' <<<"${values[$i,base]}" | grep . | median)
    c=$(tr ' ' '\n' <<<"${values[$i,cand]}" | grep . | median)
    r=$(awk -v b="$b" -v c="$c" 'BEGIN {printf "%.3f", c / b}')
    echo "| $name | $field | $b | $c | $r |"
done
