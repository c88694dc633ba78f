"""A step a user adds with ``--add-step demo-drop-digits``: right after reading, documents with more than
``--demo-max-digits`` digits are dropped, and counted under the step's name."""

from __future__ import annotations

from dataclasses import dataclass

from mlm_pipeline.plugin import Step, param


@dataclass(frozen=True)
class DropDigitsParams:
    demo_max_digits: int = param(1000, "Documents with more digits than this are dropped.")


class DropDigits(Step):
    name = "demo-drop-digits"
    Params = DropDigitsParams
    after = "read"
    makes = "documents"

    def run(self, run):
        for part in run.parts:
            kept = [d for d in part.documents if sum(ch.isdigit() for line in d.lines for ch in line)
                    <= self.params.demo_max_digits]
            run.stats.count(self.name, "dropped", len(part.documents) - len(kept))
            part.documents = kept
