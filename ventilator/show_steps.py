"""``python -m ventilator ... --show-steps``: the job's steps as every task would run them, each with its options
and their values, printed; then the command exits, as ``--help`` does: no socket opened, nothing written.

The list is the job's own (``JobConfig.steps``, made by ``common.job.config.standard_steps`` from the same
options a run checks first), so a plugin's step shows where it inserts itself.  A step that runs a part of the
job (``Step.runs``: its reader, tokenizer, objective or writer) lists that part's settings; any other step its
own parameters, each by the flag that sets it (a parameter no flag sets, by its name); a parameter whose
declaration says it does nothing with the rest (``When``: MinHash's under ``--dedup exact``) is left out."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from common.job.cli_settings import option_flags
from common.job.config import JobConfig
from common.job.params import Component, Configurable, ParamValue, applying
from common.objectives import objectives
from common.readers import readers
from common.steps import step_named
from common.writers import writers
from ventilator.job import JobError, job_config, validate
from ventilator.run_config import JobSettings, RunConfig, axis_specs, data_command, step_flags

#: The ventilator's option choosing each part of the job a step runs (``Step.runs``).
CHOSEN_BY = {"reader": "--format", "objective": "--objective", "writer": "--output-format"}
#: Each such part's variants, by name: whose declarations say which of its options apply.
VARIANTS: dict[str, Callable[[], Mapping[str, type[Configurable]]]] = {
    "reader": readers, "objective": objectives, "writer": writers}


@dataclass(frozen=True)
class ShownStep:
    """One step as --show-steps lists it: its name and its options, each (flag or parameter name, value)."""

    name: str
    options: tuple[tuple[str, str], ...]


def _value(value: ParamValue) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def shown_steps(config: JobConfig, tokenizer: str, flags: dict[tuple[str, str], str]) -> list[ShownStep]:
    """The job's steps in order with their options.  ``tokenizer``: the tokenizer as the log describes it;
    ``flags``: (step name or "", parameter) -> the flag that sets it ("" for the job's axes' parameters)."""
    shown = []
    for step in config.steps:
        runs = step_named(step.name).runs
        options: list[tuple[str, str]] = []
        if runs == "tokenizer":
            options.append(("tokenizer", tokenizer))
        elif runs:
            component: Component = getattr(config, runs)
            options.append((CHOSEN_BY.get(runs, runs), component.name))
            variant = VARIANTS[runs]().get(component.name)
            given = applying(variant.Params, component.params) if variant is not None else component.params
            options += [(flags.get(("", key), key), _value(value)) for key, value in given.items()]
        options += [(flags.get((step.name, key)) or flags.get(("", key), key), _value(value))
                    for key, value in applying(step_named(step.name).Params, step.params).items()]
        shown.append(ShownStep(step.name, tuple(options)))
    return shown


def text(shown: list[ShownStep]) -> str:
    """The list as printed: one numbered line per step, one indented line per option."""
    width = max((len(flag) for step in shown for flag, _ in step.options), default=0)
    lines = [f"The job's {len(shown)} steps, in the order every task runs them (nothing was started):"]
    for number, step in enumerate(shown, 1):
        lines.append(f"{number:2}. {step.name}")
        lines += [f"      {flag:<{width}}  {value}" for flag, value in step.options]
    return "\n".join(lines)


def option_names() -> dict[tuple[str, str], str]:
    """Every job parameter's flag: the steps' own (by step), the job's own settings' and its axes' (by field)."""
    flags = {("", name): next(flag for flag in decls if flag.startswith("--"))
             for name, decls in option_flags(JobSettings).items()}
    flags.update({("", spec.field_name): spec.flag for axis, specs in axis_specs() if axis.choice is None
                  for spec in specs})
    flags.update({(flag.step, flag.field): "--" + flag.name.replace("_", "-") for flag in step_flags()})
    return flags


def show_steps(run: RunConfig) -> str:
    """The job's steps as :func:`text` prints them, checked as a run checks them first (JobError, one line):
    the options, the tokenizer, the inputs listed.  Nothing is written and no socket opened."""
    checked = validate(run)
    try:
        config = job_config(dataclasses.replace(run, command=data_command(run)), checked)
    except ValueError as error:  # an added step whose place is not in this job
        raise JobError(str(error)) from None
    return text(shown_steps(config, checked.vocabulary.describe(), option_names()))
