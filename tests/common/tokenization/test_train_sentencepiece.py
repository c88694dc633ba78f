"""``mlm-train-vocab --model sentencepiece``: SentencePiece's own trainer, with its character_coverage, on
Chinese text (tests/data/cjk) and on English (../shared): a .model the pipeline reads with --tokenizer."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from common.tokenization import Vocabulary, load_tokenizer
from common.word_segmenters.base import han_runs
from tests.support.helpers import REPO, WIKI, need_shared

CJK = Path(__file__).resolve().parents[2] / "data" / "cjk"


def train(data: Path, output: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "common.tokenization.training", "--data", str(data), "--output",
                           str(output), "--model", "sentencepiece", *flags], cwd=REPO, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def chinese(tmp_path_factory) -> tuple[Path, str]:
    corpus = tmp_path_factory.mktemp("zh")
    text = "\n".join(path.read_text(encoding="utf-8") for path in sorted(CJK.glob("*.txt")))
    (corpus / "zh.txt").write_text(text, encoding="utf-8")
    return corpus, text


def unknown_share(model: Path, text: str) -> tuple[float, set[str]]:
    """The share of the text's characters (spaces aside) the pipeline's tokenizer from ``model`` makes <unk>,
    and which those are."""
    vocabulary = Vocabulary.from_tokenizer(load_tokenizer(tokenizer_file=str(model)))
    counts = Counter(ch for ch in text if not ch.isspace())
    unknown = {ch for ch in counts if vocabulary.unk_id in vocabulary.encode_many([ch])[0].tolist()}
    return sum(counts[ch] for ch in unknown) / sum(counts.values()), unknown


def test_character_coverage_leaves_only_the_rarest_characters_unknown(chinese, tmp_path):
    """SentencePiece counts characters after its NFKC normalisation: the shares are held to twice the
    uncovered share, and the left-out characters to the rarest."""
    corpus, text = chinese
    shares = {}
    for coverage in ("0.98", "0.9995", "1.0"):
        done = train(corpus, tmp_path / f"{coverage}.model", "--vocab-size", "2500", "--character-coverage", coverage)
        assert done.returncode == 0, done.stderr[-2000:]
        shares[coverage] = unknown_share(tmp_path / f"{coverage}.model", text)
    assert shares["1.0"][0] == 0.0
    assert 0 < shares["0.9995"][0] <= 0.001 < shares["0.98"][0] <= 0.04
    assert shares["0.9995"][1] < shares["0.98"][1]
    han = Counter(ch for start, end in han_runs(text) for ch in text[start:end])
    for _, unknown in shares.values():  # no Han character left out is commoner than one kept
        left_out, kept = [han[ch] for ch in unknown if ch in han], [han[ch] for ch in set(han) - unknown]
        assert not left_out or max(left_out) <= min(kept) + 1


def test_the_model_has_albert_roles_and_reads_english_with_the_pipeline(tmp_path):
    need_shared()
    done = train(WIKI, tmp_path / "en.model", "--vocab-size", "4000", "--character-coverage", "1.0")
    assert done.returncode == 0, done.stderr[-2000:]
    vocabulary = Vocabulary.from_tokenizer(load_tokenizer(tokenizer_file=str(tmp_path / "en.model")))
    special = vocabulary.special
    assert (special.pad, special.unk, special.cls, special.sep, special.mask) == (0, 1, 2, 3, 4)
    ids, _ = vocabulary.encode_many(["The quick brown fox jumps over the lazy dog."])
    assert len(ids) > 5 and special.unk not in ids.tolist()


def test_character_coverage_is_for_sentencepiece_only(tmp_path, chinese):
    corpus, _ = chinese
    done = subprocess.run([sys.executable, "-m", "common.tokenization.training", "--data", str(corpus), "--output",
                           str(tmp_path / "v.txt"), "--character-coverage", "0.9995"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--character-coverage is for --model sentencepiece" in done.stderr
    assert not (tmp_path / "v.txt").exists()
