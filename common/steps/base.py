"""The step interface: a worker's task is a list of steps, named in the job, run in order.

A job's steps (``JobConfig.steps``), in the order they run::

    read -> [dedup] -> [holdout] -> segment -> [words] -> tokenize -> objective -> write

(each step names the one it follows, ``Step.after``; the bracketed ones are on when their own parameters say,
``Step.enabled``)

    read       the task's documents, by the job's reader (timer "parse")
    dedup      drops the documents the dedup stages found to be copies ("dedup"; counters "dedup")
    holdout    splits off the held-out side: a second part, split "holdout" (counters "holdout")
    segment    each document's segments, by the job's segmenter (common/segmenters/) (timer "split")
    words      word starts inside Han runs, by a word segmenter (common/word_segmenters/) ("words")
    tokenize   token ids (TokenizedDocuments) ("tokenize")
    objective  a lazy stream of record batches, pass after pass ("build")
    write      the files, by the job's writer ("write")

Between steps the data is a list of typed values, one per side of the output (a :class:`Lane`: the
training side, split ``""``, and after a split step the held-out side, each with its own random-stream key
and file stem).  Each step takes the values the one before returned and returns its own (``Step[In, Out]``,
:meth:`Step.apply`)::

    Lane -> read -> Documents -> [dedup, holdout] -> Documents -> segment -> Segmented -> [words] -> Worded
         -> tokenize -> Tokenized -> objective -> Records -> write -> Written

so no step finds a field an earlier one has not filled.  The objective's records are a generator the write
step drains, so records are written pass by pass as they are made: memory holds one pass.

A step is a :class:`common.job.params.Configurable`: a module (or package) of :mod:`common.steps` with a
``name`` and ``Params``, found by name (:func:`common.steps.step_named`).  It implements :meth:`Step.apply`
(or :meth:`Step.run`, changing ``TaskRun.parts`` in place, as plugins written before ``apply`` do),
names the step it follows (``after``) and says when it is on (:meth:`Step.enabled`, from its ``Params``, whose
fields naming a ``flag`` are its own command-line options); it may also

- add counters to the task's statistics (``TaskRun.count``: step name -> counter -> value, summed by the
  sink into summary.json under the step's name);
- add job stages (``stages``, :meth:`Step.plan`, :meth:`Step.run_stage`): tasks that run before the
  normal pass (dedup's signature, bucket and resolve) or after it (the writer's finish stage);
- say how it changes the job's identity (:meth:`Step.identity`, for ``JobConfig.job_id``).

``worker.pipeline.TaskProcessor`` builds the job's steps and runs them; it knows none of their names.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from common.job.params import Component, Configurable, NoParams
from common.objectives import objective_named
from common.output.files import TRAIN, ShardFile
from common.readers import reader_named
from common.wire.protocol import AckStats

if TYPE_CHECKING:  # names for the annotations only
    import numpy as np

    from common.job.tasks import Task
    from common.objectives import TokenizedDocuments
    from common.objectives.base import Batch
    from common.readers import Document, ParseReport
    from common.storage.base import Storage
    from common.tokenization.vocabulary import SpecialIds, Vocabulary

#: What steps make, in the order data flows (``Step.makes``): how steps placed after the same step are ordered.
FLOW = ("documents", "parts", "segments", "words", "tokenized", "batches", "files")


@dataclass
class TaskStats:
    """A task's statistics as the worker gathers them (AckStats on the wire)."""

    documents: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    segments: int = 0
    tokens: int = 0
    instances: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpu_seconds: float = 0.0
    output_tokens: int = 0  # the training side's records' tokens, padding left out
    #: step name -> counter -> value (e.g. "dedup": removed documents; "holdout": the held-out side's counts)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_wire(self) -> AckStats:
        return AckStats(documents=self.documents, skipped=dict(self.skipped), segments=self.segments,
                        tokens=self.tokens, instances=self.instances, bytes_in=self.bytes_in,
                        bytes_out=self.bytes_out,
                        seconds={stage: round(value, 6) for stage, value in self.seconds.items()},
                        cpu_seconds=round(self.cpu_seconds, 6), output_tokens=self.output_tokens,
                        counters={name: dict(values) for name, values in self.counters.items() if values})

    @contextmanager
    def timed(self, name: str):
        """Adds the block's wall seconds to the timer ``name`` (``seconds``).  A timer is not a job stage
        (``Task.stage``, ``Step.stages``): it times part of a task, whatever the stage."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started

    def count(self, step: str, counter: str, value: int = 1) -> None:
        values = self.counters.setdefault(step, {})
        values[counter] = values.get(counter, 0) + value


class WordEncoder(Protocol):
    """A part's pieces with their words (the words step's): the tokenize step encodes them through it into
    ids, tokens per piece, per-token word starts, and how many pieces could not be mapped."""

    def encode(self, vocabulary: Vocabulary) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]: ...


@dataclass
class Lane:
    """One side of a task's output (the training side, or one a split step adds), as every step's value for it
    names it, whatever the stage."""

    split: str  # "" the training side; else the split that made it (its files are marked so)
    key: str  # the task key its random streams are drawn from
    stem: str  # what its files are named from (``part-<task id>``, ``holdout/part-<task id>``)


@dataclass
class Documents(Lane):
    """A side's documents: what read makes, and dedup, holdout and a plugin's document steps take and give."""

    documents: list[Document] = field(default_factory=list)


@dataclass
class Part(Documents):
    """A side as a step written against :meth:`Step.run` (plugins before :meth:`Step.apply`) sees it in
    ``TaskRun.parts``: every value's fields, as the one shared Part had them (what is not made yet is None), so
    such a step runs wherever it is placed (``Step.apply`` converts to it and back)."""

    segments: list | None = None
    words: WordEncoder | None = None
    tokenized: TokenizedDocuments | None = None
    tokens: int = 0
    batches: Iterator[Batch] | None = None
    files: list[ShardFile] = field(default_factory=list)


_PART_FIELDS = ("documents", "segments", "words", "tokenized", "tokens", "batches", "files")


def _as_part(value: Lane, run: TaskRun) -> Part:
    """A typed value as the Part a step written against ``run(run)`` expects: its own fields, and those the
    steps before it stopped handing on (``TaskRun.dropped``: documents past tokenize, token ids past the
    objective)."""
    earlier = run.dropped.get(value.split, {})
    fields = {name: getattr(value, name) if hasattr(value, name) else earlier[name]
              for name in _PART_FIELDS if hasattr(value, name) or name in earlier}
    return Part(value.split, value.key, value.stem, **fields)


def _from_part(part: Lane, like: type[Lane]) -> Lane:
    """A Part a ``run(run)`` step left, as the typed value the next step takes (the type it was given)."""
    if not isinstance(part, Part):
        return part  # the step handed on a typed value itself
    if like is Segmented and part.words is not None:
        like = Worded
    if like is Part or like is Documents:
        like = Documents
    names = [f.name for f in dataclasses.fields(like)]
    return like(**{name: getattr(part, name) for name in names})


@dataclass
class Segmented(Documents):
    """A side's documents and each one's segments, each a list of pieces (the segment step's)."""

    segments: list[list[list[str]]] = field(default_factory=list)


@dataclass
class Worded(Segmented):
    """Segments with the words inside their Han runs (the words step's): the tokenize step encodes through them."""

    words: WordEncoder = field(kw_only=True)


@dataclass
class Tokenized(Lane):
    """A side's token ids (the tokenize step's)."""

    tokenized: TokenizedDocuments
    tokens: int  # tokens of its documents before segments were dropped


@dataclass
class Records(Lane):
    """A side's record batches, made by the objective as the write step drains them (memory holds one pass);
    None for a side without documents: nothing to write."""

    batches: Iterator[Batch] | None


@dataclass
class Written(Lane):
    """A side's files (the write step's)."""

    files: list[ShardFile]


@dataclass
class TaskRun:
    """What the steps of one task share: the task, its payload, its statistics and its skipped documents (the
    data itself goes from step to step: :meth:`Step.apply`)."""

    task: Task | None  # None: documents tokenized apart from a task (TaskProcessor.tokenize_documents)
    payload: bytes
    stats: TaskStats
    report: ParseReport  # documents skipped, by reason
    #: The sides as the step before left them, for a step written against :meth:`Step.run` (plugins).
    parts: list[Any] = field(default_factory=list)
    #: Per side (split), the fields a step took but does not hand on (:meth:`drop`): a ``run(run)`` step placed
    #: after it still sees them on its Part, as it did when one Part went through every step.
    dropped: dict[str, dict[str, Any]] = field(default_factory=dict)

    def drop(self, part: Lane, *names: str) -> None:
        """Keep ``part``'s fields ``names``, which the step taking it does not hand on, for ``run(run)`` steps."""
        kept = self.dropped.setdefault(part.split, {})
        for name in names:
            kept[name] = getattr(part, name)


@dataclass
class StageResult:
    """What a task of a step's own stage wrote (the stage's files, not shards) and counted."""

    files: list[ShardFile]
    counters: dict[str, int] = field(default_factory=dict)


class Job(Protocol):
    """What a step sees of its job (:class:`common.job.config.JobConfig` is one).  The job is above the steps
    (it resolves them, and the formats, by name), so the steps name it by what they use, not by its class."""

    @property
    def reader(self) -> Component: ...
    @property
    def objective(self) -> Component: ...
    @property
    def writer(self) -> Component: ...
    @property
    def tokenizer_json(self) -> str: ...
    @property
    def steps(self) -> tuple[Component, ...]: ...
    @property
    def job_id(self) -> str: ...
    #: Its output format's class (a ``common.writers.Writer``, which the steps cannot name: the formats are above
    #: them); the write step builds it and asks it for its finish tasks.
    def writer_class(self) -> Any: ...


@dataclass
class JobPlan:
    """What a step sees when the ventilator plans the job: to add tasks before or after the normal pass."""

    config: Job
    output: Storage
    normal: list[Task]  # the normal pass's tasks
    special: SpecialIds  # the tokenizer's
    log: logging.Logger | None = None


class JobContext:
    """What every task of a job shares: the job, its tokenizer, its output and the job's components
    (reader, objective, writer), built once and only when a step asks for them."""

    def __init__(self, config, vocabulary, output):
        self.config = config
        self.vocabulary = vocabulary
        self.output = output
        self._built: dict[str, Any] = {}

    def _once(self, name: str, make):
        if name not in self._built:
            self._built[name] = make()
        return self._built[name]

    @property
    def reader(self):
        def make():
            reader_class = reader_named(self.config.reader.name)
            return reader_class(reader_class.make_params(self.config.reader.params))
        return self._once("reader", make)

    @property
    def objective(self):
        def make():
            objective_class = objective_named(self.config.objective.name)
            return objective_class(objective_class.make_params(self.config.objective.params),
                                   self.vocabulary.special)
        return self._once("objective", make)

    @property
    def writer(self):
        def make():
            writer_class = self.config.writer_class()  # the job names its format: the formats are above the steps
            return writer_class(writer_class.make_params(self.config.writer.params), self.objective.features,
                                self.vocabulary.special)
        return self._once("writer", make)


# --- How a step describes itself: its sides, its sections of dataset_info.json, the card and mlm-report ------
# The describers (common/describe/dataset_info.py, common/describe/dataset_card.py, report/, loader/, the writers, the
# manifest, mlm-verify) ask the steps for these instead of naming any; all are class-level, so no job needs to run.


@dataclass(frozen=True)
class Side:
    """A side of the output a step writes besides the training side: its files are marked with ``split``
    (``ShardFile.split``), go under ``directory``, and its counts (documents, tokens, records, shards) are the
    step's counters under that same name."""

    split: str  # ShardFile.split of its files, and the name its counts go under
    directory: str  # where its files go, relative to the output's root
    label: str  # what prose calls it: "the {label} side", "{label} records"
    flag: str  # what makes it, for messages ("the job was run without {flag}")
    card_split: str = ""  # its split in the dataset card (Hugging Face's name); "" for ``split`` itself
    colour: str = ""  # its colour in mlm-report's plots; "" for matplotlib's next

    def stem(self, shard_stem: str) -> str:
        """Its file stem for a task's ``part-<task>``."""
        return f"{self.directory}/{shard_stem}"


@dataclass(frozen=True)
class InfoSection:
    """A step's section of dataset_info.json, under the step's name: written for every job (``null`` when the
    job runs without the step), and compared by ``changed_options`` (a step on one side only is one change:
    ``switch`` from ``off`` to its value)."""

    switch: str  # the parameter that turns the step on
    off: object  # its value, as the change shows it, when the step is off


@dataclass(frozen=True)
class ReportSection:
    """A step's section of mlm-report's page and of report.json (under the step's name, ``null`` when the job
    ran without it): a table of its counters, and a histogram of one distribution of its report."""

    title: str  # the page's heading
    absent: str  # what the page says when the job ran without it
    histogram: str = ""  # a key of its report.json section holding a distribution (``_distribution``)
    x_label: str = ""
    y_label: str = ""


class Describes:
    """What a step says about the output it helps make (mixed into :class:`Step`; every method has a default
    for a step that says nothing)."""

    #: The sides the step writes besides the training side.
    sides: ClassVar[tuple[Side, ...]] = ()
    #: Its section of dataset_info.json (None: only the ``steps`` list names it).
    info_section: ClassVar[InfoSection | None] = None
    #: Its section of mlm-report's page (None: none).
    report_section: ClassVar[ReportSection | None] = None
    #: Directories of files it writes beside the output's (its stages'), relative to the root: not data.
    directories: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def info(cls, params: dict) -> dict:
        """Its section of dataset_info.json from its parameters as the job carries them."""
        return dict(params)

    @classmethod
    def card_lines(cls, section: dict | None) -> list[str]:
        """Its lines of the dataset card's "Records" list, from its dataset_info section (None: off)."""
        return []

    @classmethod
    def report(cls, counters: dict[str, int], read: Callable[[str, int], bytes | None]) -> dict:
        """Its section of report.json from its counters over the job; ``read(name, limit)`` reads a file of
        the output (at most ``limit`` bytes; None when absent)."""
        return {"counters": counters}

    @classmethod
    def legacy_split(cls, listed: dict) -> str:
        """The split of a file a manifest line written before splits had names lists (those marked their
        side with a flag of its own); "" when that is not this step's mark."""
        return ""


In = TypeVar("In", bound=Lane)
Out = TypeVar("Out", bound=Lane)


class Step(Configurable, Describes, abc.ABC, Generic[In, Out]):
    """One step of a task, from a side's ``In`` value to its ``Out`` (``Step[Documents, Segmented]``: the segment
    step).  ``params`` are the job's for it; ``job`` the :class:`JobContext`."""

    Params: ClassVar[type] = NoParams
    #: What the step gives each part (a Part field: "documents", "segments", "words", "tokenized", "batches",
    #: "files"), or "parts" for a step that adds parts: how a caller runs the steps up to a point
    #: (``TaskProcessor.parse``, ``tokenize``) without knowing their names.
    makes: ClassVar[str] = ""
    #: The job's part this step runs ("reader", "tokenizer", "objective", "writer": a JobConfig field), whose
    #: settings ``--show-steps`` lists as the step's options; "" for a step whose options are its own parameters.
    runs: ClassVar[str] = ""
    #: The job stages this step's tasks run in (``Task.stage``), if it adds any.
    stages: ClassVar[tuple[str, ...]] = ()
    #: The step this one runs right after (None: the first, read).  The job's steps are every step that is on
    #: (:meth:`enabled`), each right after the one it names (or where that one would be when it is off); steps
    #: after the same one run in the order of what they make (``FLOW``: one that makes nothing new first, then
    #: one that drops documents, one that splits them into parts, segments ...), then by name
    #: (``common.job.config.standard_steps``).  A
    #: step users add with --add-step goes right after the one it names, which must be on.
    after: ClassVar[str | None] = None

    @classmethod
    def enabled(cls, params) -> bool:
        """Whether a job runs this step, from its own parameters (its flags): holdout when --holdout-fraction is
        above 0, say.  A step that does not say (this default) runs only where ``--add-step NAME`` adds it, its
        parameters then its own flags in the "Added steps" section."""
        return False

    @classmethod
    def has_switch(cls) -> bool:
        """The step says itself when it is on (it overrides :meth:`enabled`): its fields that name their flag
        are its own options, with their defaults; otherwise --add-step adds it."""
        return cls.enabled.__func__ is not Step.enabled.__func__  # type: ignore[attr-defined]

    @classmethod
    def resolve(cls, params, input_bytes: int):
        """The parameters as the job records them, defaults that depend on the corpus (``input_bytes``: every
        readable input's size) made explicit.  As given by default."""
        return params

    def __init__(self, params, job: JobContext):
        self.params = params
        self.job = job

    def apply(self, parts: list[In], run: TaskRun) -> list[Out]:
        """This step over every side: the sides as the step before gave them, the sides for the next (one more
        for a split step).  A step written against :meth:`run` (plugins) is run through ``run.parts``."""
        if type(self).run is Step.run:
            raise NotImplementedError(f"step {self.name} implements neither apply() nor run()")
        like = type(parts[0]) if parts else Documents
        run.parts = [_as_part(part, run) for part in parts]
        self.run(run)
        return [_from_part(part, like) for part in run.parts]  # type: ignore[misc]

    def run(self, run: TaskRun) -> None:
        """This step over ``run.parts`` in place (they may be replaced, or added to): what a step may implement
        instead of :meth:`apply`, as plugins written before it do."""
        run.parts = self.apply(run.parts, run)

    def run_stage(self, task, payload: bytes, stats: TaskStats) -> StageResult:
        """Do one task of this step's own stage (``task.stage`` is one of ``stages``)."""
        raise ValueError(f"step {self.name} has no stage {task.stage!r}")

    @classmethod
    def plan(cls, params, plan: JobPlan) -> tuple[list, list]:
        """The tasks of this step's stages: (before the normal pass, after it).  None by default."""
        return [], []

    @classmethod
    def required_tasks(cls, params) -> dict[str, str]:
        """Task ids of its stages whose quarantine means the normal pass cannot run, with why (one line)."""
        return {}

    @classmethod
    def identity(cls, params) -> dict:
        """What this step adds to the job's identity (``JobConfig.job_id``): its name and parameters."""
        return {f"step:{cls.name}": dataclasses.asdict(params)}

    @classmethod
    def versions(cls, params, config) -> dict[str, int]:
        """The behaviour versions above 1 this step runs with (its own, and its variants'), by name: part of
        the job's id (``JobConfig.versions``)."""
        return {f"step:{cls.name}": cls.version} if cls.version > 1 else {}


__all__ = ["FLOW", "Describes", "Documents", "InfoSection", "Job", "JobContext", "JobPlan", "Lane", "Part", "Records",
           "ReportSection", "Segmented", "Side", "StageResult", "Step", "TaskRun", "TaskStats", "TRAIN", "Tokenized",
           "Worded", "Written"]
