"""Dynamic masking of an unmasked output (`--objective roberta --masking
none`, what RoBERTa recipes store): the server adds the mask features to
every batch and draws them per (seed, epoch, record), never on a position
the records mark special; the tokens underneath are the stored ones."""

from __future__ import annotations

import numpy as np
import pytest

from common.objectives.masking import num_to_predict
from loader.client import LoaderClient
from loader.shards import ShardCache, open_dataset
from tests.support.factories import finished_job
from tests.support.helpers import VOCAB, WIKI, need_shared, run_ventilator
from tests.support.loader_helpers import LoaderProcess, vocab_args

pytestmark = pytest.mark.e2e

MASK_ID = 103


@pytest.fixture(scope="module")
def unmasked(tmp_path_factory):
    return finished_job(tmp_path_factory.mktemp("unmasked"), "--vocab-file", VOCAB, "--objective", "roberta",
                        "--masking", "none", "--max-seq-length", "128", "--task-size", "512K", "--workers", "2")


def _epoch(client: LoaderClient) -> list:
    batches = []
    while True:
        batch = client.next_batch()
        batches.append(batch)
        if batch.last_in_epoch:
            return batches


def test_masks_are_drawn_over_the_stored_tokens_each_epoch(unmasked):
    storage, shards = open_dataset(str(unmasked))
    cache = ShardCache(storage, shards, 1 << 30)
    stored = {name: np.concatenate([cache.columns(i)[name] for i in range(len(shards.names))])
              for name in ("input_ids", "input_mask", "special_tokens_mask")}
    assert "masked_lm_positions" not in cache.columns(0)
    with LoaderProcess(unmasked, "--batch-size", 256, "--dynamic-masking", *vocab_args()) as server:
        with LoaderClient(server.address) as client:
            names = [spec.name for spec in client.info.features]
            epochs = [_epoch(client) for _ in range(2)]
    assert names[-3:] == ["masked_lm_positions", "masked_lm_ids", "masked_lm_weights"]

    chosen = []
    replaced = kept = masked_total = 0
    for batches in epochs:
        by_record = np.zeros((shards.records, 128), dtype=bool)
        for batch in batches:
            f, ids = batch.features, batch.record_ids
            rows, slots = np.nonzero(f["masked_lm_weights"] > 0)
            positions = f["masked_lm_positions"][rows, slots]
            original = stored["input_ids"][ids]
            restored = f["input_ids"].copy()
            restored[rows, positions] = f["masked_lm_ids"][rows, slots]
            np.testing.assert_array_equal(restored, original)  # only masked positions changed
            np.testing.assert_array_equal(f["masked_lm_ids"][rows, slots], original[rows, positions])
            assert not stored["special_tokens_mask"][ids][rows, positions].any(), "a special position was masked"
            expected = num_to_predict(stored["input_mask"][ids].sum(axis=1), 0.15, f["masked_lm_positions"].shape[1])
            assert ((f["masked_lm_weights"] > 0).sum(axis=1) == expected).all()
            labels = f["labels"]
            assert (labels[rows, positions] == original[rows, positions]).all() and (labels >= 0).sum() == len(rows)
            replaced += int((f["input_ids"][rows, positions] == MASK_ID).sum())
            kept += int((f["input_ids"][rows, positions] == original[rows, positions]).sum())
            masked_total += len(rows)
            by_record[ids[rows], positions] = True
        chosen.append(by_record)
    assert (chosen[0] != chosen[1]).any(axis=1).mean() > 0.9, "each epoch draws new masks"
    assert 0.77 < replaced / masked_total < 0.83 and 0.07 < (kept / masked_total) < 0.13  # 80/10/10


def test_records_without_masks_or_special_positions_are_refused_in_one_line(tmp_path):
    need_shared()
    output = tmp_path / "electra"
    text = (WIKI / "AA" / "wiki_00").read_text(encoding="utf-8")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "wiki_00").write_text(text[:text.index("</doc>\n", 100_000) + 7], encoding="utf-8")
    result = run_ventilator(corpus, output, "--vocab-file", VOCAB, "--objective", "electra", "--workers", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    server = LoaderProcess(output, "--dynamic-masking", *vocab_args())
    printed = server.wait()
    assert server.process.returncode == 1
    assert "special_tokens_mask" in printed and "masking none" in printed and "Traceback" not in printed
