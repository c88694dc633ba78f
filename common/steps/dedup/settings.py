"""The dedup flags, declared once (as the step's ``Params``), checked once and carried in the job.

``DedupSettings`` travels as the dedup step's parameters in :class:`common.job.config.JobConfig`; with
``mode == "off"`` (the default) the step is off (``Dedup.enabled``), so the job, its id and its tasks are
exactly those of a job without dedup.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import click

from common.job.params import When, param
from common.steps.dedup.lsh import optimal_bands_rows

#: The stages that run before the normal pass, in order (the normal pass is the stage "").
SIGNATURE = "signature"
BUCKET = "bucket"
RESOLVE = "resolve"
STAGES = (SIGNATURE, BUCKET, RESOLVE)
#: Stages whose tasks read only the input: nothing earlier can make them stale.
FIRST_STAGES = (SIGNATURE,)
#: The counter a stage's task reports when it ran without earlier tasks (quarantined ones).
SKIPPED_COUNTER = "signature_tasks_skipped"


def made_without_earlier_tasks(entry: dict) -> bool:
    """A manifest line of a stage's task that ran without some task of an
    earlier stage: its result lacks those tasks' documents (see
    sink/manifest.py, which has it and what followed done again)."""
    return bool((entry.get("dedup") or {}).get(SKIPPED_COUNTER))

MODES = ("off", "exact", "minhash")
#: The MinHash flags do something only with --dedup minhash; elsewhere another value is refused, naming them.
MINHASH = When(lambda params: params.mode == "minhash", "--dedup minhash")


@dataclass(frozen=True)
class DedupSettings:
    """The dedup step's parameters: its own flags (generated into the ventilator's command line from these
    fields, under the "Dedup" heading of --help, after "Tokenizer")."""

    section: ClassVar[str] = "Dedup"  # its heading in --help
    section_after: ClassVar[str] = "Tokenizer"  # the heading it follows
    mode: str = param("off", "Remove duplicate documents across the whole corpus before the normal pass: exact (same "
                             "normalised text) or minhash (also near-duplicates). See docs/dedup.md.",
                      flag="--dedup", choices=MODES)
    ngram: int = param(5, "Words per shingle (--dedup minhash).", flag="--minhash-ngram",
                       cli={"type": click.IntRange(min=1)}, when=MINHASH)
    #: MinHash permutations (= bands * rows when both are given)
    perm: int = param(112, "MinHash permutations (--dedup minhash).", flag="--minhash-perm",
                      cli={"type": click.IntRange(1, 1024)}, when=MINHASH)
    threshold: float = param(0.8, "Jaccard similarity the LSH bands and rows are chosen for, as datasketch does "
                                  "(--dedup minhash).", flag="--minhash-threshold", when=MINHASH)
    #: 0: derived from threshold and perm
    bands: int = param(0, "LSH bands, with --minhash-rows, instead of --minhash-threshold's choice.",
                       flag="--minhash-bands", cli={"type": click.IntRange(min=0)}, when=MINHASH,
                       derived="from --minhash-threshold and --minhash-perm")
    rows: int = param(0, "Rows (permutations) per LSH band, with --minhash-bands.", flag="--minhash-rows",
                      cli={"type": click.IntRange(min=0)}, when=MINHASH,
                      derived="from --minhash-threshold and --minhash-perm")
    #: bucket tasks; 0: one per 256 MiB of input (at least 1, at most 1024)
    partitions: int = param(0, "Bucket tasks (each holds 1/N of the keys).", flag="--dedup-partitions",
                            cli={"type": click.IntRange(0, 65535)}, derived="one per 256 MiB of input")
    seed: int = param(1, "of the MinHash permutations (no flag: fixed)")

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    @property
    def uses_minhash(self) -> bool:
        return self.mode == "minhash"

    def validate(self) -> None:
        """ValueError with a one-line reason."""
        if self.mode not in MODES:
            raise ValueError(f"--dedup {self.mode!r}: choose one of {', '.join(MODES)}")
        if self.ngram < 1:
            raise ValueError("--minhash-ngram must be at least 1")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("--minhash-threshold must be between 0 and 1 (exclusive)")
        if (self.bands > 0) != (self.rows > 0):
            raise ValueError("give both --minhash-bands and --minhash-rows, or neither (then --minhash-threshold "
                             "chooses them)")
        if self.bands < 0 or self.rows < 0:
            raise ValueError("--minhash-bands and --minhash-rows must be positive")
        if self.bands and self.bands * self.rows > self.perm:
            raise ValueError(f"--minhash-bands x --minhash-rows ({self.bands * self.rows}) exceeds --minhash-perm "
                             f"({self.perm})")
        if not 1 <= self.perm <= 1024:
            raise ValueError("--minhash-perm must be between 1 and 1024")
        if not 0 <= self.partitions <= 65535:
            raise ValueError("--dedup-partitions must be between 0 (auto) and 65535")

    def resolved(self, input_bytes: int) -> DedupSettings:
        """Bands, rows and partitions made explicit (the job records these)."""
        bands, rows = self.bands, self.rows
        if self.uses_minhash and not bands:
            bands, rows = optimal_bands_rows(self.threshold, self.perm)
        partitions = self.partitions or max(1, min(1024, -(-input_bytes // (256 << 20))))
        return dataclasses.replace(self, bands=bands, rows=rows, partitions=partitions)
