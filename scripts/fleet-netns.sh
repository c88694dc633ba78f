#!/usr/bin/env bash
# The multi-host job over ssh (tests/fleet/fleet_netns.py): 4 hosts in network namespaces with a real sshd each,
# driven by the Ansible playbooks; every host builds the sdist in a venv of its own, one installs a pinned version
# too.  Those installs are minutes of building, so it runs as its own step of .ci/run, not inside `python -m
# pytest` (whose clock is the suite's: under 20 minutes on 2 cores).  Needs root, iproute2, openssh-server and
# ../shared; a skip fails the step (a check CI must run is not passed by skipping).  Arguments are pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp "${TMPDIR:-/tmp}/mlm-fleet-netns.XXXXXX")
trap 'rm -f "$log"' EXIT
rc=0
timeout 1800 python -m pytest -n 0 -rs --durations=5 tests/fleet/fleet_netns.py "$@" 2>&1 | tee "$log" || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "fleet-netns: failed (exit $rc)" >&2
    exit 1
fi
if ! grep -Eq '^=+ [0-9]+ passed in ' "$log"; then
    echo "fleet-netns: the multi-host test did not run (skipped or deselected): see its reason above" >&2
    exit 1
fi
