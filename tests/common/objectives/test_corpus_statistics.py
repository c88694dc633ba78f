"""On the real Wikipedia sample with the real vocabulary, our instances have
the statistics google-research/bert's algorithm gives on the same documents.

The reference (tests/common/objectives/bert_reference.py) runs BERT's algorithm token by token
on the very token lists our worker produced, with its own random stream; we
compare distributions with tolerances of a few standard errors.
"""

import random

import numpy as np
import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import Task
from common.objectives import derive_seed
from common.objectives.bert import BertParams, build_batch, plan_instances
from common.tokenization import Vocabulary, load_tokenizer
from tests.common.objectives import bert_reference
from tests.support.helpers import VOCAB, WIKI, need_shared
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor, TaskStats

PASSES = 8


@pytest.fixture(scope="module")
def corpus():
    need_shared()
    vocabulary = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB)))
    config = JobConfig(data_uri="", output_uri="", reader=Component("wikiextractor"), steps=steps_of("blingfire"),
                       tokenizer_json="")
    processor = TaskProcessor(config, vocabulary, output_storage=None)
    content = (WIKI / "AA" / "wiki_00").read_bytes()
    documents = processor.tokenize(Task("wiki_00", 0, len(content), len(content), ""), content, TaskStats())
    tokens = documents.tokens.tolist()
    as_lists = []
    for d in range(documents.num_documents):
        first, last = documents.document_offsets[d], documents.document_offsets[d + 1]
        as_lists.append([tokens[documents.segment_offsets[s]:documents.segment_offsets[s + 1]]
                         for s in range(first, last)])
    return vocabulary, documents, as_lists


def ours(vocabulary, documents, params):
    special = vocabulary.special
    rows = []
    for dupe in range(PASSES):
        plan = plan_instances(documents, params, random.Random(derive_seed(1, "t", dupe, "plan")))
        batch = build_batch(documents.tokens, plan, params, special, np.random.default_rng(dupe))
        weights = batch.columns["masked_lm_weights"].astype(bool)
        replaced = np.take_along_axis(batch.columns["input_ids"], batch.columns["masked_lm_positions"], axis=1)
        for i in range(len(batch)):
            count = int(weights[i].sum())
            rows.append((int(batch.columns["input_mask"][i].sum()), int(batch.columns["next_sentence_labels"][i, 0]), count,
                         int((replaced[i, :count] == vocabulary.mask_id).sum()),
                         int((replaced[i, :count] == batch.columns["masked_lm_ids"][i, :count]).sum())))
    return np.array(rows, dtype=np.float64)


def reference(vocabulary, documents, params):
    rng = random.Random(2)
    rows = []
    # The flags read once: Vocabulary.is_continuation makes its array anew at each call (once per token, most of
    # this reference's CPU with whole-word masking).
    continuation = vocabulary.is_continuation.tolist().__getitem__ if params.do_whole_word_mask else None
    for _ in range(PASSES):
        for index in range(len(documents)):
            for a, b, is_random in bert_reference.create_instances_from_document(
                    documents, index, params.max_seq_length, params.short_seq_prob, rng):
                sequence = [vocabulary.cls_id] + a + [vocabulary.sep_id] + b + [vocabulary.sep_id]
                output, positions, labels = bert_reference.create_masked_lm_predictions(
                    sequence, params.masked_lm_prob, params.max_predictions_per_seq, vocabulary.size, rng,
                    vocabulary.cls_id, vocabulary.sep_id, vocabulary.mask_id, continuation)
                replaced = [output[p] for p in positions]
                rows.append((len(sequence), int(is_random), len(positions),
                             sum(r == vocabulary.mask_id for r in replaced),
                             sum(r == label for r, label in zip(replaced, labels))))
    return np.array(rows, dtype=np.float64)


PLAN_PASSES = 120


def plan_rows(vocabulary, documents, as_lists, params):
    ours_rows, reference_rows = [], []
    rng = random.Random(3)
    for dupe in range(PLAN_PASSES):
        plan = plan_instances(documents, params, random.Random(derive_seed(2, "t", dupe, "plan")))
        ours_rows.append((len(plan), (plan.a_length + plan.b_length + 3).sum(), plan.is_random_next.sum(),
                          (plan.a_length + plan.b_length + 3 < 0.9 * params.max_seq_length).sum()))
        instances = [i for index in range(len(as_lists)) for i in bert_reference.create_instances_from_document(
            as_lists, index, params.max_seq_length, params.short_seq_prob, rng)]
        lengths = np.array([len(a) + len(b) + 3 for a, b, _ in instances])
        reference_rows.append((len(instances), lengths.sum(), sum(r for _, _, r in instances),
                               (lengths < 0.9 * params.max_seq_length).sum()))
    return np.array(ours_rows, dtype=np.float64), np.array(reference_rows, dtype=np.float64)


@pytest.mark.parametrize("params", [
    BertParams(), BertParams(short_seq_prob=0.0), BertParams(max_seq_length=512, short_seq_prob=0.3),
    BertParams(max_seq_length=32)], ids=["default", "no-short", "512", "32"])
def test_instance_statistics_match_berts_algorithm(corpus, params):
    """Instances per pass, lengths, next-sentence balance, short sequences.

    BERT draws the target length once per *document*, and these 37 documents
    differ in size by 10x, so one pass varies by ~9%: many passes are
    compared (plans only, which is cheap)."""
    vocabulary, documents, as_lists = corpus
    a, b = plan_rows(vocabulary, documents, as_lists, params)
    totals_a, totals_b = a.sum(axis=0), b.sum(axis=0)
    assert totals_a[0] == pytest.approx(totals_b[0], rel=0.05)  # instances
    assert totals_a[1] / totals_a[0] == pytest.approx(totals_b[1] / totals_b[0], rel=0.03)  # mean length
    assert totals_a[2] / totals_a[0] == pytest.approx(totals_b[2] / totals_b[0], abs=0.02)  # random next
    assert totals_a[3] / totals_a[0] == pytest.approx(totals_b[3] / totals_b[0], abs=0.03)  # short
    if params.max_seq_length == 128:
        assert 0.5 < totals_a[2] / totals_a[0] < 0.7  # single-segment chunks are always random next


@pytest.mark.parametrize("params", [
    BertParams(),
    BertParams(do_whole_word_mask=True),
    BertParams(max_seq_length=512, max_predictions_per_seq=76),
], ids=["default", "whole-word", "512"])
def test_masking_statistics_match_berts_algorithm(corpus, params):
    vocabulary, documents, as_lists = corpus
    a, b = ours(vocabulary, documents, params), reference(vocabulary, as_lists, params)
    assert min(len(a), len(b)) > 1000
    assert a[:, 0].max() <= params.max_seq_length
    # Masked fraction of tokens, and the 80/10/10 split.
    assert a[:, 2].sum() / a[:, 0].sum() == pytest.approx(b[:, 2].sum() / b[:, 0].sum(), rel=0.02)
    assert a[:, 3].sum() / a[:, 2].sum() == pytest.approx(0.8, abs=0.01)
    assert b[:, 3].sum() / b[:, 2].sum() == pytest.approx(0.8, abs=0.01)
    assert a[:, 4].sum() / a[:, 2].sum() == pytest.approx(b[:, 4].sum() / b[:, 2].sum(), abs=0.01)
    # Per instance: the number of predictions given the length.
    for length in np.unique(a[:, 0])[::10]:
        ours_mean = a[a[:, 0] == length, 2].mean()
        reference_rows = b[b[:, 0] == length, 2]
        if len(reference_rows) > 30 and not params.do_whole_word_mask:
            assert ours_mean == pytest.approx(reference_rows.mean(), abs=0.01)
