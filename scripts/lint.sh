#!/usr/bin/env bash
# Lint and type-check the whole tree (configured in pyproject.toml), and lint the Ansible playbooks (ansible-lint,
# from tests/fleet/requirements.txt, offline, every rule); .ci/run runs this before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
mypy
lint=$(command -v ansible-lint || true)
[ -n "$lint" ] || lint="$(dirname "$(python -c 'import sys; print(sys.executable)')")/ansible-lint"
if [ ! -x "$lint" ]; then
    echo "lint: ansible-lint is not installed (pip install -r tests/fleet/requirements.txt)" >&2
    exit 1
fi
home=$(mktemp -d)  # its caches, not in the repository
trap 'rm -rf "$home"' EXIT
(cd ansible && HOME="$home" ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_LOCAL_TEMP="$home/local" ANSIBLE_NOCOLOR=1 \
    "$lint" --offline --nocolor)
