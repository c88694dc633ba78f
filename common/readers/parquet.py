"""Parquet files (Hugging Face datasets, FineWeb, C4, ...): one document per row.

A task is a set of whole row groups of one file, cut from the file footers
alone: the ventilator reads each footer (a ranged read at the end of the
file), and groups consecutive row groups up to ``--task-size`` compressed
bytes.  A task's ``start``/``end`` stay *byte offsets*, as for every other
format: the task owns each row group whose first byte lies in
``[start, end)``, the tasks of a file tile ``[0, size)``, so the task key is
unique and stable, progress counts real input bytes, and the manifest's
ranges mean what they mean elsewhere.  A row group is never split, so a file
of huge row groups is cut no finer than one row group per task.

A worker (or, shipping, the ventilator) reads the footer and then only the
text and id column chunks of its row groups, through
:class:`~common.readers.seekable.ReadAtFile`: ranged GETs on S3.  The payload
is those columns as an Arrow IPC stream (text as bytes, id as text, the row's
position in its file), with what could not be read counted in the stream's
metadata, so the worker's path is the same whether the ventilator shipped it
or the worker read it.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.job.params import param
from common.job.tasks import InputFile, Task
from common.lazy_import import LazyModule
from common.readers.base import Document, ParseReport, Reader, decode_utf8
from common.readers.seekable import ReadAtFile
from common.storage import RangeReader, StorageError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
else:  # imported when first used
    pa = LazyModule("pyarrow")
    pq = LazyModule("pyarrow.parquet")

MAGIC = b"PAR1"
#: Footers read at once when planning: S3 latency, not bandwidth, bounds a listing of thousands of files.
FOOTER_THREADS = 16
_SKIPPED_KEY = b"mlm.skipped"


def _payload_schema():
    return pa.schema([("text", pa.large_binary()), ("id", pa.large_string()), ("row", pa.int64())])


class NotParquet(ValueError):
    """A file whose footer cannot be read: not Parquet, or truncated."""


@dataclass(frozen=True)
class ParquetParams:
    text_column: str = param("text", "Parquet: the column holding each document's text.")
    id_column: str = param("id", "Parquet: the column naming each document; a file without it names rows by "
                                 "position, and --holdout-fraction then hashes the text.")


@dataclass(frozen=True)
class RowGroup:
    offset: int  # the first byte of its column chunks
    compressed_bytes: int
    rows: int


@dataclass(frozen=True)
class Footer:
    """What planning needs of a file's footer (not the whole FileMetaData:
    thousands of files stay small in the ventilator's memory)."""

    columns: dict[str, pa.DataType]
    groups: tuple[RowGroup, ...]

    def describe_columns(self) -> str:
        return ", ".join(f"{name} ({kind})" for name, kind in self.columns.items()) or "no columns"


def _is_text_type(kind: pa.DataType) -> bool:
    """Every Arrow string or binary type, dictionary-encoded ones included."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind) or getattr(pa.types, "is_string_view", lambda _: False)(kind)
            or getattr(pa.types, "is_binary_view", lambda _: False)(kind))


def _group_offset(metadata: pq.FileMetaData, index: int) -> int:
    """Where a row group starts: the smallest page offset of its column chunks."""
    group = metadata.row_group(index)
    offsets = []
    for i in range(group.num_columns):
        column = group.column(i)
        if column.has_dictionary_page and column.dictionary_page_offset:
            offsets.append(column.dictionary_page_offset)
        offsets.append(column.data_page_offset)
    return min(offsets) if offsets else 0


def _chunks(group: pq.RowGroupMetaData, columns: list[str]) -> list[tuple[int, int]]:
    """The ``(offset, length)`` of the named columns' chunks in a row group: what reading them reads."""
    chunks = []
    for i in range(group.num_columns):
        column = group.column(i)
        if column.path_in_schema in columns:
            start = column.dictionary_page_offset if column.has_dictionary_page else None
            start = start if start else column.data_page_offset
            chunks.append((start, column.total_compressed_size))
    return chunks


def _footer_of(metadata: pq.FileMetaData) -> Footer:
    schema = metadata.schema.to_arrow_schema()
    groups = []
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        compressed = sum(group.column(i).total_compressed_size for i in range(group.num_columns))
        groups.append(RowGroup(_group_offset(metadata, index), compressed, group.num_rows))
    return Footer({field.name: field.type for field in schema}, tuple(groups))


def _open(storage, path: str, version: str, size: int) -> tuple[pq.ParquetFile, ReadAtFile, RangeReader]:
    """A ParquetFile reading by range through the storage, the file object under it (to read a row group's
    chunks ahead) and the reader to close."""
    reader = storage.open_reader(path, version)
    try:
        source = ReadAtFile(reader.read_at, size)
        # Page checksums, where the writer wrote them, are verified: a flipped byte is a counted corrupt row
        # group, not silently changed text.  No pre_buffer: its thread pool can abort the process at its exit
        # (apache/arrow#34314); read() asks the file object to read a row group's chunks ahead instead.
        return pq.ParquetFile(source, pre_buffer=False, page_checksum_verification=True), source, reader
    except (pa.ArrowException, OSError, ValueError) as error:  # pyarrow's; storage errors pass through
        reader.close()
        raise NotParquet(f"not a Parquet file ({_first_line(error)})") from None
    except BaseException:
        reader.close()
        raise


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def read_footer(storage, f: InputFile) -> Footer:
    parquet_file, _source, reader = _open(storage, f.path, f.version, f.size)
    try:
        return _footer_of(parquet_file.metadata)
    finally:
        reader.close()


def cut_row_groups(groups: tuple[RowGroup, ...], task_size: int, size: int) -> list[tuple[int, int]]:
    """Byte ranges tiling ``[0, size)``, each owning consecutive row groups of
    about ``task_size`` compressed bytes in all (at least one)."""
    if not groups:
        return []
    starts = [0]
    filled = 0
    for index, group in enumerate(groups):
        if index and filled + group.compressed_bytes > task_size and group.offset > starts[-1]:
            starts.append(group.offset)
            filled = 0
        filled += group.compressed_bytes
    return [(start, starts[i + 1] if i + 1 < len(starts) else size) for i, start in enumerate(starts)]


class ParquetReader(Reader):
    name = "parquet"
    detect_priority = 30
    Params = ParquetParams

    def __init__(self, params=None):
        super().__init__(params)
        self._footers: dict[tuple[str, str], Footer] = {}  # read by check_inputs, used by plan

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        return head.startswith(MAGIC)

    @classmethod
    def claims_name(cls, path: str) -> bool:
        return path.endswith((".parquet", ".pq"))

    # Ventilator --------------------------------------------------------------
    def _footers_of(self, storage, files: list[InputFile]) -> dict[InputFile, Footer]:
        """Every file's footer, read in parallel; NotParquet names the first bad file."""
        missing = [f for f in files if (f.path, f.version) not in self._footers]

        def read(f: InputFile) -> Footer:
            try:
                return read_footer(storage, f)
            except NotParquet as error:
                raise NotParquet(f"{f.path or 'the input file'}: {error}") from None
            except (StorageError, OSError) as error:  # gone, changed or unreachable since it was listed
                raise ValueError(f"{f.path or 'the input file'}: cannot read its footer ({_first_line(error)})") \
                    from None

        with concurrent.futures.ThreadPoolExecutor(max_workers=FOOTER_THREADS) as pool:
            for f, footer in zip(missing, pool.map(read, missing)):
                self._footers[f.path, f.version] = footer
        return {f: self._footers[f.path, f.version] for f in files}

    def check_inputs(self, storage, files: list[InputFile]) -> None:
        footers = self._footers_of(storage, [f for f in files if f.size])
        column = self.params.text_column
        if footers and not any(column in footer.columns and _is_text_type(footer.columns[column])
                               for footer in footers.values()):
            first, footer = next(iter(footers.items()))
            where = first.path or "the input file"
            raise ValueError(f"--text-column {column}: no input file has such a text column ({where} has: "
                             f"{footer.describe_columns()})")

    def plan(self, files: Iterable[InputFile], task_size: int, storage) -> Iterator[Task]:
        if task_size < 1:
            raise ValueError("task size must be positive")
        files = [f for f in files if f.size]
        footers = self._footers_of(storage, files)
        for f in files:
            for start, end in cut_row_groups(footers[f].groups, task_size, f.size):
                yield Task(f.path, start, end, f.size, f.version)

    # Worker (or the ventilator, shipping) -------------------------------------
    def read(self, storage, task: Task) -> bytes:
        """The text and id columns of the task's row groups, as an Arrow IPC stream."""
        parquet_file, source, reader = _open(storage, task.path, task.version, task.size)
        skipped = ParseReport()
        tables = []
        try:
            metadata = parquet_file.metadata
            schema = parquet_file.schema_arrow
            names = set(schema.names)
            text_column, id_column = self.params.text_column, self.params.id_column
            text_is_text = text_column in names and _is_text_type(schema.field(text_column).type)
            columns = [name for name in (text_column, id_column) if name in names]
            first_row = 0
            for index in range(metadata.num_row_groups):
                rows = metadata.row_group(index).num_rows
                offset = _group_offset(metadata, index)
                if task.start <= offset < task.end and rows:
                    if not text_is_text:
                        skipped.skip("no_text_column" if text_column not in names else "non_string_text", rows)
                    else:
                        source.prefetch(_chunks(metadata.row_group(index), columns))  # in one request
                        table = self._row_group(parquet_file, index, columns, first_row, skipped)
                        if table is not None:
                            tables.append(table)
                first_row += rows
        finally:
            reader.close()
        return _to_ipc(tables, skipped.skipped)

    def _row_group(self, parquet_file, index: int, columns: list[str], first_row: int,
                   skipped: ParseReport) -> pa.Table | None:
        rows = parquet_file.metadata.row_group(index).num_rows
        try:
            # One thread: a worker host runs one worker process per core already.
            table = parquet_file.read_row_group(index, columns=columns, use_threads=False)
            text = table.column(self.params.text_column)
            if pa.types.is_dictionary(text.type):
                text = text.cast(text.type.value_type)
            text = text.cast(pa.large_binary())
        except (pa.ArrowException, OSError, ValueError, IndexError):  # storage errors (StorageError) pass through
            skipped.skip("corrupt_row_group", rows)
            return None
        ids = None
        if self.params.id_column in table.column_names:
            try:
                ids = table.column(self.params.id_column).cast(pa.large_string())
            except (pa.ArrowException, ValueError):  # an id column of structs, lists...: rows named by position
                ids = None
        if ids is None:
            ids = pa.nulls(table.num_rows, pa.large_string())
        positions = pa.array(range(first_row, first_row + table.num_rows), pa.int64())
        return pa.Table.from_arrays([text, ids, positions], schema=_payload_schema())

    def documents(self, task: Task, payload: bytes, report: ParseReport) -> Iterator[Document]:
        stream = pa.ipc.open_stream(payload)
        metadata = stream.schema.metadata or {}
        for reason, count in json.loads(metadata.get(_SKIPPED_KEY, b"{}")).items():
            report.skip(reason, count)
        for batch in stream:
            try:  # valid UTF-8 throughout (the usual case): decoded in bulk
                texts, decoded = batch.column(0).cast(pa.large_string()).to_pylist(), True
            except pa.ArrowInvalid:  # some row is not: each decoded (and counted) on its own
                texts, decoded = batch.column(0).to_pylist(), False
            ids, rows = batch.column(1).to_pylist(), batch.column(2).to_pylist()
            for raw, identity, row in zip(texts, ids, rows):
                if raw is None:
                    report.skip("missing_text")
                    continue
                if decoded:
                    text = raw
                    if "\x00" in text:  # as decode_utf8: NUL bytes are binary data, not text
                        report.skip("binary")
                        continue
                else:
                    text = decode_utf8(raw, report)
                    if text is None:
                        continue
                if not text or text.isspace():  # (not strip(): no copy of every text)
                    report.skip("empty_text")
                    continue
                yield Document(row, text.split("\n"), identity or "")


def _to_ipc(tables: list[pa.Table], skipped: dict[str, int]) -> bytes:
    schema = _payload_schema().with_metadata({_SKIPPED_KEY: json.dumps(skipped, sort_keys=True).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for table in tables:
            writer.write_table(table.replace_schema_metadata(schema.metadata))
    return sink.getvalue().to_pybytes()
