#!/usr/bin/env bash
# Turns this Debian 12 (bookworm) machine into a working single-host Slurm cluster, so that
# integration tests can run `srun -n 4 --overcommit <binary>`.
#
# - Installs slurm-wlm and munge with apt if they are missing.
# - Creates the munge key, writes /etc/slurm/slurm.conf for this one host.
# - Starts munged, slurmctld and slurmd directly (no systemd needed: CI has none as PID 1).
# - Waits until the node is idle, then checks that `srun -n 4 --overcommit hostname`
#   prints 4 lines.
#
# Must run as root. Idempotent: when the daemons already run with the same configuration
# and the node is usable, it exits 0 within a second or so; daemons that died are restarted.
#
# Environment:
#   SLURM_SETUP_CPUS   CPUs the node declares (default 8; more than the machine has is fine,
#                      thanks to SlurmdParameters=config_overrides). Each `--overcommit` job
#                      takes one of them, so this bounds how many such jobs run at once.
set -euo pipefail

log() { echo "slurm-setup: $*" >&2; }
die() {
    log "ERROR: $*"
    show_logs
    exit 1
}

LOG_DIR=/var/log/slurm
CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
MUNGE_PID=/run/munge/munged.pid
MUNGE_KEY=/etc/munge/munge.key
CPUS=${SLURM_SETUP_CPUS:-8}
[[ "$CPUS" =~ ^[1-9][0-9]*$ ]] || { echo "slurm-setup: ERROR: SLURM_SETUP_CPUS must be a positive integer" >&2; exit 1; }

show_logs() {
    local f
    for f in $LOG_DIR/slurmctld.out $LOG_DIR/slurmctld.log $LOG_DIR/slurmd.out $LOG_DIR/slurmd.log \
        /var/log/munge/munged.out /var/log/munge/munged.log; do
        [ -s "$f" ] || continue
        echo "----- tail of $f -----" >&2
        tail -n 15 "$f" >&2 || true
    done
}

if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
        exec sudo -E "$0" "$@"
    fi
    log "ERROR: must run as root (Slurm and munge daemons are started here)"
    exit 1
fi

# ---- helpers --------------------------------------------------------------------------------

# pid_alive PIDFILE NAME: the pidfile names a live process whose command is NAME.
pid_alive() {
    local pid
    [ -f "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
    # A killed daemon may linger as a zombie until PID 1 reaps it.
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]
}

# stop_daemon PIDFILE NAME: stop the process the pidfile names (only that process).
stop_daemon() {
    local pid i
    pid_alive "$1" "$2" || return 0
    pid=$(cat "$1")
    log "stopping $2 (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for i in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.2
    done
    kill -9 "$pid" 2>/dev/null || true
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

# Prints the node's state (idle, mix, alloc, down*, drain, ...) or nothing.
node_state() { timeout 5 sinfo -h -N -n "$NODE" -o %t 2>/dev/null | head -n1 || true; }

node_usable() {
    case "$(node_state)" in
        idle | mix | alloc | comp) return 0 ;;
        *) return 1 ;;
    esac
}

# ---- 1. packages ----------------------------------------------------------------------------

need=()
command -v munged >/dev/null || need+=(munge)
{ command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null; } ||
    need+=(slurm-wlm)
if ((${#need[@]})); then
    log "installing ${need[*]} (apt)"
    # Keep the packages' maintainer scripts from starting services: we start them ourselves.
    made_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    trap 'if [ -n "$made_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi' EXIT
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurm-wlm munge >/dev/null
    if [ -n "$made_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
    made_policy=""
    log "installed $(dpkg-query -W -f '${Version}' slurmctld 2>/dev/null || echo slurm)"
fi

# ---- 2. hostname ----------------------------------------------------------------------------

NODE=$(hostname -s)
[ -n "$NODE" ] || die "hostname -s is empty"
if ! getent hosts "$NODE" >/dev/null; then
    log "adding $NODE to /etc/hosts"
    echo "127.0.0.1 $NODE" >>/etc/hosts
fi

# ---- 3. slurm.conf --------------------------------------------------------------------------

new_conf=$(
    cat <<EOF
# Written by scripts/slurm-setup.sh (Lazarus): a single-host test cluster.
ClusterName=lazarus
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: plain process tracking, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Reject at once (instead of queueing forever) a job this one node can never run.
EnforcePartLimits=ALL
# The node may declare more CPUs than the machine has.
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
MinJobAge=60
SlurmdTimeout=300
Waittime=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
)
conf_changed=""
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$new_conf" ]; then
    log "writing $CONF (node $NODE, CPUs=$CPUS)"
    mkdir -p "$CONF_DIR"
    printf '%s\n' "$new_conf" >"$CONF"
    chmod 644 "$CONF"
    conf_changed=1
fi

# ---- fast path: everything already up ---------------------------------------------------------

if [ -z "$conf_changed" ] && pid_alive "$MUNGE_PID" munged && pid_alive "$CTLD_PID" slurmctld &&
    pid_alive "$SLURMD_PID" slurmd && munge_ok && node_usable; then
    log "already running; node $NODE is $(node_state)"
    exit 0
fi

# ---- 4. munge -------------------------------------------------------------------------------

id munge >/dev/null 2>&1 || die "user munge missing (is the munge package installed?)"
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
chown munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
chmod 700 /etc/munge /var/lib/munge /var/log/munge
chmod 755 /run/munge
if [ ! -s "$MUNGE_KEY" ]; then
    log "creating $MUNGE_KEY"
    rm -f "$MUNGE_KEY"
    if ! mungekey --create --keyfile="$MUNGE_KEY" 2>/dev/null; then
        dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
    fi
fi
chown munge:munge "$MUNGE_KEY"
chmod 400 "$MUNGE_KEY"

if ! pid_alive "$MUNGE_PID" munged || ! munge_ok; then
    stop_daemon "$MUNGE_PID" munged
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock "$MUNGE_PID"
    log "starting munged"
    # munged runs as the owner of its key; it daemonizes itself.
    runuser -u munge -- /usr/sbin/munged </dev/null >/var/log/munge/munged.out 2>&1 ||
        die "munged failed to start"
    for _ in $(seq 50); do
        munge_ok && break
        sleep 0.1
    done
    munge_ok || die "munge does not work (munge -n | unmunge fails)"
fi

# ---- 5. slurmctld and slurmd ----------------------------------------------------------------

mkdir -p "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
chmod 755 "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd

if [ -n "$conf_changed" ]; then
    # New configuration: restart whatever runs with the old one.
    stop_daemon "$SLURMD_PID" slurmd
    stop_daemon "$CTLD_PID" slurmctld
fi

started_ctld=""
if ! pid_alive "$CTLD_PID" slurmctld; then
    rm -f "$CTLD_PID"
    log "starting slurmctld"
    # slurmctld daemonizes itself and logs to $LOG_DIR/slurmctld.log.
    setsid slurmctld </dev/null >$LOG_DIR/slurmctld.out 2>&1 || die "slurmctld failed to start"
    started_ctld=1
fi
# slurmctld must answer before slurmd registers with it.
# The answer is captured, not piped into `grep -q`: under pipefail a SIGPIPE'd writer would
# read as "down".
ctld_up() { [[ "$(timeout 5 scontrol ping 2>/dev/null || true)" == *"is UP"* ]]; }
for _ in $(seq 100); do
    ctld_up && break
    sleep 0.2
done
ctld_up || die "slurmctld does not answer (scontrol ping)"
if [ -n "$started_ctld" ]; then
    # Jobs recovered from the state of a slurmctld that died (e.g. killed at the end of an
    # earlier session) would hold CPUs forever: nothing waits for them any more.
    stale=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${stale// /}" ]; then
        log "cancelling stale jobs: $stale"
        # shellcheck disable=SC2086
        timeout 10 scancel $stale 2>/dev/null || true
    fi
fi

if ! pid_alive "$SLURMD_PID" slurmd; then
    rm -f "$SLURMD_PID"
    log "starting slurmd"
    setsid slurmd </dev/null >$LOG_DIR/slurmd.out 2>&1 || die "slurmd failed to start"
fi

# ---- 6. wait for the node -------------------------------------------------------------------

log "waiting for node $NODE to be idle"
state=""
for i in $(seq 60); do
    state=$(node_state)
    case "$state" in
        idle | mix | alloc) break ;;
        down | down~ | drain* | drng | fail* | "unk" | "unk*")
            # ReturnToService=2 brings back a node that registers with a valid config; a
            # node left down or drained by an earlier run needs an explicit resume.
            ((i % 5 == 0)) && timeout 5 scontrol update nodename="$NODE" state=resume 2>/dev/null || true
            ;;
    esac
    sleep 1
done
case "$state" in
    idle | mix | alloc) log "node $NODE is $state" ;;
    *)
        timeout 5 scontrol show node "$NODE" >&2 || true
        die "node $NODE not usable after 60 s (state '${state:-none}')"
        ;;
esac

# ---- 7. self-check --------------------------------------------------------------------------

log "self-check: srun -n 4 --overcommit hostname"
out=$(timeout 60 srun -n 4 --overcommit hostname 2>&1) || {
    echo "$out" >&2
    die "srun -n 4 --overcommit hostname failed"
}
lines=$(printf '%s\n' "$out" | grep -c . || true)
if [ "$lines" -ne 4 ]; then
    echo "$out" >&2
    die "srun -n 4 --overcommit printed $lines lines, expected 4"
fi
log "ok: single-host Slurm cluster ready (node $NODE, CPUs=$CPUS, 4 tasks ran)"
