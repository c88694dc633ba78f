"""Duplicate removal across the whole corpus (``--dedup exact|minhash``).

Pure logic lives here, apart from the job's stages that run it:
``settings`` (the flags), ``normalise`` (what counts as the same text),
``minhash`` (signatures and LSH bands), ``lsh`` (choosing bands and rows),
``clusters`` (candidate pairs and connected components), ``files`` (the self-checking
files the stages exchange).  ``stages`` is the worker's side: it reads and
writes those files in the output store.  See docs/dedup.md.
"""

from common.dedup.settings import BUCKET, RESOLVE, SIGNATURE, STAGES, DedupSettings  # noqa: F401
