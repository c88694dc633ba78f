"""Lightning's LitData: what ``litdata.optimize`` writes and
``litdata.StreamingDataset(OUT)`` reads.

Each task writes ``part-<task>.litdata`` (``holdout/part-<task>.litdata``;
past 64 MiB, ``part-<task>-00001.litdata`` ...), a chunk as LitData's
``BinaryWriter`` lays it out (Lightning-AI/litdata
``src/litdata/streaming/writer.py``, ``_create_chunk``)::

    uint32 items, uint32 offsets[items + 1], ..., items

an item being its PyTree loader's encoding (``PyTreeLoader.encode_data``):
the uint32 size of every leaf, then the leaves.  A sample is a dict of the
features in the objective's order; a sequence feature is a 1-D numpy array
(LitData's ``no_header_numpy:<dtype code>``: the values), a one-value
integer feature a Python int (``int``: int64), a one-value float a Python
float (``float``: float64).  Between the offset table and the first item
the chunk holds its JSON description (the columns and LitData's config),
bytes LitData's reader never reads (it seeks by the offsets), so a chunk is
read back (mlm-verify, the loader) without the index.  Files end in
``.litdata``, not LitData's ``.bin``, which is Megatron's: LitData finds
its chunks by the index's names, never by their ending.

At the end of the job (every task done, none quarantined) the sink writes
``index.json`` (and ``holdout/index.json``): the chunks the manifest lists,
in task order, and the config ``StreamingDataset`` reads them with
(``updated_at`` is the job id: LitData names its cache of a remote output
after it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import click
import numpy as np

from common.job.params import param
from common.objectives.base import Batch, Feature, Ragged
from common.steps import sides
from common.writers.base import Lines, ListedFile, TaskOutput, Writer, manifest_lines
from common.writers.mds import to_columns
from common.writers.sample_shards import (
    SIZE_LIMIT,
    Column,
    Samples,
    SampleShardOutput,
    check_indexes,
    column_bytes,
    config_json,
    equal_rows,
    index_name,
    job_features,
    listed_by_directory,
    parse_shard,
    read_config,
    records_as_bytes,
    side_readers,
    sliced_columns,
)

INDEX = "index.json"
#: LitData's numpy dtype codes (litdata.constants._NUMPY_DTYPES_MAPPING).
DTYPE_CODES = {"int8": 0, "int16": 1, "int32": 2, "int64": 3, "uint8": 4, "uint16": 5, "uint32": 6, "uint64": 7,
               "float16": 8, "float32": 9, "float64": 10, "bool": 13}
DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
#: What this format's chunks say of themselves (the key of the description after the offsets).
MARK = "mlm_pipeline.litdata"


#: --litdata-items: a dict of every feature per record (PyTreeLoader), or each record's input_ids alone (TokensLoader).
ITEMS = ("records", "tokens")
IDS = "input_ids"


@dataclass(frozen=True)
class LitDataParams:
    items: str = param("records", "What a LitData item is: records (a dict of every feature per record, read by "
                                  "litdata.StreamingDataset(OUT)) or tokens (each record's input_ids alone, a 1-D "
                                  "array, the token stream litdata.optimize writes for pretraining: "
                                  "StreamingDataset(OUT, item_loader=TokensLoader(block_size=N)) reads it in blocks "
                                  "of N tokens across records; needs --objective tokens).",
                       flag="--litdata-items", opt_in=True, cli={"type": click.Choice(ITEMS)})

    def validate(self) -> None:
        if self.items not in ITEMS:
            raise ValueError(f"--litdata-items must be one of {', '.join(ITEMS)}, not {self.items!r}")


def tokens_only(params) -> bool:
    return getattr(params, "items", "records") == "tokens"


def item_columns(params, features: list[Feature]) -> list[Column]:
    """The columns of an item: every feature, or (--litdata-items tokens) input_ids alone."""
    columns = [Column.of(f) for f in features]
    return [c for c in columns if c.name == IDS] if tokens_only(params) else columns


def stored(column: Column) -> Column:
    """The column as a chunk holds it: one value is a Python int (int64) or float (float64)."""
    if column.length == 1:
        return Column(column.name, np.dtype(np.float64 if column.dtype.kind == "f" else np.int64), 1)
    return column


def data_format(column: Column) -> str:
    column = stored(column)
    if column.length == 1:
        return "float" if column.dtype.kind == "f" else "int"
    return f"no_header_numpy:{DTYPE_CODES[column.dtype.name]}"


def litdata_config(columns: list[Column]) -> dict:
    """The index's ``config``: a PyTree of one dict, the features in order, each a leaf."""
    names = [c.name for c in columns]
    leaf: dict[str, object] = {"type": None, "context": None, "children_spec": []}
    spec = [1, {"type": "builtins.dict", "context": json.dumps(names), "children_spec": [leaf] * len(names)}]
    return {"chunk_bytes": SIZE_LIMIT, "chunk_size": None, "compression": None, "compression_batch_size": None,
            "compression_level": None, "data_format": [data_format(c) for c in columns],
            "data_spec": json.dumps(spec), "encryption": None, "ipc_compression": None,
            "item_loader": "PyTreeLoader"}


def tokens_config(column: Column) -> dict:
    """The index's ``config`` of a token stream, as ``optimize(..., item_loader=TokensLoader())`` writes it: one
    leaf per item, a 1-D array."""
    leaf = [1, {"type": None, "context": None, "children_spec": []}]
    return {"chunk_bytes": SIZE_LIMIT, "chunk_size": None, "compression": None, "compression_batch_size": None,
            "compression_level": None, "data_format": [data_format(column)], "data_spec": json.dumps(leaf),
            "encryption": None, "ipc_compression": None, "item_loader": "TokensLoader"}


def chunk_description(columns: list[Column], tokens: bool = False) -> dict:
    described = {MARK: 1, "columns": [[c.name, stored(c).dtype.name, c.length] for c in columns],
                 "config": tokens_config(columns[0]) if tokens else litdata_config(columns)}
    return {**described, "items": "tokens"} if tokens else described


def trailer(columns: list[Column]) -> bytes:
    """What a token chunk holds after its tokens: its description, then the description's uint32 size.  TokensLoader
    reads the tokens from the end of the offsets on, in blocks, never past the last item, so the description cannot
    sit before the items as in a chunk of records."""
    description = config_json(chunk_description(columns, tokens=True))
    return description + np.uint32(len(description)).astype("<u4").tobytes()


def split_trailer(data: bytes) -> tuple[bytes, dict] | None:
    """(the chunk without its trailer, the description) of a token chunk; None when ``data`` has no trailer."""
    if len(data) < 4:
        return None
    size = int(np.frombuffer(data, "<u4", 1, len(data) - 4)[0])
    if size + 4 > len(data):
        return None
    try:
        description = json.loads(data[len(data) - 4 - size:len(data) - 4])
    except ValueError:
        return None
    if not isinstance(description, dict) or description.get(MARK) != 1 or description.get("items") != "tokens":
        return None
    return data[:len(data) - 4 - size], description


def encode_tokens(batch: Batch, column: Column) -> Samples:
    """Each record's input_ids as a TokensLoader item: its values, nothing else."""
    buffer, starts, lengths = column_bytes(batch.columns[column.name], column, len(batch))
    return records_as_bytes([(buffer, starts, lengths)], len(batch))


def encode_batch(batch: Batch, columns: list[Column]) -> Samples:
    """Each record as a LitData item: every leaf's size, then the leaves."""
    records = len(batch)
    sizes, pieces = [], []
    for column in columns:
        buffer, starts, lengths = column_bytes(batch.columns[column.name], stored(column), records)
        sizes.append(lengths)
        pieces.append((buffer, starts, lengths))
    table = np.stack(sizes, axis=1).astype("<u4")
    pieces.insert(0, (table.view(np.uint8).reshape(-1), np.arange(records, dtype=np.int64) * 4 * len(columns),
                      np.full(records, 4 * len(columns), dtype=np.int64)))
    return records_as_bytes(pieces, records)


class LitDataWriter(Writer):
    name = "litdata"
    Params = LitDataParams
    suffixes = (".litdata",)
    reading = ("Lightning's litdata reads it as it is: `litdata.StreamingDataset(OUT)` (index.json ties each "
               "side's chunks).")

    @classmethod
    def reading_text(cls) -> str:
        """``reading`` with where each step's side is (the held-out side's directory)."""
        named = ", ".join(f"`StreamingDataset(OUT/{side.directory})` for the {side.label} side" for side in sides())
        return cls.reading.replace("(OUT)` (", f"(OUT)`, and {named} (") if named else cls.reading
    job_files = (INDEX,)

    def __init__(self, params, features: list[Feature], special=None):
        super().__init__(params, features, special)
        self._columns = item_columns(params, features)
        self._tokens = tokens_only(params)
        self._description = b"" if self._tokens else config_json(chunk_description(self._columns))
        self._trailer = trailer(self._columns) if self._tokens else b""

    @classmethod
    def check_features(cls, params, features: list[Feature]) -> None:
        for f in features:
            if np.dtype(f.dtype).name not in DTYPE_CODES:
                raise ValueError(f"LitData has no dtype code for {f.name}'s dtype {f.dtype}")
        if tokens_only(params) and not any(f.name == IDS and f.length is None and np.dtype(f.dtype).kind in "iu"
                                           for f in features):
            raise ValueError("--litdata-items tokens writes token sequences: it needs --objective tokens (records "
                             "of one length, padded, are no token stream)")

    def open(self, output, stem: str) -> TaskOutput:
        if self._tokens:
            (column,) = self._columns
            return SampleShardOutput(output, stem, self.suffixes[0], b"", lambda batch: encode_tokens(batch, column),
                                     trailer=self._trailer)
        return SampleShardOutput(output, stem, self.suffixes[0], self._description,
                                 lambda batch: encode_batch(batch, self._columns))

    @classmethod
    def _description_of(cls, data: bytes):
        tokens = split_trailer(data)
        shard = parse_shard(tokens[0] if tokens else data)
        description = tokens[1] if tokens else read_config(shard)
        columns = description.get("columns")
        if description.get(MARK) != 1 or not isinstance(columns, list) or not all(
                isinstance(c, list) and len(c) == 3 and c[1] in DTYPE_CODES for c in columns) \
                or (tokens and len(columns) != 1):
            raise ValueError("not a chunk of this pipeline's LitData output: no description after its offsets or "
                             "its tokens")
        return shard, columns, bool(tokens)

    @classmethod
    def count_records(cls, name: str, data: bytes) -> int:
        return cls._description_of(data)[0].samples

    @classmethod
    def stored_features(cls, params, features: list[Feature], special) -> dict[str, dict]:
        out = {}
        for column in item_columns(params, features):
            column = stored(column)
            out[column.name] = {"dtype": column.dtype.name, "shape": [] if column.length == 1 else [column.length],
                                "litdata_format": data_format(column)}
        return out

    @classmethod
    def format_details(cls, params, features: list[Feature], special) -> dict:
        columns = item_columns(params, features)
        if tokens_only(params):
            return {"index": INDEX, "config": tokens_config(columns[0]), "items": "tokens",
                    "trailer_bytes": len(trailer(columns)),
                    "reader": "litdata.StreamingDataset(OUT, item_loader=TokensLoader(block_size=N))"
                              + side_readers("OUT/")}
        return {"index": INDEX, "config": litdata_config(columns),
                "reader": "litdata.StreamingDataset(OUT)" + side_readers("OUT/")}

    @classmethod
    def read_columns(cls, name: str, data: bytes, companion) -> dict:
        shard, columns, tokens = cls._description_of(data)
        if tokens:  # each item is input_ids' values: the offsets give each record's
            ((column, dtype_name, _),) = columns
            dtype = np.dtype(dtype_name).newbyteorder("<")
            sizes = np.diff(shard.offsets)
            if (sizes % dtype.itemsize).any():
                raise ValueError(f"an item of {column} is not whole {dtype.name} values")
            values = np.frombuffer(shard.data, dtype, int(sizes.sum()) // dtype.itemsize, int(shard.offsets[0]))
            return {column: Ragged(values, (sizes // dtype.itemsize).astype(np.int64))}
        dtypes = [np.dtype(dtype).newbyteorder("<") for _, dtype, _ in columns]
        rows = equal_rows(shard)
        table = 4 * len(columns)
        if rows is not None and rows.shape[1] >= table and (rows[:, :table] == rows[0, :table]).all():
            sizes = np.frombuffer(rows[0, :table].tobytes(), "<u4").tolist()  # every item's leaves the same size
            if table + sum(sizes) == rows.shape[1] and all(s % d.itemsize == 0 for s, d in zip(sizes, dtypes)):
                return sliced_columns(rows, [(column, dtype, length, size) for (column, _, length), dtype, size
                                             in zip(columns, dtypes, sizes)], table)
        samples = []
        for i in range(shard.samples):
            raw = shard.sample(i)
            if len(raw) < 4 * len(columns):
                raise ValueError(f"item {i} is shorter than its size table")
            sizes = np.frombuffer(raw, "<u4", len(columns)).tolist()
            at = 4 * len(columns)
            if at + sum(sizes) != len(raw):
                raise ValueError(f"item {i}: its leaves' sizes add up to {sum(sizes)}, it holds {len(raw) - at}")
            sample = {}
            for (column, _, _), dtype, size in zip(columns, dtypes, sizes):
                if size % dtype.itemsize:
                    raise ValueError(f"item {i}: {column} holds {size} bytes, not whole {dtype.name} values")
                sample[column] = np.frombuffer(raw[at:at + size], dtype)
                at += size
            samples.append(sample)
        return to_columns(samples, {column: length for column, _, length in columns})

    @classmethod
    def finish_job(cls, output, config, totals: dict, lines: Lines | None = None) -> None:
        """``index.json`` in each directory of chunks (the training side's, holdout/): the manifest's chunks."""
        params = cls.make_params(dict(config.writer.params))
        details = cls.format_details(params, job_features(config), None)
        for directory, files in listed_by_directory(output, cls.suffixes, manifest_lines(output, lines)).items():
            index = index_of(files, details["config"], config.job_id, details.get("trailer_bytes"))
            output.put_bytes(index_name(directory, INDEX), json.dumps(index, sort_keys=True).encode())
        super().finish_job(output, config, totals, lines)

    @classmethod
    def check_output(cls, storage, entries: list[dict], info: dict) -> list[str]:
        """A complete output's index.json files list the manifest's chunks as they are."""
        if not info.get("complete"):
            return []
        details = info.get("format_details") or {}
        return check_indexes(storage, entries, cls.suffixes, lambda files: index_of(
            files, details.get("config"), info.get("job"), details.get("trailer_bytes")))


def index_of(files: list[ListedFile], config: dict, job_id: str, trailer_bytes: int | None = None) -> dict:
    """index.json for these files (the manifest's), LitData's ``config`` and the job.  A
    token chunk (``trailer_bytes``: its description's) says its tokens, ``dim``: what TokensLoader cuts into blocks,
    known from its bytes, items and the dtype."""
    def dim(f: ListedFile) -> int | None:
        if trailer_bytes is None:
            return None
        itemsize = np.dtype(DTYPE_NAMES[int(config["data_format"][0].rsplit(":", 1)[1])]).itemsize
        return (int(f.bytes) - 4 * (int(f.records) + 2) - trailer_bytes) // itemsize

    return {"chunks": [{"chunk_bytes": f.bytes, "chunk_size": f.records, "dim": dim(f),
                        "filename": f.basename} for f in files],
            "config": config, "updated_at": job_id}
