"""The dedup step (--dedup; docs/dedup.md), on unless ``--dedup off``: three stages before the normal pass find
the copies (common/steps/dedup/stages.py: signature, bucket, resolve), and in the normal pass this step drops
the documents the resolve stage listed, right after reading (the lists name documents by their rank in the
reader's order, so this comes before any split).  Counters under "dedup": removed_<method>[_bytes] here,
and each stage's own counters and bytes written."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable

from common.job.tasks import Task, decode_quarantined
from common.readers import ParseReport
from common.steps.base import Documents, InfoSection, JobPlan, ReportSection, StageResult, Step, TaskRun
from common.steps.dedup import stages as dedup_stages
from common.steps.dedup.keys import KeyMaker
from common.steps.dedup.settings import BUCKET, RESOLVE, SIGNATURE, STAGES, DedupSettings

#: MinHash's behaviour version (common/steps/dedup/normalise.py): 2 cuts Han and kana text into characters.
MINHASH_VERSION = 2


class Dedup(Step[Documents, Documents]):
    name = "dedup"
    makes = "documents"
    Params = DedupSettings
    stages = STAGES
    after = "read"  # the removal lists name documents by their rank in the reader's order

    @classmethod
    def enabled(cls, params: DedupSettings) -> bool:
        return params.enabled

    @classmethod
    def resolve(cls, params: DedupSettings, input_bytes: int) -> DedupSettings:
        return params.resolved(input_bytes)

    def __init__(self, params: DedupSettings, job):
        super().__init__(params, job)
        self._keys: KeyMaker | None = None
        self._plan: list[Task] | None = None

    def apply(self, parts: list[Documents], run: TaskRun) -> list[Documents]:
        if run.task is None:
            raise ValueError("the dedup step needs the task its documents come from (its removals are by task)")
        with run.stats.timed("dedup"):
            removals = dedup_stages.read_removals(self.job.output, run.task, self.params.partitions)
            if not removals:
                return parts
            for code, size in removals.values():
                method = dedup_stages.METHODS[code]
                run.stats.count(self.name, f"removed_{method}")
                run.stats.count(self.name, f"removed_{method}_bytes", size)
            return [Documents(part.split, part.key, part.stem,
                              [d for ordinal, d in enumerate(part.documents) if ordinal not in removals])
                    for part in parts]

    def plan_of_tasks(self):
        """The normal tasks in corpus order (bucket and resolve tasks need it), read once per job."""
        if self._plan is None:
            self._plan = dedup_stages.read_plan(self.job.output, self.job.config.job_id)
        return self._plan

    def run_stage(self, task, payload: bytes, stats) -> StageResult:
        output = self.job.output
        if task.stage == SIGNATURE:
            report = ParseReport()
            with stats.timed("parse"):
                documents = list(self.job.reader.documents(task, payload, report))
            with stats.timed("signature"):
                keys = self._keys = self._keys or KeyMaker(self.params)
                result = dedup_stages.write_signatures(output, self.params, keys, task, documents)
        elif task.stage == BUCKET:
            with stats.timed("bucket"):
                result = dedup_stages.find_pairs(output, task, self.plan_of_tasks(), decode_quarantined(payload))
        elif task.stage == RESOLVE:
            with stats.timed("resolve"):
                result = dedup_stages.resolve(output, self.plan_of_tasks(), self.params.partitions,
                                              decode_quarantined(payload))
        else:
            return super().run_stage(task, payload, stats)
        # Their bytes are the stage's own: the job's bytes_written stays the training shards'.
        return StageResult(result.files, {**result.counters,
                                          f"{task.stage}_bytes_written": sum(f.bytes for f in result.files)})

    @classmethod
    def plan(cls, params: DedupSettings, plan: JobPlan) -> tuple[list, list]:
        # The plan names every normal task in corpus order (how bucket and resolve tasks find the signature
        # files and rank documents); the same job always writes the same bytes.
        plan.output.put_bytes(dedup_stages.PLAN_NAME, dedup_stages.encode_plan(plan.config.job_id, plan.normal))
        if plan.log is not None:
            plan.log.info("dedup %s: %d signature, %d bucket and 1 resolve task(s) before the normal pass%s",
                          params.mode, len(plan.normal), params.partitions,
                          f" (MinHash {params.perm} permutations, {params.bands} bands x {params.rows} rows, "
                          f"{params.ngram}-word shingles)" if params.uses_minhash else "")
        everything = dedup_stages.stage_tasks(plan.normal, params)
        return everything[:len(everything) - len(plan.normal)], []

    @classmethod
    def required_tasks(cls, params) -> dict[str, str]:
        return {dedup_stages.resolve_task().task_id:
                "dedup could not resolve the duplicate clusters (its resolve task was quarantined), so the normal "
                "pass did not start; run the same command to retry"}

    @classmethod
    def identity(cls, params) -> dict:
        return {"dedup": dataclasses.asdict(params)}

    @classmethod
    def versions(cls, params, config) -> dict[str, int]:
        """MinHash's words: 2 since Han and kana characters are words of their own (common/steps/dedup/normalise.py);
        exact dedup never changed."""
        return {**super().versions(params, config), **({"dedup:minhash": MINHASH_VERSION}
                                                        if params.uses_minhash else {})}

    # --- How it describes itself (common/steps/base.py ``Describes``): its sections, its files -------------

    info_section = InfoSection(switch="mode", off="off")  # --dedup off
    report_section = ReportSection("Dedup", "The job ran without --dedup.", histogram="sizes",
                                   x_label="documents in a cluster", y_label="clusters")
    directories = ("dedup",)  # the stages' files (docs/dedup.md)
    #: Of dedup/clusters.jsonl, at most this many bytes are read for the report (a sample beyond it).
    CLUSTERS_LIMIT = 16 << 20

    @classmethod
    def report(cls, counters: dict[str, int], read: Callable[[str, int], bytes | None]) -> dict:
        """Its counters, and the documents per cluster (clusters.jsonl: the kept one and its removed copies;
        ``sizes`` as a list of values, drawn as the section's histogram)."""
        section: dict = {"counters": counters}
        clusters = read(dedup_stages.CLUSTERS_NAME, cls.CLUSTERS_LIMIT)
        if clusters is not None:
            lines = []
            for raw in clusters.splitlines():
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    break  # the last line, cut by the limit
            methods: Counter = Counter(m.get("method") for line in lines for m in line.get("members") or []
                                       if m.get("method"))
            section.update({"clusters": len(lines), "sizes": [len(line.get("members") or []) for line in lines],
                            "removed_by_method": dict(methods)})
            section["clusters_sampled"] = len(clusters) >= cls.CLUSTERS_LIMIT
        return section
