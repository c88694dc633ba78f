"""Parquet: one row per record, one column per feature, for PyTorch trainers
(Hugging Face ``datasets``, NVIDIA's LDDL-style loaders, ``pyarrow.dataset``).

Columns keep the features' names and narrow types: a fixed- or
variable-length feature is a ``list<int32>`` (``int8``, ``float32`` …: the
dtype the objective declares), a one-value feature (``next_sentence_labels``)
a scalar column.  Files are zstd-compressed with row groups of
``ROW_GROUP_ROWS`` records, so a reader streams them a row group at a time.
pyarrow writes no timestamp, so the same records give the same bytes.

With ``--bin-size N`` a task writes one file per non-empty sequence-length
bin, LDDL's binning: bin k holds records whose length (``input_mask``'s sum,
else ``input_ids``' length) is in ((k-1)·N, k·N], under ``bin-K/``, so a
trainer draws batches from one bin and pads less.

At the end of the job the sink writes ``README.md``, a dataset card whose
YAML names the splits' files for ``datasets.load_dataset(OUT)``
(common/dataset_card.py); ``dataset_info.json`` is every format's
(common/dataset_info.py).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from common.lazy_import import LazyModule
from common.objectives.base import Batch, Feature, Ragged
from common.params import param
from common.writers.base import OutputFile, ShardFile, TaskOutput, Writer

pa = LazyModule("pyarrow")
pq = LazyModule("pyarrow.parquet")

#: Records per row group: ~2-10 MB of token ids at 128-512 tokens, one read each.
ROW_GROUP_ROWS = 8192


@dataclass(frozen=True)
class ParquetParams:
    bin_size: int = param(0, "Write records to sequence-length bins of this width (bin k: lengths in "
                             "((k-1)N, kN]), one file per bin and task; 0: one file per task.")
    chinese_ref: bool = param(False, "Also write chinese_ref, the positions of tokens that continue a word (Hugging "
                                     "Face's run_chinese_ref.py column, read by DataCollatorForWholeWordMask), from "
                                     "the records' word_starts (--objective roberta --masking none, or electra "
                                     "--word-starts).", opt_in=True)

    def validate(self) -> None:
        if self.bin_size < 0:
            raise ValueError("--bin-size must be 0 (no bins) or a positive width")


CHINESE_REF = Feature("chinese_ref", "int32", None)


def chinese_ref(batch: Batch) -> Ragged:
    """Per record, the positions of tokens that continue a word: text tokens
    (not special, not padding) whose ``word_starts`` is 0.  Hugging Face's
    run_chinese_ref.py lists only such Han characters; ``##`` pieces are
    continuations to DataCollatorForWholeWordMask anyway, so listing them too
    masks the same words."""
    starts = np.asarray(batch.columns["word_starts"]) != 0
    text = np.ones_like(starts)
    if "special_tokens_mask" in batch.columns:
        text &= np.asarray(batch.columns["special_tokens_mask"]) == 0
    if "input_mask" in batch.columns:
        text &= np.asarray(batch.columns["input_mask"]) != 0
    continues = text & ~starts
    rows, positions = np.nonzero(continues)
    return Ragged(positions.astype(np.int32), np.bincount(rows, minlength=len(starts)).astype(np.int64))


def arrow_schema(features: list[Feature]) -> pa.Schema:
    """The columns: the features' names, their declared dtypes, lists unless one value per record."""
    fields = []
    for feature in features:
        value_type = pa.from_numpy_dtype(np.dtype(feature.dtype))
        fields.append(pa.field(feature.name, value_type if feature.length == 1 else pa.list_(value_type),
                               nullable=False))
    return pa.schema(fields)


def _column(values, feature: Feature) -> pa.Array:
    dtype = np.dtype(feature.dtype)
    if isinstance(values, Ragged):
        offsets = np.concatenate([[0], np.cumsum(values.lengths)]).astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.asarray(values.values, dtype=dtype)))
    values = np.asarray(values, dtype=dtype)
    if feature.length == 1:
        return pa.array(values.reshape(-1))
    rows, width = values.shape
    offsets = np.arange(0, rows * width + 1, width, dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.reshape(-1)))


class _ParquetFile:
    """One file of a task: buffered to whole row groups, written atomically."""

    def __init__(self, output, name: str, schema: pa.Schema):
        self.name = name
        self._file = OutputFile(output, name)
        self._writer = pq.ParquetWriter(self._file, schema, compression="zstd", write_statistics=False)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.records = 0

    def add(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self.records += table.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if not self._pending:
            return
        table = pa.concat_tables(self._pending)
        whole = table.num_rows if final else table.num_rows - table.num_rows % ROW_GROUP_ROWS
        if whole:
            self._writer.write_table(table.slice(0, whole), row_group_size=ROW_GROUP_ROWS)
        rest = table.slice(whole)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows

    def commit(self) -> ShardFile:
        self._flush(final=True)
        self._writer.close()
        return self._file.commit(self.records)

    def abort(self) -> None:
        self._file.abort()


def record_lengths(batch: Batch) -> np.ndarray:
    """Each record's sequence length, for binning."""
    if "input_mask" in batch.columns and not isinstance(batch.columns["input_mask"], Ragged):
        return np.asarray(batch.columns["input_mask"]).sum(axis=1)
    ids = batch.columns["input_ids"]
    return ids.lengths if isinstance(ids, Ragged) else np.full(len(batch), np.asarray(ids).shape[1])


class _ParquetTaskOutput(TaskOutput):
    def __init__(self, output, stem: str, features: list[Feature], bin_size: int):
        self._output = output
        self._stem = stem
        self._features = features
        self._schema = arrow_schema(features)
        self._bin_size = bin_size
        self._files: dict[int, _ParquetFile] = {}  # bin (0 without binning) -> file

    def _file(self, bin_index: int) -> _ParquetFile:
        if bin_index not in self._files:
            if not self._bin_size:
                name = f"{self._stem}.parquet"
            else:  # the bin inside the stem's directory: the held-out side stays under holdout/ (holdout/bin-K/)
                directory, _, base = self._stem.rpartition("/")
                name = f"{directory + '/' if directory else ''}bin-{bin_index:03d}/{base}.parquet"
            self._files[bin_index] = _ParquetFile(self._output, name, self._schema)
        return self._files[bin_index]

    def _table(self, batch: Batch, rows: np.ndarray | None = None) -> pa.Table:
        if rows is not None:  # binning: fixed-length records only (check_features), chinese_ref derived after
            batch = Batch({name: np.asarray(values)[rows] for name, values in batch.columns.items()})
        columns = [_column(chinese_ref(batch) if feature is CHINESE_REF else batch.columns[feature.name], feature)
                   for feature in self._features]
        return pa.Table.from_arrays(columns, schema=self._schema)

    def write(self, batch: Batch) -> None:
        if not len(batch):
            return
        if not self._bin_size:
            self._file(0).add(self._table(batch))
            return
        bins = (record_lengths(batch) + self._bin_size - 1) // self._bin_size  # ((k-1)N, kN] -> k
        for bin_index in np.unique(bins).tolist():
            self._file(bin_index).add(self._table(batch, np.nonzero(bins == bin_index)[0]))

    def commit(self) -> list[ShardFile]:
        return [self._files[k].commit() for k in sorted(self._files)]

    def abort(self) -> None:
        for file in self._files.values():
            file.abort()


class ParquetWriter(Writer):
    name = "parquet"
    Params = ParquetParams
    suffixes = (".parquet",)

    def __init__(self, params, features: list[Feature], special=None):
        super().__init__(params, features + [CHINESE_REF] if params.chinese_ref else features, special)

    @classmethod
    def check_features(cls, params, features: list[Feature]) -> None:
        if params.chinese_ref and "word_starts" not in {f.name for f in features}:
            raise ValueError("--chinese-ref needs records with word_starts (--objective roberta --masking none, "
                             "or --objective electra --word-starts)")
        if params.bin_size:
            names = {f.name for f in features}
            ragged_ids = any(f.name == "input_ids" and f.length is None for f in features)
            if "input_mask" not in names and not ragged_ids:
                raise ValueError("--bin-size needs records with a length (input_mask, or variable-length input_ids)")
            if any(f.length is None for f in features):
                raise ValueError("--bin-size bins fixed-length records; this objective writes variable-length ones")

    def open(self, output, stem: str) -> TaskOutput:
        return _ParquetTaskOutput(output, stem, self.features, self.params.bin_size)

    @classmethod
    def count_records(cls, name: str, data: bytes) -> int:
        try:
            return pq.ParquetFile(io.BytesIO(data)).metadata.num_rows
        except (pa.ArrowInvalid, OSError) as error:
            raise ValueError(f"not a readable Parquet file: {error}") from None

    @classmethod
    def stored_features(cls, params, features: list[Feature], special) -> dict[str, dict]:
        """The columns: a one-value feature is a scalar column (shape []), the others lists."""
        features = features + ([CHINESE_REF] if getattr(params, "chinese_ref", False) else [])
        schema = arrow_schema(features)
        return {f.name: {"dtype": f.dtype, "shape": [] if f.length == 1 else [f.length],
                         "arrow_type": str(schema.field(f.name).type)} for f in features}

    @classmethod
    def format_details(cls, params, features: list[Feature], special) -> dict:
        return {"compression": "zstd", "row_group_rows": ROW_GROUP_ROWS, "bin_size": params.bin_size}

    @classmethod
    def read_columns(cls, name: str, data: bytes, companion) -> dict:
        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowInvalid, OSError) as error:
            raise ValueError(f"not a readable Parquet file: {error}") from None
        columns = {}
        for field in table.schema:
            column = table.column(field.name).combine_chunks()
            if not pa.types.is_list(field.type):
                columns[field.name] = column.to_numpy(zero_copy_only=False)
                continue
            lengths = column.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
            values = column.flatten().to_numpy(zero_copy_only=False)
            if len(lengths) and (lengths == lengths[0]).all():
                columns[field.name] = values.reshape(len(lengths), int(lengths[0]))
            else:
                columns[field.name] = Ragged(values, lengths)
        return columns

    @classmethod
    def arrow_types(cls, name: str, data: bytes) -> dict[str, str]:
        """The file's columns and their Arrow types, from its footer alone."""
        try:
            schema = pq.ParquetFile(io.BytesIO(data)).schema_arrow
        except (pa.ArrowInvalid, OSError) as error:
            raise ValueError(f"not a readable Parquet file: {error}") from None
        return {field.name: str(field.type) for field in schema}

    @classmethod
    def finish_job(cls, output, config, totals: dict) -> None:
        """``README.md``: a dataset card that ``datasets.load_dataset(OUT)`` follows (common/dataset_card.py)."""
        from common.dataset_card import write_card

        write_card(output, config)
