"""The task model: a task is a byte range of one input file or object.

The ventilator cuts files into tasks from their sizes alone (it never reads
an S3 object to plan); readers widen each range to document boundaries (see
:mod:`common.readers`).  A task's identity is its location, so the same
input always yields the same tasks, the same random streams and the same
shard names, whatever the fleet, the order or the storage it is read from.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import msgpack

#: The stage of a format's own tasks after the normal pass (``Writer.finish_tasks``: Megatron's merge).
FINISH = "finish"
#: What a stage may be named (steps declare their stages: common/steps/base.py); "" is the normal pass.
_STAGE_RE = re.compile(r"[a-z0-9_]*")

#: Suffixes of inputs that cannot be split by byte range: one task per file.
COMPRESSED_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """'8M', '256KiB', '1g' or a plain byte count, to bytes (powers of 1024)."""
    if isinstance(text, int):
        return text
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (try 8M, 256K or a byte count)")
    number, unit, _ = match.groups()
    scale = 1024 ** " kmgt".index(unit.lower() or " ")
    return int(float(number) * scale)


def compression_of(path: str) -> str:
    for suffix, name in COMPRESSED_SUFFIXES.items():
        if path.endswith(suffix):
            return name
    return ""


@dataclass(frozen=True)
class InputFile:
    """One listed input: its path relative to the data root, size and version
    (an S3 ETag, or size and mtime for a local file)."""

    path: str
    size: int
    version: str


def task_key(path: str, start: int, end: int, stage: str = "") -> str:
    """A task's name: its range of its file, and its stage (only a stage's task carries one)."""
    where = f"{path}@{start}-{end}"
    return f"{stage}:{where}" if stage else where


def task_id_of(path: str, start: int, end: int, stage: str = "") -> str:
    """The id of the task over this range (``Task.task_id``): what its acknowledgement, which names the range,
    must carry (the sink drops one that does not: a forged or garbled frame)."""
    return hashlib.sha256(task_key(path, start, end, stage).encode()).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class Task:
    path: str
    start: int
    end: int
    size: int
    version: str
    compression: str = ""
    #: "" for the normal pass; a step's stage for its tasks (``Step.stages``: dedup's, the writer's finish).
    #: Only those carry it in their key, so the normal pass's task ids and random streams never change.
    stage: str = ""
    #: Derived from (path, range) only: output does not depend on where the corpus is stored.  The version
    #: guards against mixing file revisions instead (resume redoes a task whose version changed; an S3 read
    #: fails if the object's ETag differs from the listed one).  Computed once: a million-task job looks
    #: ids up millions of times (the dispatcher's tables, resume).
    task_id: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_id", task_id_of(self.path, self.start, self.end, self.stage))

    @property
    def key(self) -> str:
        return task_key(self.path, self.start, self.end, self.stage)

    @property
    def shard_stem(self) -> str:
        """What the task's files are named from (the writer adds its endings)."""
        return f"part-{self.task_id}"

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def reads_input(self) -> bool:
        """Its payload is a range of the corpus (the normal pass; a stage's task that names a range, such as
        dedup's signatures), not the list of quarantined tasks a stage's task over no range is given."""
        return not self.stage or self.size > 0

    def to_wire(self) -> list:
        wire = [self.path, self.start, self.end, self.size, self.version, self.compression]
        return wire + [self.stage] if self.stage else wire

    @classmethod
    def from_wire(cls, data: list) -> Task:
        if not isinstance(data, list) or len(data) not in (6, 7):
            raise TypeError("a task is a list of 6 or 7 fields")
        path, start, end, size, version, compression, *rest = data
        stage = rest[0] if rest else ""
        if not (isinstance(path, str) and isinstance(version, str) and isinstance(compression, str)
                and isinstance(stage, str)):
            raise TypeError("task path, version, compression and stage must be strings")
        for number in (start, end, size):
            if not isinstance(number, int) or isinstance(number, bool) or number < 0:
                raise TypeError("task offsets must be non-negative integers")
        if not start <= end <= size:
            raise ValueError("task range out of bounds")
        if not _STAGE_RE.fullmatch(stage):
            raise ValueError(f"not a task stage: {stage!r}")
        return cls(path, start, end, size, version, compression, stage)


class EarlierTaskFileError(Exception):
    """A file an earlier stage's task wrote is missing or corrupt: ``writer_task`` (its id) is done again
    (TaskFailed.redo), then the task that found it."""

    writer_task: str = ""


def encode_quarantined(task_ids: list[str]) -> bytes:
    """The payload of a stage's task that reads no input: the earlier tasks that were quarantined (their
    files never came), so it does without them or refuses."""
    return msgpack.packb(sorted(task_ids))


def decode_quarantined(payload: bytes | None) -> set[str]:
    return set(msgpack.unpackb(payload)) if payload else set()


def plan_tasks(files: Iterable[InputFile], task_size: int) -> Iterator[Task]:
    """Cut each file into ``task_size`` byte ranges (compressed files whole)."""
    if task_size < 1:
        raise ValueError("task size must be positive")
    for f in files:
        if f.size == 0:
            continue
        compression = compression_of(f.path)
        if compression:
            yield Task(f.path, 0, f.size, f.size, f.version, compression)
            continue
        for start in range(0, f.size, task_size):
            yield Task(f.path, start, min(start + task_size, f.size), f.size, f.version)
