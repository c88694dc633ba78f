"""``python -m bench.unigram_speed``: CPU-s per MB of ``Vocabulary.encode_many`` for the Unigram families
(tests/support/tokenizer_families.py ``unigram`` and ``sentencepiece``), HF ``tokenizers`` against the worker's
encoder (common/tokenization/fast_unigram.py) with a cold cache (cleared) and a warm one (the same texts again),
on ../shared's corpus as lines and as whole documents; ids checked equal.  One thread; least of ``--repeats``."""

from __future__ import annotations

import os
import time
from typing import Any

import click
import numpy as np


@click.command()
@click.option("--repeats", default=3, show_default=True)
def main(repeats: int) -> None:
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from common.readers import ParseReport, reader_named
    from tests.support.helpers import WIKI
    from tests.support.tokenizer_families import corpus_lines, vocabulary_of

    reader: Any = reader_named("wikiextractor")()
    documents = ["\n".join(document.lines) for path in sorted(WIKI.rglob("wiki_*"))
                 for document in reader.parse(path.read_bytes(), 0, ParseReport())]
    forms = {"lines": list(corpus_lines()), "documents": documents}
    print("| family | texts | HF | fast, cold | fast, warm | HF / warm |")
    print("| --- | --- | --- | --- | --- | --- |")
    for family in ("unigram", "sentencepiece"):
        vocabulary = vocabulary_of(family)
        fast = vocabulary._fast_encoder()
        assert fast is not None, f"{family}: no fast encoder"
        for name, texts in forms.items():
            megabytes = sum(len(text.encode()) for text in texts) / 1e6
            hf_costs, cold_costs, warm_costs = [], [], []
            for _ in range(repeats):
                started = time.process_time()
                expected = vocabulary._encode_hf(texts, with_words=False)[:2]
                hf_costs.append(time.process_time() - started)
                fast.clear_cache()
                started = time.process_time()
                fast(texts)
                cold_costs.append(time.process_time() - started)
                started = time.process_time()
                got = fast(texts)
                warm_costs.append(time.process_time() - started)
                assert all(np.array_equal(a, b) for a, b in zip(got, expected)), f"{family} {name}: ids differ"
            hf, cold, warm = (min(costs) / megabytes for costs in (hf_costs, cold_costs, warm_costs))
            print(f"| {family} | {name} ({megabytes:.1f} MB) | {hf:.3f} | {cold:.3f} | {warm:.3f} | {hf / warm:.1f}x |")


if __name__ == "__main__":
    main()
