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

import numpy as np

from common.job.params import NoParams
from common.objectives.base import Batch, Feature
from common.writers.base import TaskOutput, Writer
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
#: What this format's chunks say of themselves (the key of the description after the offsets).
MARK = "mlm_pipeline.litdata"


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


def chunk_description(columns: list[Column]) -> dict:
    return {MARK: 1, "columns": [[c.name, stored(c).dtype.name, c.length] for c in columns],
            "config": litdata_config(columns)}


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
    Params = NoParams
    suffixes = (".litdata",)
    reading = ("Lightning's litdata reads it as it is: `litdata.StreamingDataset(OUT)` (index.json ties each "
               "side's chunks).")

    @classmethod
    def reading_text(cls) -> str:
        """``reading`` with where each step's side is (the held-out side's directory)."""
        from common.steps import sides

        named = ", ".join(f"`StreamingDataset(OUT/{side.directory})` for the {side.label} side" for side in sides())
        return cls.reading.replace("(OUT)` (", f"(OUT)`, and {named} (") if named else cls.reading
    job_files = (INDEX,)

    def __init__(self, params, features: list[Feature], special=None):
        super().__init__(params, features, special)
        self._columns = [Column.of(f) for f in features]
        self._description = config_json(chunk_description(self._columns))

    @classmethod
    def check_features(cls, params, features: list[Feature]) -> None:
        for f in features:
            if np.dtype(f.dtype).name not in DTYPE_CODES:
                raise ValueError(f"LitData has no dtype code for {f.name}'s dtype {f.dtype}")

    def open(self, output, stem: str) -> TaskOutput:
        return SampleShardOutput(output, stem, self.suffixes[0], self._description,
                                 lambda batch: encode_batch(batch, self._columns))

    @classmethod
    def _description_of(cls, data: bytes):
        shard = parse_shard(data)
        description = read_config(shard)
        columns = description.get("columns")
        if description.get(MARK) != 1 or not isinstance(columns, list) or not all(
                isinstance(c, list) and len(c) == 3 and c[1] in DTYPE_CODES for c in columns):
            raise ValueError("not a chunk of this pipeline's LitData output: no description after its offsets")
        return shard, columns

    @classmethod
    def count_records(cls, name: str, data: bytes) -> int:
        return cls._description_of(data)[0].samples

    @classmethod
    def stored_features(cls, params, features: list[Feature], special) -> dict[str, dict]:
        out = {}
        for f in features:
            column = stored(Column.of(f))
            out[f.name] = {"dtype": column.dtype.name, "shape": [] if f.length == 1 else [f.length],
                           "litdata_format": data_format(column)}
        return out

    @classmethod
    def format_details(cls, params, features: list[Feature], special) -> dict:
        return {"index": INDEX, "config": litdata_config([Column.of(f) for f in features]),
                "reader": "litdata.StreamingDataset(OUT)" + side_readers("OUT/")}

    @classmethod
    def read_columns(cls, name: str, data: bytes, companion) -> dict:
        shard, columns = cls._description_of(data)
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
    def finish_job(cls, output, config, totals: dict) -> None:
        """``index.json`` in each directory of chunks (the training side's, holdout/): the manifest's chunks."""
        litdata = litdata_config([Column.of(f) for f in job_features(config)])
        for directory, files in listed_by_directory(output, cls.suffixes).items():
            output.put_bytes(index_name(directory, INDEX),
                             json.dumps(index_of(files, litdata, config.job_id), sort_keys=True).encode())
        super().finish_job(output, config, totals)  # the dataset card

    @classmethod
    def check_output(cls, storage, entries: list[dict], info: dict) -> list[str]:
        """A complete output's index.json files list the manifest's chunks as they are."""
        if not info.get("complete"):
            return []
        litdata = (info.get("format_details") or {}).get("config")
        return check_indexes(storage, entries, cls.suffixes, lambda files: index_of(files, litdata, info.get("job")))


def index_of(files: list[dict], config: dict, job_id: str) -> dict:
    """index.json for these files (the manifest's, with their ``basename``), LitData's ``config`` and the job."""
    return {"chunks": [{"chunk_bytes": f["bytes"], "chunk_size": f["records"], "dim": None,
                        "filename": f["basename"]} for f in files],
            "config": config, "updated_at": job_id}
