"""The finished output as the loader sees it: shards in a fixed order, read lazily.

The manifest is the source of truth (never a directory listing): it says
which files make up the output and how many records each holds, so the
epoch order is known before any shard is read.  Shards are decoded on first
use by the format that wrote them (common/writers: the loader knows no format by
name or suffix), and kept in a cache bounded in bytes
(least recently used out): memory does not grow with the dataset.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from common.objectives.base import Ragged
from common.output.files import SUMMARY_NAME, TRAIN, check_finished  # noqa: F401 (re-exported)
from common.output.manifest import read_published
from common.steps import split_of
from common.storage import Storage, open_storage
from common.writers import Writer, writer_for_file
from loader.layout import RecordLayout

log = logging.getLogger("loader")

Columns = dict[str, np.ndarray]


class DatasetError(ValueError):
    """The output cannot be served (reason in the message, one line)."""


class ListedFile(NamedTuple):
    """A file as a manifest line lists it."""

    name: str  # relative to the output root
    records: int
    size: int | None  # bytes, when the line says (the older single-shard shape does not)
    split: str  # its side: "" training, else the split of the step's side that made it (Step.sides)
    sha256: str | None = None  # what the worker wrote, when the line says: checked before a shard is served


#: The training side's name for ``--split``.
TRAIN_SPLIT = "train"


def splits() -> tuple[str, ...]:
    """What ``--split`` chooses between: the training side, or a step's side (``Step.sides``: the held-out
    side, a plugin's) for evaluation."""
    from common.steps import sides

    return (TRAIN_SPLIT, *(side.split for side in sides()))


def entry_files(entry: dict) -> list[ListedFile]:
    """The files of a manifest line.

    Two shapes: ``shards``, a list of {name, records, sha256, bytes[, split]}
    (one task may write several files), and the older single ``shard`` (a
    URI) with the line's ``records``.
    """
    if "shards" in entry:
        return [ListedFile(str(shard["name"]), int(shard["records"]),
                           int(shard["bytes"]) if shard.get("bytes") is not None else None,
                           split_of(shard), str(shard["sha256"]) if shard.get("sha256") else None)
                for shard in entry["shards"] or []]
    if entry.get("shard"):
        return [ListedFile(str(entry["shard"]).replace("\\", "/").rsplit("/", 1)[-1], int(entry.get("records", 0)),
                           None, TRAIN)]
    return []


# --------------------------------------------------------------------------
# Reading a shard: through its format (the writer axis)
# --------------------------------------------------------------------------

def format_for(name: str) -> type[Writer]:
    """The output format whose file ``name`` is (common.writers: the loader knows none by name)."""
    try:
        return writer_for_file(name)
    except ValueError as error:
        raise DatasetError(str(error)) from None


#: The feature every record has at one length: a batch is a (records, width) matrix of each feature.
RECORD_FEATURE = "input_ids"


def read_shard(name: str, data: bytes, companion: Callable[[str], bytes | None] = lambda name: None) -> Columns:
    """A file's records as (records, width) arrays, read by its format; ValueError if it cannot be served
    (corrupt, no records of its own, or input_ids of varying length)."""
    return served_columns(name, data, companion)[0]


def served_columns(name: str, data: bytes, companion: Callable[[str], bytes | None] = lambda name: None
                   ) -> tuple[Columns, list[str]]:
    """:func:`read_shard`, and the features left out: one its format reads as variable-length beside
    input_ids (Parquet's chinese_ref: where words continue, which word_starts says too) is not served, since
    a batch holds fixed-length features only."""
    columns = format_for(name).read_columns(name, data, companion)
    if columns is None:
        raise ValueError("holds no records of its own (its format reads it with another file)")
    out, left = {}, []
    for key, column in columns.items():
        if isinstance(column, Ragged):
            if key != RECORD_FEATURE:
                left.append(key)
                continue
            lengths = np.asarray(column.lengths)
            if len(lengths) and (lengths != lengths[0]).any():
                raise ValueError(f"feature {key!r} varies in length between records: it cannot be batched")
            width = int(lengths[0]) if len(lengths) else 0
            column = np.asarray(column.values).reshape(len(lengths), width)
        column = np.asarray(column)
        out[key] = column.reshape(-1, 1) if column.ndim == 1 else column
    return out, left


# --------------------------------------------------------------------------
# The dataset
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class ShardList:
    """The output's shards in serving order (sorted by task id), with records per shard."""

    names: tuple[str, ...]
    counts: np.ndarray  # int64, records per shard
    offsets: np.ndarray  # int64, (shards + 1): global index of each shard's first record
    #: The sha256 of every file of the side the manifest lists, by name (the files read with another, as a
    #: Megatron .bin with its .idx, included): checked before a byte of it is served.
    checksums: Mapping[str, str] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return int(self.offsets[-1])

    @property
    def fingerprint(self) -> str:
        """Names a dataset: a client resuming from a state checks it is the same one."""
        text = "\n".join(f"{name}\t{count}" for name, count in zip(self.names, self.counts.tolist()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @classmethod
    def from_entries(cls, entries: list[dict], split: str = "train") -> ShardList:
        """The files of one side (``train`` or a step's side) that hold records, in task order."""
        files = cls.listed(entries, split)
        for file in files:
            format_for(file.name)
        counts = np.asarray([file.records for file in files], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        checksums = {file.name: file.sha256 for file in cls.listed(entries, split, with_records_only=False)
                     if file.sha256}
        return cls(tuple(file.name for file in files), counts, offsets, checksums)

    @staticmethod
    def listed(entries: list[dict], split: str = "train", with_records_only: bool = True) -> list[ListedFile]:
        known = splits()
        if split not in known:
            raise DatasetError(f"--split {split}: choose one of {', '.join(known)}")
        # Only the training split's files are training data: a split a step names otherwise is not (it
        # is counted apart from the training side, as the sink's totals count it).
        side = TRAIN if split == TRAIN_SPLIT else split
        return [file for entry in sorted(entries, key=lambda e: str(e.get("task", "")))
                for file in entry_files(entry) if (file.records > 0 or not with_records_only) and file.split == side]


def check_shards_present(storage: Storage, uri: str, files: list[ListedFile]) -> None:
    """Every listed file is there with the size the manifest says (one listing):
    a missing or cut shard fails now, not hours into training."""
    sizes = storage.output_sizes()
    missing = [file.name for file in files if file.name not in sizes]
    cut = [f"{file.name} ({sizes[file.name]} bytes, the manifest says {file.size})" for file in files
           if file.name in sizes and file.size is not None and sizes[file.name] != file.size]
    problems = []
    if missing:
        problems.append(f"{len(missing)} shard(s) listed in the manifest are missing ({missing[0]}"
                        f"{', ...' if len(missing) > 1 else ''})")
    if cut:
        problems.append(f"{len(cut)} shard(s) have another size ({cut[0]}{', ...' if len(cut) > 1 else ''})")
    if problems:
        raise DatasetError(f"--data {uri}: {'; '.join(problems)}: run mlm-verify")


def open_dataset(uri: str, endpoint_url: str | None = None, split: str = "train",
                 allow_partial: bool = False) -> tuple[Storage, ShardList]:
    """The storage and the shard list of one side of a finished output.

    DatasetError (one line) if there is no output, if the job has not
    finished (unless ``allow_partial``), if the side is empty, or if a
    listed shard is missing or of another size than the manifest says.
    """
    storage = open_storage(uri, endpoint_url)
    published = read_published(storage)
    if published is None:
        raise DatasetError(f"--data {uri}: no manifest.jsonl (not an output of this project, or not finished)")
    entries, torn = published
    unfinished = check_finished(storage)
    if unfinished and not allow_partial:
        raise DatasetError(f"--data {uri} is not a finished output: {unfinished}; pass --allow-partial to serve "
                           f"the {len(entries)} task(s) written so far")
    if unfinished:
        log.warning("%s is not a finished output (%s): serving the %d task(s) written so far (--allow-partial)",
                    uri, unfinished, len(entries))
    if torn:
        log.warning("%s: the manifest ends with %d bytes of an incomplete line; serving the complete lines", uri, torn)
    shards = ShardList.from_entries(entries, split)
    if shards.records == 0:
        from common.steps import side_named

        side = side_named(split)
        if side is not None:
            raise DatasetError(f"--data {uri}: the {side.label} side is empty: the manifest lists no {side.label} "
                               f"record (a job makes them with {side.flag})")
        raise DatasetError(f"--data {uri}: the manifest lists no records")
    check_shards_present(storage, uri, ShardList.listed(entries, split))
    return storage, shards


def read_listed(storage: Storage, shards: ShardList, name: str) -> bytes | None:
    """A listed file's bytes (None if it is not there), checked against the manifest's sha256: what every
    cache of the loader reads, a shard and the files its format reads with it (fixed-size and token-budget
    batches alike).  DatasetError if it changed since it was written: a format's own checks (TFRecord's
    CRCs, Parquet's page CRCs) miss a file rewritten whole, and MDS, LitData and Megatron files have none."""
    data = storage.get_bytes(name)
    digest = shards.checksums.get(name)
    if data is not None and digest is not None and hashlib.sha256(data).hexdigest() != digest:
        raise DatasetError(f"{storage.uri(name)}: its sha256 differs from the manifest's: it changed since it "
                           "was written (run mlm-verify)")
    return data


def read_shard_bytes(storage: Storage, shards: ShardList, shard: int) -> tuple[bytes, Callable[[str], bytes | None]]:
    """A shard's checked bytes, and the checked reader of the files its format reads with it."""
    name = shards.names[shard]
    data = read_listed(storage, shards, name)
    if data is None:
        raise DatasetError(f"{storage.uri(name)}: listed in the manifest but missing (run mlm-verify)")
    return data, lambda other: read_listed(storage, shards, other)


class ShardCache:
    """Decoded shards as (records, row_bytes) matrices (loader.layout),
    least recently used out once over ``max_bytes`` (the shard in use always
    stays, however big).  Every shard must have the layout of the first."""

    def __init__(self, storage: Storage, shards: ShardList, max_bytes: int):
        self.storage = storage
        self.shards = shards
        self.max_bytes = max_bytes
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self.layout: RecordLayout | None = None
        self.bytes = 0
        self.loads = 0

    def get(self, shard: int) -> np.ndarray:
        matrix = self._cache.get(shard)
        if matrix is not None:
            self._cache.move_to_end(shard)
            return matrix
        matrix = self._load(shard)
        while self._cache and self.bytes + matrix.nbytes > self.max_bytes:
            _, evicted = self._cache.popitem(last=False)
            self.bytes -= evicted.nbytes
        self._cache[shard] = matrix
        self.bytes += matrix.nbytes
        return matrix

    def columns(self, shard: int) -> Columns:
        """A shard's features as arrays (views of its cached matrix)."""
        return self.layout_of().views(self.get(shard))

    def layout_of(self) -> RecordLayout:
        if self.layout is None:
            self.get(0)
        assert self.layout is not None, "reading a shard sets the layout"
        return self.layout

    def _load(self, shard: int) -> np.ndarray:
        name = self.shards.names[shard]
        where = self.storage.uri(name)
        data, companion = read_shard_bytes(self.storage, self.shards, shard)
        try:
            columns, left = served_columns(name, data, companion)
        except DatasetError:  # a companion file's own (it names that file)
            raise
        except ValueError as error:
            raise DatasetError(f"{where}: {error} (run mlm-verify)") from None
        expected = int(self.shards.counts[shard])
        got = len(next(iter(columns.values()))) if columns else 0
        if got != expected:
            raise DatasetError(f"{where}: {format_for(name).miscount(name, data, got, expected)}")
        layout = RecordLayout.of(columns)
        if self.layout is None:
            self.layout = layout
            if left:
                log.info("loader: %s: of varying length between records, not served (a batch holds "
                         "fixed-length features)", ", ".join(left))
        elif layout != self.layout:
            raise DatasetError(f"{where}: its features differ from the other shards' ({self.layout} vs {layout})")
        self.loads += 1
        return self.layout.pack(columns)

    def __len__(self) -> int:
        return len(self._cache)
