"""Reading the manifest: one JSON line per finished task, next to the shards (its lines and their files: the
loader, mlm-verify, the formats, the card).

The journal the sink keeps (appending, fsync, torn last lines, publishing to S3), which asks the steps and
formats, is ``sink/manifest.py``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import orjson

MANIFEST_NAME = "manifest.jsonl"

#: The fields of a manifest line; any other field holding a map is a step's (or split's) counters
#: (AckStats.counters), summed in the totals under its name (a step's, or a side's split).
LINE_FIELDS = frozenset({"task", "job", "source", "start", "end", "version", "shards", "shard", "records",
                         "documents", "skipped", "tokens", "bytes", "worker", "at", "seconds", "bytes_in", "stage",
                         "files", "totals", "skipped_documents", "tasks", "bytes_written", "quarantined", "this_run",
                         "dropped_messages", "cost", "reason", "complete", "cpu_seconds", "output_tokens"})
#: A stage task's counter saying it ran without some task of an earlier stage (quarantined): its results,
#: and what was built on them, are done again at the next load.
WITHOUT_EARLIER_TASKS = "signature_tasks_skipped"


def counters(entry: dict) -> dict[str, dict]:
    """A manifest line's counters, by the step (or split) that counted them."""
    if entry.keys() <= LINE_FIELDS:  # most lines (one set comparison in C: a million lines are read at a resume)
        return {}
    return {name: value for name, value in entry.items() if name not in LINE_FIELDS and isinstance(value, dict)}


def made_without_earlier_tasks(entry: dict) -> bool:
    """A stage's task that ran without some task of an earlier stage (it counted them)."""
    return bool(entry.get("stage")) and any(values.get(WITHOUT_EARLIER_TASKS) for values in counters(entry).values())


@dataclass
class Work:
    """What the listed tasks read and made, over every run of the job: the cost's denominators
    (sink/cost.py).  Lines written before they said so count no CPU and no tokens."""

    records: int = 0
    bytes_in: int = 0
    cpu_seconds: float = 0.0
    output_tokens: int = 0  # token positions holding a token (no padding)

    def add(self, entry: dict) -> None:
        get = entry.get
        self.records += get("records", 0)
        self.bytes_in += get("bytes_in", 0)
        self.cpu_seconds += get("cpu_seconds", 0.0)
        self.output_tokens += get("output_tokens", 0)


class ManifestMismatch(Exception):
    """The output already holds a manifest of a different job."""


def _loads(raw: bytes):
    """One line's JSON.  orjson: a million-line manifest is parsed at resume, ~3.5x faster than json."""
    return orjson.loads(raw)


def _iter_lines(handle: BinaryIO) -> Iterator[tuple[dict, int, int]]:
    """(entry, its first byte, the byte after its newline) of each complete,
    valid line, in order; stops at the first torn or invalid one.  Lean: a
    resume reads a million lines."""
    position = 0
    loads = orjson.loads  # _loads, without the call
    for raw in handle:
        end = position + len(raw)
        if raw[-1] != 10:  # no newline: torn
            return
        try:
            entry = loads(raw)
        except ValueError:
            return
        if not isinstance(entry, dict) or "task" not in entry:
            return
        yield entry, position, end
        position = end


def _parse_lines(data: bytes) -> tuple[list[dict], int]:
    """Entries, and the byte length of the complete, valid prefix."""
    entries, good = [], 0
    for entry, _start, end in _iter_lines(io.BytesIO(data)):
        entries.append(entry)
        good = end
    return entries, good


def shard_files(entry: dict) -> list[dict]:
    """The files a manifest line lists: each has name (relative to the
    output root), records, sha256 and bytes, and ``split`` for a file of
    another side than training (a step's ``Side``: the held-out side's
    ``holdout/part-*``; older lines carry the step's own mark:
    :func:`common.steps.split_of`)."""
    return entry.get("shards") or []


def stage_files(entry: dict) -> list[dict]:
    """The files a stage's task wrote (not training shards; same fields)."""
    return entry.get("files") or []


def check_job(entries: list[dict], job_id: str, where: str, what_changed=None) -> None:
    """ManifestMismatch unless every entry is ``job_id``'s; ``what_changed()`` says why, when it can (the
    options that differ: ventilator/job.py)."""
    for entry in entries:
        if entry.get("job") != job_id:
            why = what_changed() if what_changed else ""
            raise ManifestMismatch(
                f"{where} belongs to another job ({entry.get('job')}, this one is {job_id}: "
                + (why or "the corpus changed since, or the settings differ, --task-size included")
                + "); use another --output, or remove the old output first")


def read_published(storage) -> tuple[list[dict], int] | None:
    """The published manifest's entries, and how many bytes at its end are
    not complete lines (a sink stopped mid-write); None if there is none."""
    data = storage.get_bytes(MANIFEST_NAME)
    if data is None:
        return None
    entries, good = _parse_lines(data)
    return entries, len(data) - good


def read_entries(storage) -> list[dict]:
    """The published manifest's entries."""
    published = read_published(storage)
    return published[0] if published else []


def read_first_entry(storage) -> dict | None:
    """The published manifest's first line (which job the output holds), read
    without the rest: a web-scale manifest has millions of lines."""
    head = storage.get_bytes(MANIFEST_NAME, limit=1 << 16)
    if head is None:
        return None
    for entry, _start, _end in _iter_lines(io.BytesIO(head)):
        return entry
    entries = read_entries(storage) if len(head) == 1 << 16 else []  # a first line longer than the head
    return entries[0] if entries else None
