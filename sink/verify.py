"""``mlm-verify OUT``: check a finished output against its manifest.

Before hours of pretraining read them, every file the manifest lists is
read back: present, the sha256 the worker reported, its format's framing
intact (the format that wrote it reads it: the writer axis, common/writers;
this module knows no format by name), as many records as
acknowledged, and its records as ``dataset_info.json`` describes them
(features, their shapes and dtypes, token ids below the vocabulary's size);
and no file a writer writes (``part-*``, a format's finish files such as
Megatron's merged pairs) is there that the manifest does not list; and the
job finished (``summary.json`` says ``complete``: a killed job's files may
all match while some are missing).  No TensorFlow needed.
"""

from __future__ import annotations

import hashlib
import sys
import zlib
from dataclasses import dataclass, field

import click

import common.one_blas_thread  # noqa: F401  (before numpy: see the module)
from common.describe import dataset_info
from common.job.cli_settings import (
    SectionedCommand,
    add_options,
    build,
    command_option,
    command_settings,
    naming_variables,
)
from common.job.params import PluginError
from common.job.tasks import FINISH
from common.output.files import check_finished
from common.output.manifest import read_published, shard_files, stage_files
from common.steps import split_of
from common.storage import StorageError, StorageSettings, configure, open_storage
from common.writers import is_output_file, writer_for_file, writer_named


@dataclass
class Verification:
    tasks: int = 0
    shards: int = 0
    records: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_output(storage) -> Verification:
    result = Verification()
    published = read_published(storage)
    if published is None:
        result.problems.append("no manifest.jsonl: not an mlm-pipeline output, or no task has finished yet")
        return result
    entries, torn = published
    unfinished = check_finished(storage)
    if unfinished:  # its files may all match, yet some are missing (a merged pair, the data path list)
        result.problems.append(f"the job has not finished: {unfinished}")
    info = _dataset_info(storage, entries, result)
    if torn:
        result.problems.append(f"manifest.jsonl ends with {torn} bytes that are not a complete line")
    listed: dict[str, str] = {}  # shard name -> task
    seen_tasks: set[str] = set()
    for entry in entries:
        task = entry["task"]
        if task in seen_tasks:
            result.problems.append(f"task {task} is listed twice")
            continue
        seen_tasks.add(task)
        result.tasks += 1
        for shard in shard_files(entry):
            _verify_file(storage, task, shard, result, info)
            listed[shard["name"]] = task
        for stage_file in stage_files(entry):  # a stage's own files: present and as written (docs/dedup.md)
            listed[stage_file["name"]] = task
            data = storage.get_bytes(stage_file["name"])
            if data is None:
                result.problems.append(f"{stage_file['name']}: missing ({entry.get('stage')} task {task})")
            elif hashlib.sha256(data).hexdigest() != stage_file.get("sha256"):
                result.problems.append(f"{stage_file['name']}: sha256 differs from the manifest's")
            elif entry.get("stage") == FINISH:  # the format's files after the normal pass (Megatron's merged pairs)
                _read_back(storage, stage_file, data, result, info)
    for name in storage.list_outputs():  # every file a writer writes (part-*, merged pairs), on every side
        if is_output_file(name) and name not in listed:
            result.problems.append(f"{name}: not in the manifest")
    if info is not None:  # what the format wrote for the whole output (MDS's and LitData's index.json)
        try:
            result.problems += writer_named(str(info.get("format"))).check_output(storage, entries, info)
        except ValueError as error:
            result.problems.append(f"{dataset_info.DATASET_INFO}: {error}")
    return result


def _dataset_info(storage, entries: list[dict], result: Verification) -> dict | None:
    """The output's dataset_info.json, its job and totals checked against the manifest (None: none to check
    the files against, a problem already reported)."""
    try:
        info = dataset_info.read(storage)
    except ValueError as error:
        result.problems.append(f"{dataset_info.DATASET_INFO}: {error}")
        return None
    if info is None:
        result.problems.append(f"no {dataset_info.DATASET_INFO}: the sink has not finished this output (or an "
                               "older mlm-pipeline made it)")
        return None
    jobs = {entry.get("job") for entry in entries}
    if jobs and jobs != {info.get("job")}:
        result.problems.append(f"{dataset_info.DATASET_INFO} describes job {info.get('job')}, the manifest "
                               f"{', '.join(sorted(map(str, jobs)))}")
    if info.get("complete"):
        unique = {entry["task"]: entry for entry in entries}.values()
        records = sum(entry.get("records", 0) for entry in unique)
        files = sum(1 for entry in unique for f in shard_files(entry) if not split_of(f))
        if (info.get("records"), info.get("files")) != (records, files):
            result.problems.append(f"{dataset_info.DATASET_INFO} counts {info.get('records')} records in "
                                   f"{info.get('files')} files, the manifest {records} in {files}")
        result.problems += _side_totals(info, list(unique))
    return info


def _side_totals(info: dict, entries: list[dict]) -> list[str]:
    """Each step's side (``Step.sides``) as dataset_info.json counts it (``<split>_totals``) against the
    manifest's files of that side."""
    from common.steps import sides

    problems = []
    for side in sides():
        totals = info.get(f"{side.split}_totals")
        if not isinstance(totals, dict) or "shards" not in totals:
            continue
        files = [f for entry in entries for f in shard_files(entry) if split_of(f) == side.split]
        records = sum(int(f.get("records", 0)) for f in files)
        if (totals.get("records", records), totals["shards"]) != (records, len(files)):
            problems.append(f"{dataset_info.DATASET_INFO} counts {totals.get('records')} records in "
                            f"{totals['shards']} files on the {side.label} side, the manifest {records} in "
                            f"{len(files)}")
    return problems


def _verify_file(storage, task: str, shard: dict, result: Verification, info: dict | None = None) -> None:
    name = shard["name"]
    data = storage.get_bytes(name)
    if data is None:
        result.problems.append(f"{name}: missing (task {task})")
        return
    result.shards += 1
    result.bytes += len(data)
    if hashlib.sha256(data).hexdigest() != shard.get("sha256"):
        result.problems.append(f"{name}: sha256 differs from the manifest's")
    result.records += _read_back(storage, shard, data, result, info)


def _read_back(storage, listed: dict, data: bytes, result: Verification, info: dict | None) -> int:
    """Read a listed file with the format whose file it is (this module knows none by name): its framing,
    its record count against the manifest's, its features against dataset_info.json.  Its records."""
    name = listed["name"]
    try:
        writer = writer_for_file(name)
    except ValueError as error:
        result.problems.append(f"{error} (is the package of its format installed?)")
        return 0
    try:
        records = writer.count_records(name, data)
    except (ValueError, OSError, EOFError, zlib.error) as error:
        result.problems.append(f"{name}: corrupt: {error}")
        return 0
    if records != listed.get("records"):
        result.problems.append(f"{name}: {records} records, the manifest says {listed.get('records')}")
    if info is None:
        return records
    if writer.name != info.get("format"):
        result.problems.append(f"{name}: a {writer.name} file, {dataset_info.DATASET_INFO} says {info.get('format')}")
        return records
    try:
        columns = writer.read_columns(name, data, storage.get_bytes)
    except (ValueError, OSError, EOFError, zlib.error) as error:
        result.problems.append(f"{name}: cannot be read as {dataset_info.DATASET_INFO} says: {error}")
        return records
    if columns is not None:
        result.problems += dataset_info.check_columns(info, name, columns)
    return records


@click.command(cls=SectionedCommand, context_settings=command_settings("verify", show_default=False))
@click.argument("output", metavar="DIR|s3://BUCKET/PREFIX|gs://BUCKET/PREFIX")
@command_option("--s3-endpoint-url", default="", show_envvar=True, help="An S3-compatible endpoint instead of AWS.")
@add_options(StorageSettings)
def main(output: str, s3_endpoint_url: str, **storage_values) -> None:
    """Check every shard of OUTPUT against its manifest.jsonl.

    Exits 0 when each listed file is present with its sha256, intact
    framing and checksums, its record count, and the features, shapes and
    dtypes dataset_info.json describes, no part-* file (or merged pair) is
    there that the manifest does not list, and summary.json says the job
    finished; 1 with one line per problem.
    """
    configure(build(StorageSettings, storage_values))
    try:
        result = verify_output(open_storage(output, s3_endpoint_url or None))
    except (StorageError, PluginError) as error:
        click.echo(f"mlm-verify: error: {naming_variables(str(error))}", err=True)
        sys.exit(1)
    for problem in result.problems:
        click.echo(f"mlm-verify: {problem}", err=True)
    verdict = "all match the manifest" if result.ok else f"{len(result.problems)} problem(s)"
    click.echo(f"{output}: {result.tasks} tasks, {result.shards} shards, {result.records:,} records, "
               f"{result.bytes / 1e6:,.1f} MB: {verdict}")
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
