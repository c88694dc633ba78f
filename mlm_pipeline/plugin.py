"""The public plugin API: what a package adding a step, reader, segmenter, word segmenter, objective, format,
storage backend, launcher or backlog publisher imports, from one path that stays put when the tree is
reorganised (docs/design.md, "The public plugin API").

    from mlm_pipeline.plugin import ByteRangeReader, Document, param

A plugin declares its variants in its ``pyproject.toml`` under the entry-point group of their axis
(``mlm_pipeline.steps``, ``.readers``, ``.segmenters``, ``.word_segmenters``, ``.objectives``, ``.writers``,
``.storage``, ``.launchers``, ``.publishers``); tests/data/plugin_demo is one package doing all of them.

Names are loaded when first asked for (PEP 562), so a worker importing a plugin step loads the step axis, not
the ventilator's launchers.  Everything else in the tree is internal: import it at your own risk.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from common.job.params import NoParams, ParamValue, When, param
    from common.objectives import objective_named, objectives
    from common.objectives.base import Batch, Feature, Objective, Ragged, derive_seed
    from common.objectives.documents import TokenizedDocuments
    from common.output.files import ShardFile
    from common.readers import reader_named, readers
    from common.readers.base import ByteRangeReader, Document, ParseReport, Reader, decode_utf8
    from common.readers.scanning import first_line_start_at_or_after
    from common.segmenters import segmenter_named, segmenters
    from common.segmenters.base import Segmenter
    from common.steps import step_named, steps
    from common.steps.base import (
        Documents,
        InfoSection,
        JobContext,
        JobPlan,
        Lane,
        Part,
        Records,
        ReportSection,
        Segmented,
        Side,
        StageResult,
        Step,
        TaskRun,
        TaskStats,
        Tokenized,
        Worded,
        Written,
    )
    from common.storage import backends, open_storage
    from common.storage.base import Backend, RetryPolicy, Storage, StorageError, VersionChanged
    from common.storage.local import LocalStorage
    from common.word_segmenters import word_segmenter_named, word_segmenters
    from common.word_segmenters.base import WordSegmenter
    from common.writers import writer_named, writers
    from common.writers.base import OutputFile, TaskOutput, Writer
    from ventilator.launchers import launcher_named, launchers
    from ventilator.launchers.base import Launcher, LaunchError, Role
    from ventilator.launchers.local import LocalLauncher
    from ventilator.publishers import publisher_named, publishers
    from ventilator.publishers.base import Backlog, BacklogPublisher, PublisherError

#: Each public name and the internal module that defines it (the only place a move must be followed).
_WHERE: dict[str, str] = {
    # parameters: a variant's ``Params`` is a frozen dataclass of ``param(default, help)`` fields
    **dict.fromkeys(("NoParams", "ParamValue", "When", "param"), "common.job.params"),
    # steps (``--add-step NAME``; ``after`` names the step it follows) and the typed values they hand on
    **dict.fromkeys(("JobContext", "JobPlan", "Part", "StageResult", "Step", "TaskRun", "TaskStats"),
                    "common.steps.base"),
    **dict.fromkeys(("Documents", "Lane", "Records", "Segmented", "Tokenized", "Worded", "Written"),
                    "common.steps.base"),
    # a step's side of the output and its sections of dataset_info.json and mlm-report (``Describes``)
    **dict.fromkeys(("InfoSection", "ReportSection", "Side"), "common.steps.base"),
    **dict.fromkeys(("step_named", "steps"), "common.steps"),
    # input formats
    **dict.fromkeys(("ByteRangeReader", "Document", "ParseReport", "Reader", "decode_utf8"), "common.readers.base"),
    "first_line_start_at_or_after": "common.readers.scanning",
    **dict.fromkeys(("reader_named", "readers"), "common.readers"),
    # segmenters and word segmenters
    "Segmenter": "common.segmenters.base",
    **dict.fromkeys(("segmenter_named", "segmenters"), "common.segmenters"),
    "WordSegmenter": "common.word_segmenters.base",
    **dict.fromkeys(("word_segmenter_named", "word_segmenters"), "common.word_segmenters"),
    # objectives
    **dict.fromkeys(("Batch", "Feature", "Objective", "Ragged", "derive_seed"), "common.objectives.base"),
    "TokenizedDocuments": "common.objectives.documents",
    **dict.fromkeys(("objective_named", "objectives"), "common.objectives"),
    # output formats
    **dict.fromkeys(("OutputFile", "TaskOutput", "Writer"), "common.writers.base"),
    "ShardFile": "common.output.files",
    **dict.fromkeys(("writer_named", "writers"), "common.writers"),
    # storage backends (a Backend's ``name`` is its URI scheme)
    **dict.fromkeys(("Backend", "RetryPolicy", "Storage", "StorageError", "VersionChanged"), "common.storage.base"),
    "LocalStorage": "common.storage.local",
    **dict.fromkeys(("backends", "open_storage"), "common.storage"),
    # launchers and backlog publishers (the ventilator's)
    **dict.fromkeys(("LaunchError", "Launcher", "Role"), "ventilator.launchers.base"),
    "LocalLauncher": "ventilator.launchers.local",
    **dict.fromkeys(("launcher_named", "launchers"), "ventilator.launchers"),
    **dict.fromkeys(("Backlog", "BacklogPublisher", "PublisherError"), "ventilator.publishers.base"),
    **dict.fromkeys(("publisher_named", "publishers"), "ventilator.publishers"),
}

#: The same names as ``_WHERE`` (tests/test_layout.py holds them equal).
__all__ = ["Backend", "Backlog", "BacklogPublisher", "Batch", "ByteRangeReader", "Document", "Documents", "Feature",
           "InfoSection", "JobContext", "JobPlan", "Lane", "LaunchError", "Launcher", "LocalLauncher", "LocalStorage",
           "NoParams", "Objective", "OutputFile", "ParamValue", "ParseReport", "Part", "PublisherError", "Ragged",
           "Reader", "Records", "ReportSection", "RetryPolicy", "Role", "Segmented", "Segmenter", "ShardFile", "Side",
           "StageResult", "Step", "Storage", "StorageError", "TaskOutput", "TaskRun", "TaskStats", "Tokenized",
           "TokenizedDocuments", "VersionChanged", "When", "WordSegmenter", "Worded", "Writer", "Written", "backends",
           "decode_utf8", "derive_seed", "first_line_start_at_or_after", "launcher_named", "launchers",
           "objective_named", "objectives", "open_storage", "param", "publisher_named", "publishers", "reader_named",
           "readers", "segmenter_named", "segmenters", "step_named", "steps", "word_segmenter_named", "word_segmenters",
           "writer_named", "writers"]


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"mlm_pipeline.plugin has no {name!r} (the public names: {', '.join(__all__)})")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
