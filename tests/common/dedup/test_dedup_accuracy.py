"""Accuracy of exact and MinHash dedup on a corpus with planted duplicates
(tests/support/dedup_corpus.py), and agreement with datasketch's MinHashLSH, an
independent implementation, on the same parameters."""

from __future__ import annotations

import re

import numpy as np
import pytest

from common.steps.dedup.in_memory import deduplicate
from common.steps.dedup.lsh import optimal_bands_rows
from common.steps.dedup.normalise import exact_hash, normalise_exact, words
from common.steps.dedup.settings import DedupSettings
from tests.support.dedup_corpus import planted_corpus
from tests.support.helpers import WIKI, need_shared

THRESHOLD = 0.8


@pytest.fixture(scope="module")
def corpus():
    need_shared()
    return planted_corpus(WIKI)


@pytest.fixture(scope="module")
def minhash_outcome(corpus):
    """MinHash dedup of the planted corpus at 112 permutations, run once for the two tests that check it (neither
    changes it)."""
    return deduplicate(corpus.texts, _settings())


def _cluster_of(outcome, size: int) -> np.ndarray:
    """Each document's cluster (its kept member; itself when in none)."""
    label = np.arange(size)
    for root, members in outcome.clusters.items():
        label[members] = root
    return label


def _same_cluster(label, corpus, index: int) -> bool:
    return label[index] == label[corpus.origin[index]]


def test_normalisation_is_what_the_docs_say():
    assert normalise_exact("  The\u00a0cat\t\n sat  ") == "The cat sat"
    assert normalise_exact("cafe\u0301") == "caf\u00e9"  # NFC
    assert exact_hash("The cat") != exact_hash("the cat")  # case counts for exact dedup
    assert exact_hash("a  b\n") == exact_hash("a b")
    assert exact_hash("   ") == 0  # empty text is nobody's copy
    assert words("The CAT, sat: on_it 42") == ["the", "cat", "sat", "on_it", "42"]


def test_exact_finds_every_exact_copy_and_nothing_else(corpus):
    outcome = deduplicate(corpus.texts, DedupSettings(mode="exact"))
    label = _cluster_of(outcome, len(corpus.texts))
    for index, kind in enumerate(corpus.kind):
        if kind in ("exact", "whitespace"):
            assert _same_cluster(label, corpus, index), f"exact copy {index} of {corpus.origin[index]} missed"
        elif kind != "base":
            assert label[index] == index and outcome.kept[index], f"{kind} copy {index} merged by exact dedup"
    # Every cluster is one article and its exact copies; the first in corpus order is kept.
    for root, members in outcome.clusters.items():
        assert root == min(members)
        assert len({corpus.origin[m] for m in members}) == 1
        assert len({normalise_exact(corpus.texts[m]) for m in members}) == 1
    expected_removed = sum(kind in ("exact", "whitespace") for kind in corpus.kind)
    assert (~outcome.kept).sum() == expected_removed


def _settings(perm: int = 112) -> DedupSettings:
    return DedupSettings(mode="minhash", perm=perm, threshold=THRESHOLD).resolved(0)


def test_bands_and_rows_are_datasketchs():
    from datasketch.lsh import _optimal_param

    for threshold, perm in ((0.8, 112), (0.85, 64), (0.7, 256)):
        assert optimal_bands_rows(threshold, perm) == _optimal_param(threshold, perm, 0.5, 0.5)


def test_minhash_recall_above_and_false_merges_below_the_threshold(corpus, minhash_outcome):
    outcome = minhash_outcome
    label = _cluster_of(outcome, len(corpus.texts))
    similarity, kind = np.array(corpus.similarity), np.array(corpus.kind)
    copies = kind != "base"
    above = copies & (similarity >= 0.9)
    below = copies & (similarity <= 0.6)
    found_above = np.mean([_same_cluster(label, corpus, i) for i in np.flatnonzero(above)])
    merged_below = np.mean([_same_cluster(label, corpus, i) for i in np.flatnonzero(below)])
    print(f"planted pairs: {above.sum()} above (found {found_above:.3f}), {below.sum()} below "
          f"(merged {merged_below:.3f})")
    assert above.sum() >= 200 and below.sum() >= 200
    assert found_above >= 0.95
    assert merged_below <= 0.02
    # Nothing merges two different articles.
    for root, members in outcome.clusters.items():
        assert len({corpus.origin[m] for m in members}) == 1, f"cluster {root} mixes articles"
        assert root == min(members)


def test_minhash_finds_chinese_near_copies_as_english_ones():
    """Chinese copies with one character in a hundred replaced are found: a ``\\w`` run is a whole clause
    in Chinese, so its shingles are cut from characters (English copies so edited: tests above)."""
    import random

    from bench.chinese_bench import chinese_paragraphs

    paragraphs = chinese_paragraphs()
    bases = ["\n".join(paragraphs[k::20]) for k in range(20)]
    han = [ch for ch in "".join(bases) if "\u4e00" <= ch <= "\u9fff"]
    rng = random.Random(34)
    copies = []
    for base in bases:
        chars = list(base)
        positions = [i for i, ch in enumerate(chars) if "\u4e00" <= ch <= "\u9fff"]
        for position in rng.sample(positions, len(positions) // 100):
            chars[position] = rng.choice(han)
        copies.append("".join(chars))
    outcome = deduplicate(bases + copies, _settings())
    label = _cluster_of(outcome, 40)
    found = sum(label[20 + k] == label[k] for k in range(20))
    assert found >= 18, f"{found} of 20 Chinese near copies found"
    assert len(set(label[:20].tolist())) == 20  # no two articles merged
    assert outcome.too_short == 0


def _datasketch_kept(texts: list[str], settings: DedupSettings) -> np.ndarray:
    """The same method with datasketch's MinHash and MinHashLSH: a document is
    removed when an earlier document is in its cluster (union-find over the
    pairs the LSH index returns)."""
    from datasketch import MinHash, MinHashLSH

    from common.steps.dedup.clusters import UnionFind

    lsh = MinHashLSH(threshold=settings.threshold, num_perm=settings.perm)
    assert (lsh.b, lsh.r) == (settings.bands, settings.rows)
    union = UnionFind()
    for index, text in enumerate(texts):
        w = words(text)
        shingles = {" ".join(w[i:i + settings.ngram]).encode() for i in range(len(w) - settings.ngram + 1)}
        if not shingles:
            continue
        minhash = MinHash(num_perm=settings.perm, seed=settings.seed)
        minhash.update_batch(list(shingles))
        for other in lsh.query(minhash):
            union.union(other, index)
        lsh.insert(index, minhash)
    kept = np.ones(len(texts), dtype=bool)
    for root, members in union.clusters().items():
        kept[[m for m in members if m != root]] = False
    return kept


def test_minhash_agrees_with_datasketch(corpus, minhash_outcome):
    settings = _settings()
    ours = minhash_outcome.kept
    theirs = _datasketch_kept(corpus.texts, settings)
    agreement = np.mean(ours == theirs)
    print(f"agreement with datasketch: {agreement:.4f} of {len(ours)} documents; "
          f"removed {(~ours).sum()} vs {(~theirs).sum()}")
    assert agreement >= 0.99


def test_too_short_documents_are_kept_and_counted():
    texts = ["one two three", "one two three", "four", "", "a b c d e f g h i j k l m n o p"]
    outcome = deduplicate(texts, _settings())
    assert outcome.too_short == 4  # fewer than 5 words (the empty one included)
    assert outcome.kept.tolist() == [True, False, True, True, True]  # exact dedup still applies to them


def test_kept_member_does_not_depend_on_how_documents_are_grouped(corpus):
    """The job names documents by (task rank, rank in task): splitting the
    same corpus into tasks of other sizes keeps the same documents."""
    from common.steps.dedup.clusters import UnionFind, candidate_pairs, handles
    from common.steps.dedup.keys import KeyMaker

    settings = _settings()
    texts = corpus.texts[:300]
    maker = KeyMaker(settings)
    results = []
    for task_size in (1, 7, 300):
        rows = []
        for rank, start in enumerate(range(0, len(texts), task_size)):
            chunk = texts[start:start + task_size]
            rows.append(maker.flat(maker.keys(chunk), handles(rank, len(chunk))))
        kinds, keys, members = (np.concatenate(parts) for parts in zip(*rows))
        # Shuffled rows: bucket tasks read signature files in any order.
        order = np.random.default_rng(task_size).permutation(len(members))
        first, other, _ = candidate_pairs(kinds[order], keys[order], members[order])
        union = UnionFind()
        for a, b in zip(first.tolist(), other.tolist()):
            union.union(a, b)
        removed = set()
        for root, group in union.clusters().items():
            for member in group:
                if member != root:
                    rank, ordinal = member >> 32, member & 0xFFFFFFFF
                    removed.add(rank * task_size + ordinal)
        results.append(sorted(removed))
    assert results[0] == results[1] == results[2]
    assert len(results[0]) > 50


def test_signature_is_the_minimum_over_distinct_shingles_per_permutation():
    """The vectorised signature equals MinHash's definition, computed naively per document."""
    from common.steps.dedup.minhash import MinHasher, shingles

    rng = np.random.default_rng(3)
    vocabulary = [f"w{i}" for i in range(50)]
    texts = [" ".join(rng.choice(vocabulary, size=n)) for n in (0, 3, 5, 6, 40, 400, 7)]
    hasher = MinHasher(5, 64, 9)
    signatures, valid = hasher.signatures(texts)
    for index, text in enumerate(texts):
        hashes, _owner = shingles([words(text)], 5)
        assert valid[index] == (len(hashes) > 0)
        if len(hashes):
            distinct = np.unique(hashes)
            with np.errstate(over="ignore"):
                expected = ((distinct[:, None] * hasher.a[None, :] + hasher.b[None, :]) >> np.uint64(32)).min(axis=0)
            assert (signatures[index] == expected.astype(np.uint32)).all()


def test_word_hashes_cut_the_words_re_cuts():
    """word_hashes finds exactly the words ``\\w+`` finds, in any script, and
    hashes equal words equally and different words differently."""
    from common.steps.dedup import word_hashes as module
    from common.steps.dedup.normalise import fold

    texts = ["", "   ", "Hello, wörld! ÉCOLE école", "snake_case x2 ½ ٣ 十二 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 café\u0301", "a" * 5000,
             "\0inside\0nul", "tab\tand\nnewline", "𐍈𐍈 emoji 🙂 joined"]
    folded = [fold(text) for text in texts]
    hashes, counts = module.word_hashes(folded)
    expected = [words(text) for text in texts]
    assert counts.tolist() == [len(w) for w in expected]
    flat = [word for w in expected for word in w]
    by_word: dict[str, int] = {}
    for word, value in zip(flat, hashes.tolist(), strict=True):
        assert by_word.setdefault(word, value) == value
    assert len(set(by_word.values())) == len(by_word)
    # The table is re's \w, code point by code point.
    table = module.word_table()
    sample = np.random.default_rng(0).integers(0, 0x110000, 20_000)
    assert all(table[c] == bool(re.fullmatch(r"\w", chr(c))) for c in sample.tolist())


def test_word_hashes_in_batches_are_the_same(monkeypatch):
    from common.steps.dedup import word_hashes as module

    texts = [f"doc {i} " + " ".join(f"w{j % 97}" for j in range(i * 7)) for i in range(60)]
    texts += ["x" * 1000, "十二" * 400 + " tail words", "", "word " * 500]  # no space; a late space; empty
    whole = module.word_hashes(texts)
    assert whole[1].tolist() == [len(words(text)) for text in texts]
    monkeypatch.setattr(module, "_BATCH_CHARACTERS", 300)
    batched = module.word_hashes(texts)
    assert np.array_equal(whole[0], batched[0]) and np.array_equal(whole[1], batched[1])
