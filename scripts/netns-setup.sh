#!/usr/bin/env bash
# Emulated hosts on this machine for the multi-host tests: network namespaces lzh0..lzhN-1,
# each with an address of its own (10.77.0.1, 10.77.0.2, ...) on one bridge, lzbr0. A
# process started with `ip netns exec lzhK` sees only that host's network, so nodes on
# different "hosts" talk over real interfaces between real addresses, and a node restarted
# on a spare host comes back at another address.
#
# Must run as root; needs iproute2 (installed with apt if missing). Idempotent.
#
# Usage: scripts/netns-setup.sh [HOSTS]   (default 5: four nodes and a spare)
set -euo pipefail

log() { echo "netns-setup: $*" >&2; }

HOSTS=${1:-5}
if [ "$(id -u)" != 0 ]; then
    log "must run as root"
    exit 1
fi
if ! command -v ip >/dev/null; then
    log "installing iproute2"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
fi

if ! ip link show lzbr0 >/dev/null 2>&1; then
    ip link add lzbr0 type bridge
fi
ip link set lzbr0 up

for i in $(seq 0 $((HOSTS - 1))); do
    ns=lzh$i
    addr=10.77.0.$((i + 1))
    # No `cmd | grep -q` under pipefail here: grep exits at the first match, the writer
    # can die of SIGPIPE, and the pipeline then reads as "not found" (a CI run failed so).
    if [ ! -e "/run/netns/$ns" ]; then
        ip netns add "$ns"
    fi
    if ! ip link show "lzv$i" >/dev/null 2>&1; then
        ip link add "lzv$i" type veth peer name eth0 netns "$ns"
    fi
    ip link set "lzv$i" master lzbr0 up
    # `replace` adds the address or keeps it: idempotent without inspecting first.
    ip -n "$ns" addr replace "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
done

# Every host reaches every other one: a TCP connection to a closed port is refused at once
# by a reachable host and times out at an unreachable one.
for i in $(seq 1 $((HOSTS - 1))); do
    addr=10.77.0.$((i + 1))
    rc=0
    ip netns exec lzh0 timeout 3 bash -c "echo > /dev/tcp/$addr/9" 2>/dev/null || rc=$?
    if [ "$rc" = 124 ]; then
        log "ERROR: lzh0 cannot reach $addr"
        exit 1
    fi
done
log "ok: $HOSTS hosts lzh0..lzh$((HOSTS - 1)) at 10.77.0.1..10.77.0.$HOSTS"
