"""The mds and litdata writers alone: records in, files out, the same records read back through the axis
(one step for fixed-length records, sample by sample for variable ones), and files cut at the size limit.
Their own libraries read real jobs' outputs in tests/e2e/test_streaming_formats.py."""

import numpy as np
import pytest

from common.job.params import NoParams
from common.objectives.base import Batch, Feature, Ragged
from common.storage import LocalStorage
from common.writers import sample_shards, writer_named

FIXED = [Feature("input_ids", "int32", 5), Feature("masked_lm_weights", "float32", 2),
         Feature("next_sentence_labels", "int32", 1)]
VARIABLE = [Feature("input_ids", "int32", None), Feature("document_id", "int64", 1), Feature("chunk_index", "int32", 1)]


def batch_of(features, records, rng):
    columns = {}
    for f in features:
        if f.length is None:
            lengths = rng.integers(1, 400, size=records)
            columns[f.name] = Ragged(rng.integers(0, 30000, size=lengths.sum()).astype(f.dtype), lengths)
        else:
            columns[f.name] = rng.integers(0, 2 ** 40 if f.dtype == "int64" else 1000,
                                           size=(records, f.length)).astype(f.dtype)
    return Batch(columns)


def same(read, batch, features):
    for f in features:
        got, want = read[f.name], batch.columns[f.name]
        if f.length is None:
            assert isinstance(got, Ragged) and np.array_equal(got.lengths, want.lengths)
            assert np.array_equal(got.values, want.values)
        elif f.length == 1:
            assert got.shape == (len(batch),) and np.array_equal(got, np.asarray(want).reshape(-1))
        else:
            assert np.array_equal(got, want) and got.dtype == np.dtype(f.dtype)


@pytest.mark.parametrize("fmt", ["mds", "litdata"])
@pytest.mark.parametrize("features", [FIXED, VARIABLE], ids=["fixed", "variable"])
def test_records_come_back_as_written_across_files(tmp_path, monkeypatch, fmt, features):
    monkeypatch.setattr(sample_shards, "SIZE_LIMIT", 4_000)  # a few files per task
    rng = np.random.default_rng(1)
    batches = [batch_of(features, n, rng) for n in (300, 1, 57)]
    writer_class = writer_named(fmt)
    storage = LocalStorage(str(tmp_path))
    params = writer_class.make_params({"ids_dtype": "int32"} if fmt == "mds" else {})  # the dtypes as declared
    with writer_class(params, features).writing(storage, "holdout/part-t") as out:
        for batch in batches:
            out.write(batch)
        files = out.commit()
    assert len(files) > 2 and [f.name for f in files[:2]] == [f"holdout/part-t.{fmt}", f"holdout/part-t-00001.{fmt}"]
    assert all(f.bytes <= 4_000 + 2_000 for f in files), "cut near the limit (one sample may pass it)"
    columns = {f.name: [] for f in features}
    for shard in files:
        data = storage.get_bytes(shard.name)
        assert writer_class.count_records(shard.name, data) == shard.records
        read = writer_class.read_columns(shard.name, data, storage.get_bytes)
        for name in columns:
            columns[name].append(read[name])
    for f in features:
        parts = columns[f.name]
        columns[f.name] = Ragged(np.concatenate([p.values for p in parts]), np.concatenate([p.lengths for p in parts])) \
            if f.length is None else np.concatenate(parts)
    whole = {f.name: (Ragged(np.concatenate([b.columns[f.name].values for b in batches]),
                             np.concatenate([b.columns[f.name].lengths for b in batches])) if f.length is None
                      else np.concatenate([b.columns[f.name] for b in batches])) for f in features}
    same(columns, Batch(whole), features)


@pytest.mark.parametrize("fmt", ["mds", "litdata"])
def test_a_cut_file_is_refused(tmp_path, fmt):
    storage = LocalStorage(str(tmp_path))
    writer_class = writer_named(fmt)
    with writer_class(NoParams(), VARIABLE).writing(storage, "part-t") as out:
        out.write(batch_of(VARIABLE, 10, np.random.default_rng(2)))
        (shard,) = out.commit()
    data = storage.get_bytes(shard.name)
    for broken in (data[:-1], data[:6], data[:40]):
        with pytest.raises(ValueError):
            writer_class.count_records(shard.name, broken)
