"""Batches from the epoch order: gather the records, re-mask them if asked."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from loader.layout import RecordLayout
from loader.masking import MASK_FIELDS, MaskingParams, remask, served_layout
from loader.order import EpochOrder, Partition
from loader.sample_masking import SampleMasking
from loader.shards import ShardCache

if TYPE_CHECKING:
    from loader.mixture import MixedOrder


@dataclass(frozen=True)
class TokenBudget:
    """What shapes token-budget batches (beside ServingParams' seed and shuffle window): loader/token_batches.py
    makes them."""

    budget: int  # tokens per batch, at most
    layout: str = "flat"  # loader/token_layout.py
    pack_window: int = 4096  # samples packed together
    masking: SampleMasking | None = None
    pad_id: int = 0  # what padded rows are filled with (the tokenizer's pad id when known)


@dataclass(frozen=True)
class ServingParams:
    """What decides every batch's content: a client's state is only valid with the same ones."""

    batch_size: int
    seed: int
    window: int
    masking: MaskingParams | None = None
    #: --batch-tokens: token-budget batches of whole samples (loader/token_batches.py) instead of batch_size rows.
    tokens: TokenBudget | None = None
    #: Several --data mixed (loader/sources.py Mixture.settings): their fingerprints and phases.
    mixture: str = ""

    @property
    def order(self) -> str:
        """The settings besides seed, batch size and budget that decide which record goes where: a resumed
        state is only valid with the same (another window is another order: records twice, others never)."""
        return f"shuffle window {self.window}" + (f", pack window {self.tokens.pack_window}" if self.tokens else "") \
            + (f", {self.mixture}" if self.mixture else "")

    @property
    def dynamic_masking(self) -> bool:
        return self.masking is not None or (self.tokens is not None and self.tokens.masking is not None)


@dataclass
class Built:
    matrix: np.ndarray  # (rows, row_bytes) uint8: the records (loader.layout), re-masked if asked
    record_ids: np.ndarray  # int64: each row's global record index (manifest order)
    last_in_epoch: bool
    #: Token-budget batches: each sample's length (int32; the matrix is then one row per token), and the token
    #: slots a trainer computes on for this batch (padding waste: 1 - tokens / slots).
    lengths: np.ndarray | None = None
    slots: int = 0


#: An epoch's order: ``records`` and ``locate(positions) -> (shards, indices)`` (EpochOrder, or a mixture's).
OrderOf = Callable[[int], "EpochOrder | MixedOrder"]


class BatchMaker:
    def __init__(self, cache: ShardCache, params: ServingParams, orders: OrderOf | None = None):
        self.cache = cache
        self.shards = cache.shards
        self.params = params
        self._orders: OrderedDict[int, EpochOrder | MixedOrder] = OrderedDict()
        self._order_of = orders or (lambda epoch: EpochOrder(self.shards.counts, params.seed, epoch, params.window))
        self._layout: RecordLayout | None = None

    def layout(self) -> RecordLayout:
        """The records as batches carry them (the stored ones, plus the mask
        features when an unmasked output is masked here).  ValueError: dynamic
        masking of records that cannot take it."""
        if self._layout is None:
            stored = self.cache.layout_of()
            self._layout = stored if self.params.masking is None else served_layout(stored, self.params.masking)
        return self._layout

    def prepare(self) -> None:
        """Nothing to read ahead for fixed-size batches (the first shard is read by layout())."""

    def partition(self, world_size: int, epoch: int = 0) -> Partition:
        return Partition(self._order(epoch).records, world_size, self.params.batch_size)

    def _order(self, epoch: int) -> EpochOrder | MixedOrder:
        order = self._orders.get(epoch)
        if order is None:
            order = self._orders[epoch] = self._order_of(epoch)
            while len(self._orders) > 2:  # ranks straddle at most an epoch boundary
                self._orders.popitem(last=False)
        else:
            self._orders.move_to_end(epoch)
        return order

    def build(self, rank: int, world_size: int, epoch: int, batch: int) -> Built:
        partition = self.partition(world_size, epoch)
        start, stop = partition.span(rank, batch)
        shard, index = self._order(epoch).locate(np.arange(start, stop, dtype=np.int64))
        matrix = self._gather(shard, index)
        record_ids = self.shards.offsets[shard] + index
        if self.params.masking is not None:
            layout = self.layout()
            if layout.row_bytes != matrix.shape[1]:  # an unmasked output: room for the masks after the record
                served = np.zeros((len(matrix), layout.row_bytes), dtype=np.uint8)
                served[:, :matrix.shape[1]] = matrix
                matrix = served
            views = layout.views(matrix)
            masked = remask(views, record_ids, self.params.seed, epoch, self.params.masking)
            for name in ("input_ids", *MASK_FIELDS):
                views[name][...] = masked[name]
        return Built(matrix, record_ids, batch == partition.batches(rank) - 1)

    def _gather(self, shard: np.ndarray, index: np.ndarray) -> np.ndarray:
        """The rows, one gather per shard they come from."""
        by_shard = np.argsort(shard, kind="stable")
        boundaries = np.flatnonzero(np.diff(shard[by_shard])) + 1
        out = np.empty((len(shard), self.cache.layout_of().row_bytes), dtype=np.uint8)
        for group in np.split(by_shard, boundaries):
            out[group] = self.cache.get(int(shard[group[0]]))[index[group]]
        return out
