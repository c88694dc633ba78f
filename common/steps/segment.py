"""Each document's segments, by the job's segmenter (common/segmenters/) (its timer: :data:`TIMER`).

The step's parameters are the segmenter's name and that segmenter's own parameters (its flags), side by side
as the words step carries its word segmenter's: a segmenter without parameters names the step as before."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from common.job.params import Component, NoParams, ParamValue, param
from common.segmenters import segmenter_named
from common.steps.base import Documents, Segmented, Step, TaskRun

#: This step's timer (``TaskStats.timed``).  Its name is the one the sink's metric label
#: (``mlm_sink_worker_stage_seconds{stage="split"}``) and the benchmark's records (bench/ratios.json) have known
#: since before the word "split" came to mean a side of the output (``ShardFile.split``): kept for them.
TIMER = "split"

#: The parameter naming the segmenter; the others are that segmenter's own.
NAME = "segmenter"


@dataclass(frozen=True)
class SegmentParams:
    segmenter: str = param("blingfire", "the segmenter (common/segmenters/), resolved from auto")
    options: object = dataclasses.field(default_factory=NoParams)  # the segmenter's own Params


class Segment(Step[Documents, Segmented]):
    name = "segment"
    makes = "segments"
    Params = SegmentParams
    after = "read"

    @classmethod
    def enabled(cls, params) -> bool:
        return True

    @classmethod
    def component(cls, params: SegmentParams) -> Component:
        """The step as the job names it: the segmenter's name with its own parameters beside it."""
        own = segmenter_named(params.segmenter).component(params.options).params
        return Component(cls.name, {NAME: params.segmenter, **own})

    @classmethod
    def make_params(cls, given: dict[str, ParamValue]) -> SegmentParams:
        """The segmenter named, with its own parameters (ValueError: an unknown one, or a flag it does not take)."""
        given = dict(given)
        name = given.pop(NAME, SegmentParams.segmenter)
        if not isinstance(name, str):
            raise ValueError(f"the segment step's {NAME} must be a name, not {name!r}")
        return SegmentParams(name, segmenter_named(name).make_params(given))

    def __init__(self, params, job):
        super().__init__(params, job)
        self.segmenter = segmenter_named(params.segmenter)(params.options)

    def apply(self, parts: list[Documents], run: TaskRun) -> list[Segmented]:
        segments = self.segmenter.segments
        with run.stats.timed(TIMER):
            return [Segmented(part.split, part.key, part.stem, part.documents,
                              [segments(document.lines) for document in part.documents]) for part in parts]

    @classmethod
    def identity(cls, params) -> dict:
        own = dataclasses.asdict(params.options)  # none for the built-in segmenters: their jobs' ids as before
        return {"segmenter": params.segmenter, **({"segmenter_params": own} if own else {})}

    @classmethod
    def versions(cls, params, config) -> dict[str, int]:
        version = segmenter_named(params.segmenter).version
        return {**super().versions(params, config), **({f"segmenter:{params.segmenter}": version}
                                                        if version > 1 else {})}
