"""``python -m bench.document_tokens [FAMILY ...]``: the worker's CPU by stage for the objectives cut from each
document's encoding (``--objective tokens``, whole documents and ``--max-seq-length 1024`` chunks as ModernBERT's
MDS and Parquet outputs take them, and ``--objective roberta --masking none``), per tokenizer family:
wordpiece (../shared's BERT vocab), bpe and unigram (tests/data/matrix/), bpe-prefix (that BPE with
``add_prefix_space``).  In-process, as bench/recipe_stages.py runs the worker: ``TaskProcessor`` on three copies of
../shared's sample as one task; CPU seconds (``time.process_time``) per input MB, least of 4 runs.  The tokenize
stage is where whole-document encoding costs (docs/tokenizers.md, "Between paragraphs")."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.run import VOCAB, WIKI

MATRIX = Path(__file__).resolve().parents[1] / "tests" / "data" / "matrix"
STAGES = ("split", "tokenize", "build", "write")
#: Row label: (objective, its flags).  ``--segmenter auto`` throughout: each objective's own unit.
OBJECTIVES = {"tokens": ("tokens", {}), "tokens 1024": ("tokens", {"max_seq_length": 1024}),
              "roberta": ("roberta", {"masking": "none", "max_seq_length": 128})}


@contextlib.contextmanager
def _cpu_timed(self, name):
    started = time.process_time()
    try:
        yield
    finally:
        self.seconds[name] += time.process_time() - started


def main(families: list[str]) -> None:
    from common.steps.base import TaskStats
    from common.storage import LocalStorage
    from common.tokenization import Vocabulary
    from tests.support.run_configs import run_config
    from ventilator.job import prepare_job
    from worker.pipeline import TaskProcessor

    TaskStats.timed = _cpu_timed  # type: ignore[method-assign] # CPU, not wall: the machine is shared
    with tempfile.TemporaryDirectory(prefix="mlm-document-tokens-") as name:
        tmp = Path(name)
        (tmp / "data").mkdir()
        content = b"".join(path.read_bytes() for path in sorted(WIKI.rglob("wiki_*"))) * 3
        (tmp / "data" / "wiki_00").write_bytes(content)
        spec = json.loads((MATRIX / "bpe.json").read_text(encoding="utf-8"))
        spec["pre_tokenizer"]["add_prefix_space"] = True
        (tmp / "bpe-prefix.json").write_text(json.dumps(spec), encoding="utf-8")
        tokenizers: dict[str, dict[str, Any]] = {
                      "wordpiece": {"vocab_file": str(VOCAB)}, "bpe": {"tokenizer": str(MATRIX / "bpe.json")},
                      "bpe-prefix": {"tokenizer": str(tmp / "bpe-prefix.json")},
                      "unigram": {"tokenizer": str(MATRIX / "unigram.json")}}
        megabytes = len(content) / 1e6
        print(f"| family | objective | segmenter | {' | '.join(STAGES)} |\n| --- | --- | --- |{' --- |' * len(STAGES)}")
        for family in families or list(tokenizers):
            for label, (objective, params) in OBJECTIVES.items():
                output = tmp / f"out-{family}-{label.replace(' ', '-')}"
                job = prepare_job(run_config(data=str(tmp / "data"), output=str(output), **tokenizers[family],
                                             objective=objective, params=params, output_format="parquet",
                                             task_size=1 << 30))
                processor = TaskProcessor(job.config, Vocabulary.from_json(job.config.tokenizer_json),
                                          LocalStorage(str(output)))
                task = job.tasks[0]
                payload = job.reader.read(job.input_storage, task)
                least: dict[str, float] = {}
                for _ in range(4):
                    seconds = processor.process(task, payload).stats.seconds
                    least = {stage: min(least.get(stage, float("inf")), seconds.get(stage, 0.0)) for stage in STAGES}
                segment = job.config.step("segment")
                segmenter = segment.params["segmenter"] if segment is not None else "none"
                print(f"| {family} | {label} | {segmenter} | "
                      + " | ".join(f"{least[stage] / megabytes:.3f}" for stage in STAGES) + " |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
