"""The manifest: one JSON line per finished task, next to the shards.

It is the run's memory: the sink appends a line (and fsyncs) before telling
the ventilator a task is done, and a restarted run skips every task it lists.
A crash can leave a torn last line; it is dropped on load and the file is cut
back to its last complete line.

On S3 an object cannot be appended to, so the sink journals to a local file
and publishes it as ``PREFIX/manifest.jsonl`` regularly and at the end; a
sink started on another machine picks up from the published copy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os

from common.storage import LocalStorage

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.jsonl"


class ManifestMismatch(Exception):
    """The output already holds a manifest of a different job."""


def _parse_lines(data: bytes) -> tuple[list[dict], int]:
    """Entries, and the byte length of the complete, valid prefix."""
    entries = []
    good = 0
    position = 0
    for raw in data.split(b"\n"):
        end = position + len(raw) + 1
        if end > len(data):  # no newline: torn (or empty tail)
            break
        try:
            entry = json.loads(raw)
        except ValueError:
            break
        if not isinstance(entry, dict) or "task" not in entry:
            break
        entries.append(entry)
        good = end
        position = end
    return entries, good


def shard_files(entry: dict) -> list[dict]:
    """The files a manifest line lists: each has name (relative to the
    output root), records, sha256 and bytes, and ``"holdout": true`` for a
    file of the held-out side (``holdout/part-*``, --holdout-fraction)."""
    return entry.get("shards") or []


def stage_files(entry: dict) -> list[dict]:
    """The files a dedup stage's task wrote (not training shards; same fields)."""
    return entry.get("files") or []


def check_job(entries: list[dict], job_id: str, where: str) -> None:
    for entry in entries:
        if entry.get("job") != job_id:
            raise ManifestMismatch(
                f"{where} belongs to another job ({entry.get('job')}, this one is {job_id}: the corpus changed "
                f"since, or the settings differ, --task-size included); use another --output, or remove the old "
                f"output first")


def read_published(storage) -> tuple[list[dict], int] | None:
    """The published manifest's entries, and how many bytes at its end are
    not complete lines (a sink stopped mid-write); None if there is none."""
    data = storage.get_bytes(MANIFEST_NAME)
    if data is None:
        return None
    entries, good = _parse_lines(data)
    return entries, len(data) - good


def read_entries(storage) -> list[dict]:
    """The published manifest's entries (for checks before a run starts)."""
    published = read_published(storage)
    return published[0] if published else []


class Manifest:
    def __init__(self, storage, job_id: str, state_dir: str):
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
        self.dedup_totals: dict[str, int] = {}  # dedup counters of every stage (in the summary when any)
        self._handle = None
        self._dirty = False

    def load(self) -> dict[str, dict]:
        """Read what is there, cut a torn tail, check it is this job's."""
        if not os.path.exists(self.path) and not isinstance(self.storage, LocalStorage):
            remote = self.storage.get_bytes(MANIFEST_NAME)
            if remote:
                with open(self.path, "wb") as handle:
                    handle.write(remote)
        data = b""
        if os.path.exists(self.path):
            with open(self.path, "rb") as handle:
                data = handle.read()
        entries, good = _parse_lines(data)
        check_job(entries, self.job_id, self.storage.uri(MANIFEST_NAME))
        if good < len(data):
            log.warning("manifest %s: dropping a torn last line (%d bytes)", self.path, len(data) - good)
            with open(self.path, "r+b") as handle:
                handle.truncate(good)
                os.fsync(handle.fileno())
        entries = self._without_missing_shards(entries)
        for entry in entries:
            if entry["task"] not in self.done:
                self._count(entry)
        self._handle = open(self.path, "ab")
        self._dirty = bool(entries)  # publish at least once what the journal holds
        return self.done

    def _without_missing_shards(self, entries: list[dict]) -> list[dict]:
        """The shards are the truth: a line whose shard is gone (the output
        was deleted, while an S3 job's journal stayed on this host) no longer
        makes its task done, so the task is written again."""
        if not entries:
            return entries
        present = set(self.storage.list_outputs())
        kept = [e for e in entries if all(f["name"] in present for f in shard_files(e) + stage_files(e))]
        if len(kept) < len(entries):
            log.warning("manifest %s: %d of %d shards it lists are gone from %s; their tasks will be done again",
                        self.path, len(entries) - len(kept), len(entries), self.storage.uri(""))
            temporary = f"{self.path}.rewrite"
            with open(temporary, "wb") as handle:
                handle.write(b"".join(json.dumps(e, sort_keys=True).encode() + b"\n" for e in kept))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        return kept

    def _count(self, entry: dict) -> None:
        self.done[entry["task"]] = entry.get("version", "")
        totals = self.totals
        totals["tasks"] += 1
        files = shard_files(entry)
        totals["shards"] += sum(1 for f in files if not f.get("holdout"))
        if "holdout" in entry:  # --holdout-fraction: the training side's counts above, the held-out side's here
            held = totals.setdefault("holdout", {"shards": 0, "records": 0, "documents": 0, "tokens": 0})
            held["shards"] += sum(1 for f in files if f.get("holdout"))
            for key in ("records", "documents", "tokens"):
                held[key] += entry["holdout"].get(key, 0)
        totals["records"] += entry.get("records", 0)
        totals["documents"] += entry.get("documents", 0)
        totals["tokens"] += entry.get("tokens", 0)
        totals["bytes_written"] += entry.get("bytes", 0)
        for reason, count in (entry.get("skipped") or {}).items():
            totals["skipped_documents"][reason] = totals["skipped_documents"].get(reason, 0) + count
        for name, count in (entry.get("dedup") or {}).items():
            self.dedup_totals[name] = self.dedup_totals.get(name, 0) + count

    def append(self, entries: list[dict]) -> list[dict]:
        """Durably add the entries of tasks not yet listed; returns those."""
        fresh: dict[str, dict] = {}
        for entry in entries:
            if entry["task"] not in self.done:
                fresh.setdefault(entry["task"], entry)
        if fresh:
            lines = b"".join(json.dumps(e, sort_keys=True).encode() + b"\n" for e in fresh.values())
            self._handle.write(lines)
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._dirty = True
        for entry in fresh.values():  # done only once it is on disk
            self._count(entry)
        return list(fresh.values())

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
