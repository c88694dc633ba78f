"""The step axis: what a worker does to a task, one module per step (see :mod:`.base` for the list and
the interface), found by name like the readers, objectives and writers."""

from __future__ import annotations

from common.job.params import Registry
from common.output.files import FILE_FIELDS, TRAIN
from common.steps.base import (
    FLOW,
    Documents,
    InfoSection,
    JobContext,
    JobPlan,
    Lane,
    Part,
    Records,
    ReportSection,
    Segmented,
    Side,
    StageResult,
    Step,
    TaskRun,
    TaskStats,
    Tokenized,
    Worded,
    Written,
)

_REGISTRY: Registry[Step] = Registry(__name__, Step, "step")
steps = _REGISTRY.variants
step_named = _REGISTRY.named


def job_steps(config) -> list[tuple[type[Step], object]]:
    """The job's steps in order, each as (its class, its checked parameters)."""
    made = []
    for component in config.steps:
        step_class = step_named(component.name)
        made.append((step_class, step_class.make_params(component.params)))
    return made


def plan_stages(config, output, normal: list, special, log=None) -> tuple[list, list]:
    """The tasks the job's steps add: (before the normal pass, after it), each step's in the job's order."""
    before, after = [], []
    plan = JobPlan(config, output, normal, special, log)
    for step_class, params in job_steps(config):
        early, late = step_class.plan(params, plan)
        before += early
        after += late
    return before, after


def required_tasks(config) -> dict[str, str]:
    """Task ids (of the steps' stages) whose quarantine stops the job, with why."""
    required: dict[str, str] = {}
    for step_class, params in job_steps(config):
        required.update(step_class.required_tasks(params))
    return required


# --- What the describers ask (dataset_info.json, the card, mlm-report, the loader, the writers, the manifest) --

def sides() -> tuple[Side, ...]:
    """Every side a known step (this package's and plugins') writes besides the training side, by step name."""
    found = _REGISTRY.variants()
    return tuple(side for name in sorted(found) for side in found[name].sides)


def side_named(split: str) -> Side | None:
    """The side whose files are marked ``split`` (None: the training side, or no known step's)."""
    return next((side for side in sides() if side.split == split), None)


def legacy_split(listed: dict) -> str:
    """The split of a file as a manifest line written before splits had names lists it (each step knows its
    own old mark: :meth:`Step.legacy_split`); "" (training) when no step claims it."""
    found = _REGISTRY.variants()
    for name in sorted(found):
        split = found[name].legacy_split(listed)
        if split:
            return split
    return ""


def split_of(listed: dict) -> str:
    """The split of a file as a manifest line lists it: its ``split``; for a line written before splits had
    names, the one whose old mark it carries (:func:`legacy_split`, e.g. the held-out side's files said
    ``"holdout": true``); else the training side."""
    split = listed.get("split")
    if split:
        return str(split)
    if listed.keys() <= FILE_FIELDS:  # the common case: a training file, no step asked
        return TRAIN
    return legacy_split(listed) or TRAIN


def described_steps() -> list[type[Step]]:
    """The known steps with a section of dataset_info.json (``Step.info_section``), by name."""
    found = _REGISTRY.variants()
    return [found[name] for name in sorted(found) if found[name].info_section is not None]


def reported_steps() -> list[type[Step]]:
    """The known steps with a section of mlm-report's page (``Step.report_section``), by name."""
    found = _REGISTRY.variants()
    return [found[name] for name in sorted(found) if found[name].report_section is not None]


def step_directories() -> tuple[str, ...]:
    """The directories of the steps' own files beside the output's (not data: their stages')."""
    found = _REGISTRY.variants()
    return tuple(directory for name in sorted(found) for directory in found[name].directories)


__all__ = ["FLOW", "InfoSection", "ReportSection", "Side", "described_steps", "legacy_split", "reported_steps",
           "side_named", "sides", "split_of", "step_directories",
           "Documents", "JobContext", "JobPlan", "Lane", "Part", "Records", "Segmented", "StageResult", "Step",
           "TaskRun", "TaskStats", "Tokenized", "Worded", "Written", "job_steps",
           "plan_stages", "required_tasks", "step_named", "steps"]
