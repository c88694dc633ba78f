"""``mlm-verify OUT``: check a finished output against its manifest.

Before hours of pretraining read them, every file the manifest lists is
read back: present, the sha256 the worker reported, its format's framing
intact (each writer counts its own files' records), as many records as
acknowledged; and no ``part-*`` file is there that the manifest does not
list.  No TensorFlow needed.
"""

from __future__ import annotations

import hashlib
import sys
import zlib
from dataclasses import dataclass, field

import click

from common.manifest import read_published, shard_files, stage_files
from common.storage import StorageError, open_storage
from common.writers import writer_for_file

SHARD_PREFIX = "part-"


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
            _verify_file(storage, task, shard, result)
            listed[shard["name"]] = task
        for stage_file in stage_files(entry):  # --dedup's files: present and as written (docs/dedup.md)
            data = storage.get_bytes(stage_file["name"])
            if data is None:
                result.problems.append(f"{stage_file['name']}: missing (dedup {entry.get('stage')} task {task})")
            elif hashlib.sha256(data).hexdigest() != stage_file.get("sha256"):
                result.problems.append(f"{stage_file['name']}: sha256 differs from the manifest's")
    for name in storage.list_outputs():
        if name.rsplit("/", 1)[-1].startswith(SHARD_PREFIX) and name not in listed:
            result.problems.append(f"{name}: not in the manifest")
    return result


def _verify_file(storage, task: str, shard: dict, result: Verification) -> None:
    name = shard["name"]
    data = storage.get_bytes(name)
    if data is None:
        result.problems.append(f"{name}: missing (task {task})")
        return
    result.shards += 1
    result.bytes += len(data)
    if hashlib.sha256(data).hexdigest() != shard.get("sha256"):
        result.problems.append(f"{name}: sha256 differs from the manifest's")
    try:
        records = writer_for_file(name).count_records(name, data)
    except (ValueError, OSError, EOFError, zlib.error) as error:
        result.problems.append(f"{name}: corrupt: {error}")
        return
    result.records += records
    if records != shard.get("records"):
        result.problems.append(f"{name}: {records} records, the manifest says {shard.get('records')}")


@click.command(context_settings={"auto_envvar_prefix": "MLM", "help_option_names": ["-h", "--help"]})
@click.argument("output", metavar="DIR|s3://BUCKET/PREFIX")
@click.option("--s3-endpoint-url", default="", show_envvar=True, help="An S3-compatible endpoint instead of AWS.")
def main(output: str, s3_endpoint_url: str) -> None:
    """Check every shard of OUTPUT against its manifest.jsonl.

    Exits 0 when each listed file is present with its sha256, intact
    framing and checksums, and its record count, and no part-* file is
    there that the manifest does not list; 1 with one line per problem.
    """
    try:
        result = verify_output(open_storage(output, s3_endpoint_url or None))
    except StorageError as error:
        click.echo(f"mlm-verify: error: {error}", err=True)
        sys.exit(1)
    for problem in result.problems:
        click.echo(f"mlm-verify: {problem}", err=True)
    verdict = "all match the manifest" if result.ok else f"{len(result.problems)} problem(s)"
    click.echo(f"{output}: {result.tasks} tasks, {result.shards} shards, {result.records:,} records, "
               f"{result.bytes / 1e6:,.1f} MB: {verdict}")
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
