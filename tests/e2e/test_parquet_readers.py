"""A Parquet output read by the libraries users reach for, each from the path the README names, the training
and held-out sides apart: ``pandas.read_parquet(OUT/train)``, ``pyarrow.dataset.dataset(OUT/train)``,
``polars.read_parquet(OUT/train/**/*.parquet)``, duckdb's ``FROM 'OUT/train/**/*.parquet'`` and
``datasets.load_dataset(OUT)`` (splits ``train`` and ``validation``); ``OUT/validation`` for the held-out side.
The job's own files (the card, dataset_info.json, the manifest, the tokenizer) stay at the root, where they were
beside the shards and every one of these readers failed on them.  On gs:// (the GCS emulator), pyarrow's own
GCS filesystem reads the same paths.

Real command lines (``python -m ventilator``), holdout on; the oracle is the format's own reading of each file
(the one mlm-verify, the loader and mlm-report use), whose records equal the tokenizer's encoding elsewhere
(tests/e2e/test_streaming_formats.py)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

import numpy as np
import pytest

from tests.common.writers.jobs import read_through_axis
from tests.support.helpers import VOCAB, need_shared, run_ventilator

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--task-size", "24K", "--objective", "tokens", "--max-seq-length", "128",
       "--segmenter", "line", "--holdout-fraction", "0.25", "--output-format", "parquet", "--workers", "2"]
SIDES = {"train": "train", "validation": "validation"}  # card split -> directory


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from tests.support.web_corpora import wiki_articles

    need_shared()
    root = tmp_path_factory.mktemp("corpus")
    rows = [{"id": a.id, "text": a.text} for a in wiki_articles()[:24]]
    (root / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture(scope="module")
def output(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("parquet") / "out"
    result = run_ventilator(corpus, out, *JOB, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def rows_key(row: dict) -> str:
    """A record as one string, whichever library gave it (numpy arrays, lists, numpy or Python scalars)."""
    return json.dumps({k: np.asarray(v).reshape(-1).tolist() if np.ndim(v) else np.asarray(v).item()
                       for k, v in row.items()}, sort_keys=True)


def written(output) -> dict[str, Counter]:
    """Each side's records as the format reads them back, by card split."""
    sides: dict[str, Counter] = {}
    for entry in map(json.loads, (output / "manifest.jsonl").read_text().splitlines()):
        for f in entry["shards"]:
            split = "validation" if f.get("split") else "train"
            assert f["name"].startswith(f"{SIDES[split]}/") and "/part-" in f["name"], f["name"]
            records = read_through_axis(output, f["name"])[2]
            sides.setdefault(split, Counter()).update(rows_key(r) for r in records)
    return sides


def frame_rows(frame) -> Counter:
    return Counter(rows_key(row) for row in frame.to_dict("records"))


def test_every_library_reads_each_side_from_its_documented_path(output):
    import datasets
    import duckdb
    import pandas as pd
    import polars as pl
    import pyarrow.dataset as ds

    expected = written(output)
    assert set(expected) == {"train", "validation"} and all(expected.values())
    train_docs = {json.loads(k)["document_id"] for k in expected["train"]}
    held_docs = {json.loads(k)["document_id"] for k in expected["validation"]}
    assert train_docs and held_docs and not train_docs & held_docs, "the sides share no document"
    root_files = sorted(p.name for p in output.iterdir() if p.is_file())
    assert {"README.md", "dataset_info.json", "manifest.jsonl"} <= set(root_files)
    assert not [n for n in root_files if n.endswith(".parquet")]
    for split, directory in SIDES.items():
        path = output / directory
        assert sorted(p.suffix for p in path.iterdir()) == [".parquet"] * len(list(path.iterdir()))
        assert frame_rows(pd.read_parquet(path)) == expected[split], f"pandas, {split}"
        assert frame_rows(ds.dataset(path).to_table().to_pandas()) == expected[split], f"pyarrow.dataset, {split}"
        assert frame_rows(pl.read_parquet(f"{path}/**/*.parquet").to_pandas()) == expected[split], f"polars, {split}"
        assert frame_rows(duckdb.sql(f"FROM '{path}/**/*.parquet'").df()) == expected[split], f"duckdb, {split}"
    loaded = datasets.load_dataset(str(output))
    assert sorted(loaded) == ["train", "validation"]
    for split in SIDES:
        assert frame_rows(loaded[split].to_pandas()) == expected[split], f"datasets, {split}"


def test_the_output_is_read_on_gcs_by_the_same_paths(corpus, gcs, output, tmp_path):
    """The same job to gs://: the same files under the same names, and pyarrow's GCS filesystem reads each
    side's directory with pyarrow.dataset and pandas."""
    import pandas as pd
    import pyarrow.dataset as ds
    from pyarrow import fs

    bucket = gcs.new_bucket("pq")
    result = run_ventilator(corpus, f"gs://{bucket}/out", *JOB, env=gcs.env(), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    host = gcs.url.split("://", 1)[1].rstrip("/")
    gcsfs = fs.GcsFileSystem(anonymous=True, endpoint_override=host, scheme="http",
                              retry_time_limit=timedelta(seconds=5))
    expected = written(output)
    for split, directory in SIDES.items():
        where = f"{bucket}/out/{directory}"
        assert frame_rows(ds.dataset(where, filesystem=gcsfs).to_table().to_pandas()) == expected[split]
        assert frame_rows(pd.read_parquet(where, filesystem=gcsfs)) == expected[split]


def test_binned_output_keeps_each_side_apart_and_load_dataset_finds_the_bins(corpus, tmp_path):
    """--bin-size: train/bin-K/ and validation/bin-K/; pandas reads a side's bins together, the card a bin alone."""
    import datasets
    import pandas as pd

    out = tmp_path / "out"
    job = [a if a != "tokens" else "roberta" for a in JOB] + ["--masking", "none", "--bin-size", "64"]
    result = run_ventilator(corpus, out, *job, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = written(out)
    bins = sorted(p.relative_to(out).as_posix() for p in out.glob("*/bin-*"))
    assert bins and all(b.split("/")[0] in SIDES.values() for b in bins)
    for split, directory in SIDES.items():
        assert frame_rows(pd.read_parquet(out / directory)) == expected[split]
    loaded = datasets.load_dataset(str(out))
    for split in SIDES:
        assert frame_rows(loaded[split].to_pandas()) == expected[split], f"datasets, {split}"
