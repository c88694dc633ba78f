"""Several outputs served as one mixture (``--data A --data B``): opening them, checking they fit together,
and reading their shards through one cache.  The plan itself (which record comes next) is loader/mixture.py.

The sources' shards are numbered one after the other (source 0's, then 1's...), so a batch's record ids are
global: source i's records are ``[first_record[i], first_record[i + 1])``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from common.describe import dataset_info
from common.storage import Storage
from loader import messages
from loader.layout import RecordLayout
from loader.mixture import (
    MixedOrder,
    MixError,
    MixPlan,
    PhaseSpec,
    SourceTokens,
    parse_schedule,
    parse_weights,
    phase_tokens,
    split_data_weight,
)
from loader.samples import SampleCache, ShardSamples
from loader.shards import Columns, DatasetError, ShardCache, ShardList, open_dataset

log = logging.getLogger("loader")


@dataclass
class Source:
    """One ``--data`` of a mixture."""

    name: str  # as given
    storage: Storage
    shards: ShardList
    info: dict | None  # its dataset_info.json


def mixture_phases(data: tuple[str, ...], weights: str | None, temperature: float | None, schedule: str | None
                   ) -> tuple[tuple[str, ...], tuple[PhaseSpec, ...] | None]:
    """The --data outputs (``OUT=WEIGHT`` cut off) and, with several, the mixture's phases (None: one output).
    MixError (one line) for a mixture asked twice or weights that do not fit."""
    pairs = [split_data_weight(value) for value in data]
    names = tuple(name for name, _ in pairs)
    inline = [weight for _, weight in pairs]
    given = [flag for flag, value in (("OUT=WEIGHT", any(w is not None for w in inline)), ("--weights", weights),
                                      ("--temperature", temperature is not None), ("--mix-schedule", schedule))
             if value]
    if len(given) > 1:
        raise MixError(f"{' and '.join(given)}: give a mixture's weights one way")
    if len(names) == 1:
        if given:
            raise MixError(f"{given[0]} is for several --data (a mixture)")
        return names, None
    if any(w is not None for w in inline) and any(w is None for w in inline):
        raise MixError("OUT=WEIGHT: give every --data a weight, or none")
    if schedule is not None:
        with open(schedule, encoding="utf-8") as file:
            return names, parse_schedule(file.read(), names)
    if weights is not None:
        return names, (PhaseSpec(weights=parse_weights(weights, len(names))),)
    given_weights = [w for w in inline if w is not None]
    if given_weights:
        if sum(given_weights) <= 0:
            raise MixError("OUT=WEIGHT: the weights weigh no source")
        return names, (PhaseSpec(weights=tuple(given_weights)),)
    return names, (PhaseSpec(temperature=1.0 if temperature is None else temperature),)


def _tokenizer(source: Source) -> tuple[str, str]:
    """(its tokenizer's sha256, how a user knows it) from dataset_info.json."""
    tokenizer = (source.info or {}).get("tokenizer") or {}
    digest = str(tokenizer.get("sha256") or "")
    return digest, f"{tokenizer.get('model', '?')}, {tokenizer.get('vocab_size', '?')} ids, sha256 {digest[:12]}"


def check_compatible(sources: Sequence[Source], fixed_length: bool) -> None:
    """One tokenizer for all (their ids mean the same), and with fixed-size batches one sequence length.
    DatasetError in one line naming both sources otherwise."""
    first = sources[0]
    for other in sources[1:]:
        (ours, ours_text), (theirs, theirs_text) = _tokenizer(first), _tokenizer(other)
        if not ours or not theirs:
            missing = first if not ours else other
            raise DatasetError(f"--data {missing.name} does not record its tokenizer (no dataset_info.json): a "
                               "mixture needs every source's, to check they share one")
        if ours != theirs:
            raise DatasetError(f"--data {other.name} was made with another tokenizer ({theirs_text}) than --data "
                               f"{first.name} ({ours_text}): a mixture's sources share one tokenizer")
        if fixed_length:
            a, b = (first.info or {}).get("sequence_length"), (other.info or {}).get("sequence_length")
            if a != b:
                raise DatasetError(f"--data {other.name} has sequence length {b}, --data {first.name} {a}: "
                                   "fixed-size batches mix records of one length (--batch-tokens mixes any)")


def open_sources(names: Sequence[str], endpoint_url: str | None, split: str, allow_partial: bool,
                 fixed_length: bool) -> list[Source]:
    """Each output's storage and shards (one side of it), checked as :func:`open_dataset` checks one, and
    against each other."""
    if len(set(names)) != len(names):
        raise DatasetError(f"--data {next(n for n in names if names.count(n) > 1)} is given twice: weigh it instead")
    sources: list[Source] = []
    for name in names:
        storage, shards = open_dataset(name, endpoint_url, split=split, allow_partial=allow_partial)
        try:
            info = dataset_info.read(storage)
        except ValueError as error:
            raise DatasetError(f"--data {name}: {error}") from None
        same = next((s for s in sources if s.shards.fingerprint == shards.fingerprint), None)
        if same is not None:  # another spelling of one output (a trailing slash, ./), or a copy of it
            raise DatasetError(f"--data {name} is the same output as --data {same.name} (dataset "
                               f"{shards.fingerprint}): weigh it instead")
        sources.append(Source(name, storage, shards, info))
    check_compatible(sources, fixed_length)
    return sources


def combined_shards(sources: Sequence[Source]) -> ShardList:
    """All sources' shards as one list, numbered source after source (named by source fingerprint)."""
    names = tuple(f"{s.shards.fingerprint}:{name}" for s in sources for name in s.shards.names)
    counts = np.concatenate([s.shards.counts for s in sources]).astype(np.int64)
    return ShardList(names, counts, np.concatenate(([0], np.cumsum(counts))).astype(np.int64))


class MixedCache:
    """The sources' caches (loader.shards.ShardCache or loader.samples.SampleCache) behind one shard numbering,
    the byte budget shared evenly.  Every source must have the first's record layout (fixed-size batches); with
    token-budget batches, per-token flags only some sources carry are dropped (masking then takes the special
    ids and word starts from the tokenizer)."""

    def __init__(self, sources: Sequence[Source], shards: ShardList, max_bytes: int, samples: bool):
        self.sources = list(sources)
        self.shards = shards
        kind = SampleCache if samples else ShardCache
        share = max(1, max_bytes // len(sources))
        self.caches: list[ShardCache | SampleCache] = [kind(s.storage, s.shards, share) for s in sources]
        self.storage = sources[0].storage
        self.first_shard = np.cumsum([0] + [len(s.shards.names) for s in sources]).astype(np.int64)
        self._lengths: np.ndarray | None = None
        self._flags: tuple[str, ...] | None = None
        self._layout: RecordLayout | None = None
        #: Each combined shard's (source, shard within it): a batch asks for several.
        self._where = [(i, local) for i, s in enumerate(sources) for local in range(len(s.shards.names))]

    def _local(self, shard: int) -> tuple[int, int]:
        return self._where[shard]

    def get(self, shard: int) -> np.ndarray | ShardSamples:
        source, local = self._where[shard]
        got = self.caches[source].get(local)
        if self._flags is not None and isinstance(got, ShardSamples) and tuple(sorted(got.flags)) != self._flags:
            got = dataclasses.replace(got, flags={k: v for k, v in got.flags.items() if k in self._flags})
        return got

    def columns(self, shard: int) -> Columns:
        source, local = self._local(shard)
        cache = self.caches[source]
        assert isinstance(cache, ShardCache), "fixed-size batches read columns"
        return cache.columns(local)

    def layout_of(self) -> RecordLayout:
        """The first source's record layout; DatasetError if another's differs."""
        if self._layout is not None:
            return self._layout
        caches = [cache for cache in self.caches if isinstance(cache, ShardCache)]
        assert len(caches) == len(self.caches), "fixed-size batches read record layouts"
        first = caches[0].layout_of()
        for source, cache in zip(self.sources[1:], caches[1:]):
            layout = cache.layout_of()
            if layout != first:
                describe = lambda lay: ", ".join(f"{f.name} {f.dtype} x{f.width}" for f in lay.fields)  # noqa: E731
                raise DatasetError(f"--data {source.name}'s records ({describe(layout)}) differ from --data "
                                   f"{self.sources[0].name}'s ({describe(first)}): fixed-size batches mix one "
                                   "record layout")
        self._layout = first
        return first

    def lengths(self) -> np.ndarray:
        """Every sample's length, source after source (read once, kept: the plan and the packing share it)."""
        if self._lengths is None:
            caches = [cache for cache in self.caches if isinstance(cache, SampleCache)]
            assert len(caches) == len(self.caches), "token-budget batches read lengths"
            self._lengths = np.concatenate([cache.lengths() for cache in caches])
            flags = [tuple(sorted(cache.flags or ())) for cache in caches]
            common = tuple(sorted(set.intersection(*map(set, flags))))
            dropped = sorted(set().union(*map(set, flags)) - set(common))
            if dropped:
                log.info("loader: %s: carried by some sources only, not used (masking takes the tokenizer's)",
                         ", ".join(dropped))
            self._flags = common
        return self._lengths

    @property
    def flags(self) -> tuple[str, ...] | None:
        return self._flags

    @property
    def bytes(self) -> int:
        return sum(cache.bytes for cache in self.caches)

    @property
    def loads(self) -> int:
        return sum(cache.loads for cache in self.caches)

    def __len__(self) -> int:
        return sum(len(cache) for cache in self.caches)


class Mixture:
    """A mixture being served: its sources, cache, plan (made once the records' tokens are known) and the
    tokens served from each source so far (the realized shares)."""

    def __init__(self, sources: Sequence[Source], specs: Sequence[PhaseSpec], seed: int, window: int):
        self.sources = list(sources)
        self.specs = tuple(specs)
        self.seed, self.window = seed, window
        self.shards = combined_shards(sources)
        self.first_record = np.concatenate(([0], np.cumsum([s.shards.records for s in sources]))).astype(np.int64)
        self.cache: MixedCache | None = None
        self._plan: MixPlan | None = None
        self.width = 1  # fixed-size records: tokens a record counts for (its sequence length)
        self.served = np.zeros(len(sources), dtype=np.int64)  # tokens sent per source, all ranks

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    @property
    def settings(self) -> str:
        """What a resumed state must have been taken with: the sources and the phases as written.  A schedule's
        stream changed when each phase began to carry the part of a record it did not complete into the next
        (loader/mixture.py, MixPlan): a state taken with the stream before is refused, not resumed elsewhere."""
        text = repr([(s.shards.fingerprint, spec) for s in self.sources for spec in self.specs])
        if len(self.specs) > 1:
            text += " quota carried across phases"
        return "mixture " + hashlib.sha256(text.encode()).hexdigest()[:16]

    def make_cache(self, max_bytes: int, samples: bool) -> MixedCache:
        self.cache = MixedCache(self.sources, self.shards, max_bytes, samples)
        return self.cache

    def plan(self) -> MixPlan:
        if self._plan is None:
            assert self.cache is not None, "the cache comes first"
            caches = self.cache.caches
            if isinstance(caches[0], SampleCache):
                lengths = self.cache.lengths()
                tokens = [SourceTokens(s.shards.counts, int(first), lengths[a:b]) for s, first, a, b in
                          zip(self.sources, self.cache.first_shard, self.first_record, self.first_record[1:])]
            else:
                layout = self.cache.layout_of()
                self.width = next((f.width for f in layout.fields if f.name == "input_ids"), 1)
                tokens = [SourceTokens(s.shards.counts, int(first), None, self.width)
                          for s, first in zip(self.sources, self.cache.first_shard)]
            try:
                self._plan = MixPlan(tokens, self.specs, self.seed, self.window)
            except MixError as error:
                raise DatasetError(str(error)) from None
            log.info("loader: %s; an epoch is %d tokens", self._plan.describe(self.names), self._plan.epoch_tokens)
        return self._plan

    def order(self, epoch: int) -> MixedOrder:
        return self.plan().epoch(epoch)

    def count(self, record_ids: np.ndarray, lengths: np.ndarray | None) -> None:
        """A batch sent: its tokens counted to their sources."""
        source = np.searchsorted(self.first_record, record_ids, side="right") - 1
        weights = None if lengths is None else lengths.astype(np.int64)
        counts = np.bincount(source, weights=weights, minlength=len(self.sources))
        self.served += (counts if lengths is not None else counts * self.width).astype(np.int64)

    def shares(self) -> list[tuple[str, float, float, int]]:
        """(source, target share now, realized share, tokens sent) per source."""
        plan = self.plan()
        clock = int(self.served.sum())
        target = plan.weights[plan.phase_at(clock)]
        total = max(1, clock)
        return [(name, float(t), float(n) / total, int(n))
                for name, t, n in zip(self.names, target.tolist(), self.served.tolist())]

    def status(self) -> list[messages.SourceShare]:
        """The status's shares: per source now (target, realized, tokens sent), and per phase the stream has been
        through up to the tokens sent (target and the planned stream's realized share: loader.mixture.phase_tokens)."""
        phases = phase_tokens(self.plan(), int(self.served.sum()))
        return [messages.SourceShare(name, target, realized, tokens,
                                     [messages.PhaseShare(p.phase, p.start, p.target[i], p.realized[i], p.tokens[i])
                                      for p in phases])
                for i, (name, target, realized, tokens) in enumerate(self.shares())]
