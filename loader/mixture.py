"""Data mixtures: several outputs served as one stream, in shares of tokens (pure logic: no I/O).

The plan is weighted fair queueing on tokens.  Each source is an endless
stream of its records: pass p of source i is its own epoch order
(loader/order.py, keyed by the source and p), so every pass is a new
shuffle holding each record exactly once, and passes follow one another
without a gap.  A virtual clock V counts the mixture's tokens: in a phase
that starts at V0 with weights w (summing to 1), the record that brings
source i's tokens since the phase began to X is due at V0 + X / w_i.  The
mixed stream is every source's records in order of that due time (ties:
the lower source first).

Why this: at any cut of the mixed stream every source has served its
weight's share of the tokens to within one of its records (its next record
is due later than the cut; its last one was not), so over any run of the
stream holding T tokens source i's share is off its weight by at most
``share_tolerance`` (~2 (L_i + w_i sum L) / T, L the longest records).  It
is deterministic, needs no random draw beyond the sources' own orders, and
any point of it is computed directly (no replay from the start): the
records of source i before clock V are those its cumulative tokens reach by
``w_i (V - V0)``, a binary search in its pass.

A mixture epoch is the stretch of the clock in which the first phase's
largest-weight source (the anchor; the first of equals) makes one pass at
its weight: epoch e starts at ceil(e x its tokens / its weight), so the
anchor makes exactly one pass per epoch while the first phase lasts.  A
smaller source makes several passes in an epoch, a larger one part of a
pass, carried on in the next epoch.  Phases start at a clock value (tokens
served); a source with weight 0 in a phase is not served in it (it joins at
the first phase that weighs it).
"""

from __future__ import annotations

import functools
import json
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from common.objectives.base import derive_seed
from loader.order import EpochOrder

#: XLM-R's language sampling exponent.
XLMR_ALPHA = 0.3
_EPSILON = 1e-6  # float slack when the clock is turned into whole tokens


class MixError(ValueError):
    """A mixture that cannot be served (reason in the message, one line)."""


# --------------------------------------------------------------------------
# What the user asks: weights or a temperature, per phase
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class PhaseSpec:
    """A phase as written: from ``at_tokens`` on, ``weights`` (one per source, 0: not served) or
    ``temperature`` alpha over the token counts of ``members`` (None: every source)."""

    at_tokens: int = 0
    weights: tuple[float, ...] | None = None
    temperature: float | None = None
    members: tuple[int, ...] | None = None

    def resolve(self, tokens: Sequence[int]) -> tuple[float, ...]:
        """The phase's weights, normalized, given each source's tokens (a pass of it)."""
        if self.weights is not None:
            raw = [float(w) for w in self.weights]
        else:
            alpha = self.temperature if self.temperature is not None else 1.0
            members = set(range(len(tokens)) if self.members is None else self.members)
            raw = [float(n) ** alpha if i in members else 0.0 for i, n in enumerate(tokens)]
        total = sum(raw)
        if not math.isfinite(total) or total <= 0:
            raise MixError(f"the phase at {self.at_tokens} tokens weighs no source")
        return tuple(w / total for w in raw)


def temperature_weights(tokens: Sequence[int], alpha: float) -> tuple[float, ...]:
    """p_i proportional to n_i ** alpha (XLM-R: alpha 0.3; 1: as the sizes are, 0: uniform)."""
    return PhaseSpec(temperature=alpha).resolve(tokens)


def _weight(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise MixError(f"{where}: a weight is a finite number >= 0, not {str(value)[:40]!r}")
    return float(value)


def _alpha(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
            not 0 <= value <= 10:
        raise MixError(f"{where}: a temperature is a number in [0, 10], not {str(value)[:40]!r}")
    return float(value)


def parse_weights(text: str, sources: int) -> tuple[float, ...]:
    """``--weights 0.7,0.3``: one non-negative number per ``--data``, in order."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != sources:
        raise MixError(f"--weights {text}: {len(parts)} weight(s) for {sources} --data source(s)")
    values = []
    for part in parts:
        try:
            values.append(float(part))
        except ValueError:
            raise MixError(f"--weights {text}: {part!r} is not a number") from None
    weights = tuple(_weight(value, f"--weights {text}") for value in values)
    if sum(weights) <= 0:
        raise MixError(f"--weights {text}: weighs no source")
    return weights


def split_data_weight(value: str) -> tuple[str, float | None]:
    """``OUT=0.7`` -> (OUT, 0.7); ``OUT`` -> (OUT, None).  Only a number after the last ``=`` is a weight."""
    head, sep, tail = value.rpartition("=")
    if sep and head:
        try:
            weight = float(tail)
        except ValueError:
            return value, None
        return head, _weight(weight, f"--data {value}")
    return value, None


def source_index(name: object, names: Sequence[str], where: str) -> int:
    """A source as a schedule names it: its --data as given, the last part of its path, or its number."""
    if isinstance(name, int) and not isinstance(name, bool) and 0 <= name < len(names):
        return name
    if isinstance(name, str):
        if name in names:
            return list(names).index(name)
        found = [i for i, full in enumerate(names) if name == full.rstrip("/").rsplit("/", 1)[-1]]
        if len(found) > 1:
            raise MixError(f"{where}: {name[:60]!r} ends several --data paths: name it in full")
        if found:
            return found[0]
    raise MixError(f"{where}: {str(name)[:60]!r} is none of the --data sources ({', '.join(names)})")


def parse_schedule(text: str, names: Sequence[str], where: str = "--mix-schedule") -> tuple[PhaseSpec, ...]:
    """A schedule file: ``{"phases": [{"at_tokens": 0, "weights": {"web": 0.7, "code": 0.3}},
    {"at_tokens": 5e9, "temperature": 0.3, "sources": ["web", "code", "wiki"]}]}``.  The first phase starts at 0;
    phases in increasing order; each has weights (by source, the others 0) or a temperature (over ``sources``, by
    default all).  With a top-level ``step_tokens`` (a global step's tokens), a phase may start ``at_step``
    instead: at step x step_tokens on the clock."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise MixError(f"{where}: not JSON ({error})") from None
    phases = document.get("phases") if isinstance(document, dict) else None
    if not isinstance(phases, list) or not phases or len(phases) > 1000:
        raise MixError(f'{where}: needs {{"phases": [...]}} with 1 to 1000 phases')
    unknown = set(document) - {"phases", "step_tokens"}
    if unknown:
        raise MixError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))[:80]}")
    step_tokens = document.get("step_tokens")
    if step_tokens is not None and (isinstance(step_tokens, bool) or not isinstance(step_tokens, int) or
                                    not 0 < step_tokens <= 2 ** 40):
        raise MixError(f"{where}: step_tokens is the tokens of one global step (world size x batch x sequence "
                       f"length), a whole number > 0, not {str(step_tokens)[:40]!r}")
    out: list[PhaseSpec] = []
    for number, phase in enumerate(phases):
        here = f"{where}: phase {number}"
        if not isinstance(phase, dict):
            raise MixError(f"{here}: not an object")
        unknown = set(phase) - {"at_tokens", "at_step", "weights", "temperature", "sources"}
        if unknown:
            raise MixError(f"{here}: unknown key(s) {', '.join(sorted(map(str, unknown)))[:80]}")
        if "at_step" in phase:
            step = phase["at_step"]
            if "at_tokens" in phase or step_tokens is None:
                raise MixError(f"{here}: at_step needs the schedule's step_tokens (and no at_tokens)")
            if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= 2 ** 40:
                raise MixError(f"{here}: at_step is a whole number of steps >= 0, not {str(step)[:40]!r}")
            phase = {**phase, "at_tokens": step * step_tokens}
        at = phase.get("at_tokens", 0)
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at < 0 or \
                at > 2 ** 62 or at != int(at):
            raise MixError(f"{here}: at_tokens is a whole number of tokens >= 0, not {str(at)[:40]!r}")
        at = int(at)
        if number == 0 and at != 0:
            raise MixError(f"{here}: the first phase starts at 0 tokens")
        if out and at <= out[-1].at_tokens:
            raise MixError(f"{here}: at_tokens {at} is not after the previous phase's {out[-1].at_tokens}")
        if ("weights" in phase) == ("temperature" in phase):
            raise MixError(f"{here}: give either weights or a temperature")
        if "weights" in phase:
            given = phase["weights"]
            if not isinstance(given, dict) or "sources" in phase:
                raise MixError(f"{here}: weights are {{source: weight}} (and need no sources)")
            weights = [0.0] * len(names)
            for name, value in given.items():
                weights[source_index(name, names, here)] = _weight(value, here)
            spec = PhaseSpec(at, weights=tuple(weights))
        else:
            members = phase.get("sources")
            if members is not None and (not isinstance(members, list) or not members):
                raise MixError(f"{here}: sources is a list of --data sources")
            spec = PhaseSpec(at, temperature=_alpha(phase["temperature"], here),
                             members=None if members is None else
                             tuple(sorted({source_index(m, names, here) for m in members})))
        out.append(spec)
    return tuple(out)


# --------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class SourceTokens:
    """One source as the plan sees it: its shards' record counts and every record's tokens."""

    counts: np.ndarray  # int64, records per shard (manifest order)
    first_shard: int  # its shards' place among all sources' (the server's combined shard list)
    lengths: np.ndarray | None = None  # tokens of each record (local index); None: every record has ``width``
    width: int = 1

    @functools.cached_property
    def records(self) -> int:
        return int(np.sum(self.counts))

    @functools.cached_property
    def tokens(self) -> int:
        """Tokens in one pass."""
        return int(self.lengths.sum(dtype=np.int64)) if self.lengths is not None else self.records * self.width


def share_tolerance(longest: Sequence[int], weights: Sequence[float], tokens: int) -> list[float]:
    """How far source i's share of any run of the mixed stream holding ``tokens`` tokens (within one phase) may
    be off its weight: its served tokens are within 2 L_i of w_i x the clock's advance, the run's within
    2 sum L of it (L: each source's longest record)."""
    total = sum(longest)
    return [(2 * most + 2 * w * total) / max(1, tokens - 2 * total) for most, w in zip(longest, weights)]


class MixedOrder:
    """One mixture epoch: position -> (source, its record).  ``records`` long, like loader.order.EpochOrder.
    Every position is located once, when the epoch is made (a batch is then two gathers)."""

    def __init__(self, plan: MixPlan, epoch: int, source: np.ndarray, position: np.ndarray):
        self.plan, self.epoch = plan, epoch
        self.source = source  # int16, which source each position serves
        self.position = position  # int64, the place in that source's endless stream (pass x records + place)
        self.records = len(source)
        self._shard = np.empty(self.records, dtype=np.int32)
        self._index = np.empty(self.records, dtype=np.int64)
        for s in np.unique(source).tolist():
            here = np.flatnonzero(source == s)
            spec = plan.sources[s]
            passes, within = np.divmod(position[here], spec.records)
            for p in np.unique(passes).tolist():
                mine = passes == p
                local_shard, local_index = plan.pass_order(s, p).locate(within[mine])
                self._shard[here[mine]] = local_shard + spec.first_shard
                self._index[here[mine]] = local_index

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The shard (in the combined shard list) and the record within it at each position."""
        return self._shard[positions].astype(np.int64), self._index[positions]

    def passes(self, positions: np.ndarray) -> np.ndarray:
        """The pass of its source each position belongs to."""
        positions = np.asarray(positions, dtype=np.int64)
        sizes = np.asarray([s.records for s in self.plan.sources], dtype=np.int64)
        return self.position[positions] // sizes[self.source[positions]]


class MixPlan:
    """The mixed stream of ``sources`` under ``phases`` (resolved from specs with the sources' token counts)."""

    def __init__(self, sources: Sequence[SourceTokens], specs: Sequence[PhaseSpec], seed: int, window: int,
                 cached_passes: int = 4):
        if not sources or len(sources) > 1000:
            raise MixError("a mixture has 1 to 1000 sources")
        if not specs or specs[0].at_tokens != 0:
            raise MixError("a mixture's first phase starts at 0 tokens")
        self.sources = tuple(sources)
        for i, source in enumerate(self.sources):
            if source.records == 0:
                raise MixError(f"source {i} has no records")
            if source.lengths is not None and (len(source.lengths) != source.records or source.lengths.min() < 1):
                raise MixError(f"source {i}: every record needs at least one token")
        self.seed, self.window = seed, window
        totals = [s.tokens for s in self.sources]
        self.phase_starts = np.asarray([spec.at_tokens for spec in specs], dtype=np.int64)
        self.weights = np.asarray([spec.resolve(totals) for spec in specs], dtype=np.float64)  # (phases, sources)
        first = self.weights[0]
        #: The first phase's largest-weight source (the first of equals): it makes one pass an epoch.
        self.anchor = int(np.argmax(first))
        self._anchor_rate = totals[self.anchor] / float(first[self.anchor])  # clock tokens per pass of it
        self._passes: OrderedDict[tuple[int, int], EpochOrder] = OrderedDict()
        self._cums: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._cached = max(2, cached_passes)
        # Each phase's start: the tokens every source's stream was due by then (its quota: weight times the
        # clock's tokens in each phase before, summed), and how many of its records that holds.  The part of a
        # record a phase's quota does not complete is carried into the next phase, not dropped: a source whose
        # share of a phase is less than a record (many short phases, a small weight) is served all the same.
        span = np.diff(self.phase_starts).astype(np.float64)
        self.quota = np.vstack([np.zeros(len(self.sources)), np.cumsum(self.weights[:-1] * span[:, None], axis=0)])
        self.starts = np.asarray([self._places(self.quota[phase]) for phase in range(len(specs))],
                                 dtype=np.int64)  # (phases, sources)

    # A source's stream -----------------------------------------------------
    def pass_order(self, source: int, number: int) -> EpochOrder:
        """Pass ``number`` of a source: its own shuffle, keyed by (seed, source, pass)."""
        key = (source, number)
        order = self._passes.get(key)
        if order is None:
            seed = derive_seed(self.seed, "loader-mix-source", source, "order")
            order = self._passes[key] = EpochOrder(self.sources[source].counts, seed, number, self.window)
            while len(self._passes) > self._cached * len(self.sources):
                self._passes.popitem(last=False)
        else:
            self._passes.move_to_end(key)
        return order

    def _cum(self, source: int, number: int) -> np.ndarray:
        """Tokens before each place of a pass (records + 1), for a source of varying lengths."""
        key = (source, number)
        cum = self._cums.get(key)
        if cum is None:
            spec = self.sources[source]
            assert spec.lengths is not None, "only sources of varying lengths keep sums"
            shard, index = self.pass_order(source, number).locate(np.arange(spec.records, dtype=np.int64))
            offsets = np.concatenate(([0], np.cumsum(spec.counts))).astype(np.int64)
            lengths = spec.lengths[offsets[shard] + index]
            cum = self._cums[key] = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
            while len(self._cums) > self._cached * len(self.sources):
                self._cums.popitem(last=False)
        else:
            self._cums.move_to_end(key)
        return cum

    def tokens_before(self, source: int, places: np.ndarray) -> np.ndarray:
        """Tokens of a source's stream before each place (int64)."""
        spec = self.sources[source]
        places = np.asarray(places, dtype=np.int64)
        if spec.lengths is None:
            return places * spec.width
        passes, within = np.divmod(places, spec.records)
        out = passes * spec.tokens
        for p in np.unique(passes).tolist():
            mine = passes == p
            out[mine] += self._cum(source, p)[within[mine]]
        return out

    def place_at(self, source: int, tokens: int) -> int:
        """How many records of a source's stream fit in its first ``tokens`` tokens."""
        spec = self.sources[source]
        if spec.lengths is None:
            return tokens // spec.width
        number, rest = divmod(tokens, spec.tokens)
        return number * spec.records + int(np.searchsorted(self._cum(source, number), rest, side="right")) - 1

    def _places(self, due: np.ndarray) -> np.ndarray:
        """How many records of each source fit in the tokens ``due`` of its stream (floats: a few ulps off,
        which the slack covers, records having at least one token)."""
        return np.asarray([self.place_at(i, int(math.floor(tokens + _EPSILON + tokens * 1e-13)))
                           for i, tokens in enumerate(due.tolist())], dtype=np.int64)

    def phase_at(self, clock: int) -> int:
        return int(np.searchsorted(self.phase_starts, clock, side="right")) - 1

    def positions_at(self, clock: int) -> np.ndarray:
        """How many records of each source the mixed stream holds before the clock reaches ``clock``."""
        phase = self.phase_at(clock)
        return self._places(self.quota[phase] + self.weights[phase] * (clock - int(self.phase_starts[phase])))

    # Epochs -----------------------------------------------------------------
    @property
    def epoch_tokens(self) -> int:
        """An epoch's length on the clock (tokens), to within one."""
        return max(1, math.ceil(self._anchor_rate))

    def epoch_clock(self, epoch: int) -> int:
        """Where epoch ``epoch`` starts on the clock: the first value at which the anchor has made ``epoch``
        passes at the first phase's weight (computed afresh for each epoch, so no rounding piles up)."""
        return math.ceil(epoch * self._anchor_rate)

    def epoch(self, epoch: int) -> MixedOrder:
        """The epoch's records in due order: each source's from its place at the epoch's start to its place at
        the end, merged by due time."""
        begin, end = self.positions_at(self.epoch_clock(epoch)), self.positions_at(self.epoch_clock(epoch + 1))
        sources, places, due = [], [], []
        for i in range(len(self.sources)):
            if end[i] <= begin[i]:
                continue
            here = np.arange(begin[i], end[i], dtype=np.int64)
            ends = self.tokens_before(i, here + 1)
            # due in the last phase whose start's quota falls short of the record's end (one that weighs the
            # source 0 adds no quota, so it is never that phase)
            slack = _EPSILON + ends * 1e-13  # as _places: a record due within the slack of a start is due there
            phase = np.maximum(np.searchsorted(self.quota[:, i], ends - slack, side="left") - 1, 0)
            late, weight = np.maximum(ends - self.quota[phase, i], 0.0), self.weights[phase, i]
            due.append(self.phase_starts[phase] + np.divide(late, weight, out=np.zeros(len(late)), where=weight > 0))
            sources.append(np.full(len(here), i, dtype=np.int16))
            places.append(here)
        if not sources:
            return MixedOrder(self, epoch, np.empty(0, dtype=np.int16), np.empty(0, dtype=np.int64))
        source, place, tags = np.concatenate(sources), np.concatenate(places), np.concatenate(due)
        order = np.lexsort((source, tags))
        return MixedOrder(self, epoch, source[order], place[order])

    def describe(self, names: Sequence[str]) -> str:
        """The plan in one line (the servers' settings a state must match)."""
        phases = "; ".join(f"from {int(at)}: " + ", ".join(f"{name} {w:.6g}" for name, w in zip(names, weights))
                           for at, weights in zip(self.phase_starts.tolist(), self.weights.tolist()))
        return f"mixture ({phases})"


# --------------------------------------------------------------------------
# What the plan serves: shares per phase and over the clock (status, report)
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class PhaseTokens:
    """One phase of the planned stream as far as ``end`` on the clock: its target shares and the tokens each
    source holds in the records of [start, end) (the realized shares)."""

    phase: int
    start: int  # the clock (tokens served) where it begins
    end: int  # where the stream stands in it (its next phase's start, or the clock asked for)
    target: tuple[float, ...]
    tokens: tuple[int, ...]

    @property
    def realized(self) -> tuple[float, ...]:
        total = sum(self.tokens)
        return tuple(n / total if total else 0.0 for n in self.tokens)


def served_tokens(plan: MixPlan, clock: int) -> np.ndarray:
    """Each source's tokens in the records the stream holds before the clock reaches ``clock`` (int64)."""
    places = plan.positions_at(clock)
    return np.asarray([int(plan.tokens_before(i, places[i:i + 1])[0]) for i in range(len(plan.sources))],
                      dtype=np.int64)


def phase_tokens(plan: MixPlan, clock: int) -> list[PhaseTokens]:
    """Every phase the stream has entered by ``clock`` (tokens served), with its target and realized shares:
    a pure function of the plan, so a report computes what a running loader serves."""
    clock = max(0, int(clock))
    out = []
    for phase, start in enumerate(plan.phase_starts.tolist()):
        if phase and start >= clock:
            break
        end = clock if phase + 1 == len(plan.phase_starts) else min(clock, int(plan.phase_starts[phase + 1]))
        end = max(end, start)
        tokens = served_tokens(plan, end) - served_tokens(plan, start) if end > start else \
            np.zeros(len(plan.sources), dtype=np.int64)
        out.append(PhaseTokens(phase, int(start), end, tuple(plan.weights[phase].tolist()),
                               tuple(int(n) for n in tokens)))
    return out


def share_curve(plan: MixPlan, clocks: Sequence[int]) -> np.ndarray:
    """Each source's share of the tokens served between consecutive ``clocks`` (rows: len(clocks) - 1), the
    shares over steps a report plots."""
    served = np.stack([served_tokens(plan, int(c)) for c in clocks]).astype(np.float64)
    step = np.diff(served, axis=0)
    total = step.sum(axis=1, keepdims=True)
    return np.divide(step, total, out=np.zeros_like(step), where=total > 0)


def longest_records(plan: MixPlan) -> list[int]:
    """Each source's longest record in tokens (what ``share_tolerance`` needs)."""
    return [int(s.lengths.max()) if s.lengths is not None else s.width for s in plan.sources]
