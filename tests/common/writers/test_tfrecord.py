"""The TFRecord format reads what it writes: a real job's files through the axis, judged by TensorFlow's reader."""

import json

import numpy as np
import pytest

from common.writers import writer_named
from tests.common.writers.jobs import listed_files, read_through_axis, run_job, small_corpus

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=["plain", "gzip"])
def output(request, tmp_path_factory):
    corpus = small_corpus(tmp_path_factory.mktemp("corpus") / "wiki")
    args = ["--gzip"] if request.param == "gzip" else []
    return run_job(corpus, tmp_path_factory.mktemp(request.param) / "out", *args)


def tensorflow_records(path, info) -> list[dict]:
    import tensorflow as tf

    from tests.support.tf_reader import read_with_spec

    spec = {name: tf.io.FixedLenFeature(f["shape"], tf.float32 if f["dtype"].startswith("float") else tf.int64)
            for name, f in info["features"].items()}
    return read_with_spec(str(path), spec, "GZIP" if info["format_details"]["compression"] else "")


def test_every_file_is_the_formats_and_reads_back_as_tensorflow_reads_it(output):
    info = json.loads((output / "dataset_info.json").read_text())
    files = listed_files(output)
    assert len(files) >= 2
    for listed in files:
        writer, columns, records = read_through_axis(output, listed["name"])
        assert writer is writer_named("tfrecord")
        theirs = tensorflow_records(output / listed["name"], info)
        assert len(records) == len(theirs) == listed["records"] > 0
        for ours, reference in zip(records, theirs):
            assert set(ours) == set(reference) == set(info["features"])
            for key in reference:
                assert ours[key].shape == reference[key].shape
                np.testing.assert_array_equal(ours[key], reference[key].astype(ours[key].dtype))
        for key, column in columns.items():  # the columns: (records, length) arrays, the records stacked
            assert column.shape == (len(records), info["features"][key]["shape"][0])
            np.testing.assert_array_equal(column[-1], records[-1][key])


def test_a_damaged_file_is_a_value_error_naming_the_fault(output):
    listed = listed_files(output)[0]
    data = bytearray((output / listed["name"]).read_bytes())
    data[len(data) // 2] ^= 0xFF
    writer = writer_named("tfrecord")
    with pytest.raises(ValueError, match="checksum|gzip|CRC|corrupt"):
        list(writer.read_records(listed["name"], bytes(data)))
