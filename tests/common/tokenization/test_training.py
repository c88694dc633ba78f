"""mlm-train-vocab: the same corpus and options give the same file, byte for
byte, for every --model, trained in separate processes (each seeds its hash
maps anew: that is what made Hugging Face's trainers vary)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from common.tokenization.loading import bert_tokenizer_from_vocab
from common.tokenization.training import MODELS, corpus_lines
from common.tokenization.wordpiece_training import train_wordpiece
from tests.support.helpers import REPO

CORPUS = REPO / "examples" / "corpus"


def train(output, model: str) -> bytes:
    result = subprocess.run([sys.executable, "-m", "common.tokenization.training", "--data", str(CORPUS),
                             "--output", str(output), "--vocab-size", "1500" if model == "sentencepiece" else "2000",
                             "--model", model],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return output.read_bytes()


@pytest.mark.parametrize("model", MODELS)
def test_the_same_corpus_gives_the_same_file(tmp_path, model):
    first, second = train(tmp_path / "a", model), train(tmp_path / "b", model)
    assert first == second and len(first) > 10_000


def test_a_vocabulary_too_large_for_the_corpus_is_one_line(tmp_path):
    """SentencePiece cannot make more pieces than the corpus holds: its own reason, on one line."""
    result = subprocess.run([sys.executable, "-m", "common.tokenization.training", "--data", str(CORPUS),
                             "--output", str(tmp_path / "m.model"), "--vocab-size", "50000", "--model",
                             "sentencepiece"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and not (tmp_path / "m.model").exists()
    assert result.stderr.strip().startswith("Error: sentencepiece:") and "Vocabulary size too high" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_equally_frequent_pairs_merge_in_the_order_of_their_text():
    special = ["[PAD]", "[UNK]"]
    vocab = train_wordpiece(Counter({"cd": 3, "ab": 3, "xy": 1}), len(special) + 6 + 1, special)
    assert vocab == ["[PAD]", "[UNK]", "##b", "##d", "##y", "a", "c", "x", "ab"]
    vocab = train_wordpiece(Counter({"cd": 3, "ab": 3, "xy": 1}), 100, special)
    assert vocab[-3:] == ["ab", "cd", "xy"]


def test_a_trained_vocabulary_covers_its_corpus(tmp_path):
    path = tmp_path / "vocab.txt"
    train(path, "wordpiece")
    tokens = path.read_text(encoding="utf-8").splitlines()
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(tokens) == len(set(tokens)) == 2000
    tokenizer = bert_tokenizer_from_vocab(str(path))
    lines = list(corpus_lines(str(CORPUS)))
    encodings = tokenizer.encode_batch(lines, add_special_tokens=False)
    unknown = sum(encoding.ids.count(1) for encoding in encodings)
    assert unknown == 0
    assert sum(len(e.ids) for e in encodings) < 1.6 * sum(len(line.split()) for line in lines)
