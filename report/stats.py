"""The report's numbers from records already read: pure logic, no I/O.

:class:`SideStats` takes one file's columns at a time (a writer's
``read_columns``) and keeps running counts, so memory does not grow with what
is sampled: sequence lengths, padding, the tokens as they were before masking
(``[UNK]`` among them, and a count per id for the top tokens), the masked
positions and what each became (the measured 80/10/10), and the NSP/SOP
labels.  The manifest's numbers (documents, skips, the steps' counters, throughput) are
summed by :func:`manifest_numbers` and :func:`throughput`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from common.objectives.base import Ragged
from common.output.files import TRAIN
from common.output.manifest import counters
from common.steps import split_of
from common.steps.tokenize import tokens_per_document_name

#: Histogram bins of sequence lengths and tokens per document.
LENGTH_BINS = 40
#: The throughput curve's fewest bins (one per task above it, up to its most).
MIN_BINS = 4


@dataclass
class Specials:
    """The tokenizer's special ids by role (None when it has none)."""

    cls: int | None = None
    sep: int | None = None
    mask: int | None = None
    pad: int | None = None
    unk: int | None = None

    @classmethod
    def from_info(cls, info: dict) -> Specials:
        tokens = (info.get("tokenizer") or {}).get("special_tokens") or {}
        return cls(**{role: (tokens.get(role) or {}).get("id") for role in ("cls", "sep", "mask", "pad", "unk")})

    def ids(self) -> list[int]:
        return [i for i in (self.cls, self.sep, self.mask, self.pad) if i is not None]


def _rows(column) -> tuple[np.ndarray, np.ndarray]:
    """(values flat, per-record lengths) of a fixed or ragged column."""
    if isinstance(column, Ragged):
        return np.asarray(column.values), np.asarray(column.lengths, dtype=np.int64)
    array = np.asarray(column)
    if array.ndim == 1:
        return array, np.ones(len(array), dtype=np.int64)
    return array.reshape(-1), np.full(array.shape[0], array.shape[1], dtype=np.int64)


@dataclass
class SideStats:
    """Running counts over the sampled records of one side (training or held out)."""

    vocab_size: int
    specials: Specials
    records: int = 0
    files: int = 0
    lengths: list[np.ndarray] = field(default_factory=list)  # per record: its real tokens (no padding)
    document_tokens: list[np.ndarray] = field(default_factory=list)  # records that are whole documents
    positions: int = 0  # token positions, padding included
    padding: int = 0
    real_tokens: int = 0  # tokens from text (no special token, no padding), as they were before masking
    unk: int = 0
    masked: int = 0
    masked_as: Counter = field(default_factory=Counter)  # mask / random / kept
    masked_per_sequence: list[np.ndarray] = field(default_factory=list)
    labels: Counter = field(default_factory=Counter)
    token_counts: np.ndarray | None = None

    def add(self, columns: dict) -> None:
        ids_column = columns.get("input_ids")
        if ids_column is None:
            return
        self.files += 1
        ids, per_record = _rows(ids_column)
        records = len(per_record)
        self.records += records
        if isinstance(ids_column, Ragged):  # a record per document (tokens objective, Megatron)
            self.document_tokens.append(per_record)
        original = ids.astype(np.int64, copy=True)
        if "masked_lm_positions" in columns and not isinstance(ids_column, Ragged):
            self._masks(columns, np.asarray(ids_column), original)
        if "input_mask" in columns and not isinstance(columns["input_mask"], Ragged):
            mask = np.asarray(columns["input_mask"]).reshape(-1).astype(bool)
            self.lengths.append(np.asarray(columns["input_mask"]).sum(axis=1).astype(np.int64))
        else:
            mask = np.ones(len(ids), dtype=bool)
            self.lengths.append(per_record)
        self.positions += len(ids)
        self.padding += int((~mask).sum())
        real = original[mask]
        special = self.specials.ids()
        if special:
            real = real[~np.isin(real, special)]
        self.real_tokens += len(real)
        if self.specials.unk is not None:
            self.unk += int((real == self.specials.unk).sum())
        counts = np.bincount(real[(real >= 0) & (real < self.vocab_size)], minlength=self.vocab_size)
        self.token_counts = counts if self.token_counts is None else self.token_counts + counts
        if "next_sentence_labels" in columns:
            labels = np.asarray(columns["next_sentence_labels"]).reshape(-1)
            self.labels.update({int(k): int(v) for k, v in zip(*np.unique(labels, return_counts=True))})

    def _masks(self, columns: dict, ids: np.ndarray, original: np.ndarray) -> None:
        """The masked positions: what each input became (the 80/10/10), and the tokens before masking."""
        positions = np.asarray(columns["masked_lm_positions"]).astype(np.int64)
        targets = np.asarray(columns["masked_lm_ids"]).astype(np.int64)
        weights = np.asarray(columns.get("masked_lm_weights", (positions > 0).astype(np.float32)))
        used = weights > 0
        rows = np.broadcast_to(np.arange(ids.shape[0])[:, None], positions.shape)[used]
        where, target = positions[used], targets[used]
        seen = ids[rows, where].astype(np.int64)
        self.masked += len(where)
        self.masked_per_sequence.append(used.sum(axis=1))
        is_mask = seen == self.specials.mask if self.specials.mask is not None else np.zeros(len(seen), bool)
        kept = (seen == target) & ~is_mask
        self.masked_as.update({"mask": int(is_mask.sum()), "kept": int(kept.sum()),
                               "random": int((~is_mask & ~kept).sum())})
        original.reshape(ids.shape)[rows, where] = target

    def numbers(self, tokenizer=None, top: int = 30) -> dict:
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        per_sequence = np.concatenate(self.masked_per_sequence) if self.masked_per_sequence else None
        documents = np.concatenate(self.document_tokens) if self.document_tokens else None
        out = {
            "records_read": self.records,
            "files_read": self.files,
            "sequence_length": _distribution(lengths),
            "padding_share": self.padding / self.positions if self.positions else None,
            "tokens_read": self.real_tokens,
            "unk": {"count": self.unk, "rate": self.unk / self.real_tokens if self.real_tokens else None},
            "top_tokens": [],
            "masking": None,
            "labels": ({str(k): v for k, v in sorted(self.labels.items())} if self.labels else None),
            "tokens_per_document": _distribution(documents) if documents is not None else None,
        }
        if self.token_counts is not None:
            order = np.argsort(-self.token_counts, kind="stable")[:top]
            out["top_tokens"] = [{"id": int(i), "token": tokenizer.id_to_token(int(i)) if tokenizer else None,
                                  "count": int(self.token_counts[i]),
                                  "share": float(self.token_counts[i] / self.real_tokens)}
                                 for i in order if self.token_counts[i] > 0]
        if self.masked or per_sequence is not None:
            total = max(self.masked, 1)
            out["masking"] = {
                "masked": self.masked,
                "masked_share": self.masked / self.real_tokens if self.real_tokens else None,
                "as_mask": self.masked_as["mask"] / total, "as_random": self.masked_as["random"] / total,
                "as_kept": self.masked_as["kept"] / total,
                "per_sequence": _distribution(per_sequence if per_sequence is not None else np.zeros(0)),
            }
        return out


def _distribution(values: np.ndarray) -> dict:
    """Summary and histogram of integer values (an empty one when there are none)."""
    values = np.asarray(values, dtype=np.int64)
    if not len(values):
        return {"count": 0, "histogram": {"edges": [], "counts": []}}
    top = int(values.max())
    edges = np.unique(np.linspace(0, top + 1, min(LENGTH_BINS, top + 1) + 1).round().astype(np.int64))
    counts, edges = np.histogram(values, bins=edges)
    return {"count": int(len(values)), "mean": float(values.mean()), "min": int(values.min()),
            "median": float(np.median(values)), "max": top,
            "histogram": {"edges": edges.tolist(), "counts": counts.tolist()}}


TRAIN_SIDE = "train"  # the training side's name in the report (its files' split is "")


def side_name(split: str) -> str:
    """A side's name in the report: ``train``, or the split of a step's side."""
    return split or TRAIN_SIDE


def known_sides() -> list[str]:
    """The report's sides before any line is read: the training side and every known step's (``Step.sides``)."""
    from common.steps import sides

    return [TRAIN_SIDE] + [side.split for side in sides()]


def side_splits(names) -> list[str]:
    """The splits of the sides but the training one."""
    return [name for name in names if name != TRAIN_SIDE]


def manifest_numbers(entries: list[dict]) -> dict:
    """Documents, sequences and tokens per side (the training side, every known step's, and any other the
    lines' files name), skips by reason, every step's counters: summed from the lines."""
    def zero() -> dict:
        return {"documents": 0, "sequences": 0, "tokens": 0, "files": 0, "bytes": 0}

    sides = {name: zero() for name in known_sides()}
    for entry in entries:
        if not entry.get("stage"):
            for f in entry.get("shards") or []:
                sides.setdefault(side_name(split_of(f)), zero())
    skipped: Counter = Counter()
    counted: dict[str, Counter] = {}
    per_task_document_tokens = []
    by_tokens: dict[str, Counter] = {side: Counter() for side in sides}
    others = side_splits(sides)
    for entry in entries:
        skipped.update(entry.get("skipped") or {})
        for name, values in counters(entry).items():
            counted.setdefault(name, Counter()).update(values)
        if entry.get("stage"):
            continue
        train = sides[TRAIN_SIDE]
        train["documents"] += entry.get("documents", 0)
        train["sequences"] += entry.get("records", 0)
        train["tokens"] += entry.get("tokens", 0)
        for split in others:  # a side's counts are its step's counters under its split
            own = entry.get(split) or {}
            sides[split]["documents"] += own.get("documents", 0)
            sides[split]["sequences"] += own.get("records", 0)
            sides[split]["tokens"] += own.get("tokens", 0)
        for f in entry.get("shards") or []:
            side = sides[side_name(split_of(f))]
            side["files"] += 1
            side["bytes"] += int(f.get("bytes", 0))
        if entry.get("documents"):
            per_task_document_tokens.append(entry.get("tokens", 0) / entry["documents"])
        for name in sides:
            by_tokens[name].update(entry.get(tokens_per_document_name(TRAIN if name == TRAIN_SIDE else name)) or {})
    return {"sides": sides, "skipped": dict(sorted(skipped.items())),
            "counters": {name: dict(sorted(values.items())) for name, values in counted.items()},
            "mean_tokens_per_document_by_task": _distribution(np.round(per_task_document_tokens)),
            "tokens_per_document": {side: binned_distribution(bins) for side, bins in by_tokens.items() if bins}}


def binned_distribution(bins: dict[str, int]) -> dict:
    """A histogram of the workers' power-of-two bins ("up_to_N": more than N/2, at most N) in the shape
    :func:`_distribution` gives (edges and counts), every document counted: 1 token is the bin (0.5, 1]."""
    uppers = sorted((int(name.removeprefix("up_to_")), count) for name, count in bins.items()
                    if name.startswith("up_to_") and name[6:].isdigit() and count > 0)
    if not uppers:
        return {"count": 0, "histogram": {"edges": [], "counts": []}}
    exponents = [upper.bit_length() - 1 for upper, _ in uppers]
    span = range(exponents[0], exponents[-1] + 1)  # empty bins in between drawn as zero
    counts = dict(zip(exponents, (count for _, count in uppers)))
    return {"count": sum(counts.values()), "binned": "powers of two",
            "max_bin": uppers[-1][0],
            "histogram": {"edges": [2.0 ** (k - 1) for k in span] + [2.0 ** span[-1]],
                          "counts": [counts.get(k, 0) for k in span]}}


def throughput(entries: list[dict], max_bins: int = 30) -> dict | None:
    """Tokens per second over the run, overall and per worker; None for a manifest without times (an older
    output).

    A task's tokens are spread evenly over the time its worker spent on it (``seconds`` before the sink recorded
    it at ``at``), not counted at the moment it was recorded: counted at that moment, a run of a few tasks drew
    spikes where tasks ended and zeros between.  The run's span (first task's start to last record) is cut into
    one bin per task, at least MIN_BINS and at most ``max_bins``, so a short job is not cut finer than its tasks."""
    timed = [e for e in entries if not e.get("stage") and isinstance(e.get("at"), (int, float))
             and math.isfinite(e["at"])]
    if not timed:
        return None
    ends = np.asarray([e["at"] for e in timed], dtype=float)
    seconds = np.asarray([e.get("seconds") if isinstance(e.get("seconds"), (int, float)) else 0.0
                          for e in timed], dtype=float)
    seconds = np.clip(np.nan_to_num(seconds, nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)
    begins = ends - seconds
    start, end = float(begins.min()), float(ends.max())
    span = max(end - start, 1e-3)
    bins = int(min(max_bins, max(MIN_BINS, len(timed))))
    edges = np.linspace(0.0, span, bins + 1)
    width = span / bins
    begins, ends = begins - start, ends - start
    others = side_splits(known_sides())
    tokens = np.asarray([e.get("tokens", 0) + sum((e.get(split) or {}).get("tokens", 0) for split in others)
                         for e in timed], float)
    names = sorted({str(e.get("worker", "?")) for e in timed})
    position = {name: i for i, name in enumerate(names)}
    worker_index = np.asarray([position[str(e.get("worker", "?"))] for e in timed], dtype=np.int64)
    # done[k]: tokens done by edges[k] (a task's share of its own interval; a task of 0 s is done at its end)
    lengths = np.maximum(ends - begins, 1e-12)
    done_overall = np.empty(bins + 1)
    done_by_worker = np.empty((len(names), bins + 1))
    for k, edge in enumerate(edges):
        share = np.where(ends - begins > 0, np.clip((edge - begins) / lengths, 0.0, 1.0), (edge >= ends) * 1.0)
        if k == bins:
            share = np.ones(len(timed))  # the last edge is the last record: every task is done
        done = tokens * share
        done_overall[k] = done.sum()
        done_by_worker[:, k] = np.bincount(worker_index, weights=done, minlength=len(names))
    overall = np.diff(done_overall) / width
    workers: dict[str, dict] = {name: {"tasks": 0, "tokens": 0, "bytes_in": 0, "seconds": 0.0,
                                       "rate": (np.diff(done_by_worker[i]) / width).tolist()}
                                for i, name in enumerate(names)}
    for entry, i, n, s in zip(timed, worker_index.tolist(), tokens.tolist(), seconds.tolist()):
        worker = workers[names[i]]
        worker["tasks"] += 1
        worker["tokens"] += int(n)
        worker["bytes_in"] += int(entry.get("bytes_in", 0))
        worker["seconds"] += s
    for worker in workers.values():
        worker["tokens_per_second_working"] = worker["tokens"] / worker["seconds"] if worker["seconds"] else None
    return {"seconds": span, "bin_seconds": width, "tokens_per_second": overall.tolist(),
            "mean_tokens_per_second": float(tokens.sum() / span), "workers": workers}
