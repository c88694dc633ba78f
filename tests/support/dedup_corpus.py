"""A corpus with planted duplicates, built from ../shared's articles, with
each planted pair's true Jaccard similarity (word 5-gram shingle sets).

Variants of an article: an exact copy, a copy with its whitespace changed
(an exact copy once normalised), a copy with its case changed (not exact:
the same shingles), and near-copies at chosen similarities made by dropping
paragraphs and replacing words (the number of replaced words is searched
until the true similarity is within 0.015 of the target)."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.readers import reader_named
from common.readers.base import ParseReport
from common.steps.dedup.minhash import shingles
from common.steps.dedup.normalise import words

ABOVE = (0.92, 0.95, 0.98)  # planted near-copies above the 0.8 threshold
BELOW = (0.3, 0.45, 0.55)  # and below it


def shingle_set(text: str, n: int = 5) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def jaccard(a: str | set, b: str) -> float:
    """Exact Jaccard similarity of two texts' shingle sets (``a`` may be given as its set already)."""
    sa = a if isinstance(a, set) else shingle_set(a)
    sb = shingle_set(b)
    shared = len(sa & sb)
    union = len(sa) + len(sb) - shared  # |A ∪ B| without building it (most of this function's time)
    return shared / union if union else 1.0


@dataclass
class Planted:
    texts: list[str] = field(default_factory=list)
    origin: list[int] = field(default_factory=list)  # index of the article it was made from (itself for bases)
    kind: list[str] = field(default_factory=list)  # base, exact, whitespace, case, near
    similarity: list[float] = field(default_factory=list)  # true Jaccard to its base

    def add(self, text: str, origin: int, kind: str, similarity: float) -> int:
        self.texts.append(text)
        self.origin.append(origin)
        self.kind.append(kind)
        self.similarity.append(similarity)
        return len(self.texts) - 1


def articles(wiki: Path, min_words: int = 400) -> list[str]:
    reader = reader_named("wikiextractor")()
    found = []
    for path in sorted(p for p in wiki.rglob("*") if p.is_file()):
        for document in reader.parse(path.read_bytes(), 0, ParseReport()):
            text = "\n".join(line for line in document.lines if line.strip())
            if len(words(text)) >= min_words:
                found.append(text)
    return found


def _hashed_shingles(text: str) -> np.ndarray:
    hashes, _owner = shingles([words(text)], 5)
    return np.unique(hashes)


@dataclass
class _Base:
    """An article and what every near copy of it is compared with, computed once."""

    text: str
    hashed: np.ndarray  # its 64-bit shingle hashes
    shingles: set  # its shingles themselves (the true similarity)

    @classmethod
    def of(cls, text: str) -> _Base:
        return cls(text, _hashed_shingles(text), shingle_set(text))


def _near_copy(source: _Base, target: float, rng: random.Random, vocabulary: list[str]) -> tuple[str, float]:
    text = source.text
    paragraphs = text.split("\n")
    if len(paragraphs) > 6 and target < 0.9:  # drop a sentence-level piece too
        del paragraphs[rng.randrange(len(paragraphs))]
    tokens = "\n".join(paragraphs).split(" ")
    base = source.hashed
    kept = len(np.intersect1d(base, _hashed_shingles(" ".join(tokens)), assume_unique=True)) / len(base)
    # k random replacements among N words leave a shingle untouched with probability (1 - k/N)**5:
    # a first guess, refined by bisection until the true similarity is within 0.01 of the target.
    untouched = min(1.0, 2 * target / (1 + target) / max(kept, 1e-9))
    guess = int(len(tokens) * (1 - untouched ** 0.2))
    limit = min(len(tokens), 2 * guess + 20)
    positions = rng.sample(range(len(tokens)), limit)
    replacements = [rng.choice(vocabulary) for _ in positions]

    def edited(k: int) -> str:
        out = list(tokens)
        for position, word in zip(positions[:k], replacements[:k]):
            out[position] = word
        return " ".join(out)

    def similarity(candidate: str) -> float:  # on 64-bit shingle hashes: fast, and exact but for collisions
        other = _hashed_shingles(candidate)
        union = len(np.union1d(base, other))
        return len(np.intersect1d(base, other, assume_unique=True)) / union if union else 1.0

    low, high, k = 0, limit, min(guess, limit)
    while True:
        value = similarity(edited(k))
        if abs(value - target) <= 0.01 or low >= high:
            break
        if value > target:
            low = k + 1
        else:
            high = k
        k = (low + high) // 2
    candidate = edited(k)
    return candidate, jaccard(source.shingles, candidate)


def planted_corpus(wiki: Path, seed: int = 7, limit: int | None = None) -> Planted:
    rng = random.Random(seed)
    bases = articles(wiki)[:limit]
    vocabulary = sorted({w for text in bases[:10] for w in re.findall(r"[a-z]{4,}", text)})
    corpus = Planted()
    base_index = [corpus.add(text, i, "base", 1.0) for i, text in enumerate(bases)]
    for i, text in enumerate(bases):
        origin = base_index[i]
        if i % 3 == 0:
            corpus.add(text, origin, "exact", 1.0)
        if i % 3 == 1:
            corpus.add(re.sub(r" ", lambda _m: rng.choice([" ", "  ", "\t", " \n "]), text) + "\n\n", origin,
                       "whitespace", 1.0)
        if i % 3 == 2:
            corpus.add(text.upper(), origin, "case", jaccard(text, text.upper()))
        source = _Base.of(text)
        for target in ABOVE + BELOW:
            near, similarity = _near_copy(source, target, rng, vocabulary)
            if abs(similarity - target) <= 0.015:
                corpus.add(near, origin, "near", similarity)
    # Shuffle the copies among the bases (bases first would make "keep the first" trivially right).
    order = list(range(len(corpus.texts)))
    rng.shuffle(order)
    shuffled = Planted()
    new_index = {old: new for new, old in enumerate(order)}
    for old in order:
        shuffled.add(corpus.texts[old], new_index[corpus.origin[old]], corpus.kind[old], corpus.similarity[old])
    return shuffled


def write_wikiextractor(corpus: Planted, directory: Path, files: int = 3) -> list[str]:
    """The corpus as WikiExtractor files (documents dealt out in order, ids = their index); the
    document ids in corpus order (file by file), the order "the first copy" refers to."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-len(corpus.texts) // files)
    order = []
    for f in range(files):
        chunk = range(f * per_file, min((f + 1) * per_file, len(corpus.texts)))
        with open(directory / f"wiki_{f:02d}", "w", encoding="utf-8") as handle:
            for index in chunk:
                body = "\n".join(line for line in corpus.texts[index].split("\n"))
                handle.write(f'<doc id="{index}" url="u" title="t{index}">\nt{index}\n{body}\n</doc>\n')
                order.append(str(index))
    return order
