"""A ventilator's RunConfig from keywords, for tests that plan a job without a command line (ventilator/job.py
takes the RunConfig the command line gives).  The keywords are the options' field names; ``steps``: the
parameters of steps with their own flags, by step name (``{"holdout": {"fraction": 0.2}}``)."""

from __future__ import annotations

from common.job.params import ParamValue
from ventilator.run_config import DeliverySettings, InputSettings, JobSettings, RunConfig, SinkGroup, TokenizerSettings

_INPUT = {"corpus_format", "task_size", "shared_fs", "s3_endpoint_url"}
_JOB = {"objective", "output_format", "segmenter", "word_segmenter", "params", "steps"}
_TOKENIZER = {"vocab_file", "tokenizer", "do_lower_case"}
_DELIVERY = {"lease_seconds", "heartbeat_seconds"}


def run_config(data: str, output: str, *, added_steps: tuple[str, ...] = (), special_tokens: dict | None = None,
               sink_address: str = "", command: str = "", **given) -> RunConfig:
    unknown = set(given) - _INPUT - _JOB - _TOKENIZER - _DELIVERY
    if unknown:
        raise TypeError(f"run_config: no option {', '.join(sorted(unknown))}")
    steps: dict[str, dict[str, ParamValue]] = {name: dict(values) for name, values in given.pop("steps", {}).items()}
    tokens = {f"{role}_token": token for role, token in (special_tokens or {}).items()}
    return RunConfig(
        input=InputSettings(data=str(data), **{k: v for k, v in given.items() if k in _INPUT}),
        job=JobSettings(output=str(output), add_step=tuple(added_steps), steps=steps,
                        **{k: v for k, v in given.items() if k in _JOB}),
        tokenizer=TokenizerSettings(**{k: v for k, v in given.items() if k in _TOKENIZER}, **tokens),
        sink=SinkGroup(sink_address=sink_address), delivery=DeliverySettings(**{k: v for k, v in given.items()
                                                                                if k in _DELIVERY}),
        command=command)


def steps_of(segmenter: str = "blingfire", *, word_segmenter=None, holdout_fraction: float = 0.0,
             holdout_seed: int = 0, dedup=None, added_steps: tuple = ()):
    """A job's steps (common.job.config.standard_steps) from the settings tests name them by: the segmenter, a word
    segmenter (a name or a Component), a held-out fraction and seed, dedup's settings, added steps."""
    import dataclasses

    from common.job.config import standard_steps
    from common.job.params import Component
    from common.steps.words import Words

    given: dict[str, dict] = {"segment": {"segmenter": segmenter},
                              "holdout": {"fraction": holdout_fraction, "seed": holdout_seed}}
    if word_segmenter is not None:
        component = word_segmenter if isinstance(word_segmenter, Component) else Component(word_segmenter)
        given["words"] = Words.component_of(component).params
    if dedup is not None:
        given["dedup"] = dataclasses.asdict(dedup)
    return standard_steps(given, added=tuple(added_steps))
