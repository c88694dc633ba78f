"""``OUT/dataset_info.json``: what a reader needs to know before opening a file, for every format.

A TFRecord file does not say its sequence length, a Parquet file does not say
which tokenizer made its ids, a Megatron pair does not say which id is EOD.
At the end of a job the sink writes this one file beside the manifest: the
format and its parameters, every feature's name, dtype and shape as the files
hold it, the tokenizer (model, vocabulary size, special tokens' ids,
lower-casing, the sha256 of its JSON, and the JSON itself as tokenizer.json), the objective with every parameter
(sequence length and predictions per sequence named at the top), the reader,
each step's own section (``Step.info_section``: the held-out split's and dedup's
settings), each side's totals, the totals, and the command and version that made
the output.  ``mlm-verify`` checks every file against it (:func:`check_columns`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping

import numpy as np

from common.job.params import Option, changed, flag_of, option_named, own_flag
from common.objectives import objective_named
from common.objectives.base import Ragged
from common.segmenters import segmenter_named
from common.steps import described_steps, step_named
from common.tokenization.vocabulary import described_vocabulary
from common.writers import writer_named

DATASET_INFO = "dataset_info.json"
#: The tokenizer itself (tokenizers JSON) beside it: a reader turns ids back into text with it (mlm-report's
#: top tokens), and its sha256 is the card's.
TOKENIZER_NAME = "tokenizer.json"
#: Bumped when a key changes meaning (readers check it).
INFO_VERSION = 1


def tokenizer_identity(tokenizer_json: str) -> dict:
    """The tokenizer as a card or report names it: model family, size, special tokens, casing, hash."""
    from common.tokenization.loading import lowercases

    vocabulary = described_vocabulary(tokenizer_json)
    return {
        "model": type(vocabulary.tokenizer.model).__name__,
        "vocab_size": vocabulary.size,
        "special_tokens": {role: ({"id": index, "token": vocabulary.tokenizer.id_to_token(index)}
                                  if index is not None else None) for role, index in vocabulary.roles.items()},
        "lower_case": lowercases(vocabulary.tokenizer),
        "sha256": hashlib.sha256(tokenizer_json.encode()).hexdigest(),
        "file": TOKENIZER_NAME,
    }


def describe(config, totals: dict, complete: bool) -> dict:
    """The description of the output ``config`` makes (``totals``: the manifest's, as the sink keeps them)."""

    special = described_vocabulary(config.tokenizer_json).special
    objective_class = objective_named(config.objective.name)
    objective = objective_class(objective_class.make_params(config.objective.params), special)
    writer_class = writer_named(config.writer.name)
    writer_params = writer_class.make_params(config.writer.params)
    features = writer_class.stored_features(writer_params, objective.features, special)
    # Every parameter, the opt-in switches the job does not record (common/job/params.py) included.
    objective_params = dataclasses.asdict(objective.params)
    writer_fields = dataclasses.asdict(writer_params)
    segment = config.step("segment")
    info = {
        "info_version": INFO_VERSION,
        "format": config.writer.name,
        "format_params": writer_fields,
        "format_details": writer_class.format_details(writer_params, objective.features, special),
        "file_suffixes": list(writer_class.suffixes),
        "sequence_length": objective_params.get("max_seq_length") or None,  # tokens' 0: whole documents
        "max_predictions_per_seq": objective_params.get("max_predictions_per_seq"),
        "feature_names": list(features),
        "features": features,
        "tokenizer": tokenizer_identity(config.tokenizer_json),
        "objective": {"name": config.objective.name, **objective_params},
        "reader": {"name": config.reader.name, **config.reader.params},
        "writer": {"name": config.writer.name, **writer_fields},
        "segmenter": segment.params["segmenter"] if segment else None,
        # the endpoint of an S3-compatible store: mlm-report reads the input again there (not a setting of the job's
        # identity: the same corpus behind another address is the same job)
        "input": {"uri": config.data_uri, "task_size": config.task_size, "read_mode": config.read_mode,
                  "s3_endpoint_url": config.s3_endpoint_url or None},
        # every step of the job in order, with its parameters (the word segmenter's, a plugin step's)
        "steps": [{"name": step.name, **step.params} for step in config.steps],
        "job": config.job_id,
        "complete": complete,
        "records": totals.get("records", 0),
        "files": totals.get("shards", 0),
        "documents": totals.get("documents", 0),
        "tokens": totals.get("tokens", 0),
        "made_by": {"command": config.command, "version": config.version},
    }
    info.update(step_sections(config, totals))
    return info


def step_sections(config, totals: dict) -> dict:
    """The steps' own parts of the description: each described step's section under its name (``null`` when the
    job runs without it), and the totals of each side (``<split>_totals``) of those steps and the job's."""
    writer_class = writer_named(config.writer.name)
    sections: dict = {}
    described = described_steps()
    for step_class in described:
        component = config.step(step_class.name)
        section = step_class.info(component.params) if component else None
        for side in step_class.sides:  # where the format puts the side, when it names its own directory (val/)
            placed = writer_class.side_directory(side.split)
            if isinstance(section, dict) and "directory" in section and placed is not None:
                section["directory"] = placed
        sections[step_class.name] = section
    in_job = [step_named(step.name) for step in config.steps]
    for step_class in dict.fromkeys([*described, *in_job]):
        for side in step_class.sides:
            sections[f"{side.split}_totals"] = dict(totals[side.split]) if side.split in totals else None
    return sections


def write(output, config, totals: dict, complete: bool) -> None:
    info = describe(config, totals, complete)
    # The plain tokenizers JSON (what Tokenizer.from_file reads); roles named on the command line are in the info.
    output.put_bytes(TOKENIZER_NAME, described_vocabulary(config.tokenizer_json).tokenizer.to_str().encode())
    output.put_bytes(DATASET_INFO, json.dumps(info, indent=2, sort_keys=True).encode() + b"\n")


def read(storage) -> dict | None:
    """The output's description; None when there is none; ValueError when it is not one."""
    data = storage.get_bytes(DATASET_INFO)
    if data is None:
        return None
    try:
        info = json.loads(data)
    except ValueError as error:
        raise ValueError(f"{DATASET_INFO} is not JSON: {error}") from None
    if not isinstance(info, dict) or not isinstance(info.get("features"), dict):
        raise ValueError(f"{DATASET_INFO} does not describe features")
    return info


def special_token_ids(info: dict | None) -> dict[str, int]:
    """The special tokens' ids by role, as the description records the job's tokenizer (empty when it does not
    say): what a reader of the output knows of its tokenizer without being given it."""
    tokens = ((info or {}).get("tokenizer") or {}).get("special_tokens")
    if not isinstance(tokens, dict):
        return {}
    return {str(role): token["id"] for role, token in tokens.items()
            if isinstance(token, dict) and type(token.get("id")) is int and token["id"] >= 0}


def _steps_with_sections() -> set[str]:
    """Steps whose settings have a section of their own in the description (compared there)."""
    return {"segment"} | {step.name for step in described_steps()}


def _flag(flags: Mapping[str, str], path: str) -> str:
    """The option that sets the description's setting ``path`` (``input.task_size``), as its declaration says."""
    return flags.get(path) or "--" + path.rsplit(".", 1)[-1].replace("_", "-")


def _changed_steps(old: list, new: list, flags: Mapping[str, str]) -> list[str]:
    """The steps' parameters that differ (the word segmenter's, a plugin step's), and steps added or gone."""
    def by_name(steps: list) -> dict[str, dict]:
        return {s["name"]: s for s in steps if isinstance(s, dict) and isinstance(s.get("name"), str)}

    def switched(name: str) -> str:
        """What turns the step ``name`` on: its own flags for a step that says when it is on (--add-step
        refuses it), else --add-step and its name."""
        try:
            step = step_named(name)
        except (ValueError, KeyError):  # not installed here: as it was added
            step = None
        own = [own_flag(f) for f in dataclasses.fields(step.Params) if own_flag(f)] if step else []
        return ", ".join(own) if step is not None and step.has_switch() and own else f"{_flag(flags, 'steps')} {name}"

    before, after = by_name(old), by_name(new)
    changes = []
    for name in sorted((set(before) | set(after)) - _steps_with_sections()):
        if name not in before or name not in after:
            changes.append(f"{switched(name)} {'added' if name in after else 'removed'}"
                           if name not in ("words",) else
                           f"{_flag(flags, 'steps.words')} "
                           f"{(before.get(name) or {}).get('word_segmenter', 'none')} → "
                           f"{(after.get(name) or {}).get('word_segmenter', 'none')}")
            continue
        for key in sorted((set(before[name]) | set(after[name])) - {"name"}):
            if before[name].get(key) != after[name].get(key):
                option: Option | None = None
                try:
                    flag, option = flag_of(step_named(name).Params, key), option_named(step_named(name).Params, key)
                except (ValueError, AttributeError):
                    flag = "--" + key.replace("_", "-")
                changes.append(changed(flag, before[name].get(key), after[name].get(key), option))
    if [s for s in before if s in after] != [s for s in after if s in before]:
        changes.append(f"the order of {_flag(flags, 'steps')}")
    return changes + _changed_segmenter(before.get("segment") or {}, after.get("segment") or {})


def _changed_segmenter(before: dict, after: dict) -> list[str]:
    """The segmenter's own parameters that differ (its name is the "segmenter" section's): by its declared flags.
    Another segmenter: none (its parameters are its own; --segmenter's change says it)."""
    name = after.get("segmenter")
    if not isinstance(name, str) or name != before.get("segmenter"):
        return []
    changes = []
    for key in sorted((set(before) | set(after)) - {"name", "segmenter"}):
        if before.get(key) != after.get(key):
            option: Option | None = None
            try:
                params_class = segmenter_named(name).Params
                flag, option = flag_of(params_class, key), option_named(params_class, key)
            except (ValueError, KeyError, AttributeError, TypeError):  # not installed here
                flag = "--" + key.replace("_", "-")
            changes.append(changed(flag, before.get(key), after.get(key), option))
    return changes


def changed_options(old: dict, new: dict, flags: Mapping[str, str]) -> list[str]:
    """What differs between an output's description (``old``) and a new job's (``new``, :func:`describe`), as
    the options that set it with both values: ``--dupe-factor 10 → 5``.  The input files' versions are not
    in the description: an empty list with differing job ids (and both descriptions listing their steps) means
    the corpus changed.  Each flag is its option's declaration's: a step's or a variant's parameter's
    (``flag_of``), or, for the settings the run's own options set, ``flags`` by the setting's path
    (``input.task_size``: the declarations' ``describes``, ``ventilator.run_config.described_flags``)."""
    described = {step.name: step for step in described_steps()}

    def params_of(section: str) -> type | None:
        """The Params of the step or the variant that ``section`` describes; None where none is known here."""
        if section in described:
            return described[section].Params
        named = {"objective": "common.objectives:objective_named", "writer": "common.writers:writer_named",
                 "reader": "common.readers:reader_named"}.get(section)
        if named and isinstance(new.get(section), dict):
            import importlib

            module, function = named.split(":")
            try:
                return getattr(importlib.import_module(module), function)(new[section]["name"]).Params
            except (ValueError, KeyError, AttributeError):
                pass
        return None

    def flag(section: str, key: str) -> str:
        if f"{section}.{key}" in flags:
            return flags[f"{section}.{key}"]
        params_class = params_of(section)
        return flag_of(params_class, key) if params_class is not None else "--" + key.replace("_", "-")

    def change(section: str, key: str, before, after) -> str:
        """``--no-gzip → --gzip``: each value as the option's declaration types it."""
        params_class = None if f"{section}.{key}" in flags else params_of(section)
        option = option_named(params_class, key) if params_class is not None else None
        return changed(flag(section, key), before, after, option)

    def shown(value) -> str:
        return "none" if value is None else json.dumps(value) if isinstance(value, (dict, list)) else str(value)

    changes = []
    if isinstance(old.get("steps"), list) and isinstance(new.get("steps"), list):
        changes += _changed_steps(old["steps"], new["steps"], flags)
    for section in ("input", "tokenizer", "reader", "segmenter", "objective", "writer", *described):
        before, after = old.get(section), new.get(section)
        if before == after:
            continue
        if section == "tokenizer":
            before, after = (before or {}).get("sha256"), (after or {}).get("sha256")
            if before != after:
                changes.append("the tokenizer (its sha256)")
            continue
        if not isinstance(before, dict) or not isinstance(after, dict):  # a step on one side only, or a name
            switch = described[section].info_section if section in described else None
            if switch is None:
                changes.append(f"{_flag(flags, section)} {shown(before)} → {shown(after)}")
            else:
                key, off = switch.switch, switch.off
                changes.append(change(section, key, (before or {}).get(key, off), (after or {}).get(key, off)))
            continue
        if "name" in before and before.get("name") != after.get("name"):  # another variant: its own parameters
            changes.append(f"{flag(section, 'name')} {before['name']} → {after['name']}")
            continue
        for key in sorted(set(before) | set(after)):
            if key in ("read_mode", "s3_endpoint_url", "directory") or before.get(key) == after.get(key):
                continue  # how the input is read and where the held-out side goes are not the job's identity
            changes.append(change(section, key, before.get(key), after.get(key)))
    return changes


def _kind(dtype) -> str:
    return "float" if np.dtype(dtype).kind == "f" else "int"


def check_columns(info: dict, name: str, columns: dict) -> list[str]:
    """How a file's columns (a writer's ``read_columns``) differ from the description: names, and each
    feature's shape and dtype (exact where the format keeps it, int or float where its reader widens)."""
    problems = []
    expected = info["features"]
    exact = writer_named(info["format"]).exact_dtypes
    vocab_size = int((info.get("tokenizer") or {}).get("vocab_size") or 2 ** 63 - 1)
    if set(columns) != set(expected):
        return [f"{name}: features {sorted(columns)}, {DATASET_INFO} says {sorted(expected)}"]
    records = None
    for feature, spec in expected.items():
        column = columns[feature]
        shape = spec.get("shape") or []
        if isinstance(column, Ragged):
            values, count = np.asarray(column.values), len(column.lengths)
            if shape and shape[0] is not None and len(column.lengths) and (column.lengths != shape[0]).any():
                problems.append(f"{name}: {feature} varies in length, {DATASET_INFO} says {shape[0]}")
        else:
            values = np.asarray(column)
            count = len(values)
            width = values.shape[1] if values.ndim == 2 else None
            if shape == [] and values.ndim != 1:
                problems.append(f"{name}: {feature} holds {width} values a record, {DATASET_INFO} says one")
            elif shape and shape[0] is not None and width != shape[0]:
                problems.append(f"{name}: {feature} holds {width} values a record, {DATASET_INFO} says {shape[0]}")
        if values.size and _kind(values.dtype) != _kind(spec["dtype"]):
            problems.append(f"{name}: {feature} is {values.dtype}, {DATASET_INFO} says {spec['dtype']}")
        elif values.size and exact and values.dtype != np.dtype(spec["dtype"]):
            problems.append(f"{name}: {feature} is {values.dtype}, {DATASET_INFO} says {spec['dtype']}")
        if feature == "input_ids" and values.size and int(values.max()) >= vocab_size:
            problems.append(f"{name}: token id {int(values.max())} is not below the vocabulary's size {vocab_size}")
        if records is not None and count != records:
            problems.append(f"{name}: {feature} has {count} records, the other features {records}")
        records = count
    return problems
