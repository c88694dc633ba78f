"""The job configuration: everything a worker needs, shipped by the ventilator.

A worker starts with nothing but the ventilator's address; the ventilator
answers its hello with a :class:`JobConfig`, which carries the tokenizer
itself (as ``tokenizers`` JSON), so no vocabulary file has to be on the
workers' disks.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BertParams:
    """google-research/bert's create_pretraining_data.py flags, same names."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    do_whole_word_mask: bool = False
    random_seed: int = 12345

    def validate(self) -> None:
        """Raise ValueError with a one-line reason for settings BERT cannot use."""
        if self.max_seq_length < 5:
            raise ValueError("--max-seq-length must be at least 5 ([CLS] A [SEP] B [SEP] with A and B non-empty)")
        if self.max_predictions_per_seq < 1:
            raise ValueError("--max-predictions-per-seq must be at least 1")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError("--masked-lm-prob must be in (0, 1]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError("--short-seq-prob must be in [0, 1]")
        if self.dupe_factor < 1:
            raise ValueError("--dupe-factor must be at least 1")


@dataclass(frozen=True)
class JobConfig:
    """One job: input, tokenizer, BERT parameters, output and delivery settings."""

    data_uri: str
    output_uri: str
    corpus_format: str
    segmenter: str
    tokenizer_json: str
    bert: BertParams = field(default_factory=BertParams)
    compression: str = ""  # "" or "gzip"
    read_mode: str = "ship"  # "ship": the ventilator sends bytes; "range": workers read
    s3_endpoint_url: str = ""
    sink_address: str = ""  # "host:port"; an empty host means the ventilator's host
    lease_seconds: float = 60.0
    heartbeat_seconds: float = 5.0
    task_size: int = 0  # the --task-size the tasks were cut with
    inputs_digest: str = ""  # sha256 of the input listing: every file's path, size and version

    @staticmethod
    def digest_inputs(files) -> str:
        """What ``inputs_digest`` holds for these InputFiles."""
        listing = hashlib.sha256()
        for f in sorted(files, key=lambda f: f.path):
            listing.update(f"{f.path}\x00{f.size}\x00{f.version}\n".encode())
        return listing.hexdigest()

    @functools.cached_property
    def job_id(self) -> str:
        """Stable for the same input, tokenizer and parameters.

        It marks the manifest, so a restart with the same command resumes and
        a different command cannot silently mix into an old output.  The
        task size is part of it (tasks cut otherwise would cover the same
        documents under other names: a resume would write them twice), and so
        is every input file's version (an output holds one snapshot of the
        corpus: a changed file would leave shards of its old ranges beside
        the new ones).  The output location is not: the manifest lives there,
        and an output directory that was moved can still be resumed.
        """
        identity = {
            "data_uri": self.data_uri,
            "corpus_format": self.corpus_format,
            "segmenter": self.segmenter,
            "tokenizer": hashlib.sha256(self.tokenizer_json.encode()).hexdigest(),
            "bert": dataclasses.asdict(self.bert),
            "compression": self.compression,
            "task_size": self.task_size,
            "inputs": self.inputs_digest,
        }
        blob = json.dumps(identity, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
