"""Everything checked before a run starts: input, tokenizer, output.

Problems that would otherwise surface as failed tasks hours into a run (no
input, a vocabulary without [MASK], an output holding another job) are
reported here, in one line, before any socket is opened.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from common.config import BertParams, JobConfig
from common.formats import CorpusFormat
from common.manifest import check_job, read_entries
from common.reading import decompress
from common.sentences import Segmenter
from common.storage import LocalStorage, Storage, StorageError, is_s3, open_storage
from common.tasks import InputFile, Task, compression_of, plan_tasks
from common.tokenization import TokenizerError, Vocabulary, load_tokenizer

log = logging.getLogger("ventilator")


class JobError(Exception):
    """A one-line reason the job cannot start."""


@dataclass
class JobOptions:
    data: str
    output: str
    vocab_file: str | None = None
    tokenizer: str | None = None
    do_lower_case: bool = True
    corpus_format: str = "auto"
    segmenter: str = "auto"
    bert: BertParams = field(default_factory=BertParams)
    task_size: int = 8 * 1024 * 1024
    compression: str = ""
    shared_fs: bool = False
    s3_endpoint_url: str = ""
    sink_address: str = ""
    lease_seconds: float = JobConfig.lease_seconds
    heartbeat_seconds: float = JobConfig.heartbeat_seconds


@dataclass
class Job:
    config: JobConfig
    tasks: list[Task]
    inputs: list[InputFile]
    skipped_inputs: dict[str, str]  # path -> reason
    input_storage: Storage


def _detect_format(storage, files: list[InputFile]) -> CorpusFormat:
    for f in files[:5]:
        try:
            if compression_of(f.path):
                head = decompress(storage.read_all(f.path, f.version), compression_of(f.path))[:65536]
            else:
                with storage.open_reader(f.path, f.version) as reader:
                    head = reader.read_at(0, 65536)
        except (OSError, StorageError, ValueError):
            continue
        if head.strip():
            return CorpusFormat.detect(head)
    return CorpusFormat.BERT_TEXT


def _readable(storage, files: list[InputFile]) -> tuple[list[InputFile], dict[str, str]]:
    """Local files that cannot be opened are reported and left out."""
    if not isinstance(storage, LocalStorage):
        return files, {}
    usable, skipped = [], {}
    for f in files:
        if f.size == 0:
            skipped[f.path] = "empty file"
            continue
        try:
            with storage.open_reader(f.path, f.version) as reader:
                reader.read_at(0, 1)
        except (OSError, StorageError) as error:
            skipped[f.path] = f"unreadable: {error}"
            continue
        usable.append(f)
    return usable, skipped


def prepare_job(options: JobOptions) -> Job:
    try:
        options.bert.validate()
    except ValueError as error:
        raise JobError(str(error)) from None

    try:
        vocabulary = Vocabulary.from_tokenizer(load_tokenizer(options.vocab_file, options.tokenizer, options.do_lower_case))
    except TokenizerError as error:
        raise JobError(f"tokenizer: {error}") from None

    storage = open_storage(options.data, options.s3_endpoint_url)
    try:
        listed = storage.list_inputs()
    except StorageError as error:
        raise JobError(str(error)) from None
    files, skipped = _readable(storage, listed)
    skipped.update(storage.unlisted)
    for path, reason in skipped.items():
        log.warning("skipping input %s: %s", path or options.data, reason)
    if not files:
        raise JobError(f"--data {options.data}: no input files found" + (f" ({len(skipped)} skipped)" if skipped else ""))

    if options.corpus_format == "auto":
        corpus_format = _detect_format(storage, files)
        log.info("input format: %s (detected; --format to override)", corpus_format.value)
    else:
        corpus_format = CorpusFormat(options.corpus_format)

    data_is_s3 = is_s3(options.data)
    read_mode = "range" if (data_is_s3 or options.shared_fs) else "ship"
    data_uri = options.data if data_is_s3 else storage.root
    output_uri = options.output if is_s3(options.output) else open_storage(options.output).root

    config = JobConfig(
        data_uri=data_uri,
        output_uri=output_uri,
        corpus_format=corpus_format.value,
        segmenter=Segmenter(options.segmenter).resolve(corpus_format.value).value,
        tokenizer_json=vocabulary.to_json(),
        bert=options.bert,
        compression=options.compression,
        read_mode=read_mode,
        s3_endpoint_url=options.s3_endpoint_url,
        sink_address=options.sink_address,
        lease_seconds=options.lease_seconds,
        heartbeat_seconds=options.heartbeat_seconds,
        task_size=options.task_size,
        inputs_digest=JobConfig.digest_inputs(listed),  # readable or not: a passing read error is no new corpus
    )
    output = open_storage(config.output_uri, options.s3_endpoint_url)
    try:
        check_job(read_entries(output), config.job_id, output.uri("manifest.jsonl"))
    except Exception as error:  # ManifestMismatch, or an unreachable store
        raise JobError(str(error)) from None
    tasks = list(plan_tasks(files, options.task_size))
    return Job(config, tasks, files, skipped, storage)
