#!/usr/bin/env bash
# The readers' install as a user makes it: a fresh venv (none of this machine's packages), the README's
# `pip install '.[readers]'` line run in it as written (pip resolves MosaicML streaming's own pins: numpy<2.2,
# transformers<5, torch with the torchvision made for it), then tests/e2e/readers_venv.py's check with that venv's
# python and no stub: the README's ModernBERT commands write MDS and LitData outputs, and streaming, ModernBERT's
# reader contracts and LitData read every document equal to the tokenizer's encoding.  Used by .ci/run, apart from
# the suite (the venv is ~6 GB: torch's CUDA build, which runs on the CPU).  Time budget: the install 30 minutes,
# the check 15 (measured: docs/formats.md, "Installing the readers").
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/mlm-readers-venv.XXXXXX")
trap 'rm -rf "$work"' EXIT

line=$(python -m tests.e2e.readers_venv install-line)
python -m venv "$work/venv"
start=$SECONDS
echo "readers-venv: $line"
# as a user runs it: the venv's pip first on PATH, from the checkout
rc=0
(cd "$repo" && PATH="$work/venv/bin:$PATH" VIRTUAL_ENV="$work/venv" timeout 1800 bash -c "$line --quiet") \
    >"$work/install.log" 2>&1 || rc=$?
grep -v -e "^WARNING: Running pip as the 'root' user" -e "is ignored: it is neither a file nor a directory" \
    "$work/install.log" || true
if [ "$rc" -ne 0 ]; then
    echo "readers-venv: '$line' failed (exit $rc)" >&2
    exit 1
fi
installed=$SECONDS
echo "readers-venv: installed in $((installed - start)) s, $(du -sm "$work/venv" | cut -f1) MB"
"$work/venv/bin/python" -m pip check || { echo "readers-venv: the venv's dependencies conflict" >&2; exit 1; }
timeout 900 "$work/venv/bin/python" -m tests.e2e.readers_venv check
echo "readers-venv: checked in $((SECONDS - installed)) s"
