#!/usr/bin/env bash
# Throwaway, loopback-only, S3-compatible server for tests: a one-node Ceph
# cluster (1 monitor, 1 memstore OSD, no mgr) with a radosgw in front of it.
#
# Debian packages needed (Debian 12 "bookworm", Ceph 16.2 "pacific"):
#     apt-get install -y radosgw ceph-mon ceph-osd curl
#   radosgw  -> radosgw, and pulls in ceph-common (ceph, radosgw-admin)
#   ceph-mon -> ceph-mon, and pulls in ceph-base (monmaptool)
#   ceph-osd -> ceph-osd
#   curl     -> the "does the S3 endpoint answer?" probe
# Everything else used (timeout, tail, ...) is in Debian's essential set.
# ceph-mgr is NOT needed: pools, PGs and radosgw all work without a mgr.
#
# Usage:
#   scripts/s3-server.sh start DIR PORT   # prints `export ...` lines on stdout
#   scripts/s3-server.sh stop DIR         # kills the daemons and removes DIR
#
#   eval "$(scripts/s3-server.sh start /tmp/s3 7480)"
#   aws --endpoint-url "$S3_ENDPOINT_URL" s3 ls
#   scripts/s3-server.sh stop /tmp/s3
#
# Environment knobs:
#   S3_SERVER_MON_PORT  monitor port (default PORT+1), bound on 127.0.0.1
#   S3_SERVER_TIMEOUT   seconds each daemon gets to come up (default 60)
#
# Nothing listens anywhere but 127.0.0.1: the monitor and the radosgw are bound
# to it explicitly, and the OSD picks its address from public/cluster network
# 127.0.0.0/8. All state, logs, sockets and pidfiles live under DIR.
set -euo pipefail

readonly ACCESS_KEY=mlmtestaccess
readonly SECRET_KEY=mlmtestsecret
readonly REGION=us-east-1
readonly RGW_UID=mlmtest
readonly MON_ID=a
readonly RGW_NAME=client.rgw.s3test
# Written at start; stop only deletes a DIR that holds it, so a typo in DIR
# can never make `stop` rm -rf something that this script did not create.
readonly MARKER=.s3-server-dir
TIMEOUT=${S3_SERVER_TIMEOUT:-60}

die() {  # die MESSAGE [LOGFILE]: one-line reason, then the log's tail, on stderr
    echo "s3-server: $1" >&2
    if [[ -n ${2:-} && -f $2 ]]; then
        echo "---- last lines of $2 ----" >&2
        tail -n 30 "$2" >&2
    fi
    exit 1
}

usage() {
    echo "usage: $0 start DIR PORT | stop DIR | gateway-stop DIR | gateway-start DIR" >&2
    exit 2
}

# --------------------------------------------------------------------------
# process bookkeeping: one pidfile per daemon in $DIR/run/NAME.pid
# --------------------------------------------------------------------------

# is_ours PID: the process is alive AND was started with this DIR's ceph.conf.
# Checking the command line guards against a recycled PID after a reboot or a
# long-dead daemon: we never signal a process that is not one of ours.
is_ours() {
    local pid=$1 cmdline
    [[ -r /proc/$pid/cmdline ]] || return 1
    cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
    [[ $cmdline == *"$CONF"* ]]
}

# pids_of_dir: pids (one per line) of this DIR's daemons that are still alive
pids_of_dir() {
    local f pid
    for f in "$DIR"/run/*.pid; do
        [[ -f $f ]] || continue
        pid=$(<"$f")
        if [[ $pid =~ ^[0-9]+$ ]] && is_ours "$pid"; then echo "$pid"; fi
    done
}

# spawn NAME CMD...: start a daemon in the background, log its stdio under
# DIR/log, record its pid. stdin/stdout/stderr are redirected so the daemon
# never holds the caller's pipes open (a Python subprocess reading our stdout
# would otherwise wait for the daemons to exit, i.e. forever).
spawn() {
    local name=$1; shift
    "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
    echo $! >"$DIR/run/$name.pid"
    # Not a job of this shell: no "Killed" notices when a failed start kills it.
    disown
}

# alive NAME: the daemon recorded as NAME is still running
alive() {
    local pid
    pid=$(<"$DIR/run/$1.pid") && is_ours "$pid"
}

# wait_until WHAT DAEMON LOG CMD...: retry CMD until it succeeds. Fail fast if
# DAEMON died, or after $TIMEOUT seconds; either way print LOG's tail.
wait_until() {
    local what=$1 daemon=$2 log=$3; shift 3
    local deadline=$((SECONDS + TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        if ! alive "$daemon"; then
            die "$daemon exited while waiting for $what (logs in $DIR/log)" "$log"
        fi
        if ((SECONDS >= deadline)); then
            die "timed out after ${TIMEOUT}s waiting for $what (logs in $DIR/log)" "$log"
        fi
        sleep 0.5
    done
}

# stop_daemons: SIGKILL every daemon of DIR and wait until they are gone.
# SIGKILL rather than SIGTERM on purpose: the data is thrown away anyway, and a
# memstore OSD that is shut down cleanly first dumps its whole store to disk.
stop_daemons() {
    local pids pid deadline=$((SECONDS + 30))
    pids=$(pids_of_dir)
    [[ -n $pids ]] || return 0
    for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
    while :; do
        pids=$(pids_of_dir)
        [[ -n $pids ]] || return 0
        ((SECONDS < deadline)) || die "daemons of $DIR still alive after 30s: $(echo $pids)"
        sleep 0.2
    done
}

# port_in_use PORT: something already accepts connections on 127.0.0.1:PORT
port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# --------------------------------------------------------------------------
# cluster setup
# --------------------------------------------------------------------------

ceph_cli() {  # the ceph CLI against this DIR's cluster only
    timeout 30 ceph --conf "$CONF" --connect-timeout 10 "$@"
}

write_conf() {
    local fsid=$1
    cat >"$CONF" <<EOF
# Generated by scripts/s3-server.sh: a throwaway one-node test cluster.
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$MON_PORT]
# Loopback only. msgr2 only, so the monitor listens on exactly one port.
public network = 127.0.0.0/8
cluster network = 127.0.0.0/8
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind msgr2 = true
# No cephx: nothing but 127.0.0.1 can reach the cluster and the data is
# throwaway; this saves generating and distributing keyrings.
auth cluster required = none
auth service required = none
auth client required = none
# Keep every path inside DIR (defaults point into /var/lib/ceph, /var/run/ceph).
# Admin sockets go to run dir too; a DIR path over ~80 characters makes them
# too long for a unix socket, which ceph logs and otherwise ignores.
run dir = $DIR/run
crash dir = $DIR/crash
log file = $DIR/log/\$name.log
mon cluster log file = $DIR/log/cluster.log
log to stderr = false
err to stderr = true
# A single OSD: one replica per object, and don't warn about it.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
# Don't refuse to start on a CI box whose disk is nearly full: the OSD keeps
# its data in RAM and the monitor's store is tiny.
mon data avail crit = 0
mon data avail warn = 0

[mon]
mon data = $DIR/mon
# The monitor batches map changes for 1 s by default; setup makes ~15 of them
# in a row (OSD boot, one per radosgw pool), so this alone saves ~10 s.
paxos propose interval = 0.05

[osd]
osd data = $DIR/osd
osd objectstore = memstore
# memstore keeps objects in RAM; cap it so a runaway test can't eat the box.
memstore device bytes = 1073741824

[$RGW_NAME]
rgw data = $DIR/rgw
# radosgw defaults to "secure" (encrypted) mode towards the monitor, which the
# "none" auth method cannot provide: without this it never gets past AUTH
# ("get_initial_auth_request returned -13").
ms mon client mode = crc
rgw frontends = beast endpoint=127.0.0.1:$PORT
EOF
}

start_mon() {
    monmaptool --create --fsid "$1" --addv "$MON_ID" "[v2:127.0.0.1:$MON_PORT]" \
        "$DIR/monmap" >>"$DIR/log/setup.log" 2>&1 ||
        die "monmaptool failed" "$DIR/log/setup.log"
    ceph-mon --conf "$CONF" --id "$MON_ID" --mkfs --monmap "$DIR/monmap" \
        >>"$DIR/log/setup.log" 2>&1 ||
        die "ceph-mon --mkfs failed" "$DIR/log/setup.log"
    spawn "mon.$MON_ID" ceph-mon --conf "$CONF" --id "$MON_ID" --foreground
    wait_until "the monitor on 127.0.0.1:$MON_PORT" "mon.$MON_ID" \
        "$DIR/log/mon.$MON_ID.log" ceph_cli mon stat
}

start_osd() {
    local uuid id
    uuid=$(cat /proc/sys/kernel/random/uuid)
    # Registers the OSD with the monitor and returns its id (0).
    id=$(ceph_cli osd new "$uuid" 2>>"$DIR/log/setup.log") ||
        die "'ceph osd new' failed" "$DIR/log/setup.log"
    ceph-osd --conf "$CONF" --id "$id" --mkfs --osd-uuid "$uuid" \
        >>"$DIR/log/setup.log" 2>&1 ||
        die "ceph-osd --mkfs failed" "$DIR/log/setup.log"
    spawn "osd.$id" ceph-osd --conf "$CONF" --id "$id" --foreground
    wait_until "osd.$id to be up" "osd.$id" "$DIR/log/osd.$id.log" osd_is_up
}

osd_is_up() {
    ceph_cli osd stat --format json | grep -q '"num_up_osds":1'
}

start_rgw() {
    # Create the S3 user before radosgw starts: radosgw-admin also creates the
    # default realm/zonegroup/zone and their pools, and doing that while a
    # starting radosgw does the same races. `timeout`: it blocks while PGs peer.
    timeout "$TIMEOUT" radosgw-admin --conf "$CONF" user create \
        --uid "$RGW_UID" --display-name "mlm-pipeline tests" \
        --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" \
        >>"$DIR/log/setup.log" 2>&1 ||
        die "radosgw-admin user create failed" "$DIR/log/setup.log"
    spawn "$RGW_NAME" radosgw --conf "$CONF" --name "$RGW_NAME" --foreground
    wait_until "radosgw on http://127.0.0.1:$PORT/" "$RGW_NAME" \
        "$DIR/log/$RGW_NAME.log" s3_answers
}

s3_answers() {
    # Any HTTP response will do (anonymous GET / is a ListBuckets). --noproxy:
    # a CI-wide http_proxy must not intercept loopback traffic.
    curl --silent --output /dev/null --noproxy '*' --max-time 2 \
        "http://127.0.0.1:$PORT/"
}

print_env() {
    cat <<EOF
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_DEFAULT_REGION=$REGION
export S3_ENDPOINT_URL=http://127.0.0.1:$PORT
EOF
}

# --------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------

cmd_start() {
    [[ $MON_PORT =~ ^[0-9]+$ ]] || die "S3_SERVER_MON_PORT must be a number"
    for tool in ceph ceph-mon ceph-osd monmaptool radosgw radosgw-admin curl; do
        command -v "$tool" >/dev/null ||
            die "$tool not found: apt-get install -y radosgw ceph-mon ceph-osd curl"
    done

    # Called again on a DIR that is already serving: reuse it, don't clobber it.
    if [[ -f $DIR/$MARKER && -n $(pids_of_dir) ]]; then
        [[ $(<"$DIR/port") == "$PORT" ]] ||
            die "$DIR is already serving on port $(<"$DIR/port"), not $PORT; stop it first"
        s3_answers || die "$DIR has daemons running but no S3 endpoint; run: $0 stop $DIR"
        print_env
        return 0
    fi
    # Leftovers of a crashed or killed run: start from scratch.
    if [[ -f $DIR/$MARKER ]]; then
        rm -rf "$DIR"
    elif [[ -d $DIR && -n $(ls -A "$DIR") ]]; then
        die "$DIR exists, is not empty and was not created by $0"
    fi

    port_in_use "$PORT" && die "127.0.0.1:$PORT is already in use"
    port_in_use "$MON_PORT" && die "127.0.0.1:$MON_PORT (monitor) is already in use; set S3_SERVER_MON_PORT"

    mkdir -p "$DIR"/{mon,osd,rgw,run,log,crash}
    # A failed start must not leave half a cluster running; DIR (and its logs)
    # stays for inspection until `stop`.
    trap 'if (($? != 0)); then stop_daemons; fi' EXIT
    touch "$DIR/$MARKER"
    echo "$PORT" >"$DIR/port"

    local fsid
    fsid=$(cat /proc/sys/kernel/random/uuid)
    write_conf "$fsid"
    start_mon "$fsid"
    start_osd
    start_rgw
    trap - EXIT
    print_env
}

cmd_stop() {
    # Nothing there, or a start that failed before creating anything.
    if [[ ! -e $DIR ]] || [[ -d $DIR && -z $(ls -A "$DIR") ]]; then return 0; fi
    [[ -f $DIR/$MARKER ]] || die "$DIR was not created by $0; refusing to touch it"
    stop_daemons
    rm -rf "$DIR"
}

# gateway-stop / gateway-start: an outage of the S3 endpoint only (connections
# refused), with the cluster and its data kept, for fault-injection tests.
cmd_gateway_stop() {
    [[ -f $DIR/$MARKER ]] || die "$DIR was not created by $0"
    local pid
    pid=$(<"$DIR/run/$RGW_NAME.pid")
    if is_ours "$pid"; then
        kill -KILL "$pid"
        while is_ours "$pid"; do sleep 0.1; done
    fi
}

cmd_gateway_start() {
    [[ -f $DIR/$MARKER ]] || die "$DIR was not created by $0"
    alive "$RGW_NAME" && return 0
    PORT=$(<"$DIR/port")
    spawn "$RGW_NAME" radosgw --conf "$CONF" --name "$RGW_NAME" --foreground
    wait_until "radosgw on http://127.0.0.1:$PORT/" "$RGW_NAME" "$DIR/log/$RGW_NAME.log" s3_answers
}

main() {
    (($# >= 2)) || usage
    local cmd=$1
    # Absolute path: it ends up in ceph.conf and in the daemons' command lines.
    DIR=$(realpath -m "$2")
    CONF=$DIR/ceph.conf
    case $cmd in
        start)
            (($# == 3)) || usage
            PORT=$3
            [[ $PORT =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$PORT'"
            MON_PORT=${S3_SERVER_MON_PORT:-$((PORT + 1))}
            cmd_start
            ;;
        stop)
            (($# == 2)) || usage
            cmd_stop
            ;;
        gateway-stop) cmd_gateway_stop ;;
        gateway-start) cmd_gateway_start ;;
        *) usage ;;
    esac
}

main "$@"
