"""A job's id marks its output's manifest: the same command must give the same id release after release,
or a resume after an upgrade finds "another job" in its own output and refuses it.  The ids of the byte
matrix's jobs (tests/support/byte_matrix.py), and of a few more, are held in tests/data/job_ids.json.

An id moves only when the job's behaviour does: a variant whose ``version`` is above 1 (docs/design.md,
"Versions") adds it to the id.  tests/data/job_ids_before_versions.json holds the ids from before versions
came in: without versions every job still has that id, and exactly the jobs that run a bumped behaviour
(Bling Fire's CJK sentence ends, MinHash's CJK words, a start-sensitive tokenizer's paragraph encoding, Parquet's
and MDS's split directories, a document encoded whole for an objective cut from it) have another one now.

``python -m tests.test_job_ids --write`` records them anew: only for a change meant to change what a job
is, named in its commit (``--before-versions-too`` also the ids without versions: only for a change that
moves ids otherwise than by a version)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.support import byte_matrix
from tests.support.byte_matrix import FORMATS, OBJECTIVES, TASK_SIZE, TOKENIZERS, cases, small_corpus
from tests.support.helpers import need_shared

IDS_FILE = Path(__file__).parent / "data" / "job_ids.json"
#: Beyond the matrix: options that came later, each of which must leave other jobs' ids alone.
EXTRA = {
    "electra/parquet/wordpiece/word-starts": ("electra", "parquet", "wordpiece", {"word_starts": True}),
    "roberta-none/parquet/wordpiece/chinese-ref": ("roberta-none", "parquet", "wordpiece", {"chinese_ref": True}),
    "roberta-none/parquet/wordpiece/jieba": ("roberta-none", "parquet", "wordpiece", {"word_segmenter": "jieba"}),
}


def job_config(corpus: Path, objective: str, output_format: str, family: str, holdout: bool = False,
               dedup: str = "off", extra: dict | None = None):
    from tests.support.run_configs import run_config
    from ventilator.job import prepare_job

    extra = dict(extra or {})
    word_segmenter = extra.pop("word_segmenter", "none")
    name, params = OBJECTIVES[objective]
    writer, format_params = FORMATS[output_format]
    options = run_config(data=str(corpus), output=str(corpus.parent / "out"), **TOKENIZERS[family], objective=name,
                         output_format=writer, params={**params, **format_params, **extra}, task_size=TASK_SIZE,
                         steps={"holdout": {"fraction": 0.2 if holdout else 0.0}, "dedup": {"mode": dedup}},
                         word_segmenter=word_segmenter)
    return prepare_job(options).config


#: The input's absolute path and its files' versions (size and mtime) are part of a job's identity: the ids are
#: taken with the corpus always here, its files dated FILE_TIME.
WORKDIR = Path(tempfile.gettempdir()) / "mlm-pipeline-job-ids"
FILE_TIME = 1_700_000_000


BEFORE_VERSIONS_FILE = Path(__file__).parent / "data" / "job_ids_before_versions.json"
#: Tokenizer families that treat a text's start apart (tests/common/steps/test_separator_tokens.py).
START_SENSITIVE = {"unigram"}
#: Formats whose version moved: each side in its split's directory (Parquet, MDS), MDS's ids int64.
BUMPED_FORMATS = {"parquet", "mds"}
#: Families that encode a paragraph break (tests/common/tokenization/test_document_tokens.py), and the objectives
#: cut from each document's encoding: together they encode documents whole (tokenize:whole-documents).
PARAGRAPH_SENSITIVE = {"bpe", "unigram"}
WHOLE_DOCUMENTS = {"tokens", "roberta", "electra"}


def configs() -> dict:
    shutil.rmtree(WORKDIR, ignore_errors=True)
    corpus = small_corpus(WORKDIR)
    for path in corpus.iterdir():
        os.utime(path, (FILE_TIME, FILE_TIME))
    with byte_matrix.tokenizers_loaded_once():
        found = {case.name: (job_config(corpus, case.objective, case.output_format, case.family, case.holdout,
                                        case.dedup), case.family) for case in cases()}
        for name, (objective, output_format, family, extra) in EXTRA.items():
            found[name] = (job_config(corpus, objective, output_format, family, extra=extra), family)
    return found


def compute() -> dict[str, str]:
    return {name: config.job_id for name, (config, _family) in configs().items()}


def test_the_same_command_keeps_its_job_id_and_only_versions_moved_ids():
    need_shared()
    expected, before = json.loads(IDS_FILE.read_text()), json.loads(BEFORE_VERSIONS_FILE.read_text())
    found = configs()
    got = {name: config.job_id for name, (config, _family) in found.items()}
    assert sorted(got) == sorted(expected) == sorted(before), "the id files list other jobs"
    moved = sorted(name for name in expected if got[name] != expected[name])
    assert not moved, f"{len(moved)} of {len(expected)} job ids moved: {', '.join(moved[:8])}"
    assert len(set(got.values())) == len(got), "two different jobs share an id"
    # Without versions, every id is what it was before versions came in ...
    unversioned = {name: config.identity_hash(versioned=False) for name, (config, _family) in found.items()}
    assert unversioned == before
    # ... and the ids that moved are exactly those of the jobs that run a bumped behaviour.
    bumped = {name for name, (config, family) in found.items()
              if config.step("segment").params["segmenter"] == "blingfire"
              or (config.step("dedup") and config.step("dedup").params["mode"] == "minhash")
              or family in START_SENSITIVE
              or config.writer.name in BUMPED_FORMATS
              or (family in PARAGRAPH_SENSITIVE and config.objective.name in WHOLE_DOCUMENTS)}
    assert {name for name in got if got[name] != before[name]} == bumped
    assert 0 < len(bumped) < len(got)


if __name__ == "__main__":
    if sys.argv[1:] not in (["--write"], ["--write", "--before-versions-too"]):
        sys.exit("usage: python -m tests.test_job_ids --write [--before-versions-too]")
    found = configs()
    ids = {name: config.job_id for name, (config, _family) in found.items()}
    IDS_FILE.write_text(json.dumps(ids, indent=1, sort_keys=True) + "\n")
    print(f"{len(ids)} job ids -> {IDS_FILE}")
    if "--before-versions-too" in sys.argv:  # only for a change that moves ids otherwise than by a version
        before = {name: config.identity_hash(versioned=False) for name, (config, _family) in found.items()}
        BEFORE_VERSIONS_FILE.write_text(json.dumps(before, indent=1, sort_keys=True) + "\n")
        print(f"{len(before)} job ids without versions -> {BEFORE_VERSIONS_FILE}")
