"""The format interface: one task's records in, one or more files out, and
those files read back.

A writer sees the objective's features and its batches, never the objective
itself; it writes a task's files atomically through :class:`OutputFile` (each
appears under its final name only once complete) and reports each file's
name, records, sha256 and size for the manifest.  The same records always
give the same bytes, so a task done twice writes the same files.

The same class reads them: :attr:`Writer.suffixes` says which files of an
output are its own, :meth:`Writer.count_records` checks a file's framing and
:meth:`Writer.read_columns` / :meth:`Writer.read_records` give its records
back by feature name.  ``mlm-verify``, the loader and the tests read outputs
only this way, so a new format is served and verified without touching them.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import io
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, ClassVar

import numpy as np

from common.job.params import Configurable
from common.objectives.base import Batch, Feature, Ragged
from common.output.files import TRAIN, ShardFile
from common.output.manifest import read_entries
from common.steps import side_named, split_of
from common.tokenization.vocabulary import SpecialIds


def hf_split(split: str) -> str:
    """A side's split name in the dataset card and Hugging Face's readers: train, the step's name for its side
    (``Side.card_split``: validation for the held-out side), or a step's own split by its name."""
    if split == TRAIN:
        return "train"
    side = side_named(split)
    return side.card_split if side is not None and side.card_split else split


#: The manifest's lines, a fresh stream at each call (the sink's journal, read line by line): what a writer's
#: ``finish_job`` reads, never as a list (a line is ~1 KB of dicts: gigabytes at a million tasks).
Lines = Callable[[], Iterable[dict]]


def manifest_lines(output, lines: Lines | None) -> Iterable[dict]:
    """The lines ``finish_job`` was given, else the published manifest's (read whole)."""
    return lines() if lines is not None else read_entries(output)


@dataclass(frozen=True, slots=True)
class ListedFile:
    """A file as a manifest line lists it, with what the end of a job needs of it (an index, a blend list): a
    small typed record, where the line it came in is a dict of ~1 KB."""

    name: str
    records: int
    bytes: int
    sha256: str
    split: str  # its side's (common.steps.split_of): TRAIN for the training side

    @classmethod
    def of(cls, listed: dict) -> ListedFile:
        return cls(listed["name"], listed.get("records", 0), listed.get("bytes", 0), listed.get("sha256", ""),
                   sys.intern(split_of(listed)))  # one string per side, not one per file

    @property
    def basename(self) -> str:
        return self.name.rpartition("/")[2]


def finish_job(writer_class: type[Writer], output, config, totals: dict, lines: Lines) -> None:
    """``writer_class.finish_job``, given the manifest's ``lines`` only where it takes them: a plugin format
    written before they were offered (``finish_job(output, config, totals)``) reads the published manifest
    itself, as it always did, instead of failing the end of every job with a TypeError."""
    import inspect

    try:
        parameters = inspect.signature(writer_class.finish_job).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a C callable): called as before
        parameters = ()
    if any(p.name == "lines" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        writer_class.finish_job(output, config, totals, lines=lines)
    else:
        writer_class.finish_job(output, config, totals)


class HashingFile(io.RawIOBase):
    """Passes writes on to ``file`` and keeps their size and sha256: what the manifest says of a file,
    known without reading it again.  A raw binary file, so pyarrow's or gzip's writers can write to it."""

    def __init__(self, file: BinaryIO):
        self._file = file
        self._sha256 = hashlib.sha256()
        self.bytes = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        data = bytes(data)
        self._file.write(data)
        self._sha256.update(data)
        self.bytes += len(data)
        return len(data)

    @property
    def sha256(self) -> str:
        return self._sha256.hexdigest()


class OutputFile(HashingFile):
    """One file of a task's output, the one way every format writes one: under a temporary name
    (``Storage.open_atomic``), hashed and sized as it is written, renamed into place by :meth:`commit`."""

    def __init__(self, output, name: str):
        self.name = name
        self._atomic = output.open_atomic(name)
        super().__init__(self._atomic.file)

    def commit(self, records: int, **labels) -> ShardFile:
        """Make the file visible under its name; the manifest's line for it (``labels``: ShardFile's
        other fields)."""
        self._atomic.commit()
        return ShardFile(self.name, records, self.sha256, self.bytes, **labels)

    def abort(self) -> None:
        """Remove it (safe after a commit: nothing happens)."""
        self._atomic.abort()


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

    #: Endings of the files it writes: which files of an output are its own (common.writers.writer_for_file,
    #: for mlm-verify, the loader and every other reader of an output).
    suffixes: ClassVar[tuple[str, ...]] = ()
    #: Where the files of its own stage after the normal pass go (``finish_task``; Megatron's merged pairs:
    #: ``megatron/merged-``, on each side): with ``part-*``, the files a job of this format writes.
    finish_prefixes: ClassVar[tuple[str, ...]] = ()
    #: Files ``finish_job`` writes in each directory of the manifest's files (the training side's, each held-out
    #: side's), by name: a reader's index of them (MDS's and LitData's ``index.json``).  They are the job's, not
    #: output files: ``check_output`` checks them, and no reader of an output takes them for foreign ones.
    job_files: ClassVar[tuple[str, ...]] = ()
    #: read_columns gives the dtypes the files hold (False: a wider or narrower one of the same kind).
    exact_dtypes: ClassVar[bool] = True
    #: How to read the output, for its dataset card (common/describe/dataset_card.py), when 🤗 datasets cannot: a
    #: Markdown snippet.  "" for a format ``datasets.load_dataset(OUT)`` reads through the card (Parquet).
    reading: ClassVar[str] = ""
    #: The directory of each side's files, by the side's split as the dataset card names it (``train``;
    #: ``validation`` for the held-out side; a step's own side by its name: hf_split), for a format
    #: whose readers find a side by a directory name (MDS: ModernBERT's ``split: train`` / ``split: val``; Parquet:
    #: the Hub's ``train/``, ``validation/``).  A side it does not name goes under its card split's name.  Empty:
    #: every side where its step puts it (the training side at the root, the held-out side in holdout/).
    side_directories: ClassVar[dict[str, str]] = {}

    @classmethod
    def side_directory(cls, split: str) -> str | None:
        """The directory of the side whose files are marked ``split`` (``ShardFile.split``, "" for training),
        relative to the output's root, when the format names its sides' directories; None when it does not."""
        if not cls.side_directories:
            return None
        card = hf_split(split)
        return cls.side_directories.get(card, card)

    @classmethod
    def place(cls, split: str, stem: str) -> str:
        """Where a part's files go: ``stem`` as the steps make it (``part-<task>``, ``holdout/part-<task>``),
        moved into the format's own directory for its side when it names one (``train/part-<task>``)."""
        directory = cls.side_directory(split)
        return stem if directory is None else f"{directory}/{stem.rpartition('/')[2]}"

    @classmethod
    def reading_text(cls) -> str:
        """``reading`` as the card gives it: a format that names where each step's side is
        (``common.steps.sides``) makes it here; ``reading`` otherwise."""
        return cls.reading

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

    def names(self, stem: str) -> tuple[str, ...] | None:
        """Every name a task's files under ``stem`` can have, when known before writing (None: not known, as
        for Parquet's bins).  The write step removes those a task did not write this time: a task done again
        after the stages before it changed writes fewer files, and the rest must not stay (a merge, a glob)."""
        return None

    @classmethod
    @abc.abstractmethod
    def count_records(cls, name: str, data: bytes) -> int:
        """Records in a file this writer wrote, checking its framing; ValueError if it is corrupt."""

    @classmethod
    def finish_tasks(cls, params, output, job_id: str, normal: list, special: SpecialIds) -> list:
        """Tasks of the format's own stage after the normal pass (stage ``common.job.tasks.FINISH``), planned
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
    def miscount(cls, name: str, data: bytes, read: int, listed: int) -> str:
        """Why ``read_columns`` gives ``read`` records of a file the manifest lists with ``listed`` (what
        ``count_records`` counted when it was written), in one line for a reader's refusal.  By default the file
        is not what was written; a format whose records are counted otherwise than read says so."""
        return f"{read} records, the manifest says {listed}"

    @classmethod
    def read_records(cls, name: str, data: bytes,
                     companion: Callable[[str], bytes | None] = lambda name: None) -> Iterator[dict[str, np.ndarray]]:
        """A file's records one by one, each a dict of numpy arrays by feature name (a fixed-length
        feature: its ``length`` values; a variable one: this record's; a one-value feature: one value);
        nothing for a file read with its companion.  ValueError if the file is corrupt."""
        columns = cls.read_columns(name, data, companion)
        if not columns:
            return
        rows = {key: column.rows() if isinstance(column, Ragged) else iter(column) for key, column in columns.items()}
        for _ in range(len(next(iter(columns.values())))):
            yield {key: np.asarray(next(values)) for key, values in rows.items()}

    @classmethod
    def check_output(cls, storage, entries: list[dict], info: dict) -> list[str]:
        """``mlm-verify``'s look at what finish_job wrote for a complete output (``entries``: the manifest's,
        ``info``: dataset_info.json): one line per problem.  Nothing by default."""
        return []

    @classmethod
    def finish_job(cls, output, config, totals: dict, lines: Lines | None = None) -> None:
        """Called by the sink once every task is done: files that describe the whole output (a blend list, an
        index).  ``lines``: the manifest's lines as a stream (:func:`manifest_lines`; read at most once, kept as
        :class:`ListedFile`, never as the lines' dicts).  Nothing by default.  The sink then writes the dataset
        card README.md (common/describe/dataset_card.py) with the format's :meth:`reading_text`."""

    @contextlib.contextmanager
    def writing(self, output, stem: str):
        """``open`` as a context: aborted unless committed."""
        task_output = self.open(output, stem)
        try:
            yield task_output
        except BaseException:
            task_output.abort()
            raise
