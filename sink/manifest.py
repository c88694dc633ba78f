"""The sink's manifest journal: one JSON line per finished task, next to the shards.

It is the run's memory: the sink appends a line (and fsyncs) before telling
the ventilator a task is done, and a restarted run skips every task it lists.
A crash can leave a torn last line; it is dropped on load and the file is cut
back to its last complete line.

On S3 an object cannot be appended to, so the sink journals to a local file
and publishes it as ``PREFIX/manifest.jsonl`` regularly and at the end; a
sink started on another machine picks up from the published copy.

Reading a manifest (its lines, their files) is :mod:`common.output.manifest`, below the formats and steps
that read it; keeping it (counting sides, removing files no format would leave) asks the steps and the formats,
so it is the sink's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator

from common.describe.dataset_card import CountedSplits, card_suffixes
from common.output.manifest import (
    LINE_FIELDS,
    MANIFEST_NAME,
    Work,
    _iter_lines,
    check_job,
    counters,
    made_without_earlier_tasks,
    shard_files,
    stage_files,
)
from common.steps import sides, split_of
from common.storage import LocalStorage
from common.writers import is_output_file, writer_for_file

log = logging.getLogger(__name__)


def _side_splits() -> frozenset[str]:
    """The splits of the steps' sides.  Lines written before protocol 5 counted a side's documents, tokens and
    records under its split but not its files (the held-out side's, marked by the step's old flag: see
    ``common.steps.split_of``): those are counted from the line's files."""
    return frozenset(side.split for side in sides())


def _output_files(entry: dict) -> list[str]:
    """The files of a line that a writer wrote (shards on every side, a format's finish files), not a
    step's stage's."""
    return [f["name"] for f in shard_files(entry) + stage_files(entry) if is_output_file(f["name"])]


class Listing:
    """What the end of a job needs of the journal's lines, gathered as they are read at load and appended: the
    files they list (those not listed are removed at the end of a resumed job) and the dataset card's splits.
    So the end of a job reads the journal no more: each pass is seconds at a million lines."""

    def __init__(self, suffixes: tuple[str, ...]):
        self.names: set[str] | None = set()  # None: not kept (a first run has no earlier files to remove)
        self.splits = CountedSplits(suffixes)

    def add(self, entry: dict) -> None:
        if self.names is not None:
            self.names.update(f["name"] for f in shard_files(entry) + stage_files(entry))
        self.splits.add(entry)


class Manifest:
    def __init__(self, storage, job_id: str, state_dir: str, file_suffixes: tuple[str, ...] = ()):
        """``file_suffixes``: the format's (``Writer.suffixes``), whose files the dataset card names."""
        self.storage = storage
        self.job_id = job_id
        if isinstance(storage, LocalStorage):
            os.makedirs(storage.root, exist_ok=True)
            self.path = storage.uri(MANIFEST_NAME)
        else:
            # One journal per (output, job): the job id leaves the output out.
            where = hashlib.sha256(storage.uri(MANIFEST_NAME).encode()).hexdigest()[:12]
            directory = os.path.join(os.path.expanduser(state_dir), f"{job_id}-{where}")
            os.makedirs(directory, exist_ok=True)
            self.path = os.path.join(directory, MANIFEST_NAME)
        # Per task only its input version (a run may have millions of
        # tasks); the statistics are kept as running totals.
        self.done: dict[str, str] = {}
        self.totals = {"tasks": 0, "shards": 0, "records": 0, "documents": 0, "tokens": 0, "bytes_written": 0,
                       "skipped_documents": {}}
        self.work = Work()
        self.listing = Listing(card_suffixes(file_suffixes))
        self.passes = 0  # reads of the whole journal (load, a recount, entries()): seconds each at a million lines
        self.resumed = False  # it held lines when loaded: files of an earlier run may be there
        self._handle = None
        self._dirty = False
        self._side_names: frozenset[str] | None = None  # the steps' sides' splits, found at the first count

    def load(self) -> dict[str, str]:
        """Read what is there, cut a torn tail, check it is this job's: the
        done tasks, by id, with their versions.

        The lines are streamed, never held: at a million lines only the done
        set and the running totals are in memory.  The shards are the truth:
        a line whose files are gone (the output was deleted, while an S3
        job's journal stayed on this host) no longer makes its task done, and
        is dropped from the journal, so the task is written again."""
        if not os.path.exists(self.path) and not isinstance(self.storage, LocalStorage):
            remote = self.storage.get_bytes(MANIFEST_NAME)
            if remote:
                with open(self.path, "wb") as handle:
                    handle.write(remote)
        size = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        good, lines, gone = 0, 0, []  # gone: byte ranges of lines whose files are missing
        present: set[str] | None = None
        staged: list[tuple[int, int, str, bool, tuple]] = []  # a job with stages: every line's range, stage,
        # whether it reads the input, its files
        dropped: list[str] = []  # the files of lines dropped: their tasks are done again, maybe writing others
        incomplete_stage = False  # a later stage ran without some task of an earlier one
        if size:
            self.passes += 1
            job_id, where, done, listing = self.job_id, self.storage.uri(MANIFEST_NAME), self.done, self.listing
            with open(self.path, "rb", buffering=1 << 20) as handle:
                for entry, start, end in _iter_lines(handle):  # per line only what must be: a million at resume
                    if entry.get("job") != job_id:
                        check_job([entry], job_id, where)
                    good, lines = end, lines + 1
                    if "stage" in entry or staged:
                        staged.append((start, end, str(entry.get("stage", "")), bool(entry.get("bytes_in")),
                                       tuple(_output_files(entry))))
                        incomplete_stage = incomplete_stage or made_without_earlier_tasks(entry)
                    files = entry.get("shards") or entry.get("files")
                    if files:
                        if present is None:
                            present = set(self.storage.list_outputs())
                        if not all(f["name"] in present for f in shard_files(entry) + stage_files(entry)):
                            gone.append((start, end))
                            dropped += [name for name in _output_files(entry) if name in present]
                            continue
                        listing.add(entry)  # (a line listing no file adds nothing)
                    if entry["task"] not in done:
                        self._count(entry)
        if incomplete_stage:
            # Its results (and the normal pass built on them) lack those tasks' documents: a job that ends
            # well must have deduplicated the whole corpus, so everything after the first stage is done again.
            # The stages whose tasks read the input (dedup's signatures) need nothing earlier: they stay.
            redone = [(start, end) for start, end, stage, reads_input, _files in staged
                      if not (stage and reads_input)]
            dropped += [name for _start, _end, stage, reads_input, files in staged if not (stage and reads_input)
                        for name in files]
            log.warning("manifest %s: a stage ran without tasks that had failed; %d task(s) after the first "
                        "stage will be done again, so the whole corpus is covered", self.path, len(redone))
            gone = sorted(set(gone) | set(redone))
        if good < size:
            log.warning("manifest %s: dropping a torn last line (%d bytes)", self.path, size - good)
            with open(self.path, "r+b") as handle:
                handle.truncate(good)
                os.fsync(handle.fileno())
        if gone:
            log.warning("manifest %s: %d of %d shards it lists are gone from %s; their tasks will be done again",
                        self.path, len(gone), lines, self.storage.uri(""))
            self._rewrite_without(gone)
        if incomplete_stage:
            self._recount()
        self._remove(dropped)
        self.resumed = bool(lines)
        if not self.resumed:
            self.listing.names = None
        self._handle = open(self.path, "ab")
        self._dirty = bool(lines)  # publish at least once what the journal holds
        return self.done

    def _remove(self, names: list[str]) -> None:
        """Remove the files of lines just dropped, before their tasks are done again: a task redone after the
        stages before it changed (dedup redone after a quarantine) may write fewer files, or none, and what
        it does not write must not stay beside what it does (the loader, a glob, Megatron's merge)."""
        names = sorted(set(names))
        for name in names:
            self.storage.remove(name)
        if names:
            log.warning("manifest %s: removed %d file(s) of the tasks to be done again", self.path, len(names))

    def remove_unlisted(self) -> list[str]:
        """Remove every file a writer wrote (``part-*``, a format's finish files) that the manifest does not
        list: files of an earlier run's tasks that this one did otherwise (acknowledged nowhere: a crash
        between a write and its acknowledgement).  Only once no writer of the job can still be running (at
        its end), and only in an output that was resumed: a first run has no earlier files.  The names."""
        def ours(name: str) -> bool:  # a part-* no format writes (a user's notes) is reported, not removed
            try:
                return is_output_file(name) and bool(writer_for_file(name))
            except ValueError:
                return False

        if not self.resumed:
            return []
        listed = self.listing.names or set()  # every line's files, gathered at load and append
        stale = [name for name in self.storage.list_outputs() if name not in listed and ours(name)]
        for name in stale:
            self.storage.remove(name)
        if stale:
            log.warning("manifest %s: removed %d file(s) of earlier runs that it does not list (%s%s)", self.path,
                        len(stale), stale[0], ", ..." if len(stale) > 1 else "")
        return stale

    def _rewrite_without(self, ranges: list[tuple[int, int]]) -> None:
        """The journal less the lines at these byte ranges, replaced atomically."""
        temporary = f"{self.path}.rewrite"
        with open(self.path, "rb") as source, open(temporary, "wb") as target:
            position = 0
            for start, end in ranges + [(os.path.getsize(self.path), None)]:
                source.seek(position)
                remaining = start - position
                while remaining > 0:
                    chunk = source.read(min(remaining, 1 << 20))
                    target.write(chunk)
                    remaining -= len(chunk)
                position = end
            target.flush()
            os.fsync(target.fileno())
        os.replace(temporary, self.path)

    def _recount(self) -> None:
        """Done set and totals from the journal as it now is (after lines were dropped)."""
        self.done = {}
        self.totals = {"tasks": 0, "shards": 0, "records": 0, "documents": 0, "tokens": 0, "bytes_written": 0,
                       "skipped_documents": {}}
        self.work = Work()
        self.listing = Listing(self.listing.splits.suffixes)
        self.passes += 1
        with open(self.path, "rb", buffering=1 << 20) as handle:
            for entry, _start, _end in _iter_lines(handle):
                self.listing.add(entry)
                if entry["task"] not in self.done:
                    self._count(entry)

    def _sides(self) -> frozenset[str]:
        names = getattr(self, "_side_names", None)  # (a Manifest made without __init__ counts too)
        if names is None:
            names = self._side_names = _side_splits()
        return names

    def _count(self, entry: dict) -> None:
        get = entry.get  # a million lines at a resume: each lookup counts
        self.done[entry["task"]] = get("version", "")
        self.work.add(entry)
        totals = self.totals
        totals["tasks"] += 1
        files = get("shards")  # shard_files
        if files:
            totals["shards"] += sum(1 for f in files if not split_of(f))
        # Each step's (or split's) counters, summed under its name: the fields above count the training side.
        if not entry.keys() <= LINE_FIELDS:
            for name, values in counters(entry).items():
                section = totals.setdefault(name, {})
                for key, count in values.items():
                    section[key] = section.get(key, 0) + count
                if "shards" not in values and name in self._sides():  # a line before protocol 5 (_side_splits)
                    section["shards"] = section.get("shards", 0) + sum(1 for f in files or () if split_of(f) == name)
        totals["records"] += get("records", 0)
        totals["documents"] += get("documents", 0)
        totals["tokens"] += get("tokens", 0)
        totals["bytes_written"] += get("bytes", 0)
        skipped = get("skipped")
        if skipped:
            skipped_totals = totals["skipped_documents"]
            for reason, count in skipped.items():
                skipped_totals[reason] = skipped_totals.get(reason, 0) + count

    def append(self, entries: list[dict]) -> list[dict]:
        """Durably add the entries of tasks not yet listed; returns those."""
        fresh: dict[str, dict] = {}
        for entry in entries:
            if entry["task"] not in self.done:
                fresh.setdefault(entry["task"], entry)
        if fresh:
            # Strict JSON (orjson reads it back): a non-finite number is a bug to raise, never a line to write.
            lines = b"".join(json.dumps(e, sort_keys=True, allow_nan=False).encode() + b"\n" for e in fresh.values())
            end = os.path.getsize(self.path)  # every earlier append was flushed
            try:
                self._handle.write(lines)
                self._handle.flush()
                os.fsync(self._handle.fileno())
            except OSError:
                self._cut_back(end)  # no torn line left for the next append to follow
                raise
            self._dirty = True
        for entry in fresh.values():  # done only once it is on disk
            self.listing.add(entry)
            self._count(entry)
        return list(fresh.values())

    def _cut_back(self, end: int) -> None:
        """After a failed write: the journal back to its last complete line, and a fresh handle."""
        try:
            self._handle.close()
        except OSError:
            pass  # closing flushes what could not be written: that is the failure being handled
        try:
            with open(self.path, "r+b") as handle:
                handle.truncate(end)
        except OSError as error:
            log.error("manifest %s: could not cut a partly written line back (%s); it is dropped at the next load",
                      self.path, error)
        self._handle = open(self.path, "ab")

    def entries(self) -> Iterator[dict]:
        """The journal's lines, one at a time (never held: a million-line journal would hold ~1 KB of dicts a
        line, ~2 GB, in a sink that otherwise keeps only its done set)."""
        self.passes += 1
        with open(self.path, "rb", buffering=1 << 20) as handle:
            for entry, _start, _end in _iter_lines(handle):
                yield entry

    def publish(self) -> None:
        """Copy the journal to the output (S3 only; a local manifest is the output)."""
        if isinstance(self.storage, LocalStorage) or not self._dirty:
            return
        with open(self.path, "rb") as handle:
            self.storage.put_bytes(MANIFEST_NAME, handle.read())
        self._dirty = False

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
