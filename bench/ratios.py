"""The regression guard: each worker stage's cost as a ratio to a reference measured in the same run.

Times on this shared machine move by tens of percent with its load; a stage's CPU divided by the CPU
of a reference doing comparable work on the same text, measured right beside it, moves much less.
The references (bench/run.py, worker section): Bling Fire's ``text_to_sentences`` alone on the texts
the segmenter hands it, for the sentence split; the worker's tokenizer alone on the task's segments,
for every other stage; and the byte-level BPE's and Unigram's fast encoders over HF ``tokenizers``' own
``encode_batch`` on the same segments (bench/encoder_ratios.py).  The figures of a quick run are recorded in
bench/ratios.json; the guard (bench/guard.py, CI's own step) fails when one moves by more than ``TOLERANCE``
from its record, in either direction (a stage that got much cheaper deserves a new record too).

Issue #33's regression, the split at 5.4x Bling Fire, is ~4.5x its record: far outside the band.
The band itself was set from the spread measured under load (docs/benchmarks.md, "The ratio guard").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

RECORDED = Path(__file__).with_name("ratios.json")
#: Re-records bench/ratios.json after a deliberate change of a stage's cost (run from the repository).
RECORD_COMMAND = "PYTHONPATH=$PWD python -m bench.run --quick --only worker --record-ratios"
#: A ratio may be this factor above or below its record.
TOLERANCE = 2.0
#: Stages whose reference-relative cost is below this are too small to time on the quick input (a few
#: milliseconds); they are guarded only against growing past it (by TOLERANCE).
FLOOR = 0.05
#: The guarded stages and, per stage, what its cost is divided by.
REFERENCES = {"read": "tokenizer", "parse": "tokenizer", "split": "blingfire", "tokenize": "tokenizer",
              "build": "tokenizer", "write": "tokenizer"}


def key(variant: str, stage: str) -> str:
    """``variant`` is the worker run (``fast1``: nanotoken at dupe factor 1), ``stage`` a STAGES name."""
    return f"ratio_{variant}_{stage}"


@dataclass(frozen=True)
class Drift:
    key: str
    recorded: float
    measured: float

    def __str__(self) -> str:
        return (f"{self.key}: {self.measured:.3f} measured, {self.recorded:.3f} recorded "
                f"({self.measured / self.recorded:.2f}x)")


def drifts(measured: dict[str, float], recorded: dict[str, float], tolerance: float = TOLERANCE,
           floor: float = FLOOR) -> list[Drift]:
    """The measured ratios outside their band around the record.  A ratio measured but not recorded, or
    recorded but not measured (an optional tokenizer not installed), is not judged."""
    out = []
    for name in sorted(set(measured) & set(recorded)):
        value, record = measured[name], recorded[name]
        low, high = max(record, floor) / tolerance, max(record, floor) * tolerance
        if record < floor:
            low = 0.0
        if not (low <= value <= high) or not math.isfinite(value):
            out.append(Drift(name, record, value))
    return out


#: What the guard and --record-ratios say where the compiled kernels are not in use.
NO_KERNELS = ("common/_kernels.c is not in use here (not built: no C compiler at install, or a checkout without "
              "`pip install -e .` / `python setup.py build_ext --inplace`; or MLM_PIPELINE_NUMPY_KERNELS is set), "
              "and the ratios were recorded with it: the build and write stages run numpy, several "
              "times dearer (docs/benchmarks.md, \"Compiled kernels\")")


class RecordRefused(RuntimeError):
    """A run that cannot stand as the record (one without the compiled kernels)."""


def failure_message(found: list[Drift]) -> str:
    from common import kernels
    if kernels.compiled is None:
        return (f"worker stage cost moved against its reference: {NO_KERNELS}.  Build them; do not re-record.\n  "
                + "\n  ".join(map(str, found)))
    return ("worker stage cost moved against its reference (bench/ratios.py; tolerance "
            f"{TOLERANCE:g}x):\n  " + "\n  ".join(map(str, found)) +
            f"\nIf the change is deliberate, re-record with: {RECORD_COMMAND}")


def load(path: Path = RECORDED) -> dict[str, float]:
    return {name: float(value) for name, value in json.loads(path.read_text())["ratios"].items()}


def save(ratios: dict[str, float], how: str, path: Path = RECORDED) -> None:
    from common import kernels
    if kernels.compiled is None:
        raise RecordRefused(f"not recorded: {NO_KERNELS}")
    document = {"command": RECORD_COMMAND, "recorded": how,
                "ratios": {name: round(value, 4) for name, value in sorted(ratios.items())}}
    path.write_text(json.dumps(document, indent=1) + "\n")
