"""Each document's segments, by the job's segmenter (common/segmenters/) (stage time "split")."""

from __future__ import annotations

from dataclasses import dataclass

from common.params import param
from common.segmenters import segmenter_named
from common.steps.base import Step, TaskRun


@dataclass(frozen=True)
class SegmentParams:
    segmenter: str = param("blingfire", "the segmenter (common/segmenters/), resolved from auto")

    def validate(self) -> None:
        segmenter_named(self.segmenter)


class Segment(Step):
    name = "segment"
    makes = "segments"
    Params = SegmentParams
    after = "read"

    @classmethod
    def enabled(cls, params) -> bool:
        return True


    def __init__(self, params, job):
        super().__init__(params, job)
        segmenter_class = segmenter_named(params.segmenter)
        self.segmenter = segmenter_class(segmenter_class.make_params({}))

    def run(self, run: TaskRun) -> None:
        with run.stats.stage("split"):
            for part in run.parts:
                part.segments = [self.segmenter.segments(document.lines) for document in part.documents]

    @classmethod
    def identity(cls, params) -> dict:
        return {"segmenter": params.segmenter}

    @classmethod
    def versions(cls, params, config) -> dict[str, int]:
        version = segmenter_named(params.segmenter).version
        return {**super().versions(params, config), **({f"segmenter:{params.segmenter}": version}
                                                        if version > 1 else {})}
