"""The file record a TaskAck carries (``TaskAck.shards``): one written file, as the sink's manifest lists it.
The wire's own type, so the protocol imports nothing above the wire; common/output/files.py re-exports it for
the manifest, the writers and the steps."""

from __future__ import annotations

from dataclasses import dataclass

from common.wire.envelope import Count

#: The split of the training side's files (the default: most jobs have no other).
TRAIN = ""


@dataclass
class ShardFile:
    """One written file, as the manifest lists it (name relative to the output root)."""

    name: str
    records: Count  # checked at decode when a peer sends it (common/wire/envelope.py)
    sha256: str
    bytes: Count
    #: Which side of the output the file is on: "" the training side, else the name of the split that made
    #: it (a step's ``Side.split``: the held-out side's, under its directory).
    split: str = TRAIN
