#!/usr/bin/env bash
# The README's commands after their install lines, in fresh venvs (no system site-packages) over a fresh `git clone`
# of this checkout's HEAD (uncommitted changes are not in it), so nothing is built in place: the compiled kernels
# come from the README's `pip install .`.
# tests/e2e/readme_venvs.py says which README command runs in which venv (its COVERAGE table) and checks each:
#   base:    `pip install .` as written, `pip check`; the quick start, Recipes, Tokenizers, Output formats, the
#            loader (with the section's LoaderClient snippet), the fleet's mlm-keys, ventilator and workers (CURVE),
#            the held-out split's s3:// command against a Ceph radosgw (scripts/s3-server.sh);
#   report:  `pip install '.[report]'` into that venv, then `mlm-report`;
#   gcs:     `pip install '.[gcs]'` into that venv, then its client imports;
#   trainer: a venv of its own, the ModernBERT section's install line, then that section's commands.
# The readers' install is scripts/readers-venv.sh.  Used by .ci/run, apart from the suite; prints each install's and
# check's time.  Time budget: each install 30 minutes, each check 20, the whole step 60 (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/mlm-readme-venvs.XXXXXX")
trap 'rm -rf "$work"' EXIT
# a new user's environment: no project setting by variable, nothing on the path but the venv's
unset PYTHONPATH
while read -r name; do unset "$name"; done < <(env | sed -n 's/^\(MLM_[A-Za-z0-9_]*\)=.*/\1/p')

module=tests.e2e.readme_venvs
started=$SECONDS

# install NAME VENV CLONE: the README lines that make NAME, run as written in CLONE with VENV's pip first on PATH.
install() {
    local name=$1 venv=$2 clone=$3 line rc=0 start=$SECONDS
    while IFS= read -r line; do
        echo "readme-venvs: $name: $line"
        (cd "$clone" && PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv" timeout 1800 bash -c "$line --quiet") \
            >"$work/install.log" 2>&1 || rc=$?
        grep -v -e "^WARNING: Running pip as the 'root' user" -e "is ignored: it is neither a file nor a directory" \
            "$work/install.log" || true
        if [ "$rc" -ne 0 ]; then
            echo "readme-venvs: $name: '$line' failed (exit $rc)" >&2
            exit 1
        fi
    done < <(cd "$clone" && python -m $module install-lines "$name")
    "$venv/bin/python" -m pip check || { echo "readme-venvs: $name: the venv's dependencies conflict" >&2; exit 1; }
    echo "readme-venvs: $name: installed in $((SECONDS - start)) s, $(du -sm "$venv" | cut -f1) MB"
}

# check NAME VENV CLONE WORK: the commands the table gives NAME, with VENV's python, cwd CLONE, inputs in WORK.
check() {
    local name=$1 venv=$2 clone=$3 start=$SECONDS
    (cd "$clone" && PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv" timeout 1200 "$venv/bin/python" -m $module check \
        "$name" "$4")
    echo "readme-venvs: $name: checked in $((SECONDS - start)) s"
}

git clone --quiet "$repo" "$work/clone"
git clone --quiet "$repo" "$work/trainer-clone"   # its `pip install -e` builds in place: a clone of its own
mkdir -p "$work/base" "$work/trainer"

python -m venv "$work/venv"
install base "$work/venv" "$work/clone"
check base "$work/venv" "$work/clone" "$work/base"
# the extras' lines into the same venv, as a user adds them; mlm-report reads the quick start's output
for extra in report gcs; do
    install $extra "$work/venv" "$work/clone"
    check $extra "$work/venv" "$work/clone" "$work/base"
done

python -m venv "$work/trainer-venv"
install trainer "$work/trainer-venv" "$work/trainer-clone"
check trainer "$work/trainer-venv" "$work/trainer-clone" "$work/trainer"
echo "readme-venvs: every README command the table runs on one machine ran, in $((SECONDS - started)) s"
