"""The segmenter interface: a document's lines in, its segments out, each as its pieces of text.

A segment is a list of pieces, one per paragraph it spans (see :func:`common.segmenters.sentences.segment_pieces`
for why pieces are kept apart: each is encoded as its paragraph encodes it).  A segmenter has no state
beyond its parameters, so one instance serves every task of a job.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from common.job.params import Configurable, NoParams

#: --segmenter's default: resolved when the job is planned (common/segmenters/__init__.py).
AUTO = "auto"


class Segmenter(Configurable, abc.ABC):
    """Cuts a document's paragraphs into segments."""

    Params: ClassVar[type] = NoParams

    def __init__(self, params=None):
        problem = type(self).unavailable()
        if problem:  # a job this worker cannot run: one line (it declines the job with it), never a crash per task
            raise ValueError(problem)
        self.params = params if params is not None else self.Params()

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this segmenter cannot run on this machine (a native library that does not load), or None: the
        ventilator refuses the job with it before any work, and a worker that cannot run it says so once."""
        return None

    @abc.abstractmethod
    def segments(self, lines: list[str]) -> list[list[str]]:
        """The document's non-empty segments in order, each as its pieces (stripped paragraphs' parts)."""
