"""ELECTRA's examples on the real Wikipedia sample with the real vocabulary,
against google-research/electra's algorithm (tests/common/objectives/electra_reference.py) on
the very token lists our worker produced.

Two checks: given the same random stream, the bulk planner makes exactly
the reference's examples; and with our own seeds (derived from seed, task
and pass), the statistics of our examples fall within the reference's own
seed-to-seed spread.
"""

import random

import numpy as np
import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import Task
from common.objectives.electra import ElectraObjective, ElectraParams, lay_out_examples, plan_examples
from common.tokenization import Vocabulary, load_tokenizer
from tests.common.objectives import electra_reference
from tests.support.helpers import VOCAB, WIKI, need_shared
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor, TaskStats

SEEDS = 24


@pytest.fixture(scope="module", params=["line", "blingfire"])
def corpus(request):
    """wiki_00 tokenized by the worker: (vocabulary, TokenizedDocuments, nested lists, MB, segmenter).  Its segments are
    the paragraph lines (what the reference adds, and ``--segmenter auto`` for ELECTRA) or Bling Fire's
    sentences (``--segmenter blingfire``)."""
    need_shared()
    vocabulary = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB)))
    config = JobConfig(data_uri="", output_uri="", reader=Component("wikiextractor"), steps=steps_of(request.param),
                       tokenizer_json="", objective=Component("electra", {}))
    processor = TaskProcessor(config, vocabulary, output_storage=None)
    content = (WIKI / "AA" / "wiki_00").read_bytes()
    documents = processor.tokenize(Task("wiki_00", 0, len(content), len(content), ""), content, TaskStats())
    tokens = documents.tokens.tolist()
    offsets = documents.segment_offsets
    as_lists = [[tokens[offsets[s]:offsets[s + 1]] for s in
                 range(documents.document_offsets[d], documents.document_offsets[d + 1])]
                for d in range(documents.num_documents)]
    return vocabulary, documents, as_lists, len(content) / 1e6, request.param


def ours_unpadded(documents, params, rng, special):
    plan = plan_examples(documents, params, rng)
    batch = lay_out_examples(documents.tokens, plan, 0, len(plan), params.max_seq_length, special.cls, special.sep)
    lengths = batch.columns["input_mask"].sum(axis=1)
    assert (batch.columns["input_ids"][np.arange(params.max_seq_length)[None, :] >= lengths[:, None]] == 0).all()
    return [(ids[:n].tolist(), segments[:n].tolist()) for ids, segments, n in
            zip(batch.columns["input_ids"], batch.columns["segment_ids"], lengths)]


@pytest.mark.parametrize("params", [
    ElectraParams(), ElectraParams(max_seq_length=512), ElectraParams(max_seq_length=24),
    ElectraParams(max_seq_length=5), ElectraParams(blanks_separate_docs=False)],
    ids=["default", "512", "24", "5", "no-blanks"])
def test_same_random_stream_gives_the_references_examples(corpus, params):
    vocabulary, documents, as_lists, _, _ = corpus
    special = vocabulary.special
    for seed in range(3):
        expected = electra_reference.build_examples(as_lists, params.max_seq_length, random.Random(seed), special.cls,
                                                    special.sep, params.blanks_separate_docs)
        got = ours_unpadded(documents, params, random.Random(seed), special)
        assert len(got) == len(expected) > 100
        assert got == expected


def statistics(examples, max_length, megabytes):
    """Per run: examples per MB, mean length, share at full length, share
    shorter than half, share with one segment, first segment's share of the
    tokens in two-segment examples."""
    lengths = np.array([len(ids) for ids, _ in examples], dtype=np.float64)
    seconds = np.array([sum(segments) for _, segments in examples], dtype=np.float64)
    two = seconds > 0
    first_share = ((lengths[two] - seconds[two] - 2) / (lengths[two] - 3)).mean()
    return np.array([len(examples) / megabytes, lengths.mean(), (lengths == max_length).mean(),
                     (lengths < max_length / 2).mean(), 1 - two.mean(), first_share])


@pytest.mark.parametrize("max_seq_length", [128, 512])
def test_statistics_within_the_references_seed_to_seed_spread(corpus, max_seq_length):
    vocabulary, documents, as_lists, megabytes, _ = corpus
    special = vocabulary.special
    params = ElectraParams(max_seq_length=max_seq_length)
    objective = ElectraObjective(params, special)
    reference = np.array([statistics(electra_reference.build_examples(
        as_lists, max_seq_length, random.Random(1000 + seed), special.cls, special.sep), max_seq_length, megabytes)
        for seed in range(SEEDS)])
    ours = []
    for seed in range(SEEDS):
        (batch,) = objective.batches(documents, f"wiki_00:{seed}", 0)
        lengths = batch.columns["input_mask"].sum(axis=1)
        ours.append(statistics([(ids[:n], segments[:n]) for ids, segments, n in
                                zip(batch.columns["input_ids"], batch.columns["segment_ids"], lengths)],
                               max_seq_length, megabytes))
    ours = np.array(ours)
    spread = reference.std(axis=0, ddof=1)
    assert (spread > 0).all()
    # Two means of SEEDS runs each: their difference has sd spread * sqrt(2 / SEEDS); allow 4 of those.
    bound = 4 * spread * np.sqrt(2 / SEEDS)
    names = ["examples/MB", "mean length", "full length", "short", "one segment", "first share"]
    for name, a, b, limit in zip(names, ours.mean(axis=0), reference.mean(axis=0), bound):
        assert abs(a - b) <= limit, f"{name}: ours {a:.4f}, reference {b:.4f} (bound {limit:.4f})"
    # And the reference's own rules, on our output: ~10% one segment by the coin (plus the
    # examples whose sentences all fit in the first), first segment near half.  Whole paragraphs are
    # often longer than half an example (lines): then the first segment takes one and often all of it.
    if corpus[4] == "line":
        return
    one_segment = ours[:, 4].mean()
    assert 0.09 < one_segment < 0.35
    assert 0.35 < ours[:, 5].mean() < 0.65


def test_features_are_what_pretrain_data_reads(corpus):
    """ELECTRA's pretrain_data.py: input_ids, input_mask, segment_ids, each FixedLenFeature([max_seq_length])."""
    vocabulary, documents, _, _, _ = corpus
    objective = ElectraObjective(ElectraParams(max_seq_length=64), vocabulary.special)
    assert [(f.name, f.length) for f in objective.features] == [
        ("input_ids", 64), ("input_mask", 64), ("segment_ids", 64)]
    assert objective.passes == 1
    (batch,) = objective.batches(documents, "t", 0)
    assert list(batch.columns) == ["input_ids", "input_mask", "segment_ids"]
    assert all(column.shape == (len(batch), 64) for column in batch.columns.values())
    # Same task and seed: same examples; another task key: others.
    (again,) = objective.batches(documents, "t", 0)
    (other,) = objective.batches(documents, "u", 0)
    assert (again.columns["input_ids"] == batch.columns["input_ids"]).all()
    assert len(other) != len(batch) or (other.columns["input_ids"] != batch.columns["input_ids"]).any()


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(ValueError, match="--max-seq-length must be at least 5"):
        ElectraObjective.make_params({"max_seq_length": 4})
    with pytest.raises(ValueError, match="--short-seq-prob does not apply to electra"):
        ElectraObjective.make_params({"short_seq_prob": 0.1})
