#!/usr/bin/env bash
# The fleet tests' own setup and run, for .ci/run (or by hand):
#
#   scripts/fleet-ci.sh deps   # pip + apt packages the fleet tests need (idempotent)
#   scripts/fleet-ci.sh test   # deps, then pytest tests/fleet, then scripts/fleet-installs.sh (root)
#
# Terraform: `terraform test`/`fmt` run when a terraform (>= 1.6) or tofu binary
# is on PATH; no registry this project reaches ships one (see docs/fleet.md),
# so without it those tests skip with that reason and the python-hcl2
# structural tests still run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-python3}

deps() {
    "$py" -m pip install --quiet -r "$here/tests/fleet/requirements.txt"
    if [[ $(id -u) -eq 0 ]]; then
        need=()
        [[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
        command -v ssh >/dev/null || need+=(openssh-client)
        command -v ip >/dev/null || need+=(iproute2)
        if [[ ${#need[@]} -gt 0 ]]; then
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
            # The package starts a system sshd on port 22 of every interface: the tests do not use it.
            if command -v systemctl >/dev/null && systemctl is-active --quiet ssh 2>/dev/null; then
                systemctl stop ssh || true
            fi
        fi
    fi
}

case ${1:-test} in
    deps) deps ;;
    test)
        deps
        cd "$here"
        "$py" -m pytest -q tests/fleet "${@:2}"
        exec bash scripts/fleet-installs.sh
        ;;
    *) echo "usage: $0 deps|test [pytest args]" >&2; exit 2 ;;
esac
