#!/usr/bin/env bash
# Random-SIGKILL soak of the recovery: runs the apps under `lazarus run --ft on` again and
# again with random kill schedules (one to three kills, at one moment or spread, a node
# sometimes killed twice), random checkpoint periods, one or two cores per node (plain
# mode) and, in `loggers` mode, a log quota
# with two logger nodes keeping two copies while a logger is also SIGKILLed from outside.
# Each run's RESULT, less its timing and order-dependent fields, must equal the
# failure-free run's, and no frame between healthy nodes may be refused.
#
#   scripts/soak.sh [RUNS] [plain|loggers]      (default: 50 runs, plain)
#
# Builds the release binaries and copies them aside first, so the tree can be rebuilt
# while it runs. Failing runs' whole output is kept in $SOAK_DIR (default a fresh
# directory under /tmp). Exits non-zero if any run failed.
set -uo pipefail

RUNS="${1:-50}"
MODE="${2:-plain}"
if ! [[ "$RUNS" =~ ^[0-9]+$ ]] || [[ "$MODE" != plain && "$MODE" != loggers ]]; then
    echo "usage: $0 [RUNS] [plain|loggers]" >&2
    exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${SOAK_DIR:-$(mktemp -d /tmp/lazarus-soak.XXXXXX)}"
mkdir -p "$DIR/bin"
(cd "$ROOT" && cargo build --release --quiet -p lazarus-cli -p lazarus-apps) || exit 1
for b in lazarus bank histogram jacobi2d kvstore master-worker npb-cg payments pingpong power spawn-ring transfer; do
    cp "$ROOT/target/release/$b" "$DIR/bin/"
done
B="$DIR/bin"

# Fields that depend on timing or on the arrival order an order-sensitive app is free
# to see (its checks, `consistent`, `history`, bank's `conserved` ... `no_duplicates`,
# payments' `journals_match`, `verified`, stay). bank's `early`/`causal` count answers
# that came before their transfer was sent again, which a node that fails while another
# still re-executes may cause (apps/src/bin/bank.rs; docs/recovery.md, "The interval
# rule is approximate"); histogram's `first_ticket` is whichever fetch-and-op came first.
norm() {
    grep '^RESULT' | tr ' ' '\n' |
        grep -Ev '^(elapsed_s|mlups|mops|tasks_per_s|ops_per_s|transfers_per_s|payments_per_s|settled|refused|tasks_per_worker|ledger|epochs|replies|store|puts|balances|applied|rejected|min_latency_us|max_bandwidth_MBps|keys_per_s|first_ticket|early|causal)=' |
        tr '\n' ' '
}
# nodes|seconds a run lasts here (for the kill times)|app and arguments
if [ "$MODE" = plain ]; then
    APPS=(
        "4|6|jacobi2d --n 512 --iters 25000"
        "4|4|jacobi2d --n 256 --iters 5000 --halo put"
        "4|3|histogram --keys 50000 --rounds 2000"
        "4|4|spawn-ring --uneven --rounds 8000"
        "4|9|master-worker --tasks 60000"
        "4|5|kvstore --ops 25000"
        "4|5|bank --transfers 12000"
        "4|3|power --coordinator actor --steps 6000"
        "4|3|power --steps 6000"
        "4|3|power --coordinator async --steps 6000"
        "4|5|transfer --transfers 12000 --think-us 50"
        "4|5|payments --payments 8000"
        "4|4|npb-cg --class A"
    )
else
    APPS=(
        "2|8|pingpong --min-size 1048576 --max-size 1048576 --iters 131072000"
        "4|6|jacobi2d --n 512 --iters 25000"
        "4|3|power --coordinator actor --steps 6000"
        "4|4|spawn-ring --uneven --rounds 8000"
        "4|5|bank --transfers 12000"
    )
fi
# Frames a healthy cluster never refuses (`misdirected` and the channel checks).
REFUSED='refused a (logged message|[a-z_]+ frame from node)|naming channels between other nodes'
random_time() { awk -v r=$RANDOM -v t="$1" 'BEGIN { printf "%.2f", 0.3 + r / 32768 * t * 0.9 }'; }

# Plain runs give a node one or two cores (two: actors of a node on different core
# threads, each counting its same-node messages on its own counter); an app's answer may
# depend on how many actors it makes per core, so each setting has its reference.
if [ "$MODE" = plain ]; then CORES=(1 2); else CORES=(""); fi
declare -A REF
for e in "${APPS[@]}"; do
    IFS='|' read -r n _ app <<<"$e"
    for c in "${CORES[@]}"; do
        # shellcheck disable=SC2086 # the app's arguments are words
        REF[$app|$c]=$("$B/lazarus" run -n "$n" ${c:+--cores-per-node $c} --ft off -- "$B"/$app 2>&1 | norm)
        if [ -z "${REF[$app|$c]}" ]; then
            echo "the failure-free run of $app printed no RESULT" >&2
            exit 1
        fi
    done
done

failed=0
for i in $(seq "$RUNS"); do
    IFS='|' read -r n t app <<<"${APPS[$((RANDOM % ${#APPS[@]}))]}"
    kills=""
    at=$(random_time "$t")
    together=$((RANDOM % 4 == 0))
    for _ in $(seq $((1 + RANDOM % 3))); do
        [ "$together" = 1 ] || at=$(random_time "$t")
        kills="$kills${kills:+,}$((RANDOM % n))@$at"
    done
    args=(--ft on)
    logger_kill=""
    c="${CORES[$((RANDOM % ${#CORES[@]}))]}"
    [ -n "$c" ] && args+=(--cores-per-node "$c")
    if [ "$MODE" = plain ]; then
        args+=(--checkpoint-every "$([ $((RANDOM % 2)) = 1 ] && echo 300ms || echo 1s)")
    else
        args+=(--checkpoint-every "$([ $((RANDOM % 2)) = 1 ] && echo 2s || echo 0)")
        args+=(--log-quota "$([ $((RANDOM % 2)) = 1 ] && echo 512KiB || echo 4MiB)")
        args+=(--loggers 2 --logger-copies 2)
        [ $((RANDOM % 3)) = 0 ] && kills=""
        logger_kill="$((RANDOM % 2))@$(random_time "$t")"
        (
            sleep "${logger_kill#*@}"
            pkill -9 -f "$B/lazarus logger --index ${logger_kill%@*} "
        ) &
    fi
    [ -n "$kills" ] && args+=(--kill "$kills")
    # shellcheck disable=SC2086
    out=$(timeout 300 "$B/lazarus" run -n "$n" "${args[@]}" -- "$B"/$app 2>&1)
    rc=$?
    wait
    what="${args[*]} logger_kill=${logger_kill:-none} -- $app"
    if [ $rc = 0 ] && [ "$(echo "$out" | norm)" = "${REF[$app|$c]}" ] && ! echo "$out" | grep -Eq "$REFUSED"; then
        echo "$i ok   $what"
    else
        failed=$((failed + 1))
        echo "$out" >"$DIR/run-$i.log"
        echo "$i FAIL rc=$rc $what (output: $DIR/run-$i.log)"
    fi
done
echo "soak: $((RUNS - failed)) of $RUNS runs gave the failure-free answer ($MODE; logs in $DIR)"
[ "$failed" = 0 ]
