"""What a task leaves behind, in terms every role shares: its written files.

The manifest, the writers and the steps all speak of :class:`ShardFile`, the record a TaskAck carries: it is
the wire's (common/wire/files.py), re-exported here, so the wire imports nothing above it.
"""

from __future__ import annotations

import json

from common.wire.files import TRAIN, ShardFile

#: What the sink writes last, saying whether every task's output is in (``complete``).
SUMMARY_NAME = "summary.json"
#: What every task's file is named from (``Task.shard_stem``: ``part-<task id>``).
SHARD_PREFIX = "part-"

#: The fields of a file as a manifest line lists it (:func:`manifest_file`).
FILE_FIELDS = frozenset({"name", "records", "sha256", "bytes", "split"})


def manifest_file(shard: ShardFile) -> dict:
    """A file as a manifest line lists it: the training side's files carry no ``split``."""
    entry = {"name": shard.name, "records": shard.records, "sha256": shard.sha256, "bytes": shard.bytes}
    if shard.split:
        entry["split"] = shard.split
    return entry


def check_finished(storage) -> str | None:
    """Why the output is not a finished job's (None if it is): the sink writes ``summary.json`` last, and
    says there whether every task's output is in.  Every reader of an output asks (the loader, mlm-verify)."""
    data = storage.get_bytes(SUMMARY_NAME)
    if data is None:
        return "no summary.json: the job has not ended (or its sink was killed)"
    try:
        summary = json.loads(data)
    except ValueError:
        return "summary.json is not JSON"
    if not isinstance(summary, dict):
        return "summary.json is not a JSON object"
    if summary.get("quarantined"):
        return f"{len(summary['quarantined'])} task(s) were quarantined: their documents are not in it"
    complete = summary.get("complete")
    if complete is None:  # written before summaries said so
        complete = str(summary.get("reason", "")).endswith("all tasks done")
    if not complete:
        return f"the job did not finish ({summary.get('reason', 'no reason given')})"
    return None


__all__ = ["FILE_FIELDS", "SHARD_PREFIX", "SUMMARY_NAME", "TRAIN", "ShardFile", "check_finished", "manifest_file"]
