"""The job the object-store tests (test_s3.py, test_gcs.py) run on s3:// and gs://, and its local run: the bytes
every store must give (storage does not change output)."""

from __future__ import annotations

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
