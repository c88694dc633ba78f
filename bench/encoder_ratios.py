"""The ratio guard's rows for the exact fast encoders of byte-level BPE and Unigram (bench/ratios.py).

``Vocabulary.encode_many`` over the worker task's segments, divided by HF ``tokenizers``' own ``encode_batch`` of
the same tokenizer on the same texts: the encoder is the worker's, chosen as the worker chooses it (the byte-level
BPE's word cache over the ``byte_level_encode`` kernel, fast_unigram), so an encoder that falls back to HF (the
kernels not built, a shape check that starts refusing, a probe that starts differing) puts its ratio near 1, and
one that loses its cache puts the warm ratio near the cold one.  Both figures:

* cold: the encoder's cache cleared first, as a fresh worker process meets its first task;
* warm: the same texts again, every word kept, as a worker meets the rest of a corpus.

The tokenizers are the test suite's (tests/support/tokenizer_families.py: ``modernbert``, a byte-level BPE of
ModernBERT's tokenizer.json's shape; ``unigram``, an ALBERT-style Unigram over Metaspace), trained on ../shared;
nothing from a hub.  Rounds alternate reference, cold and warm; each figure is its least over the rounds (other
work on the machine only adds to a cost).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import click

#: tests/support/tokenizer_families.py family -> what the rows call it.
FAMILIES = {"modernbert": "byte-level BPE of ModernBERT's shape", "unigram": "Unigram over Metaspace (ALBERT-style)"}
CACHES = ("cold", "warm")
#: Cold passes, then warm ones, a round: on the quick task one takes 5-80 ms (HF's reference ~130), so the least
#: of a round's few is kept.
PASSES = 3


def key(family: str, cache: str) -> str:
    return f"ratio_{family}_{cache}"


KEYS = tuple(key(family, cache) for family in FAMILIES for cache in CACHES)
#: Each row's fast encoder (its ``name``), the one it is recorded with: the guard names a row measured on another
#: (bench/guard.py), whatever its figure.
EXPECTED = {key(family, cache): encoder for family, encoder in (("modernbert", "word cache"),
                                                                  ("unigram", "unigram-cache")) for cache in CACHES}


@dataclass(frozen=True)
class EncoderRatios:
    """One family's figures: the encoder ``encode_many`` ran on (its name, or "HF"), and each cache's ratio."""

    family: str
    encoder: str
    ratios: dict[str, float]


def cpu(function: Callable[[], object]) -> float:
    started = time.process_time()
    function()
    return time.process_time() - started


def measure(vocabulary, texts: list[str], rounds: int, family: str) -> EncoderRatios:
    """``vocabulary.encode_many`` on ``texts``, cold and warm, over HF's ``encode_batch``, least of ``rounds``."""
    fast = vocabulary._fast_encoder()  # made and checked against HF once per worker process: not timed
    hf = vocabulary.text_tokenizer

    def reference() -> None:
        hf.encode_batch(texts, add_special_tokens=False)

    def cold() -> None:
        if fast is not None:
            fast.clear_cache()

    least = {"hf": math.inf, "cold": math.inf, "warm": math.inf}
    for _ in range(rounds):
        least["hf"] = min(least["hf"], cpu(reference))
        for _ in range(PASSES):
            cold()
            least["cold"] = min(least["cold"], cpu(lambda: vocabulary.encode_many(texts)))
        for _ in range(PASSES):
            least["warm"] = min(least["warm"], cpu(lambda: vocabulary.encode_many(texts)))
    return EncoderRatios(family, "HF" if fast is None else fast.name,
                         {cache: least[cache] / least["hf"] for cache in CACHES})


def measure_all(texts: list[str], rounds: int, log: Callable[[str], None]) -> list[EncoderRatios]:
    from tests.support.tokenizer_families import vocabulary_of

    out = []
    for family in FAMILIES:
        log(f"worker: encoder ratios {family}, {rounds} rounds")
        out.append(measure(vocabulary_of(family), texts, rounds, family))
    return out


def quick_segments() -> list[str]:
    """The quick run's worker task (bench/run.py, ``--quick``), parsed and split as the worker does."""
    from bench import corpus as corpora
    from bench.run import WIKI, Settings
    from bench.worker_bench import documents_of, split_all

    settings = Settings.make(quick=True, repeats=None, scale=None)
    sources = corpora.load_sources(WIKI, settings.limit_per_file)
    return split_all(documents_of(corpora.replicated_bytes(sources, settings.worker_copies)))


@click.command()
@click.option("--runs", type=click.IntRange(min=1), default=5, show_default=True,
              help="Measure the rows this many times (each as the quick run does: its rounds, the least kept).")
@click.option("--no-cache", is_flag=True,
              help="Empty the encoders' caches whenever they are used (CACHE_ENTRIES 0): an encoder that lost its "
                   "cache, as tests/test_bench_quick.py reasons from.")
def main(runs: int, no_cache: bool) -> None:
    """Only these rows, as the quick run measures them, ``--runs`` times: each figure over its record (the spread
    docs/benchmarks.md states).  ``MLM_FAST_BPE=0 MLM_FAST_UNIGRAM=0`` measures them with HF under encode_many."""
    from bench.ratios import load
    from common.tokenization import fast_bpe, fast_unigram

    if no_cache:
        fast_bpe.CACHE_ENTRIES = fast_unigram.CACHE_ENTRIES = 0
    from bench.run import Settings

    recorded = load()
    texts = quick_segments()
    rounds = Settings.make(quick=True, repeats=None, scale=None).ratio_rounds
    print(f"{sum(len(t.encode()) for t in texts) / 1e6:.2f} MB of segments, {rounds} rounds a run")
    print("| run | " + " | ".join(KEYS) + " |")
    for run in range(runs):
        figures = {key(m.family, cache): (m.encoder, value) for m in measure_all(texts, rounds, lambda _: None)
                   for cache, value in m.ratios.items()}
        cells = []
        for name in KEYS:
            encoder, value = figures[name]
            record = recorded.get(name)
            cells.append(f"{value:.3f}" + (f" ({value / record:.2f}x)" if record else "") + f" {encoder}")
        print(f"| {run + 1} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
