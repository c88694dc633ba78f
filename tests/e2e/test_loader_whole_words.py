"""The loader's dynamic masking by whole words on Chinese text: a RoBERTa job with --word-segmenter jieba
stores unmasked blocks with word_starts; ``mlm-loader --dynamic-masking --whole-word-mask`` serves masks
that are always unions of those words (jieba's words of two or more characters masked whole), new each
epoch, at BERT's share."""

from __future__ import annotations

import numpy as np
import pytest

from bench.chinese_bench import chinese_vocabulary, make_corpus
from common.objectives.masking import num_to_predict
from loader.client import LoaderClient
from loader.shards import ShardCache, open_dataset
from tests.support.helpers import VOCAB, need_shared, run_ventilator
from tests.support.loader_helpers import LoaderProcess

pytestmark = pytest.mark.e2e


def words(starts: np.ndarray, maskable: np.ndarray) -> np.ndarray:
    """Per position, the id of its word (-1 where not maskable), as the loader reads word_starts."""
    opens = maskable & (starts.astype(bool) | ~np.concatenate([[False], maskable[:-1]]))
    ids = np.cumsum(opens) - 1
    return np.where(maskable, ids, -1)


def test_dynamic_masks_are_unions_of_the_segmenters_words(tmp_path):
    need_shared()
    make_corpus(tmp_path / "in" / "AA", 0.1)
    chinese_vocabulary(str(VOCAB), tmp_path)
    vocab = tmp_path / "zh-vocab.txt"
    result = run_ventilator(tmp_path / "in", tmp_path / "out", "--vocab-file", vocab, "--word-segmenter", "jieba",
                            "--objective", "roberta", "--masking", "none", "--max-seq-length", "128",
                            "--task-size", "64K", "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    storage, shards = open_dataset(str(tmp_path / "out"))
    cache = ShardCache(storage, shards, 1 << 30)
    stored = {name: np.concatenate([cache.columns(i)[name] for i in range(len(shards.names))])
              for name in ("input_ids", "input_mask", "special_tokens_mask", "word_starts")}
    with LoaderProcess(tmp_path / "out", "--batch-size", 128, "--dynamic-masking", "--whole-word-mask",
                       "--vocab-file", vocab) as server:
        with LoaderClient(server.address) as client:
            epochs = []
            for _ in range(2):
                batches = [client.next_batch()]
                while not batches[-1].last_in_epoch:
                    batches.append(client.next_batch())
                epochs.append(batches)
    masked = budget = whole_multi = 0
    chosen = []
    for batches in epochs:
        seen = {}
        for batch in batches:
            f = batch.features
            for row, record in enumerate(batch.record_ids):
                maskable = (stored["input_mask"][record] == 1) & (stored["special_tokens_mask"][record] == 0)
                word_of = words(stored["word_starts"][record], maskable)
                positions = f["masked_lm_positions"][row][f["masked_lm_weights"][row] > 0]
                taken = set(word_of[positions].tolist())
                assert -1 not in taken
                assert set(np.flatnonzero(np.isin(word_of, list(taken))).tolist()) == set(positions.tolist())
                whole_multi += sum(1 for w in taken if (word_of == w).sum() > 1)
                masked += len(positions)
                budget += int(num_to_predict(np.array([stored["input_mask"][record].sum()]), 0.15,
                                             f["masked_lm_positions"].shape[1])[0])
                seen[int(record)] = tuple(positions.tolist())
        chosen.append(seen)
    assert whole_multi > 1000  # Chinese words of two or more characters, masked whole
    assert masked / budget > 0.95
    assert np.mean([chosen[0][r] != chosen[1][r] for r in chosen[0]]) > 0.9  # new masks each epoch
