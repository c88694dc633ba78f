#!/usr/bin/env bash
# build-sdist.sh CHECKOUT OUTDIR: build a source distribution of CHECKOUT into OUTDIR and print its path. Used
# by init.yaml (mlm_install_source=checkout) on the controller. Not a wheel: the compiled kernels
# (common/_kernels.c) make a wheel specific to the platform and Python that built it, and the controller (a
# laptop on macOS, another Python, x86_64 beside aarch64 hosts) is not the hosts; each host builds the sdist
# itself, with its own compiler, or without one runs the numpy code.
#
# The checkout is copied first (without .git, build leftovers and tool caches: a development checkout or CI's
# holds hundreds of MB of them, .ci/transformers4 and .mypy_cache, none of which an sdist ships) so it is never
# written to, and the archive is
# written again in a fixed order with fixed times and owners: the same source gives the same bytes, so the file
# is replaced only when its content changed and a second init.yaml run copies and installs nothing.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 CHECKOUT OUTDIR" >&2; exit 2; }
src=$(cd "$1" && pwd)
out=$2
py=${PYTHON:-python3}
[[ -f $src/setup.cfg || -f $src/pyproject.toml ]] || { echo "build-sdist: $src is not a Python project" >&2; exit 1; }
mkdir -p "$out"
stage=$(mktemp -d "${TMPDIR:-/tmp}/mlm-sdist.XXXXXX")
trap 'rm -rf "$stage"' EXIT
tar -C "$src" \
    --exclude=.git --exclude=.ci --exclude=.mypy_cache --exclude=.ruff_cache --exclude=.hypothesis \
    --exclude=.benchmarks --exclude=build --exclude=dist --exclude='*.egg-info' --exclude=__pycache__ \
    --exclude='*.so' --exclude='*.pyd' \
    --exclude=.terraform --exclude=.pytest_cache --exclude=.venv --exclude=venv --exclude=node_modules \
    -cf - . | tar -C "$stage/" -xf - --no-same-owner
mkdir -p "$stage/.sdist"
# setuptools' own PEP 517 hook: no download, no build isolation needed for an sdist.
(cd "$stage" && "$py" -c 'import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))' \
    "$stage/.sdist" >&2)
shopt -s nullglob
built=("$stage"/.sdist/*.tar.gz)
[[ ${#built[@]} -eq 1 ]] || { echo "build-sdist: expected one sdist, got ${#built[@]}" >&2; exit 1; }
target=$out/$(basename "${built[0]}")
"$py" - "${built[0]}" "$target.tmp$$" <<'PY'
"""Write the sdist again, reproducibly: members sorted, mtime 0 in the gzip header, fixed mtimes and owners."""
import gzip
import sys
import tarfile

source, target = sys.argv[1], sys.argv[2]
with tarfile.open(source, "r:gz") as archive:
    members = sorted(archive.getmembers(), key=lambda m: m.name)
    with open(target, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as result:
        for member in members:
            data = archive.extractfile(member) if member.isfile() else None
            member.mtime, member.uid, member.gid, member.uname, member.gname = 315532800, 0, 0, "", ""
            member.pax_headers = {}
            result.addfile(member, data)
PY
if cmp -s "$target.tmp$$" "$target"; then
    rm -f "$target.tmp$$"
else
    mv "$target.tmp$$" "$target"
fi
echo "$target"
