"""What MosaicML's MDS and Lightning's LitData share: a shard is a run of
samples, each sample the bytes of its columns after a table of their sizes,
and the file is ``uint32 samples, uint32 offsets[samples + 1], ..., the
samples``, each offset a sample's first byte (the last: the file's end).
Readers seek through the offsets, so the bytes between the offset table and
the first sample are theirs to define: MDS keeps its shard's JSON
configuration there, and so do our LitData chunks (LitData's reader never
reads them), which is how a chunk is read back without its index.

Pure numpy: the worker imports neither library (they need torch).  Samples
are laid out per batch and buffered to ``limit`` bytes per file (MDSWriter's
default size_limit, 64 MiB: a file under 4 GiB, as the uint32 offsets need);
a task's files are committed together.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from common.objectives import objective_named
from common.objectives.base import Batch, Feature, Ragged
from common.output.manifest import read_entries, shard_files
from common.steps import sides
from common.tokenization.vocabulary import described_vocabulary
from common.writers.base import ListedFile, OutputFile, ShardFile, TaskOutput

#: Bytes of samples per file before the next one starts (MDSWriter's default size_limit).
SIZE_LIMIT = 1 << 26
#: What the file names of a task's later files add to its stem (``part-<task>-00001.mds``).
CONTINUATION = "-{:05d}"


@dataclass(frozen=True)
class Column:
    """One feature as a column of the samples (``length``: 1 one value, None variable, n fixed)."""

    name: str
    dtype: np.dtype
    length: int | None

    @classmethod
    def of(cls, feature: Feature) -> Column:
        return cls(feature.name, np.dtype(feature.dtype), feature.length)


def column_bytes(values, column: Column, records: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch's column as one little-endian byte buffer, with each record's start and length in it."""
    if isinstance(values, Ragged):
        data = np.ascontiguousarray(np.asarray(values.values), dtype=column.dtype.newbyteorder("<"))
        counts = np.asarray(values.lengths, dtype=np.int64)
    else:
        array = np.asarray(values, dtype=column.dtype.newbyteorder("<")).reshape(records, -1)
        data = np.ascontiguousarray(array)
        counts = np.full(records, array.shape[1], dtype=np.int64)
    sizes = counts * column.dtype.itemsize
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return data.view(np.uint8).reshape(-1), starts, sizes


@dataclass
class Samples:
    """Records laid out end to end: ``data`` (bytes or a uint8 array) and each record's size."""

    data: bytes | np.ndarray
    sizes: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.sizes)


def shard_bytes(samples: Samples, config: bytes) -> list[bytes | np.ndarray]:
    """The file's parts, in order: sample count, offsets, ``config``, samples."""
    head = 4 + 4 * (len(samples) + 1) + len(config)
    offsets = head + np.concatenate([[0], np.cumsum(samples.sizes)])
    if offsets[-1] >= 1 << 32:
        raise ValueError("a shard of 4 GiB or more cannot be addressed by uint32 offsets")
    return [np.uint32(len(samples)).tobytes(), offsets.astype("<u4").tobytes(), config, samples.data]


@dataclass
class ParsedShard:
    """A file's offsets and the bytes between them and the first sample (its configuration)."""

    data: bytes
    offsets: np.ndarray
    config: bytes

    @property
    def samples(self) -> int:
        return len(self.offsets) - 1

    def sample(self, i: int) -> memoryview:
        return memoryview(self.data)[int(self.offsets[i]):int(self.offsets[i + 1])]


def parse_shard(data: bytes) -> ParsedShard:
    """The file's framing checked: its count, offsets rising from the end of the table to the file's end."""
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes: too short for a sample count and an offset")
    count = int(np.frombuffer(data, "<u4", 1)[0])
    table_end = 4 + 4 * (count + 1)
    if table_end > len(data):
        raise ValueError(f"{count} samples need a {table_end}-byte offset table; the file holds {len(data)} bytes")
    offsets = np.frombuffer(data, "<u4", count + 1, 4).astype(np.int64)
    if offsets[0] < table_end or (np.diff(offsets) < 0).any() or offsets[-1] != len(data):
        raise ValueError("offsets do not run from the end of the table to the end of the file")
    return ParsedShard(data, offsets, data[table_end:int(offsets[0])])


def config_json(config: dict) -> bytes:
    return json.dumps(config, sort_keys=True).encode()


def read_config(shard: ParsedShard) -> dict:
    try:
        config = json.loads(shard.config)
    except ValueError as error:
        raise ValueError(f"the configuration after the offsets is not JSON: {error}") from None
    if not isinstance(config, dict):
        raise ValueError("the configuration after the offsets is not a JSON object")
    return config


class SampleShardOutput(TaskOutput):
    """A task's samples, cut into files of about ``limit`` bytes of samples: ``stem + suffix``, then
    ``stem-00001 + suffix``...  ``encode`` lays a batch's records out end to end (:class:`Samples`)."""

    def __init__(self, output, stem: str, suffix: str, config: bytes, encode: Callable[[Batch], Samples],
                 limit: int | None = None, trailer: bytes = b""):
        self._trailer = trailer  # bytes after the last sample, outside every offset (LitData's token chunks)
        self._output = output
        self._stem = stem
        self._suffix = suffix
        self._config = config
        self._encode = encode
        self._limit = limit or SIZE_LIMIT
        self._pending: list[Samples] = []
        self._pending_bytes = 0  # samples' bytes and their offsets'
        self._files: list[tuple[OutputFile, int]] = []  # written, not committed, with their sample counts

    def write(self, batch: Batch) -> None:
        if not len(batch):
            return
        samples = self._encode(batch)
        data, sizes = memoryview(samples.data).cast("B"), samples.sizes
        while len(sizes):
            # How many of them still fit in this file (one at least, if the file is empty: a sample past the
            # limit goes alone).
            fit = int(np.searchsorted(self._pending_bytes + np.cumsum(sizes + 4), self._limit, side="right"))
            if not fit and not self._pending:
                fit = 1
            if fit:
                end = int(sizes[:fit].sum())
                self._pending.append(Samples(data[:end], sizes[:fit]))
                self._pending_bytes += end + 4 * fit
                data, sizes = data[end:], sizes[fit:]
            if len(sizes):
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        index = len(self._files)
        name = self._stem + (CONTINUATION.format(index) if index else "") + self._suffix
        file = OutputFile(self._output, name)
        self._files.append((file, sum(len(p) for p in self._pending)))
        try:
            samples = Samples(b"", np.concatenate([p.sizes for p in self._pending]))
            for part in shard_bytes(samples, self._config)[:-1]:
                file.write(part)
            for part in self._pending:
                file.write(part.data)
            file.write(self._trailer)
        except BaseException:
            self.abort()
            raise
        self._pending, self._pending_bytes = [], 0

    def commit(self) -> list[ShardFile]:
        self._flush()
        return [file.commit(samples) for file, samples in self._files]

    def abort(self) -> None:
        for file, _ in self._files:
            file.abort()


def records_as_bytes(pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]], records: int) -> Samples:
    """The records end to end, each its piece of every (buffer, starts, sizes) in turn."""
    if not records:
        return Samples(b"", np.zeros(0, np.int64))
    if all((sizes == sizes[0]).all() for _, _, sizes in pieces):  # every piece fixed: columns side by side
        rows = np.empty((records, sum(int(sizes[0]) for _, _, sizes in pieces)), dtype=np.uint8)
        column = 0
        for buffer, starts, sizes in pieces:
            size = int(sizes[0])
            if (starts == np.arange(records) * size).all():  # end to end: one reshape
                rows[:, column:column + size] = np.frombuffer(buffer, np.uint8, records * size).reshape(records, size)
            else:  # spaced (a header's stride is wider than the header)
                rows[:, column:column + size] = buffer[starts[:, None] + np.arange(size)]
            column += size
        return Samples(rows.reshape(-1), np.full(records, rows.shape[1], dtype=np.int64))
    views = [(memoryview(buffer), starts.tolist(), sizes.tolist()) for buffer, starts, sizes in pieces]
    out = [b"".join([buffer[starts[i]:starts[i] + sizes[i]] for buffer, starts, sizes in views])
           for i in range(records)]
    return Samples(b"".join(out), np.fromiter(map(len, out), dtype=np.int64, count=records))


def job_features(config) -> list[Feature]:
    """The features the job's objective writes (for the indexes written at the end of the job)."""

    special = described_vocabulary(config.tokenizer_json).special
    objective_class = objective_named(config.objective.name)
    return objective_class(objective_class.make_params(config.objective.params), special).features


def listed_by_directory(output, suffixes: tuple[str, ...], entries: Iterable[dict] | None = None
                        ) -> dict[str, list[ListedFile]]:
    """The manifest's files of this format (the normal pass's, in task order), by directory: one index each
    (the training side's at the root, each step's side's in its directory: the held-out side's in holdout/).
    Only what the manifest lists; ``entries`` (else the published manifest's) read line by line, each kept only as
    its files of this format (a task listed twice: its last line)."""
    directories: dict[str, list[ListedFile]] = {}
    by_task: dict[str, tuple[ListedFile, ...]] = {}
    for entry in read_entries(output) if entries is None else entries:
        if not entry.get("stage"):
            by_task[entry["task"]] = tuple(ListedFile.of(f) for f in shard_files(entry) if f["name"].endswith(suffixes))
    for task in sorted(by_task):
        for f in by_task[task]:
            directories.setdefault(f.name.rpartition("/")[0], []).append(f)
    return directories


def side_readers(prefix: str) -> str:
    """" (holdout: local=OUT/holdout)": where each step's side is (``common.steps.sides``), for a format's
    ``reader`` detail; "" when no step writes a side."""
    named = "; ".join(f"{side.split}: {prefix}{side.directory}" for side in sides())
    return f" ({named})" if named else ""


def index_name(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def check_indexes(storage, entries: list[dict], suffixes: tuple[str, ...], expected_index) -> list[str]:
    """Each directory's index.json against what the manifest makes of it (``expected_index(files)``, as
    finish_job writes it): the problems, one line each."""
    problems = []
    for directory, files in listed_by_directory(storage, suffixes, entries).items():
        name = index_name(directory, "index.json")
        data = storage.get_bytes(name)
        if data is None:
            problems.append(f"{name}: missing (the job is complete: its readers open this index)")
            continue
        try:
            found = json.loads(data)
        except ValueError as error:
            problems.append(f"{name}: not JSON: {error}")
            continue
        if found != expected_index(files):
            problems.append(f"{name}: does not list the manifest's {len(files)} files as they are (names, "
                            "records, bytes)")
    return problems


def equal_rows(shard: ParsedShard) -> np.ndarray | None:
    """The samples as one (samples, bytes) array when all are the same size (fixed-length records: read in
    one step, not sample by sample); None otherwise."""
    sizes = np.diff(shard.offsets)
    if not len(sizes) or (sizes != sizes[0]).any():
        return None
    return np.frombuffer(shard.data, np.uint8, len(sizes) * int(sizes[0]), int(shard.offsets[0])).reshape(
        len(sizes), int(sizes[0]))


def sliced_columns(rows: np.ndarray, layout: list[tuple[str, np.dtype, int | None, int]], at: int) -> dict:
    """Columns cut from equal rows: ``layout`` gives each column's name, dtype, length (1: one value) and
    bytes, in order from byte ``at``."""
    columns = {}
    for name, dtype, length, size in layout:
        values = np.ascontiguousarray(rows[:, at:at + size]).view(dtype)
        columns[name] = values.reshape(-1) if length == 1 else values
        at += size
    return columns
