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

from common.dedup.settings import DedupSettings
from common.params import Component


@dataclass(frozen=True)
class JobConfig:
    """One job: input, tokenizer, objective, output and delivery settings.

    The reader, the objective and the writer are :class:`Component` s (a
    name and its parameters), so the job, and the wire that carries it,
    are the same whatever components run."""

    data_uri: str
    output_uri: str
    reader: Component
    segmenter: str
    tokenizer_json: str
    objective: Component = field(default_factory=lambda: Component("bert"))
    writer: Component = field(default_factory=lambda: Component("tfrecord"))
    read_mode: str = "ship"  # "ship": the ventilator sends bytes; "range": workers read
    s3_endpoint_url: str = ""
    sink_address: str = ""  # "host:port"; an empty host means the ventilator's host
    lease_seconds: float = 60.0
    heartbeat_seconds: float = 5.0
    task_size: int = 0  # the --task-size the tasks were cut with
    inputs_digest: str = ""  # sha256 of the input listing: every file's path, size and version
    dedup: DedupSettings = field(default_factory=DedupSettings)  # mode "off": no dedup stage
    holdout_fraction: float = 0.0  # --holdout-fraction: documents held out to OUT/holdout/ (common/holdout.py)
    holdout_seed: int = 0  # --holdout-seed: which documents those are
    #: Provenance, for dataset_info.json and the dataset card; not part of the job's identity (a resume may be
    #: typed otherwise): the ventilator's command line and mlm-pipeline's version (common/version.py).
    command: str = ""
    version: str = ""
    #: --word-segmenter (common/word_segmenters/): words inside Han runs for whole-word masking; "none": none
    word_segmenter: Component = field(default_factory=lambda: Component("none"))

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
            "reader": dataclasses.asdict(self.reader),
            "segmenter": self.segmenter,
            "tokenizer": hashlib.sha256(self.tokenizer_json.encode()).hexdigest(),
            "objective": dataclasses.asdict(self.objective),
            "writer": dataclasses.asdict(self.writer),
            "task_size": self.task_size,
            "inputs": self.inputs_digest,
        }
        if self.dedup.enabled:  # a job without dedup keeps the id it always had
            identity["dedup"] = dataclasses.asdict(self.dedup)
        if self.holdout_fraction:  # only then: jobs without a holdout keep the ids they had
            identity["holdout"] = [self.holdout_fraction, self.holdout_seed]
        if self.word_segmenter.name != "none":  # likewise
            identity["word_segmenter"] = dataclasses.asdict(self.word_segmenter)
        blob = json.dumps(identity, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
