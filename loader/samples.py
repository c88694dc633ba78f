"""Samples of variable length, for token-budget batches (``--batch-tokens``).

A sample is one record's tokens: ``input_ids`` as the format reads it
(``Ragged``: the tokens objective, one record per document or chunk), or a
fixed-length row cut to its ``input_mask`` (unmasked fixed-length outputs).
``special_tokens_mask`` and ``word_starts``, when the records carry them,
come along token by token (they say what masking may not touch and where
words begin).  Records with stored masks are refused: their masks would be
served again, not drawn per epoch.

:class:`SampleCache` holds decoded shards as flat token arrays plus offsets,
least recently used out once over its byte budget, like the fixed-length
cache (loader/shards.py); :meth:`SampleCache.lengths` reads every shard once
at start, for the packing (4 bytes per sample kept).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from common.objectives.base import Ragged
from loader.shards import DatasetError, ShardList, format_for, read_shard_bytes

if TYPE_CHECKING:
    from common.storage import Storage

log = logging.getLogger("loader")

#: Per-token features a sample may carry besides its ids (bool as int8).
TOKEN_FLAGS = ("special_tokens_mask", "word_starts")
STATIC_MASKS = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights", "labels")


@dataclass
class ShardSamples:
    """One shard's samples end to end: sample i is ``ids[offsets[i]:offsets[i + 1]]``."""

    ids: np.ndarray  # int32
    offsets: np.ndarray  # int64, (samples + 1)
    flags: dict[str, np.ndarray]  # TOKEN_FLAGS present, int8 per token

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.offsets.nbytes + sum(f.nbytes for f in self.flags.values())

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def _flat(column: np.ndarray | Ragged, lengths: np.ndarray | None, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, lengths) of a ragged column, or of a fixed-length one cut to ``lengths`` (its input mask)."""
    if isinstance(column, Ragged):
        return np.asarray(column.values), np.asarray(column.lengths, dtype=np.int64)
    column = np.asarray(column)
    if column.ndim != 2:
        raise ValueError(f"feature {name!r} is not a sequence of tokens")
    if lengths is None:
        lengths = np.full(len(column), column.shape[1], dtype=np.int64)
    keep = np.arange(column.shape[1])[None, :] < lengths[:, None]
    return column[keep], lengths


def samples_of(columns: dict) -> ShardSamples:
    """A shard's columns (a format's read_columns) as samples; ValueError (one line) if they are not."""
    names = set(columns)
    if "input_ids" not in names:
        raise ValueError(f"token-budget batches need records with input_ids; these have {', '.join(sorted(names))}")
    stored = sorted(names & set(STATIC_MASKS))
    if stored:
        raise ValueError(f"token-budget batches need unmasked samples (--objective tokens, or roberta --masking "
                         f"none); these records carry stored masks ({', '.join(stored)})")
    mask_lengths = None
    if "input_mask" in columns and not isinstance(columns["input_ids"], Ragged):
        mask_lengths = np.asarray(columns["input_mask"]).sum(axis=1).astype(np.int64)
    ids, lengths = _flat(columns["input_ids"], mask_lengths, "input_ids")
    flags = {}
    for name in TOKEN_FLAGS:
        if name in columns:
            values, flag_lengths = _flat(columns[name], mask_lengths, name)
            if not np.array_equal(flag_lengths, lengths):
                raise ValueError(f"feature {name!r} is not aligned with input_ids")
            flags[name] = values.astype(np.int8, copy=False)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return ShardSamples(ids.astype(np.int32, copy=False), offsets, flags)


class SampleCache:
    """Decoded shards as :class:`ShardSamples`, least recently used out once over ``max_bytes``."""

    def __init__(self, storage: Storage, shards: ShardList, max_bytes: int):
        self.storage = storage
        self.shards = shards
        self.max_bytes = max_bytes
        self._cache: OrderedDict[int, ShardSamples] = OrderedDict()
        self.bytes = 0
        self.loads = 0
        self.flags: tuple[str, ...] | None = None  # the first shard's; every shard must have the same

    def get(self, shard: int) -> ShardSamples:
        samples = self._cache.get(shard)
        if samples is not None:
            self._cache.move_to_end(shard)
            return samples
        samples = self._load(shard)
        while self._cache and self.bytes + samples.nbytes > self.max_bytes:
            _, evicted = self._cache.popitem(last=False)
            self.bytes -= evicted.nbytes
        self._cache[shard] = samples
        self.bytes += samples.nbytes
        return samples

    def lengths(self) -> np.ndarray:
        """Every sample's length (int32, global record order): each shard read once."""
        out = np.empty(self.shards.records, dtype=np.int32)
        for shard in range(len(self.shards.names)):
            start, stop = int(self.shards.offsets[shard]), int(self.shards.offsets[shard + 1])
            out[start:stop] = self.get(shard).lengths
        return out

    def _load(self, shard: int) -> ShardSamples:
        name = self.shards.names[shard]
        where = self.storage.uri(name)
        data, companion = read_shard_bytes(self.storage, self.shards, shard)
        try:
            columns = format_for(name).read_columns(name, data, companion)
            if columns is None:
                raise ValueError("holds no records of its own (its format reads it with another file)")
            samples = samples_of(columns)
        except DatasetError:  # a companion file's own (it names that file)
            raise
        except ValueError as error:
            raise DatasetError(f"{where}: {error}") from None
        expected = int(self.shards.counts[shard])
        if len(samples.offsets) - 1 != expected:
            raise DatasetError(f"{where}: {format_for(name).miscount(name, data, len(samples.offsets) - 1, expected)}")
        flags = tuple(sorted(samples.flags))
        if self.flags is None:
            self.flags = flags
        elif flags != self.flags:
            raise DatasetError(f"{where}: its features differ from the other shards' ({flags} vs {self.flags})")
        self.loads += 1
        return samples

    def __len__(self) -> int:
        return len(self._cache)
