"""The writer interface: one task's records in, one or more files out.

A writer sees the objective's features and its batches, never the objective
itself; it writes a task's files atomically (each appears under its final
name only once complete) and reports each file's name, records, sha256 and
size for the manifest.  The same records always give the same bytes, so a
task done twice writes the same files.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Callable, ClassVar

from common.objectives.base import Batch, Feature
from common.tokenization.vocabulary import SpecialIds
from common.outputs import ShardFile  # noqa: F401 (re-exported: the writers' result type lives in a neutral module)
from common.params import Configurable


class TaskOutput(abc.ABC):
    """The files of one task being written: nothing is visible before commit()."""

    @abc.abstractmethod
    def write(self, batch: Batch) -> None: ...

    @abc.abstractmethod
    def commit(self) -> list[ShardFile]:
        """Make every file visible; what to acknowledge."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Remove whatever was written (an error: the task will be done again)."""


class Writer(Configurable, abc.ABC):
    """An output format."""

    #: Endings of the files it writes (for mlm-verify and readers of an output).
    suffixes: ClassVar[tuple[str, ...]] = ()
    #: read_columns gives the dtypes the files hold (False: a wider or narrower one of the same kind).
    exact_dtypes: ClassVar[bool] = True

    def __init__(self, params, features: list[Feature], special: SpecialIds | None = None):
        self.params = params
        self.features = features
        self.special = special  # the tokenizer's special ids, for formats that write one (Megatron's EOD)

    @classmethod
    def check_features(cls, params, features: list[Feature]) -> None:
        """ValueError with a one-line reason when the format cannot hold these features."""

    @abc.abstractmethod
    def open(self, output, stem: str) -> TaskOutput:
        """Start a task's files, named from ``stem`` (``part-<task id>``), in ``output`` (a Storage)."""

    @classmethod
    @abc.abstractmethod
    def count_records(cls, name: str, data: bytes) -> int:
        """Records in a file this writer wrote, checking its framing; ValueError if it is corrupt."""

    @classmethod
    def finish_tasks(cls, params, output, job_id: str, normal: list, special: SpecialIds) -> list:
        """Tasks of the format's own stage after the normal pass (stage ``common.tasks.FINISH``), planned
        with the job: none by default.  Whatever they need to know is written to ``output`` here."""
        return []

    def finish_task(self, output, task, job_id: str, skipped: list[str]) -> list[ShardFile]:
        """Do one of those tasks; ``skipped``: normal tasks quarantined (their files are missing)."""
        raise ValueError(f"{self.name} has no stage after the normal pass")

    @classmethod
    def stored_features(cls, params, features: list[Feature], special: SpecialIds) -> dict[str, dict]:
        """Each feature as this format's files hold it (dataset_info.json): its ``dtype`` and ``shape``
        (``[n]`` a fixed length, ``[None]`` variable, ``[]`` one value per record)."""
        return {f.name: {"dtype": f.dtype, "shape": [f.length]} for f in features}

    @classmethod
    def format_details(cls, params, features: list[Feature], special: SpecialIds) -> dict:
        """What else a reader of this format needs to know (dataset_info.json's ``format_details``)."""
        return {}

    @classmethod
    def read_columns(cls, name: str, data: bytes, companion: Callable[[str], bytes | None]) -> dict | None:
        """A file's records as columns, by feature name: a (records, length) array per fixed-length feature,
        a 1-D array per one-value feature, a :class:`Ragged` per variable one.  None for a file that holds
        no records of its own (read with its companion); ``companion(name)`` gives another file's bytes.
        ValueError if the file is corrupt."""
        raise NotImplementedError(f"{cls.name} files cannot be read back")

    @classmethod
    def finish_job(cls, output, config, totals: dict) -> None:
        """Called by the sink once every task is done: files that describe the
        whole output (a dataset description, a blend list).  Nothing by default."""

    @contextlib.contextmanager
    def writing(self, output, stem: str):
        """``open`` as a context: aborted unless committed."""
        task_output = self.open(output, stem)
        try:
            yield task_output
        except BaseException:
            task_output.abort()
            raise
