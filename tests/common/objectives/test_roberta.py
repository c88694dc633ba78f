"""RoBERTa / MLM-only blocks on the real Wikipedia sample with the real
vocabulary: fairseq's packing (tests/common/objectives/roberta_reference.py) block for block,
nothing lost or added, and BERT's masking proportions for --masking static."""

import numpy as np
import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import Task
from common.objectives.documents import TokenizedDocuments
from common.objectives.roberta import RobertaObjective, RobertaParams, lay_out_blocks, plan_blocks
from common.tokenization import Vocabulary, load_tokenizer
from tests.common.objectives import roberta_reference
from tests.support.helpers import VOCAB, WIKI, need_shared
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor, TaskStats


@pytest.fixture(scope="module")
def corpus():
    """wiki_00 tokenized by the worker: (vocabulary, TokenizedDocuments, nested token lists)."""
    need_shared()
    vocabulary = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB)))
    config = JobConfig(data_uri="", output_uri="", reader=Component("wikiextractor"), steps=steps_of("blingfire"),
                       tokenizer_json="", objective=Component("roberta", {}))
    processor = TaskProcessor(config, vocabulary, output_storage=None)
    content = (WIKI / "AA" / "wiki_00").read_bytes()
    documents = processor.tokenize(Task("wiki_00", 0, len(content), len(content), ""), content, TaskStats())
    tokens = documents.tokens.tolist()
    offsets = documents.segment_offsets
    as_lists = [[tokens[offsets[s]:offsets[s + 1]] for s in
                 range(documents.document_offsets[d], documents.document_offsets[d + 1])]
                for d in range(documents.num_documents)]
    return vocabulary, documents, as_lists


def block_contents(documents, params, special):
    stream, plan = plan_blocks(documents, params, special)
    layout = lay_out_blocks(stream, plan, params.max_seq_length, special)
    rows = [row[1:n - 1].tolist() for row, n in zip(layout.original, layout.sequence_length)]
    assert all(row[0] == special.cls and row[n - 1] == special.sep
               for row, n in zip(layout.original.tolist(), layout.sequence_length.tolist()))
    return rows, layout


@pytest.mark.parametrize("pack,max_seq_length", [
    ("full-sentences", 128), ("doc-sentences", 128), ("full-sentences", 512), ("doc-sentences", 512),
    ("full-sentences", 16), ("doc-sentences", 16)])
def test_blocks_are_fairseqs(corpus, pack, max_seq_length):
    vocabulary, documents, as_lists = corpus
    special = vocabulary.special
    params = RobertaParams(max_seq_length=max_seq_length, pack=pack)
    ours, layout = block_contents(documents, params, special)
    capacity = max_seq_length - 2
    units = roberta_reference.units(as_lists, special.sep, capacity)
    reference = roberta_reference.blocks(units, capacity, "complete" if pack == "full-sentences" else "complete_doc")
    assert len(ours) == len(reference) > 10
    assert ours == reference
    # Nothing lost, nothing added: the blocks end to end are the documents' tokens, joined by one
    # separator (full-sentences) or by nothing (doc-sentences).
    flat = [t for row in ours for t in row]
    joined = []
    for index, document in enumerate(as_lists):
        if index and pack == "full-sentences":
            joined.append(special.sep)
        joined.extend(t for sentence in document for t in sentence)
    assert flat == joined
    assert max(len(row) for row in ours) <= capacity
    # Short blocks fill up: most end exactly at the capacity.
    lengths = np.array([len(row) for row in ours])
    assert (lengths == capacity).mean() > (0.3 if max_seq_length == 16 else 0.0)
    separators = int(layout.separator.sum())
    assert separators == (documents.num_documents - 1 if pack == "full-sentences" else 0)


def test_overlong_sentences_are_cut_into_block_sized_pieces():
    """fairseq would make one over-long block of a sentence that does not fit; we cut it."""
    documents = TokenizedDocuments.from_lists([[[10, 11], list(range(100, 125)), [12]], [[13, 14, 15]]])
    from common.tokenization.vocabulary import SpecialIds
    special = SpecialIds(cls=1, sep=2, mask=3, pad=0, unk=4, vocab_size=200, starts_word=np.ones(200, dtype=bool))
    rows, _ = block_contents(documents, RobertaParams(max_seq_length=12), special)
    assert rows == [[10, 11], list(range(100, 110)), list(range(110, 120)), [*range(120, 125), 12, 2, 13, 14, 15]]
    rows, _ = block_contents(documents, RobertaParams(max_seq_length=12, pack="doc-sentences"), special)
    assert rows == [[10, 11], list(range(100, 110)), list(range(110, 120)), [*range(120, 125), 12], [13, 14, 15]]


def test_unmasked_blocks_carry_what_a_train_time_masker_needs(corpus):
    vocabulary, documents, _ = corpus
    special = vocabulary.special
    objective = RobertaObjective(RobertaParams(max_seq_length=128), special)
    assert [f.name for f in objective.features] == ["input_ids", "input_mask", "segment_ids", "special_tokens_mask",
                                                    "word_starts"]
    assert objective.passes == 1
    (batch,) = objective.batches(documents, "t", 0)
    ids, mask = batch.columns["input_ids"], batch.columns["input_mask"]
    special_mask, starts = batch.columns["special_tokens_mask"], batch.columns["word_starts"]
    is_special_id = np.isin(ids, [special.cls, special.sep]) | (mask == 0)
    # WordPiece: a sentence's first token never has ##, so every [SEP] inside a block is a separator.
    assert (special_mask.astype(bool) == is_special_id).all()
    assert not (batch.columns["segment_ids"]).any()
    # word_starts: the tokenizer's own word starts, on sentence tokens only.
    per_id = special.starts_word[ids]
    assert (starts.astype(bool) <= ~special_mask.astype(bool)).all()
    assert (starts.astype(bool) == (per_id & ~special_mask.astype(bool))).mean() > 0.999
    assert 0.6 < starts.sum() / (1 - special_mask).sum() < 0.95


@pytest.mark.parametrize("masked_lm_prob,max_seq_length", [(0.15, 128), (0.3, 512)])
def test_static_masking_proportions(corpus, masked_lm_prob, max_seq_length):
    vocabulary, documents, _ = corpus
    special = vocabulary.special
    unmasked = RobertaObjective(RobertaParams(max_seq_length=max_seq_length), special)
    params = RobertaParams(max_seq_length=max_seq_length, masking="static", masked_lm_prob=masked_lm_prob,
                           dupe_factor=3)
    objective = RobertaObjective(params, special)
    predictions = int(round(max_seq_length * masked_lm_prob))
    assert [(f.name, f.length) for f in objective.features][-3:] == [
        ("masked_lm_positions", predictions), ("masked_lm_ids", predictions), ("masked_lm_weights", predictions)]
    assert objective.passes == 3
    (original,) = unmasked.batches(documents, "t", 0)
    masked_total = tokens_total = as_mask = kept = 0
    first_positions = None
    for pass_index in range(objective.passes):
        (batch,) = objective.batches(documents, "t", pass_index)
        ids, weights = batch.columns["input_ids"], batch.columns["masked_lm_weights"].astype(bool)
        positions, labels = batch.columns["masked_lm_positions"], batch.columns["masked_lm_ids"]
        lengths = batch.columns["input_mask"].sum(axis=1)
        count = weights.sum(axis=1)
        # BERT's budget per block (every block has enough sentence tokens).
        assert (count == np.minimum(predictions, np.maximum(1, np.round(lengths * masked_lm_prob)))).all()
        rows = np.nonzero(weights)[0]
        at = positions[weights]
        assert (original.columns["special_tokens_mask"][rows, at] == 0).all()  # never [CLS], [SEP], separators
        assert (labels[weights] == original.columns["input_ids"][rows, at]).all()
        untouched = np.ones_like(ids, dtype=bool)
        untouched[rows, at] = False
        assert (ids[untouched] == original.columns["input_ids"][untouched]).all()
        masked_total += count.sum()
        tokens_total += lengths.sum()
        as_mask += (ids[rows, at] == special.mask).sum()
        kept += (ids[rows, at] == labels[weights]).sum()
        if first_positions is None:
            first_positions = positions
        else:
            assert (positions != first_positions).any()  # each pass masks differently
    assert masked_total / tokens_total == pytest.approx(masked_lm_prob, abs=0.005)
    n = masked_total
    assert as_mask / n == pytest.approx(0.8, abs=4 * np.sqrt(0.16 / n))
    # Kept: 10% on purpose plus the random draws that hit the original id.
    assert kept / n == pytest.approx(0.1, abs=4 * np.sqrt(0.09 / n) + 0.002)


def test_bad_settings_are_refused_in_one_line():
    from common.tokenization.vocabulary import SpecialIds

    for given, message in [({"pack": "docs"}, "--pack must be one of"), ({"masking": "dynamic"}, "--masking must be"),
                           ({"masked_lm_prob": 1.0}, r"--masked-lm-prob must be in \(0, 1\)"),
                           ({"dupe_factor": 10}, "--dupe-factor would repeat identical blocks"),
                           ({"max_seq_length": 2}, "--max-seq-length must be at least 3"),
                           ({"short_seq_prob": 0.1}, "--short-seq-prob does not apply to roberta")]:
        with pytest.raises(ValueError, match=message):
            RobertaObjective.make_params(given)
    assert RobertaObjective.make_params({"masking": "static", "dupe_factor": 10}).dupe_factor == 10
    no_mask = SpecialIds(cls=1, sep=2, mask=None, pad=0, unk=None, vocab_size=10, starts_word=np.ones(10, dtype=bool))
    RobertaObjective(RobertaParams(), no_mask)  # none: no mask token needed
    with pytest.raises(ValueError, match="needs the tokenizer's mask token"):
        RobertaObjective(RobertaParams(masking="static"), no_mask)
