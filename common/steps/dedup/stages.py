"""The dedup stages of a job, as its tasks and the files they exchange.

A job with ``--dedup`` runs, over the same ventilator, workers and sink:

1. one ``signature`` task per normal task (the same byte range): the
   worker parses its documents and writes their keys, split into
   ``partitions`` files by key (``dedup/signatures/pNNNNN/<task>.sig``),
   and a table of its documents (``dedup/documents/<task>.docs``);
2. one ``bucket`` task per partition: reads that partition of every
   signature task, writes the candidate pairs (``dedup/pairs/pNNNNN.pairs``);
3. one ``resolve`` task: connected components of the pairs, writes
   ``dedup/clusters.jsonl`` (the audit) and the removal lists, in as many
   files as there are partitions (``dedup/removed/pNNNNN.rm``: a normal
   task's list is in the file its task id hashes to);
4. the normal pass: each task drops the documents its removal list names.

Each stage's tasks start once every task of the stage before is done (see
ventilator/dispatcher.py).  No task holds more than a partition of the keys
(bucket), the pairs (resolve), or one task's documents.  Every file is
self-checking (common/steps/dedup/files.py): a reader that finds one missing or
corrupt raises :class:`CorruptFile` naming the task that wrote it, and that
task is done again.  Documents are named by handles (common/steps/dedup/clusters.py):
their task's rank in ``dedup/plan.bin`` (the normal tasks in corpus order,
written by the ventilator) and their rank in the task.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

from common.job.tasks import Task, decode_quarantined, encode_quarantined
from common.output.files import ShardFile
from common.steps.dedup import files
from common.steps.dedup.clusters import candidate_pairs, components, split_handle
from common.steps.dedup.files import CorruptFile
from common.steps.dedup.keys import KeyMaker
from common.steps.dedup.normalise import document_text
from common.steps.dedup.settings import BUCKET, RESOLVE, SIGNATURE, SKIPPED_COUNTER, DedupSettings

PLAN_NAME = "dedup/plan.bin"
CLUSTERS_NAME = "dedup/clusters.jsonl"
METHODS = ("exact", "minhash")  # a removal's method: its code is its index


# Tasks ---------------------------------------------------------------------

def bucket_task(partition: int) -> Task:
    return Task(f"dedup/partition-{partition:05d}", 0, 0, 0, "", "", BUCKET)


def resolve_task() -> Task:
    return Task("dedup/clusters", 0, 0, 0, "", "", RESOLVE)


def signature_task(task: Task) -> Task:
    return dataclasses.replace(task, stage=SIGNATURE)


def corpus_order(tasks: list[Task]) -> list[Task]:
    """Normal tasks by (file, start): the order documents are ranked in."""
    return sorted(tasks, key=lambda t: (t.path, t.start))


def stage_tasks(normal: list[Task], settings: DedupSettings) -> list[Task]:
    """Every task of a dedup job, stage by stage, the normal pass last."""
    ordered = corpus_order(normal)
    return ([signature_task(t) for t in ordered] + [bucket_task(p) for p in range(settings.partitions)]
            + [resolve_task()] + list(normal))


# Names -----------------------------------------------------------------------

def signature_name(signature_id: str, partition: int) -> str:
    return f"dedup/signatures/p{partition:05d}/{signature_id}.sig"


def documents_name(signature_id: str) -> str:
    return f"dedup/documents/{signature_id}.docs"


def pairs_name(partition: int) -> str:
    return f"dedup/pairs/p{partition:05d}.pairs"


def removed_name(partition: int) -> str:
    return f"dedup/removed/p{partition:05d}.rm"


def removal_partition(normal_id: str, partitions: int) -> int:
    """Which removal file holds a normal task's list: from its id alone, so the task needs no plan."""
    return int(normal_id[:8], 16) % partitions


# The plan and what the ventilator ships to bucket and resolve tasks --------------

def encode_plan(job_id: str, normal: list[Task]) -> bytes:
    return files.encode({"job": job_id, "tasks": [t.to_wire() for t in corpus_order(normal)]}, {})


def read_plan(output, job_id: str) -> list[Task]:
    meta, _ = files.decode(output.get_bytes(PLAN_NAME), PLAN_NAME, "")
    if meta.get("job") != job_id:
        raise CorruptFile(PLAN_NAME, "", f"written for job {meta.get('job')}, not {job_id}")
    return [Task.from_wire(wire) for wire in meta["tasks"]]


#: A bucket or resolve task's payload: earlier tasks that were quarantined (their files never came).
encode_skips, decode_skips = encode_quarantined, decode_quarantined


# Writing -----------------------------------------------------------------------

def _put(output, name: str, meta: dict, arrays: dict[str, np.ndarray], records: int) -> ShardFile:
    data = files.encode(meta, arrays)
    output.put_bytes(name, data)
    return ShardFile(name, records, hashlib.sha256(data).hexdigest(), len(data))


def _get(output, name: str, writer: Task) -> tuple[dict, dict[str, np.ndarray]]:
    return files.decode(output.get_bytes(name), name, writer.task_id)


@dataclasses.dataclass
class StageResult:
    files: list[ShardFile]
    counters: dict[str, int]


def write_signatures(output, settings: DedupSettings, maker: KeyMaker, task: Task, documents) -> StageResult:
    """Stage 1: ``documents`` are the task's parsed Documents, in reading order."""
    texts = [document_text(d.lines) for d in documents]
    keys = maker.keys(texts)
    ordinals = np.arange(len(texts), dtype=np.uint64)
    kinds, values, members = maker.flat(keys, ordinals)
    partition_of = values % np.uint64(settings.partitions)
    written = []
    for partition in range(settings.partitions):
        chosen = partition_of == partition
        written.append(_put(output, signature_name(task.task_id, partition), {"task": task.key},
                            {"kind": kinds[chosen], "key": values[chosen],
                             "ordinal": members[chosen].astype(np.uint32)}, int(chosen.sum())))
    sizes = np.fromiter((len(t.encode("utf-8")) for t in texts), dtype=np.int64, count=len(texts))
    offsets = np.fromiter((d.offset for d in documents), dtype=np.int64, count=len(texts))
    written.append(_put(output, documents_name(task.task_id),
                        {"task": task.key, "ids": [d.id for d in documents]},
                        {"offset": offsets, "bytes": sizes, "exact": keys.exact}, len(texts)))
    counters = {"signed_documents": len(texts)}
    if settings.uses_minhash:
        counters["too_short_documents"] = keys.too_short
    counters["empty_documents"] = int((keys.exact == 0).sum())
    return StageResult(written, counters)


def find_pairs(output, task: Task, plan: list[Task], skips: set[str]) -> StageResult:
    """Stage 2: the candidate pairs of one partition of every signature file."""
    partition = int(task.path.rsplit("-", 1)[1])
    kinds, keys, members = [], [], []
    skipped = 0
    for rank, source in enumerate(plan):
        writer = signature_task(source)
        if writer.task_id in skips:
            skipped += 1
            continue
        _meta, arrays = _get(output, signature_name(writer.task_id, partition), writer)
        kinds.append(arrays["kind"])
        keys.append(arrays["key"])
        members.append((np.uint64(rank) << np.uint64(32)) | arrays["ordinal"].astype(np.uint64))
    def join(parts: list, dtype: type) -> np.ndarray:
        return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)

    first, other, kind = candidate_pairs(join(kinds, np.uint16), join(keys, np.uint64), join(members, np.uint64))
    pairs = _put(output, pairs_name(partition), {"partition": partition},
                 {"first": first, "other": other, "kind": kind}, len(first))
    return StageResult([pairs], {"candidate_pairs": len(first), SKIPPED_COUNTER: skipped})


def _member(source: Task, meta: dict, arrays: dict, ordinal: int) -> dict:
    return {"source": source.path, "task_start": source.start, "offset_in_task": int(arrays["offset"][ordinal]),
            "id": meta["ids"][ordinal], "bytes": int(arrays["bytes"][ordinal])}


def resolve(output, plan: list[Task], partitions: int, skips: set[str]) -> StageResult:
    """``partitions``: of the pairs files to read, and of the removal files to write."""
    """Stage 3: clusters from the pairs; the audit file and the removal lists."""
    firsts, others = [], []
    for partition in range(partitions):
        writer = bucket_task(partition)
        if writer.task_id in skips:
            continue
        _meta, arrays = _get(output, pairs_name(partition), writer)
        firsts.append(arrays["first"])
        others.append(arrays["other"])
    empty = np.empty(0, dtype=np.uint64)
    nodes, roots = components(np.concatenate(firsts) if firsts else empty, np.concatenate(others) if others else empty)
    del firsts, others
    clusters: dict[int, list[int]] = {}
    for node, root in zip(nodes.tolist(), roots.tolist()):  # nodes ascending: members come sorted
        clusters.setdefault(root, []).append(node)
    # The document tables of the tasks that hold a clustered document, one at a time.
    by_rank: dict[int, list[int]] = {}
    for members in clusters.values():
        for member in members:
            by_rank.setdefault(split_handle(member)[0], []).append(member)
    described: dict[int, dict] = {}
    exact_of: dict[int, int] = {}
    for rank in sorted(by_rank):
        writer = signature_task(plan[rank])
        meta, arrays = _get(output, documents_name(writer.task_id), writer)
        for member in by_rank[rank]:
            ordinal = split_handle(member)[1]
            described[member] = _member(plan[rank], meta, arrays, ordinal)
            exact_of[member] = int(arrays["exact"][ordinal])
    removals: dict[int, list[tuple[int, int, int]]] = {}  # rank -> (ordinal, method, bytes)
    counters = {"clusters": len(clusters)}
    lines = []
    for root, members in clusters.items():
        entries = []
        for member in members:
            entry = dict(described[member])
            if member == root:
                entry["kept"] = True
            else:
                method = 0 if exact_of[member] == exact_of[root] and exact_of[root] != 0 else 1
                entry["method"] = METHODS[method]
                rank, ordinal = split_handle(member)
                removals.setdefault(rank, []).append((ordinal, method, entry["bytes"]))
                counters[f"duplicates_{METHODS[method]}"] = counters.get(f"duplicates_{METHODS[method]}", 0) + 1
            entries.append(entry)
        lines.append(json.dumps({"kept": described[root]["id"] or f"{described[root]['source']}"
                                 f"@{described[root]['task_start']}+{described[root]['offset_in_task']}",
                                 "members": entries}, sort_keys=True))
    written = [_put_text(output, CLUSTERS_NAME, "".join(line + "\n" for line in lines), len(lines))]
    # The removal lists in P files (by task id), every one written, empty or not: a missing file is a
    # lost one.  P files, not one per task: one process writing millions of objects would be the job's
    # bottleneck on S3, and each normal task reads ~1/P of the removals, not the corpus's.
    by_file: dict[int, list[tuple[bytes, int, int, int]]] = {}
    for rank, rows in removals.items():
        task_id = plan[rank].task_id
        by_file.setdefault(removal_partition(task_id, partitions), []).extend(
            [(task_id.encode(), ordinal, method, size) for ordinal, method, size in rows])
    for partition in range(partitions):
        file_rows = sorted(by_file.get(partition, []))
        written.append(_put(output, removed_name(partition), {"partition": partition},
                            {"task": np.array([r[0] for r in file_rows], dtype="S20"),
                             "ordinal": np.array([r[1] for r in file_rows], dtype=np.uint32),
                             "method": np.array([r[2] for r in file_rows], dtype=np.uint8),
                             "bytes": np.array([r[3] for r in file_rows], dtype=np.int64)}, len(file_rows)))
    return StageResult(written, counters)


def _put_text(output, name: str, text: str, records: int) -> ShardFile:
    data = text.encode()
    output.put_bytes(name, data)
    return ShardFile(name, records, hashlib.sha256(data).hexdigest(), len(data))


def read_removals(output, task: Task, partitions: int) -> dict[int, tuple[int, int]]:
    """Stage 4: the normal task's documents to drop: ordinal -> (method code, bytes)."""
    _meta, arrays = _get(output, removed_name(removal_partition(task.task_id, partitions)), resolve_task())
    mine = np.flatnonzero(arrays["task"] == task.task_id.encode())
    return {int(arrays["ordinal"][i]): (int(arrays["method"][i]), int(arrays["bytes"][i])) for i in mine}
