"""What a task leaves behind, in terms every role shares: its written files.

A neutral module: the wire protocol, the manifest, the writers and the steps
all speak of :class:`ShardFile`, and none of them has to import another's
domain to do so.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.envelope import Count

#: The split of the training side's files (the default: most jobs have no other).
TRAIN = ""


@dataclass
class ShardFile:
    """One written file, as the manifest lists it (name relative to the output root)."""

    name: str
    records: Count  # checked at decode when a peer sends it (common/envelope.py)
    sha256: str
    bytes: Count
    #: Which side of the output the file is on: "" the training side, else the name of the split that made
    #: it ("holdout": --holdout-fraction's held-out side, under holdout/).
    split: str = TRAIN


def split_of(listed: dict) -> str:
    """The split of a file as a manifest line lists it: its ``split``, or ``"holdout"`` for lines written
    before splits had names (they said ``"holdout": true``)."""
    split = listed.get("split")
    if split:
        return str(split)
    return "holdout" if listed.get("holdout") else TRAIN


def manifest_file(shard: ShardFile) -> dict:
    """A file as a manifest line lists it: the training side's files carry no ``split``."""
    entry = {"name": shard.name, "records": shard.records, "sha256": shard.sha256, "bytes": shard.bytes}
    if shard.split:
        entry["split"] = shard.split
    return entry
