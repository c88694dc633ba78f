"""Every objective x format x tokenizer family, with and without holdout and
dedup, keeps its bytes (tests/byte_matrix.py; the digests in
tests/data/byte_matrix.json).  A change that moves a cell must say so in its
commit and record the matrix again (``python -m tests.byte_matrix --write``)."""

import json

from tests.byte_matrix import MATRIX_FILE, cases, compute
from tests.helpers import need_shared


def test_every_cell_keeps_its_bytes(tmp_path):
    need_shared()
    expected = json.loads(MATRIX_FILE.read_text())
    assert sorted(expected) == sorted(case.name for case in cases()), "the matrix file lists other cases"
    got = compute(tmp_path)
    moved = {name: sorted(set(got[name].items()) ^ set(expected[name].items()))[:2]
             for name in expected if got[name] != expected[name]}
    assert not moved, f"{len(moved)} of {len(expected)} cells moved: " + "; ".join(
        f"{name}: {diff}" for name, diff in sorted(moved.items())[:8])
