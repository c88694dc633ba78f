"""The dedup flags, checked once and carried in the job.

``DedupSettings`` travels inside :class:`common.config.JobConfig`; with
``mode == "off"`` (the default) the job, its id and its tasks are exactly
those of a job without dedup.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.dedup.lsh import optimal_bands_rows

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
    common/manifest.py, which has it and what followed done again)."""
    return bool((entry.get("dedup") or {}).get(SKIPPED_COUNTER))

MODES = ("off", "exact", "minhash")


@dataclass(frozen=True)
class DedupSettings:
    mode: str = "off"
    ngram: int = 5  # words per shingle
    perm: int = 112  # MinHash permutations (= bands * rows when both are given)
    bands: int = 0  # 0: derived from threshold and perm
    rows: int = 0
    threshold: float = 0.8  # Jaccard similarity the bands and rows are tuned for
    partitions: int = 0  # bucket tasks; 0: one per 256 MiB of input (at least 1, at most 1024)
    seed: int = 1  # of the MinHash permutations

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
        return DedupSettings(self.mode, self.ngram, self.perm, bands, rows, self.threshold, partitions, self.seed)
