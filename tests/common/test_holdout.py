"""The held-out split: a document's side depends on its id (or text) and
--holdout-seed only, and each side's records are made of its own documents
only, random next sentences included."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.readers import Document, ParseReport
from common.steps.holdout import HoldoutSplit, document_key
from common.storage import LocalStorage
from tests.support.helpers import VOCAB, need_shared
from tests.support.run_configs import steps_of
from tests.support.web_corpora import wiki_parquet
from worker.pipeline import TaskProcessor, TaskStats


def test_a_documents_side_depends_on_its_key_and_the_seed_only():
    keys = [f"doc-{i}" for i in range(20000)]
    split = HoldoutSplit(0.1, seed=0)
    held = {k for k in keys if split.held_out(k)}
    assert abs(len(held) - 2000) < 4 * math.sqrt(20000 * 0.1 * 0.9)
    assert held == {k for k in keys if HoldoutSplit(0.1, seed=0).held_out(k)}
    other = {k for k in keys if HoldoutSplit(0.1, seed=1).held_out(k)}
    assert len(held & other) < 400  # another seed, another set (~200 in common by chance)
    assert held < {k for k in keys if HoldoutSplit(0.3, seed=0).held_out(k)}  # a larger fraction adds documents
    assert not any(HoldoutSplit(0.0).held_out(k) for k in keys)
    with pytest.raises(ValueError):
        HoldoutSplit(1.0)


def test_documents_are_keyed_by_id_else_by_text():
    assert document_key(Document(0, ["a"], "7")) == document_key(Document(99, ["b"], "7"))
    assert document_key(Document(0, ["same", "text"])) == document_key(Document(5, ["same", "text"]))
    assert document_key(Document(0, ["7"])) != document_key(Document(0, ["x"], "7"))
    training, held = HoldoutSplit(0.5, 3).split([Document(i, ["t"], str(i)) for i in range(100)])
    assert len(training) + len(held) == 100 and training and held
    assert [d.offset for d in training] == sorted(d.offset for d in training)


def _config(output: Path, fraction: float) -> JobConfig:
    return JobConfig(data_uri="", output_uri=str(output), reader=Component("parquet", {}),
                     tokenizer_json="", objective=Component("bert", {"max_seq_length": 128, "dupe_factor": 2}),
                     writer=Component("tfrecord", {}),
                     steps=steps_of("blingfire", holdout_fraction=fraction, holdout_seed=11))


def _examples(path: Path) -> list[dict]:
    import tensorflow as tf

    from tests.support.tf_reader import feature_spec

    spec = feature_spec()
    dataset = tf.data.TFRecordDataset(str(path)).batch(4096).map(lambda batch: tf.io.parse_example(batch, spec))
    rows = []
    for batch in dataset:
        batch = {k: v.numpy() for k, v in batch.items()}
        rows += [{k: v[i] for k, v in batch.items()} for i in range(len(batch["input_ids"]))]
    return rows


def _segments_of(example) -> tuple[list[int], list[int]]:
    """The instance's A and B tokens, masked ones put back."""
    ids = example["input_ids"].copy()
    for position, original, weight in zip(example["masked_lm_positions"], example["masked_lm_ids"],
                                          example["masked_lm_weights"]):
        if weight > 0:
            ids[position] = original
    length = int(example["input_mask"].sum())
    first_b = int(np.argmax(example["segment_ids"]))
    return list(ids[1:first_b - 1]), list(ids[first_b:length - 1])


class _Stream:
    """Documents' token lists: is a list of tokens a contiguous part of one of them?"""

    K = 8

    def __init__(self, documents: list[list[int]]):
        self.documents = documents
        self.index: dict[tuple, list[tuple[int, int]]] = {}
        for d, tokens in enumerate(documents):
            for i in range(len(tokens) - self.K + 1):
                self.index.setdefault(tuple(tokens[i:i + self.K]), []).append((d, i))

    def contains(self, segment: list[int]) -> bool:
        if len(segment) < self.K:
            return any(tokens[i:i + len(segment)] == segment for tokens in self.documents
                       for i in range(len(tokens) - len(segment) + 1))
        return any(self.documents[d][i:i + len(segment)] == segment
                   for d, i in self.index.get(tuple(segment[:self.K]), ()))


def test_each_side_is_made_of_its_own_documents_whatever_the_task_size(tmp_path):
    need_shared()
    from bench.worker_bench import load_vocabulary

    wiki_parquet(tmp_path / "data", files=2, row_group_size=4)
    storage = LocalStorage(str(tmp_path / "data"))
    vocabulary = load_vocabulary(str(VOCAB))
    processor = TaskProcessor(_config(tmp_path / "out", 0.3), vocabulary, LocalStorage(str(tmp_path / "out")))
    split = HoldoutSplit(0.3, 11)

    sides_by_size = {}
    for task_size in (60_000, 10 ** 9):
        tasks = list(processor.reader.plan(storage.list_inputs(), task_size, storage))
        documents = [d for t in tasks for d in processor.parse(t, processor.reader.read(storage, t), ParseReport(),
                                                               TaskStats())]
        sides_by_size[task_size] = tuple(frozenset(d.id for d in side) for side in split.split(documents))
    assert sides_by_size[60_000] == sides_by_size[10 ** 9]
    training_ids, held_ids = sides_by_size[60_000]
    assert len(held_ids) > 15 and len(training_ids) > 60 and not training_ids & held_ids

    # Each side's documents as token lists (what its instances may be cut from), indexed by 8-grams.
    streams = {}
    for side, ids in (("training", training_ids), ("holdout", held_ids)):
        chosen = [d for d in documents if d.id in ids]
        tokenized, _ = processor.tokenize_documents(chosen, ParseReport(), TaskStats())
        offsets, segment_offsets = tokenized.document_offsets, tokenized.segment_offsets
        streams[side] = _Stream([tokenized.tokens[segment_offsets[offsets[i]]:segment_offsets[offsets[i + 1]]].tolist()
                                 for i in range(tokenized.num_documents)])

    tasks = list(processor.reader.plan(storage.list_inputs(), 60_000, storage))
    counts = {"training": 0, "holdout": 0}
    random_next = 0
    for task in tasks:
        result = processor.process(task, processor.reader.read(storage, task))
        assert result.records == sum(f.records for f in result.files if not f.split)
        assert result.stats.counters["holdout"]["records"] == sum(f.records for f in result.files if f.split)
        for shard in result.files:
            assert shard.name.startswith("holdout/part-") == (shard.split == "holdout")
            side = "holdout" if shard.split else "training"
            for example in _examples(tmp_path / "out" / shard.name):
                a, b = _segments_of(example)
                for segment in (a, b):
                    assert streams[side].contains(segment), (side, shard.name)
                counts[side] += 1
                random_next += int(example["next_sentence_labels"][0])
    assert counts["training"] > 1000 and counts["holdout"] > 200 and random_next > 300


def test_the_wire_carries_held_out_files_and_counts_and_checks_their_types():
    from common.wire import protocol
    from common.writers import ShardFile

    ack = protocol.TaskAck("t", "j", "w", "a.parquet", 0, 10, "v",
                           [ShardFile("part-t.tfrecord", 3, "ab", 10), ShardFile("holdout/part-t.tfrecord", 1, "cd", 5,
                                                                                 split="holdout")],
                           3, protocol.AckStats(documents=4, counters={"holdout": {"documents": 1, "tokens": 9, "records": 1}}))
    assert protocol.decode(protocol.encode(ack)) == ack
    import msgpack

    frame = msgpack.unpackb(protocol.encode(ack))
    frame["shards"][1]["split"] = True
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(msgpack.packb(frame))
    frame["shards"][1]["split"] = "holdout"
    frame["stats"]["counters"]["holdout"] = {"documents": 1.5}
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(msgpack.packb(frame))


def test_the_manifest_counts_each_side():
    from common.output.manifest import Work
    from sink.manifest import Manifest

    manifest = Manifest.__new__(Manifest)
    manifest.work = Work()
    manifest.done, manifest.totals = {}, {"tasks": 0, "shards": 0, "records": 0, "documents": 0, "tokens": 0,
                                          "bytes_written": 0, "skipped_documents": {}}
    manifest._count({"task": "a", "records": 3, "documents": 4, "tokens": 50, "bytes": 15,
                     "shards": [{"name": "part-a.tfrecord", "records": 3},
                                {"name": "holdout/part-a.tfrecord", "records": 1, "holdout": True}],
                     "holdout": {"documents": 1, "tokens": 9, "records": 1}})
    manifest._count({"task": "b", "records": 2, "documents": 2, "tokens": 20, "bytes": 5,
                     "shards": [{"name": "part-b.tfrecord", "records": 2}], "holdout": {"documents": 0, "tokens": 0,
                                                                                      "records": 0}})
    assert manifest.totals["shards"] == 2 and manifest.totals["records"] == 5 and manifest.totals["documents"] == 6
    assert manifest.totals["holdout"] == {"shards": 1, "records": 1, "documents": 1, "tokens": 9}
    # The sink's Prometheus metrics show the held-out side beside the training side's totals.
    from sink.server import SinkOptions, SinkServer

    sink = SinkServer(SinkOptions(ventilator="127.0.0.1:1"))
    sink.manifest = manifest
    (family,) = [m for m in sink.metrics() if m.name == "mlm_sink_holdout"]
    assert {s.labels["quantity"]: s.value for s in family.samples if s.name.endswith("_total")} == \
        {"shards": 1, "records": 1, "documents": 1, "tokens": 9}
