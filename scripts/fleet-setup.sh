#!/usr/bin/env bash
# Test hosts for the fleet playbooks: network namespaces on a bridge in
# 10.213.0.0/24, each with its own sshd (key-only, a key made for the fleet).
#
#   sudo scripts/fleet-setup.sh up DIR [HOSTS]   # default 4 hosts; host 0 = ventilator
#   sudo scripts/fleet-setup.sh down DIR
#   sudo scripts/fleet-setup.sh cleanup [--all]  # leftovers of dead test runs (--all: every fleet)
#   scripts/fleet-setup.sh list
#
# After `up`, DIR/inventory.yml is an Ansible inventory in the shape Terraform
# renders (groups ventilator/worker), with the ssh settings and a per-host
# install dir (the hosts share this machine's filesystem) and
# mlm_process_manager=pidfile (no systemd in a namespace):
#
#   cd ansible && ansible-playbook -i DIR/inventory.yml ping.yaml
#   ansible-playbook -i DIR/inventory.yml job.yaml -e mlm_output=DIR/out \
#       -e mlm_data=$PWD/../../shared/corpus/wiki -e mlm_vocab_file=... \
#       -e mlm_venv_site_packages=true -e mlm_pip_extra_args=--no-deps
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PYTHON:-python3}
tool=("$py" "$here/../tests/fleet/fleetnet.py")
cmd=${1:-}
case $cmd in
    up)
        [[ $# -ge 2 ]] || { echo "usage: $0 up DIR [HOSTS]" >&2; exit 2; }
        exec "${tool[@]}" up --dir "$2" --hosts "${3:-4}" --python "$("$py" -c 'import sys; print(sys.executable)')"
        ;;
    down)
        [[ $# -eq 2 ]] || { echo "usage: $0 down DIR" >&2; exit 2; }
        exec "${tool[@]}" down --dir "$2"
        ;;
    cleanup)
        shift
        exec "${tool[@]}" cleanup "$@"
        ;;
    list)
        exec "${tool[@]}" list
        ;;
    *)
        sed -n '2,20p' "$0" >&2
        exit 2
        ;;
esac
