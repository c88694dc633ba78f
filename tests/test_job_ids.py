"""A job's id marks its output's manifest: the same command must give the same id release after release,
or a resume after an upgrade finds "another job" in its own output and refuses it.  The ids of the byte
matrix's jobs (tests/byte_matrix.py), and of a few more, are held in tests/data/job_ids.json.

``python -m tests.test_job_ids --write`` records them anew: only for a change meant to change what a job
is, named in its commit."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.byte_matrix import FORMATS, OBJECTIVES, TASK_SIZE, TOKENIZERS, cases, small_corpus
from tests.helpers import need_shared

IDS_FILE = Path(__file__).parent / "data" / "job_ids.json"
#: Beyond the matrix: options that came later, each of which must leave other jobs' ids alone.
EXTRA = {
    "electra/parquet/wordpiece/word-starts": ("electra", "parquet", "wordpiece", {"word_starts": True}),
    "roberta-none/parquet/wordpiece/chinese-ref": ("roberta-none", "parquet", "wordpiece", {"chinese_ref": True}),
    "roberta-none/parquet/wordpiece/jieba": ("roberta-none", "parquet", "wordpiece", {"word_segmenter": "jieba"}),
}


def job_id(corpus: Path, objective: str, output_format: str, family: str, holdout: bool = False,
           dedup: str = "off", extra: dict | None = None) -> str:
    from common.dedup.settings import DedupSettings
    from ventilator.job import JobOptions, prepare_job

    extra = dict(extra or {})
    word_segmenter = extra.pop("word_segmenter", "none")
    name, params = OBJECTIVES[objective]
    writer, format_params = FORMATS[output_format]
    options = JobOptions(data=str(corpus), output=str(corpus.parent / "out"), **TOKENIZERS[family], objective=name,
                         output_format=writer, params={**params, **format_params, **extra}, task_size=TASK_SIZE,
                         holdout_fraction=0.2 if holdout else 0.0, dedup=DedupSettings(mode=dedup),
                         word_segmenter=word_segmenter)
    return prepare_job(options).config.job_id


#: The input's absolute path and its files' versions (size and mtime) are part of a job's identity: the ids are
#: taken with the corpus always here, its files dated FILE_TIME.
WORKDIR = Path(tempfile.gettempdir()) / "mlm-pipeline-job-ids"
FILE_TIME = 1_700_000_000


def compute() -> dict[str, str]:
    shutil.rmtree(WORKDIR, ignore_errors=True)
    corpus = small_corpus(WORKDIR)
    for path in corpus.iterdir():
        os.utime(path, (FILE_TIME, FILE_TIME))
    ids = {case.name: job_id(corpus, case.objective, case.output_format, case.family, case.holdout, case.dedup)
           for case in cases()}
    for name, (objective, output_format, family, extra) in EXTRA.items():
        ids[name] = job_id(corpus, objective, output_format, family, extra=extra)
    return ids


def test_the_same_command_keeps_its_job_id():
    need_shared()
    expected = json.loads(IDS_FILE.read_text())
    got = compute()
    assert sorted(got) == sorted(expected), "the id file lists other jobs"
    moved = sorted(name for name in expected if got[name] != expected[name])
    assert not moved, f"{len(moved)} of {len(expected)} job ids moved: {', '.join(moved[:8])}"
    assert len(set(got.values())) == len(got), "two different jobs share an id"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_job_ids --write")
    ids = compute()
    IDS_FILE.write_text(json.dumps(ids, indent=1, sort_keys=True) + "\n")
    print(f"{len(ids)} job ids -> {IDS_FILE}")
