#!/usr/bin/env bash
# Throwaway, loopback-only, single-host Slurm for tests and trying the sbatch
# scripts under deploy/slurm/: munged, slurmctld and one slurmd, all running as
# root with every file (config, key, state, logs, sockets, pidfiles) under DIR.
# It installs nothing.
#
# Debian packages needed (Debian 12 "bookworm", Slurm 22.05):
#     apt-get install -y slurmctld slurmd slurm-client munge
#
# Usage:
#   scripts/slurm-cluster.sh start DIR [CPUS]   # prints `export SLURM_CONF=...` on stdout
#   scripts/slurm-cluster.sh stop DIR           # kills the daemons and removes DIR
#
#   eval "$(scripts/slurm-cluster.sh start /tmp/slurm)"
#   sbatch deploy/slurm/mlm-pipeline.sbatch --data ... --output ... --vocab-file ...
#   scripts/slurm-cluster.sh stop /tmp/slurm
#
# DIR should be short (the munge socket path must fit in 108 bytes).  The
# nodes are called mlm1..mlmN (N = SLURM_CLUSTER_NODES, default 1), all at
# 127.0.0.1 with CPUS cpus each (default: nproc), one slurmd each; the
# controller and the slurmds listen on free ports chosen here.  KillWait (seconds
# between scancel's SIGTERM and SIGKILL) is SLURM_CLUSTER_KILL_WAIT, default 60.
set -euo pipefail

readonly MARKER=.slurm-cluster-dir
TIMEOUT=${SLURM_CLUSTER_TIMEOUT:-60}

die() {  # die MESSAGE [LOGFILE]
    echo "slurm-cluster: $1" >&2
    if [[ -n ${2:-} && -f $2 ]]; then
        echo "---- last lines of $2 ----" >&2
        tail -n 30 "$2" >&2
    fi
    exit 1
}

usage() {
    echo "usage: $0 start DIR [CPUS] | stop DIR" >&2
    exit 2
}

need() {
    local binary
    for binary in "$@"; do
        command -v "$binary" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v "$binary" >/dev/null 2>&1 \
            || die "$binary not found: apt-get install -y slurmctld slurmd slurm-client munge"
    done
}

free_port() {  # a TCP port nothing listens on now, on 127.0.0.1
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() {  # wait_for DESCRIPTION LOGFILE COMMAND...
    local what=$1 logfile=$2
    shift 2
    local deadline=$((SECONDS + TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "$what did not come up in ${TIMEOUT}s" "$logfile"
        sleep 0.3
    done
}

start() {
    local dir=$1 cpus=${2:-$(nproc)}
    [[ $(id -u) == 0 ]] || die "must run as root (slurmd starts jobs as their users)"
    export PATH=$PATH:/usr/sbin:/sbin
    need munged slurmctld slurmd sbatch sinfo scontrol
    [[ ! -e $dir || -f $dir/$MARKER ]] || [[ -z $(ls -A "$dir") ]] || die "$dir exists and is not ours"
    mkdir -p "$dir"/{munge,state,spool,log,run}
    touch "$dir/$MARKER"
    dir=$(cd "$dir" && pwd)
    (( ${#dir} < 80 )) || die "$dir is too long for the munge socket path"

    # munge: its own key, socket and seed under DIR; --force because the key's
    # directory is not the packaged /etc/munge with its munge-user ownership.
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 0400 "$dir/munge/munge.key"
    chmod 0700 "$dir/munge"
    munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
        --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" \
        || die "munged did not start" "$dir/log/munged.log"
    wait_for munged "$dir/log/munged.log" test -S "$dir/munge/munge.socket"

    local controller_port slurmd_port host nodes=${SLURM_CLUSTER_NODES:-1} node_lines="" n
    [[ $nodes =~ ^[1-9][0-9]?$ ]] || die "SLURM_CLUSTER_NODES must be 1-99"
    controller_port=$(free_port)
    slurmd_port=$(free_port)
    host=$(hostname -s)
    for n in $(seq "$nodes"); do  # one slurmd each, on its own port
        node_lines+="NodeName=mlm$n NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$cpus State=UNKNOWN"$'\n'
    done
    cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm-cluster.sh: a one-node cluster on 127.0.0.1.
ClusterName=mlmtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$controller_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd.%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in a container: processes are tracked by parentage.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# scancel: SIGTERM, then SIGKILL after this long (the drain's time).
KillWait=${SLURM_CLUSTER_KILL_WAIT:-60}
# The node may say it has other cpus than it has: we declare what we want.
SlurmdParameters=config_overrides
$node_lines
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    export SLURM_CONF=$dir/slurm.conf
    slurmctld -i -f "$SLURM_CONF" || die "slurmctld did not start" "$dir/log/slurmctld.log"
    wait_for slurmctld "$dir/log/slurmctld.log" scontrol ping
    for n in $(seq "$nodes"); do
        slurmd -f "$SLURM_CONF" -N "mlm$n" || die "slurmd mlm$n did not start" "$dir/log/slurmd.mlm$n.log"
    done
    all_idle() { [[ $(sinfo -h -N -o %t | sort -u) == idle && $(sinfo -h -N -o %N | wc -l) == "$nodes" ]]; }
    wait_for "slurmd (nodes mlm1..mlm$nodes idle)" "$dir/log/slurmd.mlm1.log" all_idle
    echo "export SLURM_CONF=$SLURM_CONF"
}

daemon_pid() {  # daemon_pid FILE NAME: the pid in FILE if that process is the named daemon
    local file=$1 name=$2 pid
    [[ -f $file ]] || return 0
    pid=$(<"$file")
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 0
    echo "$pid"
}

kill_all() {  # kill_all PID...: TERM to all at once, then KILL those alive after 3 s
    local pid alive
    (($#)) || return 0
    kill -TERM "$@" 2>/dev/null || true
    for _ in $(seq 15); do
        alive=0
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        ((alive)) || return 0
        sleep 0.2
    done
    kill -KILL "$@" 2>/dev/null || true
}

stop() {
    local dir=$1
    [[ -d $dir ]] || return 0
    [[ -f $dir/$MARKER ]] || die "$dir was not made by this script; not touching it"
    export PATH=$PATH:/usr/sbin:/sbin
    if [[ -f $dir/slurm.conf ]]; then  # end the jobs' processes before their daemons
        # Short timeouts: a test cluster going away need not wait on a busy slurmctld (in the suite's runs of
        # 2026-11-25 each teardown took 20 s, under load, against 4 s alone).
        SLURM_CONF=$dir/slurm.conf timeout 5 scancel --full --signal=KILL --partition=debug 2>/dev/null || true
        SLURM_CONF=$dir/slurm.conf timeout 5 scancel --partition=debug 2>/dev/null || true
    fi
    local pidfile daemons=()
    for pidfile in "$dir"/run/slurmd.*.pid; do
        daemons+=($(daemon_pid "$pidfile" slurmd))
    done
    daemons+=($(daemon_pid "$dir/run/slurmctld.pid" slurmctld))
    kill_all "${daemons[@]}"  # together: one after another took up to 10 s each
    kill_all $(daemon_pid "$dir/run/munged.pid" munged)  # last: the others authenticate through it
    rm -rf "$dir"
}

case ${1:-} in
    start) [[ $# -ge 2 ]] || usage; start "$2" "${3:-}" ;;
    stop) [[ $# -eq 2 ]] || usage; stop "$2" ;;
    *) usage ;;
esac
