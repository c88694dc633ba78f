"""The step axis: what a worker does to a task, one module per step (see :mod:`.base` for the list and
the interface), found by name like the readers, objectives and writers."""

from __future__ import annotations

from common.params import Registry
from common.steps.base import FLOW, JobContext, JobPlan, Part, StageResult, Step, TaskRun, TaskStats

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


__all__ = ["FLOW", "JobContext", "JobPlan", "Part", "StageResult", "Step", "TaskRun", "TaskStats", "job_steps",
           "plan_stages", "required_tasks", "step_named", "steps"]
