"""The job the object-store tests (test_s3.py, test_gcs.py) run on s3:// and gs://, and its local run: the bytes
every store must give (storage does not change output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.factories import finished_job
from tests.support.helpers import VOCAB

#: One pass over the wiki sample in tasks of 300 KB: a few tasks, seconds of work.
JOB = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "300K", "--report-seconds", "2"]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JOB run locally by two workers."""
    return finished_job(tmp_path_factory.mktemp("local"), *JOB, "--workers", "2")


def assert_only_the_unchanged_object_done(output: Path) -> None:
    """After wiki/AB/wiki_00 was replaced between listing and reading: its tasks quarantined on their first attempt
    as changed since listed, and only AA/wiki_00's tasks in the manifest."""
    quarantined = json.loads((output / "summary.json").read_text())["quarantined"]
    assert quarantined and all(f["source"] == "AB/wiki_00" for f in quarantined.values())
    assert all("changed since it was listed" in f["errors"][-1] for f in quarantined.values())
    assert all(f["attempts"] == 1 for f in quarantined.values())
    done = [json.loads(line) for line in (output / "manifest.jsonl").read_text().splitlines()]
    assert {e["source"] for e in done} == {"AA/wiki_00"}
