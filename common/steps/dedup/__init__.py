"""Duplicate removal across the whole corpus (``--dedup exact|minhash``).

Everything dedup is lives in this package, the step axis's ``dedup`` (found by name like every step):
``step`` (the step: its stages, when it is on), ``settings`` (its parameters, which are its flags).
Pure logic apart from the job's stages that run it: ``normalise`` (what counts as the same text),
``minhash`` (signatures and LSH bands), ``lsh`` (choosing bands and rows),
``clusters`` (candidate pairs and connected components), ``files`` (the self-checking
files the stages exchange).  ``stages`` is the worker's side: it reads and
writes those files in the output store.  See docs/dedup.md.
"""

from common.steps.dedup.settings import BUCKET, RESOLVE, SIGNATURE, STAGES, DedupSettings
from common.steps.dedup.step import Dedup

__all__ = ["BUCKET", "RESOLVE", "SIGNATURE", "STAGES", "Dedup", "DedupSettings"]
