"""Megatron-LM's indexed datasets: what its ``tools/preprocess_data.py``
writes and ``megatron.core.datasets.indexed_dataset.IndexedDataset`` reads.

Each task writes ``part-<task>.bin`` (every sequence's token ids, end to
end, in the index's dtype) and ``part-<task>.idx``:

    b"MMIDIDX\\x00\\x00"            9 bytes
    version                      uint64, 1
    dtype code                   uint8 (megatron-core's DType: uint16 8, int32 4)
    sequence count               uint64
    document count               uint64 (documents + 1)
    sequence lengths             int32 × sequences
    sequence pointers            int64 × sequences (byte offsets in .bin)
    document indices             int64 × (documents + 1): 0, then each document's end, in sequences

all little-endian, checked against megatron-core's ``indexed_dataset.py``
(``_IndexWriter.write`` / ``_IndexReader``, Megatron-LM main as of 2025; the
layout has not changed since Megatron-LM 23.x).  ``--megatron-level
sentence`` makes each sentence a sequence (what Megatron's BERT dataset
needs: ``preprocess_data.py --split-sentences``); ``document`` one sequence
per document, ending with the end-of-document token as
``preprocess_data.py --append-eod`` writes it (Megatron's ``eod``: the
tokenizer's separator, ``[SEP]`` for BERT's WordPiece, ``</s>`` for
RoBERTa's), so GPT-style samples that cross a document boundary see it.
The dtype is uint16 when the vocabulary has fewer than 65,500
ids (Megatron's ``best_fitting_dtype``), int32 otherwise.

At the end of the job the sink writes ``megatron_data_path.txt``: ``TOKENS
PREFIX`` pairs, the form ``--data-path`` takes for a blend weighted by size.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import msgpack
import numpy as np

from common.job.params import param
from common.job.tasks import FINISH, Task, parse_size
from common.objectives.base import Batch, Feature, Ragged
from common.output.files import TRAIN
from common.output.manifest import shard_files, stage_files
from common.steps import sides
from common.writers.base import Lines, ListedFile, OutputFile, ShardFile, TaskOutput, Writer, manifest_lines

INDEX_HEADER = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}
DATA_PATH_LIST = "megatron_data_path.txt"
MERGE_PLAN_NAME = "megatron/merge-plan.msgpack"  # which tasks' pairs each merged pair holds, written when planning
MERGED_PREFIX = "megatron/merged-"  # merged pairs: megatron/merged-NNNNN.{bin,idx} (and under holdout/)
#: Input characters per token, to size merge groups before any pair exists (English Wikipedia and web
#: text give ~4.2-4.6 with 30k-50k vocabularies): a group's input is about merge size x this / dtype bytes.
CHARS_PER_TOKEN = 4.4
LEVELS = ("sentence", "document")


def side_data_path_list(directory: str) -> str:
    """A step's side's own data path list, in its directory (the held-out side's: Megatron's validation split)."""
    return f"{directory}/{DATA_PATH_LIST}"


@dataclass(frozen=True)
class MegatronParams:
    megatron_level: str = param("sentence", "sentence: each sentence a sequence, documents delimited (Megatron's "
                                            "BERT); document: one sequence per document (GPT, T5).", choices=LEVELS)
    megatron_merge_size: str = param("4G", "After the normal pass, merge the tasks' pairs into pairs of about "
                                           "this size (Megatron-LM's merge_datasets); 0: keep one pair per task.",
                                     cli={"metavar": "SIZE"})

    def validate(self) -> None:
        if self.megatron_level not in LEVELS:
            raise ValueError(f"--megatron-level must be one of {', '.join(LEVELS)}")
        if parse_size(self.megatron_merge_size) < 0:
            raise ValueError("--megatron-merge-size must be 0 (no merge) or a size")


def best_fitting_dtype(vocab_size: int | None) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size is not None and vocab_size < 65500 else np.dtype(np.int32)


@dataclass
class IndexedDataset:
    """A .bin/.idx pair read back (no torch): for tests and ``mlm-verify``."""

    dtype: np.dtype
    sequence_lengths: np.ndarray
    sequence_pointers: np.ndarray
    document_indices: np.ndarray
    data: np.ndarray | None = None

    @classmethod
    def parse_index(cls, index: bytes) -> IndexedDataset:
        if not index.startswith(INDEX_HEADER) or len(index) < 34:
            raise ValueError("not a Megatron index: no MMIDIDX header")
        version, code, sequences, documents = struct.unpack_from("<QBQQ", index, len(INDEX_HEADER))
        if version != INDEX_VERSION:
            raise ValueError(f"index version {version}, expected {INDEX_VERSION}")
        dtypes = {c: d for d, c in DTYPE_CODES.items()}
        if code not in dtypes:
            raise ValueError(f"unknown dtype code {code}")
        offset = len(INDEX_HEADER) + 25
        expected = offset + 4 * sequences + 8 * sequences + 8 * documents
        if len(index) != expected:
            raise ValueError(f"index holds {len(index)} bytes, its counts ask for {expected}")
        lengths = np.frombuffer(index, np.int32, sequences, offset)
        pointers = np.frombuffer(index, np.int64, sequences, offset + 4 * sequences)
        document_indices = np.frombuffer(index, np.int64, documents, offset + 12 * sequences)
        return cls(dtypes[code], lengths, pointers, document_indices)

    def with_data(self, data: bytes) -> IndexedDataset:
        total = int(self.sequence_lengths.sum()) * self.dtype.itemsize
        if len(data) != total:
            raise ValueError(f".bin holds {len(data)} bytes, the index {total}")
        self.data = np.frombuffer(data, self.dtype)
        return self

    def sequence(self, i: int) -> np.ndarray:
        start = int(self.sequence_pointers[i]) // self.dtype.itemsize
        return self.data[start:start + int(self.sequence_lengths[i])]

    def documents(self) -> list[list[np.ndarray]]:
        return [[self.sequence(s) for s in range(int(a), int(b))]
                for a, b in zip(self.document_indices[:-1], self.document_indices[1:])]


def _commit_pair(output, data: OutputFile, index_name: str, dtype: np.dtype, lengths: np.ndarray,
                 pointers: np.ndarray, document_indices: np.ndarray, split: str = "") -> list[ShardFile]:
    """Write the index of ``data`` (written, not yet committed) and commit both, the index last: a reader
    that finds the .idx finds its .bin complete."""
    index = OutputFile(output, index_name)
    try:
        index.write(INDEX_HEADER + struct.pack("<QBQQ", INDEX_VERSION, DTYPE_CODES[dtype], len(lengths),
                                               len(document_indices)))
        index.write(lengths.astype("<i4").tobytes())
        index.write(pointers.astype("<i8").tobytes())
        index.write(document_indices.astype("<i8").tobytes())
        return [data.commit(0, split=split), index.commit(len(lengths), split=split)]
    except BaseException:
        index.abort()
        raise


def merge_parts(output, parts: list[str], name: str, split: str = "") -> list[ShardFile]:
    """The pairs ``parts`` (prefixes, in order) as one pair ``name``: their data end to end, their
    indices joined (pointers and document ends moved by what comes before), as Megatron-LM's
    tools/merge_datasets.py does.  No file when no part exists (tasks that wrote nothing)."""
    read = []
    for prefix in parts:
        index = output.get_bytes(f"{prefix}.idx")
        if index is not None:
            read.append((prefix, IndexedDataset.parse_index(index)))
    if not read:
        return []
    dtype = read[0][1].dtype
    if any(part.dtype != dtype for _, part in read):
        raise ValueError(f"{name}: its parts have different dtypes")
    data = OutputFile(output, f"{name}.bin")
    try:
        lengths, pointers, document_indices = [], [], [np.zeros(1, np.int64)]
        sequences = 0
        for prefix, part in read:
            blob = output.get_bytes(f"{prefix}.bin")
            expected = int(part.sequence_lengths.sum()) * dtype.itemsize
            if blob is None or len(blob) != expected:
                raise ValueError(f"{prefix}.bin is missing or not the size its index says (run mlm-verify)")
            lengths.append(part.sequence_lengths)
            pointers.append(part.sequence_pointers + data.bytes)
            document_indices.append(part.document_indices[1:] + sequences)
            sequences += len(part.sequence_lengths)
            data.write(blob)
        return _commit_pair(output, data, f"{name}.idx", dtype, np.concatenate(lengths),
                            np.concatenate(pointers), np.concatenate(document_indices), split)
    except BaseException:
        data.abort()
        raise


class _MegatronTaskOutput(TaskOutput):
    def __init__(self, output, stem: str, dtype: np.dtype, level: str, eod: int | None = None):
        self._output = output
        self._stem = stem
        self._dtype = dtype
        self._level = level
        self._eod = eod  # document level: appended to every document, as preprocess_data.py --append-eod
        self._bin = OutputFile(output, f"{stem}.bin")
        self._lengths: list[np.ndarray] = []
        self._document_ends: list[np.ndarray] = []
        self._sequences = 0

    def write(self, batch: Batch) -> None:
        ids, sentences = batch.columns["input_ids"], batch.columns["sentence_lengths"]
        values = np.asarray(ids.values)
        if self._level == "sentence":
            lengths = np.asarray(sentences.values, dtype=np.int32)
            per_document = np.asarray(sentences.lengths, dtype=np.int64)
        else:
            lengths = np.asarray(ids.lengths, dtype=np.int32)
            per_document = np.ones(len(ids.lengths), dtype=np.int64)
            if self._eod is not None and len(lengths):  # each document's ids, then the EOD token
                ends = np.cumsum(lengths)
                values = np.insert(values, ends, self._eod)
                lengths = lengths + 1
        self._bin.write(values.astype(self._dtype).tobytes())
        self._lengths.append(lengths)
        self._document_ends.append(self._sequences + np.cumsum(per_document))
        self._sequences += int(per_document.sum())

    def commit(self) -> list[ShardFile]:
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int32)
        pointers = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))[:-1]]) * self._dtype.itemsize \
            if len(lengths) else np.zeros(0, np.int64)
        document_indices = np.concatenate([[0], *self._document_ends]).astype(np.int64)
        return _commit_pair(self._output, self._bin, f"{self._stem}.idx", self._dtype, lengths, pointers,
                            document_indices)

    def abort(self) -> None:
        self._bin.abort()


class MegatronWriter(Writer):
    name = "megatron"
    Params = MegatronParams
    suffixes = (".bin", ".idx")
    finish_prefixes = (MERGED_PREFIX,)
    reading = (f"Megatron-LM and NeMo take the pairs as they are: `--data-path $(cat {DATA_PATH_LIST})` (each "
               "prefix weighted by its tokens); megatron-core's `IndexedDataset(prefix)` opens one pair.  "
               "dataset_info.json names the dtype and the end-of-document id.")

    @classmethod
    def reading_text(cls) -> str:
        """``reading`` with each step's side's own list (the held-out side's, for Megatron's validation split)."""
        named = "".join(f"; `{side_data_path_list(side.directory)}` for the {side.label} side" for side in sides())
        return cls.reading.replace("by its tokens)", f"by its tokens{named})")

    @classmethod
    def check_features(cls, params, features: list[Feature]) -> None:
        names = {f.name: f for f in features}
        ids, sentences = names.get("input_ids"), names.get("sentence_lengths")
        if "document_id" in names:
            raise ValueError("megatron holds whole documents (Megatron cuts its samples itself): drop "
                             "--max-seq-length from --objective tokens")
        if ids is None or ids.length is not None or sentences is None:
            raise ValueError("megatron holds token sequences, not finished instances: use --objective tokens "
                             "(Megatron builds its BERT/T5/GPT samples itself at train time)")

    def open(self, output, stem: str) -> TaskOutput:
        ids = next(f for f in self.features if f.name == "input_ids")
        eod = self.special.sep if self.special is not None else None  # Megatron's eod: [SEP] for BERT, </s>
        return _MegatronTaskOutput(output, stem, best_fitting_dtype(ids.bound), self.params.megatron_level, eod)

    def names(self, stem: str) -> tuple[str, ...]:
        return f"{stem}.bin", f"{stem}.idx"

    @classmethod
    def finish_tasks(cls, params, output, job_id: str, normal: list, special) -> list:
        """One merge task per group of tasks, in the order the data path list names them (task id),
        each group about ``--megatron-merge-size`` of output (estimated from its input: CHARS_PER_TOKEN)."""
        limit = parse_size(params.megatron_merge_size)
        if not limit:
            return []
        budget = limit * CHARS_PER_TOKEN / best_fitting_dtype(special.vocab_size).itemsize
        groups: list[list[str]] = []
        size = 0
        for task in sorted(normal, key=lambda t: t.task_id):
            if not groups or (size + task.length > budget and groups[-1]):
                groups.append([])
                size = 0
            groups[-1].append(task.shard_stem)
            size += task.length
        output.put_bytes(MERGE_PLAN_NAME, msgpack.packb({"job": job_id, "groups": groups}))
        return [Task(f"{MERGED_PREFIX}{i:05d}", 0, 0, 0, "", "", FINISH) for i in range(len(groups))]

    def finish_task(self, output, task, job_id: str, skipped: list[str]) -> list[ShardFile]:
        """One merged pair per side (training, and each step's side: the held-out one) from its group's pairs."""
        if skipped:  # merged without them, a rerun that does them would keep the stale merge
            raise ValueError(f"{len(skipped)} normal task(s) quarantined: nothing is merged without them (a "
                             "rerun merges once they are done)")
        data = output.get_bytes(MERGE_PLAN_NAME)
        plan = msgpack.unpackb(data) if data is not None else None
        if not isinstance(plan, dict) or plan.get("job") != job_id:
            raise ValueError(f"{output.uri(MERGE_PLAN_NAME)} is missing or of another job")
        stems = plan["groups"][int(task.path.rsplit("-", 1)[1])]
        merged = merge_parts(output, stems, task.path)
        for side in sides():
            merged += merge_parts(output, [side.stem(stem) for stem in stems], side.stem(task.path), split=side.split)
        return merged

    @classmethod
    def count_records(cls, name: str, data: bytes) -> int:
        """Sequences in an index (its structure checked); a .bin holds no record count of its own."""
        if name.endswith(".bin"):
            return 0
        return len(IndexedDataset.parse_index(data).sequence_lengths)

    @classmethod
    def miscount(cls, name: str, data: bytes, read: int, listed: int) -> str:
        """A sentence-level index counts sentences (the manifest's records) where ``read_columns`` gives
        documents: say so, not that the file changed."""
        try:
            index = IndexedDataset.parse_index(data) if name.endswith(".idx") else None
        except ValueError:
            index = None
        if index is not None and len(index.sequence_lengths) == listed and len(index.document_indices) - 1 == read:
            return (f"a sentence-level Megatron output (--megatron-level sentence): its {listed} records are "
                    f"sentences of {read} document(s), which Megatron-LM pairs into samples itself; a reader of "
                    "records (the loader) serves whole documents, from --megatron-level document only")
        return super().miscount(name, data, read, listed)

    @classmethod
    def stored_features(cls, params, features: list[Feature], special) -> dict[str, dict]:
        """Per document: its token ids (the .bin, in the index's dtype), and its sequences' lengths (the
        .idx): a sequence is a sentence or, at document level, the whole document and its EOD."""
        return {"input_ids": {"dtype": best_fitting_dtype(special.vocab_size).name, "shape": [None]},
                "sequence_lengths": {"dtype": "int32", "shape": [None]}}

    @classmethod
    def format_details(cls, params, features: list[Feature], special) -> dict:
        level = params.megatron_level
        return {"level": level, "sequence": "a sentence" if level == "sentence" else "a document",
                "eod_id": special.sep if level == "document" else None,
                "dtype_code": DTYPE_CODES[best_fitting_dtype(special.vocab_size)],
                "merge_size": params.megatron_merge_size, "data_path_list": DATA_PATH_LIST}

    @classmethod
    def read_columns(cls, name: str, data: bytes, companion) -> dict | None:
        """An index with its .bin: ``input_ids`` per document (its sequences end to end), ``sequence_lengths``
        per document (each of its sequences' length).  A .bin alone: None (read through its index)."""
        if name.endswith(".bin"):
            return None
        dataset = IndexedDataset.parse_index(data)
        blob = companion(name[:-len(".idx")] + ".bin")
        if blob is None:
            raise ValueError(f"{name[:-len('.idx')]}.bin is missing")
        dataset.with_data(blob)
        lengths = dataset.sequence_lengths.astype(np.int64)
        ends = dataset.document_indices
        if len(lengths) and not (np.diff(dataset.sequence_pointers) == lengths[:-1] * dataset.dtype.itemsize).all():
            raise ValueError(f"{name}: sequences are not end to end in the .bin")
        per_document = np.diff(ends).astype(np.int64)
        token_ends = np.concatenate([[0], np.cumsum(lengths)])[ends]
        return {"input_ids": Ragged(dataset.data, np.diff(token_ends).astype(np.int64)),
                "sequence_lengths": Ragged(dataset.sequence_lengths, per_document)}

    @classmethod
    def finish_job(cls, output, config, totals: dict, lines: Lines | None = None) -> None:
        """``megatron_data_path.txt``: each pair's prefix weighted by its tokens: the merged pairs when
        the job merged, else every task's (in task order)."""
        from common.tokenization import Vocabulary

        dtype = best_fitting_dtype(Vocabulary.from_json(config.tokenizer_json).special.vocab_size)
        files = pairs_listed(manifest_lines(output, lines))
        by_split: dict[str, list[str]] = {}  # the training side's, each step's side's (the held-out one)
        for f in files:
            prefix = output.uri(f.name[:-len(".bin")])
            by_split.setdefault(f.split, []).append(f"{f.bytes // dtype.itemsize} {prefix}")
        # The training side's list always; a step's side's when it has files.
        for split, name in [(TRAIN, DATA_PATH_LIST)] + [(side.split, side_data_path_list(side.directory))
                                                        for side in sides()]:
            if by_split.get(split) or split == TRAIN:
                output.put_bytes(name, ("\n".join(by_split[split]) + "\n").encode() if by_split.get(split) else b"")
        super().finish_job(output, config, totals, lines)


def pairs_listed(entries: Iterable[dict]) -> list[ListedFile]:
    """The pairs' .bin files the manifest lists, read line by line: the merged ones by name when the job merged,
    else every task's, in task order (a task listed twice: both, in the manifest's order)."""
    merged: list[ListedFile] = []
    listed: list[tuple[str, ListedFile]] = []
    merging = False  # a merged file listed (a .bin or an .idx)
    for entry in entries:
        stage = entry.get("stage")
        if stage == FINISH:
            files = stage_files(entry)
            merging = merging or bool(files)
            merged += [ListedFile.of(f) for f in files if f["name"].endswith(".bin")]
        elif not stage:
            task = entry["task"]
            listed += [(task, ListedFile.of(f)) for f in shard_files(entry) if f["name"].endswith(".bin")]
    if merging:
        return sorted(merged, key=lambda f: f.name)
    listed.sort(key=lambda item: item[0])  # stable: a task's files, and a task listed twice, in order
    return [f for _task, f in listed]
