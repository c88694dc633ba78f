#!/usr/bin/env bash
# The byte matrix, BERT's golden shards and the objectives' tests on an install without the compiled kernels, as
# a machine with no C compiler gets it (docs/design.md, "Compiled kernels"): the project installed with
# CC=/bin/false into a virtual environment sharing this Python's packages, the tests run from a copy of the
# tracked files (no extension built in place there).  Fails if the extension is there or the kernels say other
# than numpy.  Arguments, if any, are pytest's instead of that selection.  Used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# The byte matrix and BERT's golden shards skip without ../shared (the corpus and vocabulary): the step would pass
# having checked none of their bytes.  Refused instead, for the default selection.
if [ $# -eq 0 ] && { [ ! -d "$repo/../shared/corpus/wiki" ] || [ ! -f "$repo/../shared/vocab/bert-base-uncased-vocab.txt" ]; }; then
    echo "numpy-only: needs ../shared (corpus/wiki and vocab/bert-base-uncased-vocab.txt) beside $repo: without it the byte matrix and BERT's golden shards skip" >&2
    exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/mlm-numpy-only.XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir "$work/src"
git ls-files -z | (cd "$repo" && xargs -0 cp --parents -t "$work/src" 2>/dev/null || true)
ln -s "$repo/../shared" "$work/shared"  # the tests' real Wikipedia sample and vocabulary (tests/support/helpers.py)
python -m venv --system-site-packages "$work/venv"
python="$work/venv/bin/python"
# A compiler that always fails: setup.py's extension is optional, so the install goes on without it.
CC=/bin/false CXX=/bin/false "$python" -m pip install --quiet --no-deps --no-build-isolation --no-cache-dir \
    "$work/src" 2>&1 | grep -v "^WARNING: Running pip as the 'root' user" || true
rm -rf "$work/src/build"

site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ ! -f "$site/common/kernels.py" ]; then
    echo "numpy-only: the project is not installed in $site" >&2
    exit 1
fi
built=$(find "$site/common" "$work/src/common" -name '_kernels*.so' -o -name '_kernels*.pyd')
if [ -n "$built" ]; then
    echo "numpy-only: the extension was built all the same: $built" >&2
    exit 1
fi
expected="numpy (common/_kernels.c is not built here)"
for where in / "$work/src"; do  # the installed copy, and the copy the tests run from
    status=$(cd "$where" && env -u MLM_PIPELINE_NUMPY_KERNELS "$python" -c 'import common.kernels as k; print(k.status)')
    if [ "$status" != "$expected" ]; then
        echo "numpy-only: kernels in $where say '$status', not '$expected'" >&2
        exit 1
    fi
done
echo "numpy-only: installed without the extension; kernels: $status"

# The golden shards' "compiled" cells assert the extension is there: the numpy ones are this install's.  The byte
# matrix is one test running every cell in turn, on numpy here: pytest's 600 s limit is raised for it.
selection=(-m "not gcs" -k "not (test_bert_shards_keep_their_bytes and compiled)" --timeout 1800
           tests/test_byte_matrix.py tests/test_bert_golden.py tests/common/objectives)
if [ $# -gt 0 ]; then
    selection=("$@")
fi
cd "$work/src"
env -u MLM_PIPELINE_NUMPY_KERNELS "$python" -m pytest -q "${selection[@]}"
