"""Token-budget batches (``--batch-tokens N``): whole samples, at most N tokens a batch.

The epoch order is the fixed-size batches' (loader/order.py: shards
permuted, then every ``--shuffle-window`` records), cut into packing
windows of ``--pack-window`` consecutive samples.  Each window is packed on
its own (loader/packing.py: best fit decreasing for ``flat``, runs of
similar lengths for ``padded``), and its bins are put in an order drawn from
(seed, epoch, window), so batches of long and of short samples alternate.
The epoch's bins, window after window, are then dealt to ranks as records
are dealt with fixed-size batches (loader/order.py ``Partition`` with one
bin per slot): global step k is bins k x world size ... + world size - 1,
rank r takes the r-th; the bins that do not fill a last step go one each
to the first ranks.  Every sample is in exactly one bin of an epoch, so
served exactly once over all ranks; a batch is a pure function of (output,
seed, epoch, windows, budget, layout, world size, rank, batch number).

Knowing how many bins an epoch has (each rank's batch count, where batch k
lies) needs every window packed: the server reads every sample's length
once at start (4 bytes per sample kept) and packs an epoch's windows when
its first batch is asked for, keeping only bins per window (8 bytes per
window) and the few windows in use.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import numpy as np

from common.objectives.base import derive_seed
from loader.batches import Built, OrderOf, ServingParams, TokenBudget
from loader.layout import Field, RecordLayout
from loader.mixture import MixedOrder
from loader.order import EpochOrder, Partition
from loader.packing import PACKERS, Bins, slots
from loader.sample_masking import mask_samples
from loader.samples import SampleCache
from loader.shards import DatasetError

log = logging.getLogger("loader")


class _Epoch:
    """One epoch's order and its windows' bin counts."""

    def __init__(self, order: EpochOrder | MixedOrder, bins_per_window: np.ndarray):
        self.order = order
        self.first_bin = np.concatenate(([0], np.cumsum(bins_per_window))).astype(np.int64)

    @property
    def bins(self) -> int:
        return int(self.first_bin[-1])


class TokenBatchMaker:
    """Builds token-budget batches; the server's BatchMaker for ``--batch-tokens``."""

    def __init__(self, cache: SampleCache, params: ServingParams, orders: OrderOf | None = None):
        self.cache = cache
        self.shards = cache.shards
        self.params = params
        if params.tokens is None:
            raise ValueError("token-budget batches need --batch-tokens")
        self.tokens: TokenBudget = params.tokens
        self._lengths: np.ndarray | None = None
        self._epochs: OrderedDict[int, _Epoch] = OrderedDict()
        self._windows: OrderedDict[tuple[int, int], Bins] = OrderedDict()
        self._layout: RecordLayout | None = None
        self._order_of = orders or (lambda epoch: EpochOrder(self.shards.counts, params.seed, epoch, params.window))

    # What the server asks -------------------------------------------------
    def prepare(self) -> None:
        """Reads every sample's length now: an output that cannot be served fails before any rank waits.
        DatasetError (one line) for a sample over the budget, or masking the samples cannot take."""
        if self._lengths is not None:
            return
        lengths = self.cache.lengths()
        budget = self.tokens.budget
        over = np.flatnonzero(lengths > budget)
        if len(over):
            longest = int(np.argmax(lengths))
            raise DatasetError(f"--batch-tokens {budget}: {len(over)} sample(s) are longer (the longest "
                               f"{int(lengths[longest])} tokens, record {longest}): make the output with "
                               f"--max-seq-length {budget} or less, or raise --batch-tokens")
        empty = np.flatnonzero(lengths == 0)
        if len(empty):
            raise DatasetError(f"{len(empty)} sample(s) have no tokens (record {int(empty[0])})")
        masking = self.tokens.masking
        if masking is not None and masking.whole_word and masking.starts_word is None and \
                "word_starts" not in (self.cache.flags or ()):
            raise DatasetError("--whole-word-mask: the samples carry no word_starts and the tokenizer's pieces do "
                               "not say where words begin (pass the --tokenizer the output was made with)")
        self._lengths = lengths
        log.info("loader: %d samples, %d tokens, longest %d; batches of at most %d tokens, %s layout, packing "
                 "windows of %d samples", len(lengths), int(lengths.sum(dtype=np.int64)), int(lengths.max()),
                 budget, self.tokens.layout, self.tokens.pack_window)

    def _sample_lengths(self) -> np.ndarray:
        """Every sample's length, read once (prepare())."""
        if self._lengths is None:
            self.prepare()
        assert self._lengths is not None
        return self._lengths

    def layout(self) -> RecordLayout:
        """One row per token on the wire: its id, and its label when the server masks."""
        if self._layout is None:
            fields = [Field("input_ids", "int32", 1)]
            if self.tokens.masking is not None:
                fields.append(Field("labels", "int32", 1))
            self._layout = RecordLayout(tuple(fields))
        return self._layout

    def partition(self, world_size: int, epoch: int = 0) -> Partition:
        return Partition(self._epoch(epoch).bins, world_size, 1)

    def build(self, rank: int, world_size: int, epoch: int, batch: int) -> Built:
        state = self._epoch(epoch)
        partition = Partition(state.bins, world_size, 1)
        global_bin, _ = partition.span(rank, batch)
        window = int(np.searchsorted(state.first_bin, global_bin, side="right") - 1)
        bins = self._window(epoch, window, state.order)
        members = bins.bin(global_bin - int(state.first_bin[window]))
        shard, index = state.order.locate(window * self.tokens.pack_window + members)
        record_ids = self.shards.offsets[shard] + index
        lengths = self._sample_lengths()[record_ids].astype(np.int32)
        ids, flags = self._gather(shard, index)
        columns = {"input_ids": ids}
        masking = self.tokens.masking
        if masking is not None:
            special = flags["special_tokens_mask"] != 0 if "special_tokens_mask" in flags else None
            word_starts = flags["word_starts"] != 0 if "word_starts" in flags else None
            masked = mask_samples(ids, lengths, record_ids, self.params.seed, epoch, masking, special, word_starts)
            columns = {"input_ids": masked.input_ids, "labels": masked.labels}
        matrix = self.layout().pack({name: array.reshape(-1, 1) for name, array in columns.items()})
        if self.tokens.layout == "flat":
            used = self.tokens.budget
        else:
            used = len(lengths) * int(lengths.max())
        return Built(matrix, record_ids, batch == partition.batches(rank) - 1, lengths=lengths, slots=used)

    # Internals ----------------------------------------------------------------
    def _epoch(self, epoch: int) -> _Epoch:
        state = self._epochs.get(epoch)
        if state is not None:
            self._epochs.move_to_end(epoch)
            return state
        self.prepare()
        order = self._order_of(epoch)
        windows = -(-order.records // self.tokens.pack_window)
        counts = np.zeros(windows, dtype=np.int64)
        for window in range(windows):
            counts[window] = len(self._window(epoch, window, order))
        state = self._epochs[epoch] = _Epoch(order, counts)
        while len(self._epochs) > 2:  # ranks straddle at most an epoch boundary
            self._epochs.popitem(last=False)
        return state

    def _window(self, epoch: int, window: int, order: EpochOrder | MixedOrder) -> Bins:
        """The window's bins, in an order drawn from (seed, epoch, window)."""
        key = (epoch, window)
        bins = self._windows.get(key)
        if bins is not None:
            self._windows.move_to_end(key)
            return bins
        size = self.tokens.pack_window
        positions = np.arange(window * size, min((window + 1) * size, order.records), dtype=np.int64)
        shard, index = order.locate(positions)
        lengths = self._sample_lengths()[self.shards.offsets[shard] + index]
        packed = PACKERS[self.tokens.layout](lengths, self.tokens.budget)
        rng = np.random.default_rng(derive_seed(self.params.seed, f"loader-epoch-{epoch}", window, "bins"))
        permutation = rng.permutation(len(packed))
        counts = np.diff(packed.bounds)[permutation]
        pieces = [packed.bin(b) for b in permutation.tolist()]
        bins = Bins(np.concatenate(pieces) if pieces else packed.order,
                    np.concatenate(([0], np.cumsum(counts))).astype(np.int64))
        self._windows[key] = bins
        while len(self._windows) > 8:
            self._windows.popitem(last=False)
        return bins

    def _gather(self, shard: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The samples' tokens end to end (and their flags), in the bin's order."""
        ids: list[np.ndarray] = []
        flags: dict[str, list[np.ndarray]] = {}
        for s, i in zip(shard.tolist(), index.tolist()):
            samples = self.cache.get(s)
            start, stop = int(samples.offsets[i]), int(samples.offsets[i + 1])
            ids.append(samples.ids[start:stop])
            for name, values in samples.flags.items():
                flags.setdefault(name, []).append(values[start:stop])
        return np.concatenate(ids), {name: np.concatenate(parts) for name, parts in flags.items()}


def padding_waste(tokens: int, slots_used: int) -> float:
    """Share of the slots a trainer computes on that hold no token."""
    return 1.0 - tokens / slots_used if slots_used else 0.0


__all__ = ["TokenBudget", "TokenBatchMaker", "padding_waste", "slots"]
