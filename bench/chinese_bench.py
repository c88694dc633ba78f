"""Chinese text through the worker, with and without ``--word-segmenter jieba``
(bench.run's ``chinese`` section): the segmentation step's cost per MB, and
the whole task's CPU with it against without it."""

from __future__ import annotations

import time
from pathlib import Path

from common.job.config import JobConfig, standard_steps
from common.job.params import Component
from common.job.tasks import plan_tasks
from common.storage import LocalStorage
from common.tokenization import Vocabulary, load_tokenizer
from common.word_segmenters import make_word_segmenter
from common.word_segmenters.base import han_runs
from worker.pipeline import TaskProcessor

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "cjk"


def chinese_paragraphs() -> list[str]:
    """Kong Yiji's paragraphs and the GSDSimp sentences (tests/data/cjk)."""
    gold = (DATA / "gsdsimp_test_segmented.txt").read_text(encoding="utf-8").splitlines()
    return (DATA / "kong_yiji.txt").read_text(encoding="utf-8").splitlines() + [line.replace(" ", "") for line in gold]


def make_corpus(directory: Path, megabytes: float) -> float:
    """WikiExtractor documents of the paragraphs, repeated to about ``megabytes``; returns the MB written."""
    paragraphs = chinese_paragraphs()
    directory.mkdir(parents=True, exist_ok=True)
    parts, size, doc = [], 0, 0
    while size < megabytes * 1e6:
        body = "\n".join(paragraphs[doc % 7::7][:20])
        part = f'<doc id="{doc}" url="" title="zh {doc}">\nzh {doc}\n\n{body}\n</doc>\n'
        parts.append(part)
        size += len(part.encode())
        doc += 1
    (directory / "wiki_00").write_text("".join(parts), encoding="utf-8")
    return size / 1e6


def chinese_vocabulary(vocab_file: str, tmp: Path) -> Vocabulary:
    """The vocab.txt plus the Han characters of the texts (as a Chinese BERT's vocabulary has them)."""
    pieces = Path(vocab_file).read_text(encoding="utf-8").splitlines()
    text = "".join(chinese_paragraphs())
    han = sorted({ch for a, b in han_runs(text) for ch in text[a:b]} - set(pieces))
    path = tmp / "zh-vocab.txt"
    path.write_text("\n".join(pieces + han) + "\n", encoding="utf-8")
    return Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(path)))


def task_cpu(vocabulary: Vocabulary, corpus: Path, output: Path, word_segmenter: str) -> tuple[float, dict]:
    """CPU seconds of one task (BERT, whole-word masking, dupe factor 1) and its stage seconds."""
    config = JobConfig(data_uri=str(corpus), output_uri=str(output), reader=Component("wikiextractor"),
                       tokenizer_json="",
                       objective=Component("bert", {"dupe_factor": 1, "do_whole_word_mask": True}),
                       steps=standard_steps({"segment": {"segmenter": "blingfire"},
                                            "words": {"word_segmenter": word_segmenter}}))
    processor = TaskProcessor(config, vocabulary, LocalStorage(str(output)))
    storage = LocalStorage(str(corpus))
    (task,) = plan_tasks(storage.list_inputs(), 1 << 40)
    payload = processor.reader.read(storage, task)
    processor.process(task, payload)  # warm: imports, jieba's dictionary, encoder caches
    started = time.process_time()
    result = processor.process(task, payload)
    return time.process_time() - started, dict(result.stats.seconds)


def segmentation_cpu_per_mb(megabytes: float) -> float:
    """CPU seconds per MB of Chinese text for the segmenter alone (jieba-rs on the Han runs)."""
    segmenter = make_word_segmenter(Component("jieba"))
    assert segmenter is not None, "jieba is a word segmenter"
    text = "\n".join(chinese_paragraphs())
    copies = max(1, round(megabytes * 1e6 / len(text.encode())))
    runs = [text[a:b] for a, b in han_runs(text)] * copies
    segmenter.word_lengths(runs[:100])
    started = time.process_time()
    segmenter.word_lengths(runs)
    return (time.process_time() - started) / (len(text.encode()) * copies / 1e6)
