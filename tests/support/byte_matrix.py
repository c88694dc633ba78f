"""The byte matrix: every objective x output format x a tokenizer of each
family, with and without holdout and dedup, hashed on a slice of ../shared's
corpus.

It holds the pipeline's behaviour fixed while its insides are rebuilt: a job
is given as the ventilator's job options (what a user types), planned by the
ventilator's own ``prepare_job``, and every task, dedup stages first, is run
by the worker's ``TaskProcessor`` in this process, in stage order, as a fleet
of any size would run them (the output does not depend on who runs what).
The digest of every file a task writes (shards and dedup stage files) is
compared with ``tests/data/byte_matrix.json``.

The BPE and Unigram tokenizers are files in ``tests/data/matrix/`` (trained
once from ../shared's corpus with ``mlm-train-vocab``; see the README there),
so the matrix does not move with the trainer.

``python -m tests.support.byte_matrix --write`` records the digests anew: only after
a change meant to change output, named in its commit.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.helpers import VOCAB, WIKI

DATA = Path(__file__).resolve().parents[1] / "data"  # tests/data
MATRIX_FILE = DATA / "byte_matrix.json"
TOKENIZERS = {
    "wordpiece": {"vocab_file": str(VOCAB)},
    "bpe": {"tokenizer": str(DATA / "matrix" / "bpe.json")},
    "unigram": {"tokenizer": str(DATA / "matrix" / "unigram.json")},
}
#: (objective, its flags): every objective, RoBERTa both ways.
OBJECTIVES = {
    "bert": ("bert", {"dupe_factor": 2}),
    "albert": ("albert", {"dupe_factor": 2, "max_seq_length": 128}),
    "electra": ("electra", {}),
    "roberta-static": ("roberta", {"masking": "static", "max_seq_length": 128, "dupe_factor": 2}),
    "roberta-none": ("roberta", {"masking": "none", "max_seq_length": 128}),
    "tokens": ("tokens", {}),
    "tokens-chunked": ("tokens", {"max_seq_length": 128}),  # ModernBERT's shape: [CLS] chunk [SEP] records
}
#: (output format, its flags).
FORMATS = {"tfrecord": ("tfrecord", {}), "parquet": ("parquet", {}), "parquet-binned": ("parquet", {"bin_size": 64}),
           "megatron": ("megatron", {}), "megatron-document": ("megatron", {"megatron_level": "document"})}


def holds(output_format: str, objective: str) -> bool:
    """Token-only output has no fixed length, so TFRecord and bins cannot hold it; Megatron holds nothing else."""
    if objective == "tokens-chunked":
        return output_format == "parquet"  # Megatron takes whole documents; one format holds the chunks' ids
    if objective == "tokens":
        return output_format not in ("tfrecord", "parquet-binned")
    return FORMATS[output_format][0] != "megatron"
TASK_SIZE = 32 * 1024


@dataclass(frozen=True)
class Case:
    objective: str
    output_format: str
    family: str
    holdout: bool = False
    dedup: str = "off"
    extra: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def name(self) -> str:
        parts = [self.objective, self.output_format, self.family]
        parts += ["holdout"] if self.holdout else []
        parts += [f"dedup-{self.dedup}"] if self.dedup != "off" else []
        return "/".join(parts)


def cases() -> list[Case]:
    made = []
    for objective in OBJECTIVES:
        for output_format in FORMATS:
            if not holds(output_format, objective):
                continue
            for family in TOKENIZERS:
                made.append(Case(objective, output_format, family))
                made.append(Case(objective, output_format, family, holdout=True))
    # Dedup (its stages, then removal before the holdout split): every format, each family once.
    made += [Case("bert", "tfrecord", "wordpiece", dedup="exact"),
             Case("bert", "tfrecord", "wordpiece", holdout=True, dedup="minhash"),
             Case("roberta-none", "parquet", "bpe", holdout=True, dedup="exact"),
             Case("tokens", "megatron", "unigram", dedup="minhash")]
    return made


def small_corpus(root: Path) -> Path:
    """The first ~150 KB of wiki_00 (whole documents) and the same again with
    a third of its documents repeated, so dedup has something to remove."""
    text = (WIKI / "AA" / "wiki_00").read_text(encoding="utf-8")
    cut = text.index("</doc>\n", 150_000) + len("</doc>\n")
    docs = text[:cut].split("</doc>\n")[:-1]
    corpus = root / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    (corpus / "wiki_00").write_text(text[:cut], encoding="utf-8")
    (corpus / "wiki_01").write_text("".join(d + "</doc>\n" for d in docs[::3]), encoding="utf-8")
    return corpus


def run_case(case: Case, corpus: Path | str, output: Path | str, vocabularies: dict | None = None) -> dict[str, str]:
    """Plan the job as the ventilator does, run every task as workers do: {file name: sha256}.  ``corpus`` and
    ``output`` may be any storage's URI (gs://, s3://): the bytes must not depend on where they are.
    ``vocabularies``: the workers' Vocabulary of each tokenizer JSON, kept across cases (:func:`compute`)."""
    from common.steps.dedup import stages as dedup_stages
    from common.storage import open_storage
    from common.tokenization import Vocabulary
    from tests.support.run_configs import run_config
    from ventilator.job import prepare_job
    from worker.pipeline import TaskProcessor

    objective, params = OBJECTIVES[case.objective]
    output_format, format_params = FORMATS[case.output_format]
    options = run_config(data=str(corpus), output=str(output), **TOKENIZERS[case.family], objective=objective,
                         output_format=output_format, params={**params, **format_params},
                         task_size=TASK_SIZE, steps={"holdout": {"fraction": 0.2 if case.holdout else 0.0},
                                           "dedup": {"mode": case.dedup}})
    job = prepare_job(options)
    storage = open_storage(job.config.output_uri)
    if vocabularies is None:
        vocabularies = {}
    if job.config.tokenizer_json not in vocabularies:
        vocabularies[job.config.tokenizer_json] = Vocabulary.from_json(job.config.tokenizer_json)
    processor = TaskProcessor(job.config, vocabularies[job.config.tokenizer_json], storage)
    digests = {}
    for task in job.tasks:  # planned in stage order: signature, bucket, resolve, then the normal pass
        payload = job.reader.read(job.input_storage, task) if task.reads_input else dedup_stages.encode_skips([])
        for written in processor.process(task, payload).files:
            data = storage.get_bytes(written.name)
            assert data is not None and hashlib.sha256(data).hexdigest() == written.sha256, written.name
            digests[written.name] = written.sha256
    assert digests, f"{case.name} wrote nothing"
    return digests


@contextlib.contextmanager
def tokenizers_loaded_once() -> Iterator[None]:
    """The ventilator's ``load_vocabulary`` remembering what it loaded, while the matrix runs: each of the three
    tokenizers is read, checked and built once instead of once per case (~40% of the matrix's time; the job ids'
    test likewise).  Planning only reads the Vocabulary; every cell's digest is the same as with one load a case."""
    import ventilator.job

    loader = ventilator.job.load_vocabulary
    cache: dict[str, object] = {}

    @functools.wraps(loader)
    def load_once(*args, **kwargs):
        key = repr((args, sorted(kwargs.items())))
        if key not in cache:
            cache[key] = loader(*args, **kwargs)
        return cache[key]

    ventilator.job.load_vocabulary = load_once
    try:
        yield
    finally:
        ventilator.job.load_vocabulary = loader


def compute(workdir: Path, selected: list[Case] | None = None) -> dict[str, dict[str, str]]:
    corpus = small_corpus(workdir)
    vocabularies: dict = {}
    with tokenizers_loaded_once():
        return {case.name: run_case(case, corpus, workdir / f"out{i}", vocabularies)
                for i, case in enumerate(selected or cases())}


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.support.byte_matrix --write")
    with tempfile.TemporaryDirectory() as work:
        matrix = compute(Path(work))
    MATRIX_FILE.write_text(json.dumps(matrix, indent=1, sort_keys=True) + "\n")
    print(f"{len(matrix)} cases, {sum(map(len, matrix.values()))} files -> {MATRIX_FILE}")
