"""MosaicML streaming's MDS: what ``streaming.MDSWriter`` writes and
``streaming.StreamingDataset(local=OUT, split="train")`` reads, for the trainers of
ModernBERT, MosaicBERT and Composer/LLM Foundry.

Each task writes ``train/part-<task>.mds`` (``val/part-<task>.mds`` for the
held-out side: the split names ModernBERT's yamls read, ``data_local: OUT``
with ``split: train`` / ``split: val``; a task past 64 MiB of samples
continues in ``part-<task>-00001.mds`` ...), a joint MDS shard as MDSWriter lays it out
(mosaicml/streaming ``streaming/base/format/mds/writer.py``, format version
2)::

    uint32 samples, uint32 offsets[samples + 1], the shard's JSON config, samples

a sample being the uint32 sizes of its variable-size columns, then every
column's bytes, the columns in name order.  Columns are encoded as one would
declare them to MDSWriter: a variable-length feature ``ndarray:<dtype>``
(a byte for the shape's width, the shape, the values), a fixed-length one
``ndarray:<dtype>:<length>`` (the values), a one-value feature its dtype's
scalar encoding (``int32``, ``float32``...; ``int`` for int64, as a Python
int).  ``input_ids`` is int64 by default (``--mds-ids-dtype``): ModernBERT's
``StreamingTextDataset`` reads it with ``np.frombuffer(..., np.int64)``
whatever the column's encoding says.  No compression; each shard's sha256
is the manifest's.

At the end of the job (every task done, none quarantined) the sink writes
``train/index.json`` (and ``val/index.json``): the shards the manifest lists,
in task order, with their samples, bytes and sha256, which is what
StreamingDataset opens.  Until then there is no index, so no trainer reads a
partial output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import click
import numpy as np

from common.job.params import param
from common.objectives.base import Batch, Feature, Ragged
from common.output.files import TRAIN
from common.steps import sides
from common.writers.base import Lines, ListedFile, TaskOutput, Writer, manifest_lines
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
    sliced_columns,
)

INDEX = "index.json"
FORMAT = "mds"
VERSION = 2
HASHES = ["sha256"]
#: MDS's scalar encodings by numpy dtype (int64 is MDS's ``int``: a Python int when read).
SCALARS = {"int8", "int16", "int32", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"}
#: MDS's ndarray value dtypes.
ARRAY_DTYPES = SCALARS | {"int64"}
#: The shape's width code of a variable-length array (the byte before its shape): uint8, uint16, uint32.
SHAPE_WIDTHS = ((1 << 8, 0), (1 << 16, 1), (1 << 32, 2))


#: The feature --mds-ids-dtype stores, and the dtypes it takes.
IDS = "input_ids"
IDS_DTYPES = ("int64", "int32")
#: Each side's directory by its card split: the split names ModernBERT's yamls (and LLM Foundry's) read.
SIDE_DIRECTORIES = {"train": "train", "validation": "val"}


@dataclass(frozen=True)
class MdsParams:
    ids_dtype: str = param("int64", "The dtype of input_ids in the shards: int64, what ModernBERT's "
                                    "StreamingTextDataset reads (np.frombuffer(sample['input_ids'], np.int64)), or "
                                    "int32 (half the bytes, for readers that decode MDS's ndarray encoding: "
                                    "StreamingDataset itself, ModernBERT's NoStreamingDataset).",
                           flag="--mds-ids-dtype", cli={"type": click.Choice(IDS_DTYPES)})

    def validate(self) -> None:
        if self.ids_dtype not in IDS_DTYPES:
            raise ValueError(f"--mds-ids-dtype must be one of {', '.join(IDS_DTYPES)}, not {self.ids_dtype!r}")


def stored_columns(params, features: list[Feature]) -> list[Column]:
    """The features as the shards hold them: input_ids in --mds-ids-dtype, the rest as the objective makes them."""
    ids_dtype = np.dtype(getattr(params, "ids_dtype", "int64"))
    return [Column(f.name, ids_dtype, f.length) if f.name == IDS and np.dtype(f.dtype).kind in "iu" else Column.of(f)
            for f in features]


def encoding(column: Column) -> str:
    """The MDS encoding of a column, as one declares it to MDSWriter."""
    name = column.dtype.name
    if column.length == 1:
        return "int" if name == "int64" else name
    return f"ndarray:{name}" if column.length is None else f"ndarray:{name}:{column.length}"


def encoded_size(column: Column) -> int | None:
    """Bytes per sample of a fixed-size column (MDS's column_sizes); None when it varies."""
    if column.length is None:
        return None
    return column.dtype.itemsize * column.length


def shard_config(columns: list[Column]) -> dict:
    """MDSWriter.get_config for these columns (and the index's per-shard fields but the file's own)."""
    ordered = sorted(columns, key=lambda c: c.name)
    return {"version": VERSION, "format": FORMAT, "compression": None, "hashes": HASHES, "size_limit": SIZE_LIMIT,
            "column_names": [c.name for c in ordered], "column_encodings": [encoding(c) for c in ordered],
            "column_sizes": [encoded_size(c) for c in ordered]}


def encode_batch(batch: Batch, columns: list[Column]) -> Samples:
    """Each record as an MDS sample."""
    records = len(batch)
    sizes, pieces = [], []
    for column in sorted(columns, key=lambda c: c.name):
        buffer, starts, lengths = column_bytes(batch.columns[column.name], column, records)
        if column.length is None:
            counts = lengths // column.dtype.itemsize
            if records and counts.min() == 0:
                raise ValueError(f"{column.name}: MDS cannot hold an empty array (a record without values)")
            width = np.select([counts < limit for limit, _ in SHAPE_WIDTHS], [code for _, code in SHAPE_WIDTHS], 3)
            head = np.zeros((records, 9), dtype=np.uint8)
            head[:, 0] = (1 << 2) | width  # one dimension, the shape's width
            head[:, 1:9] = counts.astype("<u8").view(np.uint8).reshape(records, 8)
            head_sizes = 1 + (1 << width).astype(np.int64)
            pieces.append((head.reshape(-1), np.arange(records, dtype=np.int64) * 9, head_sizes))
            sizes.append(head_sizes + lengths)
        pieces.append((buffer, starts, lengths))
    if sizes:
        table = np.stack(sizes, axis=1).astype("<u4")
        pieces.insert(0, (table.view(np.uint8).reshape(-1), np.arange(records, dtype=np.int64) * 4 * len(sizes),
                          np.full(records, 4 * len(sizes), dtype=np.int64)))
    return records_as_bytes(pieces, records)


def decode_samples(name: str, data: bytes) -> tuple[dict, list[dict[str, np.ndarray]]]:
    """A shard's config and samples (arrays by column); ValueError if the file is not an MDS shard we read."""
    shard = parse_shard(data)
    config = read_config(shard)
    names, encodings, sizes = (config.get(key) for key in ("column_names", "column_encodings", "column_sizes"))
    if not (isinstance(names, list) and isinstance(encodings, list) and isinstance(sizes, list)) \
            or config.get("format") != FORMAT or not len(names) == len(encodings) == len(sizes):
        raise ValueError("not an MDS shard: its config names no columns")
    decoders = [_decoder(e) for e in encodings]
    variable = sum(1 for s in sizes if not s)
    samples = []
    for i in range(shard.samples):
        raw = shard.sample(i)
        if len(raw) < 4 * variable:
            raise ValueError(f"sample {i} is shorter than its size table")
        table = iter(np.frombuffer(raw, "<u4", variable).tolist())
        at = 4 * variable
        sample = {}
        for column, size, decode in zip(names, sizes, decoders):
            size = size or next(table)
            if at + size > len(raw):
                raise ValueError(f"sample {i}: {column} runs past the sample's end")
            sample[column] = decode(raw[at:at + size])
            at += size
        if at != len(raw):
            raise ValueError(f"sample {i}: {len(raw) - at} bytes after its columns")
        samples.append(sample)
    return config, samples


def _decoder(text: str):
    """A decoder for the encodings this format writes."""
    kind, _, rest = str(text).partition(":")
    if kind == "int":
        return lambda raw: np.frombuffer(raw, "<i8")[:1]
    if kind in SCALARS and not rest:
        scalar = np.dtype(kind).newbyteorder("<")
        return lambda raw: np.frombuffer(raw, scalar)[:1]
    dtype_name, _, shape = rest.partition(":")
    if kind != "ndarray" or dtype_name not in ARRAY_DTYPES:
        raise ValueError(f"column encoding {text!r} is not one this pipeline writes")
    dtype = np.dtype(dtype_name).newbyteorder("<")
    if shape:
        return lambda raw: np.frombuffer(raw, dtype)

    def dynamic(raw):
        ndim, width = raw[0] >> 2, raw[0] & 3
        if ndim != 1:
            raise ValueError(f"an array of {ndim} dimensions, not a sequence")
        count = int(np.frombuffer(raw, f"<u{1 << width}", 1, 1)[0])
        values = np.frombuffer(raw, dtype, offset=1 + (1 << width))
        if len(values) != count:
            raise ValueError(f"an array whose shape says {count} values holds {len(values)}")
        return values
    return dynamic


def to_columns(samples: list[dict[str, np.ndarray]], lengths: dict[str, int | None]) -> dict:
    """Samples as read_columns' columns: scalars 1-D, fixed lengths 2-D, variable ones Ragged."""
    columns = {}
    for name, length in lengths.items():
        values = [s[name] for s in samples]
        if length == 1:
            columns[name] = np.concatenate(values) if values else np.zeros(0)
        elif length is not None:
            columns[name] = np.stack(values) if values else np.zeros((0, length))
        else:
            columns[name] = Ragged(np.concatenate(values) if values else np.zeros(0, np.int32),
                                   np.array([len(v) for v in values], dtype=np.int64))
    return columns


class MdsWriter(Writer):
    name = "mds"
    suffixes = (".mds",)
    version = 2  # input_ids int64 by default, and each side in its split's directory (train/, val/)
    side_directories = SIDE_DIRECTORIES
    reading = ("MosaicML streaming reads it as it is: `streaming.StreamingDataset(local=OUT, split=\"train\")` "
               "(index.json ties each side's shards), and so does ModernBERT's own data code with its yamls' "
               "`data_local: OUT` and `split: train`, streaming or not (`StreamingTextDataset`, "
               "`NoStreamingDataset`).")

    @classmethod
    def reading_text(cls) -> str:
        """``reading`` with the split of each step's side (the held-out side's: ``val``)."""
        named = ", ".join(f"`split=\"{cls.side_directory(side.split)}\"` for the {side.label} side"
                          for side in sides())
        return cls.reading.replace(" (index.json", f", {named} (index.json") if named else cls.reading
    job_files = (INDEX,)
    Params = MdsParams

    def __init__(self, params, features: list[Feature], special=None):
        super().__init__(params, features, special)
        self._columns = stored_columns(params, features)
        self._config = config_json(shard_config(self._columns))

    @classmethod
    def check_features(cls, params, features: list[Feature]) -> None:
        for f in features:
            if np.dtype(f.dtype).name not in ARRAY_DTYPES:
                raise ValueError(f"MDS has no encoding for {f.name}'s dtype {f.dtype}")

    def open(self, output, stem: str) -> TaskOutput:
        return SampleShardOutput(output, stem, self.suffixes[0], self._config,
                                 lambda batch: encode_batch(batch, self._columns))

    @classmethod
    def count_records(cls, name: str, data: bytes) -> int:
        shard = parse_shard(data)
        if read_config(shard).get("format") != FORMAT:
            raise ValueError("not an MDS shard: its config says another format")
        return shard.samples

    @classmethod
    def stored_features(cls, params, features: list[Feature], special) -> dict[str, dict]:
        return {c.name: {"dtype": c.dtype.name, "shape": [] if c.length == 1 else [c.length],
                         "mds_encoding": encoding(c)} for c in stored_columns(params, features)}

    @classmethod
    def format_details(cls, params, features: list[Feature], special) -> dict:
        splits = "".join(f"; {side.split}: split={cls.side_directory(side.split)!r}" for side in sides())
        return {"index": INDEX, "shard_config": shard_config(stored_columns(params, features)),
                "splits": {"train": cls.side_directory(TRAIN), **{side.split: cls.side_directory(side.split)
                                                                   for side in sides()}},
                "reader": f"streaming.StreamingDataset(local=OUT, split='train'{splits})"}

    @classmethod
    def read_columns(cls, name: str, data: bytes, companion) -> dict:
        shard = parse_shard(data)
        config = read_config(shard)
        rows = equal_rows(shard)
        sizes = config.get("column_sizes")
        if rows is not None and isinstance(sizes, list) and all(sizes) and rows.shape[1] == sum(sizes):
            layout = []  # every column fixed-size (BERT's features): cut from the rows, no sample-by-sample decode
            for column, encoded, size in zip(config["column_names"], config["column_encodings"], sizes):
                kind, _, rest = str(encoded).partition(":")
                dtype_name, _, shape = rest.partition(":")
                dtype = np.dtype("int64" if kind == "int" else dtype_name if kind == "ndarray" else kind)
                if dtype.name not in ARRAY_DTYPES or size % dtype.itemsize:
                    raise ValueError(f"column encoding {encoded!r} is not one this pipeline writes")
                layout.append((column, dtype.newbyteorder("<"), int(shape) if shape else 1, size))
            return sliced_columns(rows, layout, 0)
        config, samples = decode_samples(name, data)
        lengths = {}
        for column, encoded in zip(config["column_names"], config["column_encodings"]):
            kind, _, rest = str(encoded).partition(":")
            shape = rest.partition(":")[2]
            lengths[column] = None if kind == "ndarray" and not shape else (int(shape) if shape else 1)
        return to_columns(samples, lengths)

    @classmethod
    def finish_job(cls, output, config, totals: dict, lines: Lines | None = None) -> None:
        """``index.json`` in each directory of shards (the training side's train/, the held-out side's val/): the
        manifest's shards."""
        params = cls.make_params(dict(config.writer.params))
        shard = shard_config(stored_columns(params, job_features(config)))
        for directory, files in listed_by_directory(output, cls.suffixes, manifest_lines(output, lines)).items():
            output.put_bytes(index_name(directory, INDEX), json.dumps(index_of(files, shard), sort_keys=True).encode())
        super().finish_job(output, config, totals, lines)

    @classmethod
    def check_output(cls, storage, entries: list[dict], info: dict) -> list[str]:
        """A complete output's index.json files list the manifest's shards as they are."""
        if not info.get("complete"):
            return []
        shard = (info.get("format_details") or {}).get("shard_config")
        return check_indexes(storage, entries, cls.suffixes, lambda files: index_of(files, shard))


def index_of(files: list[ListedFile], shard: dict) -> dict:
    """index.json for these files (the manifest's): each with its samples, bytes and sha256, and the shard config
    they were written with."""
    return {"version": VERSION, "shards": [
        {**shard, "samples": f.records, "zip_data": None,
         "raw_data": {"basename": f.basename, "bytes": f.bytes, "hashes": {"sha256": f.sha256}}}
        for f in files]}
