#!/usr/bin/env bash
# The fleet's install-heavy checks, as their own step of .ci/run rather than inside `python -m pytest` (whose clock
# is the suite's: under 20 minutes on 2 cores); no test_ prefix, so the suite does not collect them:
#   tests/fleet/fleet_netns.py     the multi-host job over ssh: 4 hosts in network namespaces, a real sshd each,
#                                  the Ansible playbooks; each host builds the sdist in a venv of its own, one
#                                  installs a pinned version too (needs root, iproute2, openssh-server)
#   tests/fleet/fleet_gcp_boot.py  the Google Cloud walk-through's startup scripts booted in mount namespaces: each
#                                  VM fetches the sdist from the GCS emulator and builds it (root, terraform)
# Both need ../shared.  A skip fails the step (a check CI must run is not passed by skipping).  Arguments are
# pytest's, given to each file's run.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp "${TMPDIR:-/tmp}/mlm-fleet-installs.XXXXXX")
trap 'rm -f "$log"' EXIT
# One pytest process per file: the netns test makes its process a subreaper (fleetnet.become_subreaper), and a VM
# service of the boot test that exits is then left a zombie the boot test's /proc wait never sees end.
for file in tests/fleet/fleet_netns.py tests/fleet/fleet_gcp_boot.py; do
    rc=0
    timeout 1800 python -m pytest -n 0 -rs --durations=5 "$file" "$@" 2>&1 | tee "$log" || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "fleet-installs: $file failed (exit $rc)" >&2
        exit 1
    fi
    if ! grep -Eq '^=+ [0-9]+ passed in ' "$log"; then
        echo "fleet-installs: $file did not run every test (skipped or deselected): see the reasons above" >&2
        exit 1
    fi
done
