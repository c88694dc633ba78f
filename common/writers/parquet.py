"""Parquet: one row per record, one column per feature, for PyTorch trainers
(Hugging Face ``datasets``, NVIDIA's LDDL-style loaders, ``pyarrow.dataset``).

Columns keep the features' names and narrow types: a fixed- or
variable-length feature is a ``list<int32>`` (``int8``, ``float32`` …: the
dtype the objective declares), a one-value feature (``next_sentence_labels``)
a scalar column.  Files are zstd-compressed with row groups of
``ROW_GROUP_ROWS`` records, so a reader streams them a row group at a time.
pyarrow writes no timestamp, so the same records give the same bytes.
Every page carries a CRC32 (``write_page_checksum``) and every read verifies
it, so a flipped bit is an error, as in a TFRecord shard, not a changed row.

Each side has a directory of Parquet files only, the Hub's split directories:
``train/part-<task>.parquet`` and ``validation/part-<task>.parquet`` (the
held-out side), so ``pandas.read_parquet(OUT/train)``, ``pyarrow.dataset``,
polars and duckdb read a side as it is; the job's own files (the card,
``dataset_info.json``, the manifest) stay at the root.

With ``--bin-size N`` a task writes one file per non-empty sequence-length
bin, LDDL's binning: bin k holds records whose length (``input_mask``'s sum,
else ``input_ids``' length) is in ((k-1)·N, k·N], under ``train/bin-K/``, so a
trainer draws batches from one bin and pads less.

With ``--column-names hf`` the columns take Hugging Face's argument names
(``attention_mask``, ``token_type_ids``, ``next_sentence_label``) and a masked
output gains ``labels`` (-100 but at the masked positions, which hold the
original ids), so ``BertForPreTraining`` and ``Trainer`` take the rows as they
are; the ``masked_lm_*`` columns stay (Trainer drops what the model does not
take).  The files say so in their schema's metadata, and reading them back maps
the names to the features' again (checking ``labels`` against ``masked_lm_*``),
so the loader, mlm-verify and mlm-report read them unchanged.

At the end of the job the sink writes ``README.md``, a dataset card whose
YAML names the splits' files for ``datasets.load_dataset(OUT)``
(common/describe/dataset_card.py); ``dataset_info.json`` is every format's
(common/describe/dataset_info.py).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from common.job.params import param
from common.lazy_import import LazyModule
from common.objectives.base import Batch, Feature, Ragged
from common.writers.base import OutputFile, ShardFile, TaskOutput, Writer

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
else:  # imported when first used
    pa = LazyModule("pyarrow")
    pq = LazyModule("pyarrow.parquet")

#: Records per row group: ~2-10 MB of token ids at 128-512 tokens, one read each.
ROW_GROUP_ROWS = 8192
#: --column-names' values.
COLUMN_NAMINGS = ("ours", "hf")


@dataclass(frozen=True)
class ParquetParams:
    bin_size: int = param(0, "Write records to sequence-length bins of this width (bin k: lengths in "
                             "((k-1)N, kN]), one file per bin and task; 0: one file per task.")
    chinese_ref: bool = param(False, "Also write chinese_ref, the positions of tokens that continue a word (Hugging "
                                     "Face's run_chinese_ref.py column, read by DataCollatorForWholeWordMask), from "
                                     "the records' word_starts (--objective roberta --masking none, or electra "
                                     "--word-starts).", opt_in=True)
    column_names: str = param("ours", "Column names: ours (the objective's feature names: input_mask, segment_ids, "
                                      "next_sentence_labels) or hf (Hugging Face's: attention_mask, token_type_ids, "
                                      "next_sentence_label, plus labels (-100 but at masked positions) for masked "
                                      "outputs), which BertForPreTraining and Trainer take as they are.", opt_in=True,
                              choices=COLUMN_NAMINGS)

    def validate(self) -> None:
        if self.bin_size < 0:
            raise ValueError("--bin-size must be 0 (no bins) or a positive width")
        if self.column_names not in COLUMN_NAMINGS:
            raise ValueError(f"--column-names must be ours or hf, not {self.column_names!r}")

#: Hugging Face's argument names (BertForPreTraining.forward) for the features that have one.
HF_NAMES = {"input_mask": "attention_mask", "segment_ids": "token_type_ids",
            "next_sentence_labels": "next_sentence_label"}
#: What a masked position's label is made of, and the value of every other position (CrossEntropyLoss's ignore_index).
MASKED_LM = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
IGNORED_LABEL = -100
#: The schema metadata key that marks a file written with Hugging Face's names (read_columns maps them back).
NAMING_KEY = b"mlm_pipeline.column_names"


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


def mlm_labels(batch: Batch) -> np.ndarray | Ragged:
    """Hugging Face's ``labels``: per position of ``input_ids``, -100, except each masked position
    (``masked_lm_positions`` whose ``masked_lm_weights`` > 0), which holds its original id (``masked_lm_ids``)."""
    ids = batch.columns["input_ids"]
    rows, (positions, originals, weights) = _flat_rows([batch.columns[name] for name in MASKED_LM])
    keep = weights > 0
    rows, positions, originals = rows[keep], positions[keep].astype(np.int64), originals[keep]
    if isinstance(ids, Ragged):
        starts = np.concatenate([[0], np.cumsum(ids.lengths)[:-1]]).astype(np.int64)
        labels = np.full(len(ids.values), IGNORED_LABEL, dtype=np.int32)
        labels[starts[rows] + positions] = originals
        return Ragged(labels, np.asarray(ids.lengths, dtype=np.int64))
    labels = np.full(np.asarray(ids).shape, IGNORED_LABEL, dtype=np.int32)
    labels[rows, positions] = originals
    return labels


def _flat_rows(columns: list) -> tuple[np.ndarray, list[np.ndarray]]:
    """Columns of equal lengths per record, flattened, with each value's record."""
    first = columns[0]
    if isinstance(first, Ragged):
        rows = np.repeat(np.arange(len(first.lengths)), first.lengths)
        return rows, [np.asarray(c.values) for c in columns]
    first = np.asarray(first)
    rows = np.repeat(np.arange(first.shape[0]), first.shape[1])
    return rows, [np.asarray(c).reshape(-1) for c in columns]


def column_names(params, features: list[Feature]) -> dict[str, str]:
    """Each feature's column in the files (only those renamed): Hugging Face's names with --column-names hf."""
    if getattr(params, "column_names", "ours") != "hf":
        return {}
    return {f.name: HF_NAMES[f.name] for f in features if f.name in HF_NAMES}


def labels_feature(params, features: list[Feature]) -> Feature | None:
    """``labels``, the column --column-names hf adds to a masked output; None otherwise."""
    names = {f.name for f in features}
    if getattr(params, "column_names", "ours") != "hf" or not set(MASKED_LM) <= names:
        return None
    (ids,) = [f for f in features if f.name == "input_ids"]
    return Feature("labels", "int32", ids.length)


def arrow_schema(features: list[Feature], renamed: dict[str, str] | None = None, hf: bool = False) -> pa.Schema:
    """The columns: the features' names (or ``renamed``'s), their declared dtypes, lists unless one value per
    record; files with Hugging Face's names (``hf``) say so in their metadata."""
    renamed = renamed or {}
    fields = []
    for feature in features:
        value_type = pa.from_numpy_dtype(np.dtype(feature.dtype))
        fields.append(pa.field(renamed.get(feature.name, feature.name),
                               value_type if feature.length == 1 else pa.list_(value_type), nullable=False))
    schema = pa.schema(fields)
    return schema.with_metadata({NAMING_KEY: b"hf"}) if hf else schema


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
        # Page checksums (CRC32 per page): every reader here verifies them, so a flipped bit is refused, not served.
        self._writer = pq.ParquetWriter(self._file, schema, compression="zstd", write_statistics=False,
                                        write_page_checksum=True)
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


#: Columns the writer derives from a batch rather than takes from it (name -> how).
DERIVED = {CHINESE_REF.name: chinese_ref, "labels": mlm_labels}


class _ParquetTaskOutput(TaskOutput):
    def __init__(self, output, stem: str, features: list[Feature], derived: set[str], schema: pa.Schema,
                 bin_size: int):
        self._output = output
        self._stem = stem
        self._features = features
        self._derived = derived  # names of the features made by DERIVED, not found in the batch
        self._schema = schema
        self._bin_size = bin_size
        self._files: dict[int, _ParquetFile] = {}  # bin (0 without binning) -> file

    def _file(self, bin_index: int) -> _ParquetFile:
        if bin_index not in self._files:
            if not self._bin_size:
                name = f"{self._stem}.parquet"
            else:  # the bin inside the stem's directory: each side keeps its own (train/bin-K/, validation/bin-K/)
                directory, _, base = self._stem.rpartition("/")
                name = f"{directory + '/' if directory else ''}bin-{bin_index:03d}/{base}.parquet"
            self._files[bin_index] = _ParquetFile(self._output, name, self._schema)
        return self._files[bin_index]

    def _table(self, batch: Batch, rows: np.ndarray | None = None) -> pa.Table:
        if rows is not None:  # binning: fixed-length records only (check_features), derived columns after
            batch = Batch({name: np.asarray(values)[rows] for name, values in batch.columns.items()})
        columns = [_column(DERIVED[feature.name](batch) if feature.name in self._derived
                           else batch.columns[feature.name], feature) for feature in self._features]
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


def _check_labels(name: str, columns: dict) -> None:
    """``labels`` (read from a file) against the labels its masked_lm_* make; removed from ``columns``."""
    labels = columns.pop("labels")
    if not set(MASKED_LM) <= set(columns):
        raise ValueError(f"{name}: labels without {', '.join(MASKED_LM)}")
    expected = mlm_labels(Batch(columns))
    given, made = ((np.asarray(x.values), np.asarray(x.lengths)) if isinstance(x, Ragged) else (np.asarray(x), None)
                   for x in (labels, expected))
    if given[0].shape != made[0].shape or (given[1] is not None and not np.array_equal(given[1], made[1])):
        raise ValueError(f"{name}: labels are not one per position of input_ids")
    wrong = given[0] != made[0]
    if wrong.any():
        raise ValueError(f"{name}: labels disagree with masked_lm_* at {int(wrong.sum())} position(s)")


#: Each side's directory by its card split, the Hub's split directories: pandas, pyarrow.dataset, polars and duckdb
#: read ``OUT/train`` (``OUT/validation``: the held-out side) with nothing but Parquet files in it.
SIDE_DIRECTORIES = {"train": "train", "validation": "validation"}


class ParquetWriter(Writer):
    name = "parquet"
    Params = ParquetParams
    suffixes = (".parquet",)
    version = 2  # each side in its split's directory (train/, validation/), not the output's root and holdout/
    side_directories = SIDE_DIRECTORIES

    def __init__(self, params, features: list[Feature], special=None):
        added = self.added_features(params, features)
        super().__init__(params, features + added, special)
        self._derived = {f.name for f in added}
        self._schema = arrow_schema(self.features, column_names(params, features), params.column_names == "hf")

    @classmethod
    def added_features(cls, params, features: list[Feature]) -> list[Feature]:
        """Columns the writer adds to the objective's features: chinese_ref, and labels with --column-names hf."""
        labels = labels_feature(params, features)
        return ([CHINESE_REF] if getattr(params, "chinese_ref", False) else []) + ([labels] if labels else [])

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
        return _ParquetTaskOutput(output, stem, self.features, self._derived, self._schema, self.params.bin_size)

    def names(self, stem: str) -> tuple[str, ...] | None:
        return None if self.params.bin_size else (f"{stem}.parquet",)  # bins: which ones is known once written

    @classmethod
    def count_records(cls, name: str, data: bytes) -> int:
        try:
            return pq.ParquetFile(io.BytesIO(data)).metadata.num_rows
        except (pa.ArrowInvalid, OSError) as error:
            raise ValueError(f"not a readable Parquet file: {error}") from None

    @classmethod
    def stored_features(cls, params, features: list[Feature], special) -> dict[str, dict]:
        """The features as read back (by the features' names, whatever --column-names): a one-value feature is
        a scalar column (shape []), the others lists.  Columns of other names are in format_details."""
        features = features + ([CHINESE_REF] if getattr(params, "chinese_ref", False) else [])
        schema = arrow_schema(features)
        return {f.name: {"dtype": f.dtype, "shape": [] if f.length == 1 else [f.length],
                         "arrow_type": str(schema.field(f.name).type)} for f in features}

    @classmethod
    def format_details(cls, params, features: list[Feature], special) -> dict:
        """Besides compression and bins, which names the files' columns have: ``columns`` (feature -> column,
        those renamed) and ``added_columns`` (in the files only, dropped on reading back)."""
        details = {"compression": "zstd", "row_group_rows": ROW_GROUP_ROWS, "bin_size": params.bin_size,
                   "column_names": getattr(params, "column_names", "ours")}
        if details["column_names"] == "hf":
            labels = labels_feature(params, features)
            details["columns"] = column_names(params, features)
            details["added_columns"] = {} if labels is None else {labels.name: {
                "dtype": labels.dtype, "shape": [labels.length], "arrow_type": str(arrow_schema([labels])[0].type),
                "holds": f"{IGNORED_LABEL} except at masked positions (masked_lm_positions whose masked_lm_weights "
                         "> 0), which hold the original token id (masked_lm_ids)"}}
        return details

    @classmethod
    def read_columns(cls, name: str, data: bytes, companion) -> dict:
        """By the features' names: a file with Hugging Face's names has them mapped back, and its ``labels``
        checked against ``masked_lm_*`` (ValueError if they disagree) and dropped."""
        try:
            # On this thread, and through ParquetFile.read, not read_table: read_table starts one of Arrow's thread
            # pools even with use_threads=False, and a pool once started can abort a short process at its exit
            # ("terminate called without an active exception", apache/arrow#34314): mlm-verify died so after a
            # correct verdict.  Readers wanting parallelism read several files at once.
            table = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True).read(use_threads=False)
        except (pa.ArrowInvalid, OSError) as error:
            raise ValueError(f"not a readable Parquet file: {error}") from None
        hf = (table.schema.metadata or {}).get(NAMING_KEY) == b"hf"
        if hf:
            features_of = {column: feature for feature, column in HF_NAMES.items()}
            table = table.rename_columns([features_of.get(name, name) for name in table.column_names])
        columns = {}
        for field in table.schema:
            column = table.column(field.name).combine_chunks()
            if not pa.types.is_list(field.type):
                columns[field.name] = column.to_numpy(zero_copy_only=False)
                continue
            lengths = column.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
            values = column.flatten().to_numpy(zero_copy_only=False)
            # chinese_ref is variable-length by nature: always Ragged, so every file reads the same way
            if field.name != CHINESE_REF.name and len(lengths) and (lengths == lengths[0]).all():
                columns[field.name] = values.reshape(len(lengths), int(lengths[0]))
            else:
                columns[field.name] = Ragged(values, lengths)
        if hf and "labels" in columns:
            _check_labels(name, columns)
        return columns

    @classmethod
    def arrow_types(cls, name: str, data: bytes) -> dict[str, str]:
        """The file's columns and their Arrow types, from its footer alone."""
        try:
            schema = pq.ParquetFile(io.BytesIO(data)).schema_arrow
        except (pa.ArrowInvalid, OSError) as error:
            raise ValueError(f"not a readable Parquet file: {error}") from None
        return {field.name: str(field.type) for field in schema}

