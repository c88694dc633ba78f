"""A mixture described (``mlm-report OUT_A OUT_B --weights 0.7,0.3``): target and realized token shares per
source and phase, and the shares over the clock, computed from the loader's own plan (loader/mixture.py) of the
same outputs and flags, so the report says what ``mlm-loader`` with those flags serves, without running it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loader.mixture import MixPlan, longest_records, phase_tokens, share_curve, share_tolerance


class MixtureError(ValueError):
    """Mixture flags or outputs the loader would refuse (its one-line reason)."""


#: Points of the shares-over-the-clock plot.
CURVE_POINTS = 120


def describe_mixture(plan: MixPlan, names: Sequence[str], horizon: int | None = None,
                     points: int = CURVE_POINTS) -> dict:
    """report.json's ``mixture``: every phase up to ``horizon`` tokens (default: the last phase's start and one
    mixture epoch more) with each source's target share, realized share, tokens and stated tolerance, and the
    shares between ``points`` evenly spaced clock values."""
    if horizon is None:
        horizon = int(plan.phase_starts[-1]) + plan.epoch_tokens
    horizon = max(1, int(horizon))
    longest = longest_records(plan)
    phases = []
    for phase in phase_tokens(plan, horizon):
        served = sum(phase.tokens)
        tolerance = share_tolerance(longest, phase.target, served)
        phases.append({
            "phase": phase.phase, "from_tokens": phase.start, "to_tokens": phase.end, "tokens": served,
            "sources": {name: {"target": phase.target[i], "realized": phase.realized[i], "tokens": phase.tokens[i],
                               "tolerance": tolerance[i]} for i, name in enumerate(names)}})
    clocks = np.unique(np.linspace(0, horizon, points + 1).round().astype(np.int64))
    shares = share_curve(plan, clocks.tolist())
    return {"sources": list(names), "epoch_tokens": plan.epoch_tokens, "horizon_tokens": horizon,
            "anchor": names[plan.anchor], "phases": phases,
            "curve": {"clock": clocks[1:].tolist(), "shares": {name: shares[:, i].tolist()
                                                              for i, name in enumerate(names)},
                      "phase_starts": [p["from_tokens"] for p in phases[1:]]}}


def token_batches(sources) -> bool:
    """Whether the loader can only serve these outputs as token-budget batches (a source's records vary in
    length, as its dataset_info.json says): the plan then counts each record's own tokens."""
    for source in sources:
        shape = (((source.info or {}).get("features") or {}).get("input_ids") or {}).get("shape") or []
        if shape and shape[0] is None:
            return True
    return False


def open_mixture(outputs: Sequence[str], weights: str | None, temperature: float | None, schedule: str | None,
                 seed: int, shuffle_window: int, by_tokens: bool | None, endpoint_url: str | None
                 ) -> tuple[MixPlan, list[str]] | None:
    """The loader's plan of ``outputs`` mixed by the flags as ``mlm-loader`` takes them (loader/sources.py
    parses them), or None for one output and no mixture flag.  MixtureError (one line) where the loader
    refuses them.  ``by_tokens``: plan as for --batch-tokens (None: when a source needs it)."""
    from loader.mixture import MixError
    from loader.shards import DatasetError
    from loader.sources import Mixture, check_compatible, mixture_phases, open_sources

    try:
        names, phases = mixture_phases(tuple(outputs), weights, temperature, schedule)
        if phases is None:
            return None
        sources = open_sources(names, endpoint_url, "train", False, fixed_length=False)
        samples = token_batches(sources) if by_tokens is None else by_tokens
        if not samples:
            check_compatible(sources, fixed_length=True)  # one sequence length, or refused as the loader does
        mixture = Mixture(sources, phases, seed, shuffle_window)
        mixture.make_cache(64 << 20, samples)
        return mixture.plan(), list(names)
    except (MixError, DatasetError) as error:
        raise MixtureError(str(error).replace("--data", "OUTPUT")) from None
