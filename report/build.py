"""What ``mlm-report`` reads and in what order: the output's own records, then a bounded sample of its files.

The manifest, summary.json and dataset_info.json are read whole (they are
small next to the shards); the files are sampled: evenly spread over the
manifest's order (tasks, so the corpus's order), both sides, whole files,
until ``budget_bytes`` are read.  Each file is read through its format's
writer (``read_columns``: the same reading side mlm-verify uses), so every
format reports the same numbers.  Nothing goes wrong silently: a torn
manifest, a missing or unreadable shard, a file no job writes, an
unfinished job, each becomes a line of ``problems`` and the report is still
made from what is there.
"""

from __future__ import annotations

import json
import logging
import time

import numpy as np

from common.describe import dataset_info
from common.output.lock import LOCK_NAME  # a run's lock (and its takeover marker): the job's
from common.output.manifest import MANIFEST_NAME, read_published, shard_files, stage_files
from common.steps import split_of
from common.writers import writer_for_file
from report import stats
from report.unknown_text import unknown_by_script

log = logging.getLogger("report")

REPORT_DIRECTORY = "report"
SUMMARY_NAME = "summary.json"
#: Files a job writes beside the shards the manifest lists (its own records, and the formats' job files; a
#: step's own files are under its ``directories``, each side's data path list in the side's directory).
JOB_FILES = {MANIFEST_NAME, SUMMARY_NAME, dataset_info.DATASET_INFO, dataset_info.TOKENIZER_NAME, "README.md",
             "megatron_data_path.txt", "megatron/merge-plan.msgpack"}


def _job_files() -> set[str]:
    from common.steps import sides

    return JOB_FILES | {f"{side.directory}/megatron_data_path.txt" for side in sides()}


def _json(storage, name: str, problems: list[str]) -> dict | None:
    data = storage.get_bytes(name)
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        problems.append(f"{name} is not JSON")
        return None
    return value if isinstance(value, dict) else None


def _format_job_file(name: str, directories: set[str]) -> bool:
    """A file a format writes at the job's end beside the manifest's files (``Writer.job_files``: MDS's and
    LitData's index.json on each side)."""
    from common.writers import writers

    directory, _, base = name.rpartition("/")
    return directory in directories and any(base in writer.job_files for writer in writers().values())


def choose_files(files: list[dict], budget_bytes: int) -> list[dict]:
    """Files spread evenly over ``files`` (in order) until their bytes pass the budget; at least one."""
    if not files:
        return []
    total = sum(int(f.get("bytes", 0)) for f in files)
    if total <= budget_bytes:
        return list(files)
    chosen, size = [], 0
    step = max(total / max(budget_bytes, 1), 1.0)
    position = 0.0
    while position < len(files) and size < budget_bytes:
        f = files[int(position)]
        chosen.append(f)
        size += int(f.get("bytes", 0))
        position += step
    return chosen


def _record_files(entries: list[dict], output_suffix_filter) -> list[dict]:
    """The files of the normal tasks that hold records (Megatron: the .idx, read with its .bin)."""
    files = []
    for entry in entries:
        if entry.get("stage"):
            continue
        for f in shard_files(entry):
            if output_suffix_filter(f["name"]):
                files.append(f)
    return files


def build_report(storage, budget_bytes: int = 64 << 20, input_budget_bytes: int = 1 << 20,
                 input_storage_opener=None) -> dict:
    """The report's numbers (report.json) for the output in ``storage``.  ``input_storage_opener(uri,
    endpoint)`` opens the job's input (``endpoint``: the S3 endpoint the job recorded, "" for none)."""
    started = time.monotonic()
    problems: list[str] = []
    published = read_published(storage)
    if published is None:
        problems.append("no manifest.jsonl: not an mlm-pipeline output, or no task has finished yet")
        entries: list[dict] = []
        torn = 0
    else:
        entries, torn = published
    if torn:
        problems.append(f"incomplete manifest: it ends with {torn} bytes that are not a complete line")
    unique: dict[str, dict] = {}
    for entry in entries:
        if entry["task"] in unique:
            problems.append(f"task {entry['task']} is listed twice in the manifest")
        unique.setdefault(entry["task"], entry)
    entries = list(unique.values())
    summary = _json(storage, SUMMARY_NAME, problems)
    if summary is None:
        problems.append("no summary.json: the job has not finished (or its sink never ended)")
    elif not summary.get("complete"):
        quarantined = len(summary.get("quarantined") or {})
        problems.append(f"the job is incomplete: {summary.get('reason', 'no reason')}"
                        + (f"; {quarantined} task(s) quarantined" if quarantined else ""))
    try:
        info = dataset_info.read(storage)
    except ValueError as error:
        problems.append(str(error))
        info = None
    if info is None:
        problems.append("no dataset_info.json: features and tokenizer are taken from the files themselves")

    sizes = storage.output_sizes()
    listed = {f["name"] for e in entries for f in shard_files(e) + stage_files(e)}
    missing = sorted(name for name in listed if name not in sizes)
    directories = {name.rpartition("/")[0] for name in listed}
    for name in missing[:20]:
        problems.append(f"missing shard: {name} is in the manifest, not in the output")
    if len(missing) > 20:
        problems.append(f"... and {len(missing) - 20} more missing files")
    from common.steps import reported_steps, step_directories

    job_files = _job_files()
    own = tuple(f"{directory}/" for directory in (REPORT_DIRECTORY, *step_directories()))
    foreign = sorted(name for name in sizes if name not in listed and name not in job_files
                     and not name.startswith(own)
                     and not _format_job_file(name, directories) and not name.startswith(LOCK_NAME))
    for name in foreign[:20]:
        base = name.rsplit("/", 1)[-1]
        why = "a temporary file left by a writer that died" if base.startswith(".") and base.endswith(".tmp") \
            else "a file no job writes" if not base.startswith("part-") else "a shard the manifest does not list"
        problems.append(f"foreign file: {name} ({why})")
    if len(foreign) > 20:
        problems.append(f"... and {len(foreign) - 20} more foreign files")

    from tokenizers import Tokenizer

    tokenizer = None
    tokenizer_json = storage.get_bytes(dataset_info.TOKENIZER_NAME)
    if tokenizer_json is not None:
        try:
            tokenizer = Tokenizer.from_str(tokenizer_json.decode())
        except Exception as error:  # any reason the file is not a tokenizer
            problems.append(f"{dataset_info.TOKENIZER_NAME} cannot be loaded: {error}")
    specials = stats.Specials.from_info(info) if info else stats.Specials()
    vocab_size = int((info or {}).get("tokenizer", {}).get("vocab_size") or
                     (tokenizer.get_vocab_size(with_added_tokens=True) if tokenizer else 1 << 20))

    def holds_records(name: str) -> bool:
        try:
            return writer_for_file(name).name != "megatron" or name.endswith(".idx")
        except ValueError:
            return False

    record_files = _record_files(entries, holds_records)
    numbers = stats.manifest_numbers(entries)
    sides = {side: stats.SideStats(vocab_size, specials) for side in numbers["sides"]}
    read_bytes = read_files = 0
    for side in sides:
        candidates = [f for f in record_files
                      if stats.side_name(split_of(f)) == side and f["name"] not in missing]
        share = budget_bytes if side == stats.TRAIN_SIDE else max(budget_bytes // 4, 1)
        for f in choose_files(candidates, share):
            name = f["name"]
            data = storage.get_bytes(name)
            if data is None:
                problems.append(f"missing shard: {name} disappeared while being read")
                continue
            companion_bytes: list[int] = []

            def companion(other: str, sizes: list[int] = companion_bytes) -> bytes | None:
                blob = storage.get_bytes(other)
                sizes.append(len(blob or b""))
                return blob
            try:
                columns = writer_for_file(name).read_columns(name, data, companion)
            except Exception as error:  # a corrupt file is reported, the others still read
                problems.append(f"unreadable shard: {name}: {error}")
                continue
            read_bytes += len(data) + sum(companion_bytes)
            read_files += 1
            if columns is not None:
                sides[side].add(columns)

    total_bytes = sum(side["bytes"] for side in numbers["sides"].values())
    report: dict = {
        "output": storage.uri(""),
        "generated_unix": round(time.time(), 3),
        "ok": not problems,
        "problems": problems,
        "job": (info or {}).get("job") or (entries[0].get("job") if entries else None),
        "format": (info or {}).get("format"),
        "objective": (info or {}).get("objective"),
        "tokenizer": (info or {}).get("tokenizer"),
        "made_by": (info or {}).get("made_by"),
        "tasks": len(entries),
        "sides": numbers["sides"],
        "sample": {"files_read": read_files, "files_total": len(record_files), "bytes_read": read_bytes,
                   "bytes_total": total_bytes,
                   "records_read": {k: v.records for k, v in sides.items()},
                   "budget_bytes": budget_bytes},
        "records": {side: value.numbers(tokenizer) for side, value in sides.items() if value.records},
        "skipped_documents": numbers["skipped"],
        "mean_tokens_per_document_by_task": numbers["mean_tokens_per_document_by_task"],
        "tokens_per_document": numbers["tokens_per_document"],  # every document, from the workers' bins
        **{step.name: None for step in reported_steps()},
        "throughput": stats.throughput(entries),
        "cost": (summary or {}).get("cost"),
        "run": {key: (summary or {}).get(key) for key in ("reason", "complete", "this_run", "quarantined")},
    }
    for step in reported_steps():  # each step's own section (Step.report_section), when the job ran it
        counted = (summary or {}).get(step.name) or numbers["counters"].get(step.name)
        if not counted:
            continue
        section = step.report(counted, lambda name, limit: storage.get_bytes(name, limit=limit))
        key = step.report_section.histogram if step.report_section else ""
        if key and isinstance(section.get(key), list):  # its values, as a distribution
            section[key] = stats._distribution(np.asarray(section[key], dtype=np.int64))
        report[step.name] = section
    report["unknown_text"] = _unknown_text(info, tokenizer, specials, input_budget_bytes, input_storage_opener)
    report["seconds"] = round(time.monotonic() - started, 3)
    return report


def _unknown_text(info, tokenizer, specials, budget_bytes: int, opener) -> dict:
    """[UNK] by script from a sample of the input, or why not."""
    if not budget_bytes:
        return {"skipped": "not asked for (--input-sample 0)"}
    if info is None or tokenizer is None or "input" not in info:
        return {"skipped": "the output does not name its input and tokenizer (dataset_info.json, tokenizer.json)"}
    from common.readers import reader_named
    from common.storage import StorageError
    from common.tokenization import Vocabulary

    uri = info["input"]["uri"]
    try:
        reader_params = {k: v for k, v in info["reader"].items() if k != "name"}
        reader_class = reader_named(info["reader"]["name"])
        reader = reader_class(reader_class.make_params(reader_params))
        roles = {role: s["token"] for role, s in info["tokenizer"]["special_tokens"].items() if s}
        vocabulary = Vocabulary.from_tokenizer(tokenizer, roles)
        storage = opener(uri, info["input"].get("s3_endpoint_url") or "")  # the job's store, unless told another
        return unknown_by_script(storage, reader, int(info["input"].get("task_size") or 1 << 20),
                                 vocabulary.text_tokenizer, specials.unk, budget_bytes)
    except (StorageError, OSError, ValueError) as error:
        return {"skipped": f"the input {uri} could not be read: {error}"}
