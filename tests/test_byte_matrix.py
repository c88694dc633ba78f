"""Every objective x format x tokenizer family, with and without holdout and
dedup, keeps its bytes (tests/support/byte_matrix.py; the digests in
tests/data/byte_matrix.json).  A change that moves a cell must say so in its
commit and record the matrix again (``python -m tests.support.byte_matrix --write``)."""

import json

import pytest

from tests.support.byte_matrix import MATRIX_FILE, cases, compute, run_case, small_corpus
from tests.support.helpers import need_shared


def test_every_cell_keeps_its_bytes(tmp_path):
    need_shared()
    expected = json.loads(MATRIX_FILE.read_text())
    assert sorted(expected) == sorted(case.name for case in cases()), "the matrix file lists other cases"
    got = compute(tmp_path)
    moved = {name: sorted(set(got[name].items()) ^ set(expected[name].items()))[:2]
             for name in expected if got[name] != expected[name]}
    assert not moved, f"{len(moved)} of {len(expected)} cells moved: " + "; ".join(
        f"{name}: {diff}" for name, diff in sorted(moved.items())[:8])


#: A cell of each output format, both dedup modes (their stage files are written and read back through the
#: storage), every tokenizer family: read from gs:// and written to gs://, on the GCS emulator.
GCS_CELLS = ("bert/tfrecord/wordpiece/holdout", "roberta-none/parquet/bpe/holdout/dedup-exact",
             "tokens/megatron/unigram/dedup-minhash", "electra/parquet-binned/unigram")


@pytest.mark.gcs
def test_cells_on_gcs_keep_their_bytes(gcs, tmp_path, monkeypatch):
    need_shared()
    expected = json.loads(MATRIX_FILE.read_text())
    for name, value in gcs.env().items():
        monkeypatch.setenv(name, value)
    bucket = gcs.new_bucket("matrix")
    gcs.upload_tree(bucket, small_corpus(tmp_path), "corpus")
    selected = [case for case in cases() if case.name in GCS_CELLS]
    assert len(selected) == len(GCS_CELLS)
    for number, case in enumerate(selected):
        got = run_case(case, f"gs://{bucket}/corpus", f"gs://{bucket}/out{number}")
        assert got == expected[case.name], case.name
