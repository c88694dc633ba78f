#!/usr/bin/env bash
# build-wheel.sh CHECKOUT OUTDIR: build a wheel of CHECKOUT into OUTDIR and
# print its path. Used by init.yaml (mlm_install_source=checkout) on the
# controller. The checkout is copied first (without .git and build leftovers)
# so it is never written to, and SOURCE_DATE_EPOCH makes the same source give
# the same bytes (the C extension's paths mapped too): the wheel is replaced only when its content changed, so a
# second init.yaml run copies and installs nothing.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 CHECKOUT OUTDIR" >&2; exit 2; }
src=$(cd "$1" && pwd)
out=$2
py=${PYTHON:-python3}
[[ -f $src/setup.cfg || -f $src/pyproject.toml ]] || { echo "build-wheel: $src is not a Python project" >&2; exit 1; }
mkdir -p "$out"
stage=$(mktemp -d "${TMPDIR:-/tmp}/mlm-wheel.XXXXXX")
trap 'rm -rf "$stage"' EXIT
tar -C "$src" \
    --exclude=.git --exclude=build --exclude=dist --exclude='*.egg-info' --exclude=__pycache__ \
    --exclude=.terraform --exclude=.pytest_cache --exclude=.venv --exclude=venv --exclude=node_modules \
    -cf - . | tar -C "$stage/" -xf - --no-same-owner
mkdir -p "$stage/.wheel"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-315532800}
# The compiled kernels (setup.py) would carry the stage's random path in their debug information.
export CFLAGS="${CFLAGS:-} -ffile-prefix-map=$stage=."
args=(--no-deps --quiet --wheel-dir "$stage/.wheel")
# Reuse the controller's setuptools/wheel when it has them (no download).
if "$py" -c 'import setuptools, wheel' 2>/dev/null; then args+=(--no-build-isolation); fi
(cd "$stage" && "$py" -m pip wheel "${args[@]}" . >&2)
shopt -s nullglob
built=("$stage"/.wheel/*.whl)
[[ ${#built[@]} -eq 1 ]] || { echo "build-wheel: expected one wheel, got ${#built[@]}" >&2; exit 1; }
target=$out/$(basename "${built[0]}")
if ! cmp -s "${built[0]}" "$target"; then
    cp "${built[0]}" "$target.tmp$$"
    mv "$target.tmp$$" "$target"
fi
echo "$target"
