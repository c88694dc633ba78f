"""The job configuration: everything a worker needs, shipped by the ventilator.

A worker starts with nothing but the ventilator's address; the ventilator
answers its hello with a :class:`JobConfig`, which carries the tokenizer
itself (as ``tokenizers`` JSON), so no vocabulary file has to be on the
workers' disks.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.job.params import Component, ParamValue, PluginError
from common.objectives import objective_named
from common.readers import reader_named
from common.steps import FLOW, Step, job_steps, step_named
from common.steps import steps as known_steps
from common.wire import envelope
from common.wire.envelope import Count, Seconds
from common.wire.protocol import PROTOCOL_VERSION, EncodedJob, ProtocolError, Welcome
from common.writers import Writer, writer_named

if TYPE_CHECKING:
    from common.job.tasks import InputFile


def step_order() -> list[type[Step]]:
    """Every step that says when it is on (``Step.has_switch``), in the order a job runs those it has: each right
    after the step it names (``Step.after``); steps after the same one in the order of what they make (``FLOW``:
    one that makes nothing new first), then by name.  ValueError (one line, naming the known steps) for a step
    that names no known step."""
    known = known_steps()
    switched = {name: step_class for name, step_class in known.items() if step_class.has_switch()}
    following: dict[str | None, list[type[Step]]] = {}
    for step_class in switched.values():
        following.setdefault(step_class.after, []).append(step_class)
    for anchor in following:
        if anchor is not None and anchor not in switched:
            raise ValueError(f"step {following[anchor][0].name} runs after {unknown_place(anchor, known)}")
    order: list[type[Step]] = []
    flow = {made: rank for rank, made in enumerate(FLOW)}

    def place(anchor: str | None) -> None:
        for step_class in sorted(following.get(anchor, ()), key=lambda c: (flow.get(c.makes, -1), c.name)):
            order.append(step_class)
            place(step_class.name)

    place(None)
    looped = sorted(name for name in switched if switched[name] not in order)  # never reached from the first step
    if looped:
        raise ValueError(f"step {looped[0]} runs after {switched[looped[0]].after!r}, which runs after it in turn "
                         f"(a loop: {', '.join(looped)}): it would never run")
    return order


def unknown_place(anchor: str, known: Mapping[str, type[Step]], switched: bool = True) -> str:
    """What a step whose ``after`` names a step it cannot follow is told, naming the steps it can follow: a step
    that says when it is on (``switched``) follows one such step; a step added with --add-step, any step."""
    places = sorted(name for name, step_class in known.items() if step_class.has_switch() or not switched)
    if anchor in known:  # a step only --add-step adds: a step the job places itself cannot depend on it
        return f"{anchor!r}, a step only --add-step adds (after takes one of {', '.join(places)})"
    return f"{anchor!r}, which is no step (after takes one of {', '.join(places)})"


def check_places(added: Iterable[str] = ()) -> None:
    """ValueError (one line, naming the steps it can follow) for a known step that names a step it cannot follow
    (``after = "tokenise"``), or a step in ``added`` (--add-step) that names no step: before anything is read."""
    step_order()
    known = known_steps()
    for name in added:
        anchor = step_named(name).after
        if anchor not in known:
            raise ValueError(f"--add-step {name} runs after {unknown_place(str(anchor), known, switched=False)}")


def step_diagram(arrow: str = " → ") -> str:
    """The data path as the docs show it (docs/architecture.md, generated and checked from this): every step a
    job can switch on, in :func:`step_order`, those off by default in brackets."""
    return arrow.join(step_class.name if step_class.enabled(step_class.make_params({})) else f"[{step_class.name}]"
                      for step_class in step_order())


def standard_steps(given: Mapping[str, Mapping[str, ParamValue]] | None = None, *,
                   added: tuple[Component, ...] = (), input_bytes: int = 0) -> tuple[Component, ...]:
    """The steps of a job: every step that is on (``Step.enabled``, from its parameters: ``given`` by step name,
    the rest at their defaults), in :func:`step_order`, with its parameters as the job records them
    (``Step.resolve``: ``input_bytes``, every readable input's size).  ``added``: steps given with --add-step,
    each placed right after the step its class names, in the order given.  ValueError (one line) for parameters
    a step refuses, a step added twice, or an added step whose place is not in the job."""
    given = given or {}
    unknown = sorted(set(given) - set(known_steps()))
    if unknown:
        raise ValueError(f"no step named {', '.join(unknown)}")
    steps_ = []
    for step_class in step_order():
        params = step_class.make_params(dict(given.get(step_class.name, {})))
        if step_class.enabled(params):
            steps_.append(step_class.component(step_class.resolve(params, input_bytes)))
    placed = [False] * len(steps_)  # which of ``steps_`` were added here
    for position, component in enumerate(added):
        if any(step.name == component.name for step in added[:position]):
            raise ValueError(f"--add-step {component.name} is given twice (once runs it on every task)")
        anchor = step_named(component.name).after
        places = [i for i, step in enumerate(steps_) if step.name == anchor]
        if not places:
            if anchor not in known_steps():
                raise ValueError(f"--add-step {component.name} runs after "
                                 f"{unknown_place(str(anchor), known_steps(), switched=False)}")
            raise ValueError(f"--add-step {component.name} runs after the {anchor} step, which this job has not "
                             f"(its steps: {', '.join(step.name for step in steps_)})")
        at = places[-1] + 1
        while at < len(steps_) and placed[at]:  # after those added after the same step before it: in order
            at += 1
        steps_.insert(at, component)
        placed.insert(at, True)
    return tuple(steps_)


@dataclass(frozen=True)
class JobConfig:
    """One job: input, tokenizer, steps, output and delivery settings.

    The reader, the objective, the writer and the steps are :class:`Component` s
    (a name and its parameters), so the job, and the wire that carries it,
    are the same whatever components run.  ``steps`` is the task's list of
    steps (common/steps/), made by :func:`standard_steps` from each step's own
    parameters: the job names no step or feature of its own."""

    data_uri: str
    output_uri: str
    reader: Component
    tokenizer_json: str
    objective: Component = field(default_factory=lambda: Component("bert"))
    writer: Component = field(default_factory=lambda: Component("tfrecord"))
    read_mode: str = "ship"  # "ship": the ventilator sends bytes; "range": workers read
    s3_endpoint_url: str = ""
    sink_address: str = ""  # "host:port"; an empty host means the ventilator's host
    lease_seconds: Seconds = 60.0
    heartbeat_seconds: Seconds = 5.0
    task_size: Count = 0  # the --task-size the tasks were cut with
    inputs_digest: str = ""  # sha256 of the input listing: every file's path, size and version
    #: Provenance, for dataset_info.json and the dataset card; not part of the job's identity (a resume may be
    #: typed otherwise): the ventilator's command line and mlm-pipeline's version (common/version.py).
    command: str = ""
    version: str = ""
    #: The task's steps in order, with their parameters (common/steps/base.py).
    steps: tuple[Component, ...] = ()

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("a job needs its steps (common.job.config.standard_steps)")

    def step(self, name: str) -> Component | None:
        """The job's step ``name`` (its parameters), or None when the job has no such step."""
        return next((step for step in self.steps if step.name == name), None)

    def writer_class(self) -> type[Writer]:
        """The job's output format (``--output-format``): what the write step writes with.  Asked of the job,
        which names it, so the steps below the formats import none."""
        return writer_named(self.writer.name)

    @staticmethod
    def digest_inputs(files: Iterable[InputFile]) -> str:
        """What ``inputs_digest`` holds for these InputFiles."""
        listing = hashlib.sha256()
        for f in sorted(files, key=lambda f: f.path):
            listing.update(f"{f.path}\x00{f.size}\x00{f.version}\n".encode())
        return listing.hexdigest()

    def versions(self, made: list | None = None) -> dict[str, int]:
        """Every behaviour version above 1 the job runs with: its steps' (and their variants'), its reader's,
        objective's and writer's.  A variant whose plugin is not installed here counts as version 1 (this
        process cannot run the job anyway, and says so)."""
        versions: dict[str, int] = {}
        for step_class, params in made if made is not None else job_steps(self):
            versions.update(step_class.versions(params, self))
        for axis, lookup, name in (("reader", reader_named, self.reader.name),
                                   ("objective", objective_named, self.objective.name),
                                   ("writer", writer_named, self.writer.name)):
            try:
                version = lookup(name).version
            except (ValueError, PluginError):
                continue
            if version > 1:
                versions[f"{axis}:{name}"] = version
        return versions

    @functools.cached_property
    def job_id(self) -> str:
        """Stable for the same input, tokenizer and parameters.

        It marks the manifest, so a restart with the same command resumes and
        a different command cannot silently mix into an old output.  The
        task size is part of it (tasks cut otherwise would cover the same
        documents under other names: a resume would write them twice), and so
        is every input file's version (an output holds one snapshot of the
        corpus: a changed file would leave shards of its old ranges beside
        the new ones).  The output location is not: the manifest lives there,
        and an output directory that was moved can still be resumed.
        """
        return self.identity_hash()

    def identity_hash(self, versioned: bool = True, versions: dict[str, int] | None = None) -> str:
        """The job id; ``versioned=False``: as it was before behaviour versions came in (tests/test_job_ids.py
        shows with it that versions are all that moved ids since); ``versions``: as it would be with these
        behaviour versions instead of this release's (what an older release made)."""
        identity = {
            "data_uri": self.data_uri,
            "reader": dataclasses.asdict(self.reader),
            "tokenizer": hashlib.sha256(self.tokenizer_json.encode()).hexdigest(),
            "objective": dataclasses.asdict(self.objective),
            "writer": dataclasses.asdict(self.writer),
            "task_size": self.task_size,
            "inputs": self.inputs_digest,
        }
        # Each step adds what it means (Step.identity); optional steps are in the list only when used, so a
        # job without them keeps the id it always had.
        made = job_steps(self)
        for step_class, params in made:
            identity.update(step_class.identity(params))
        # Step.identity is by name, so it says neither the order of added steps nor a step listed twice; both
        # change the output.  Said only then: jobs with at most one added step keep their ids.
        names = [step_class.name for step_class, _params in made]
        if len(set(names)) < len(names) or sum(not step_class.has_switch() for step_class, _ in made) > 1:
            identity["step_order"] = names
        # Behaviour versions above 1 (Configurable.version): said only then, so a job whose variants all
        # behave as they did when versions came in keeps the id it always had.
        if versions is None:
            versions = self.versions(made) if versioned else {}
        if versions:
            identity["versions"] = versions
        blob = json.dumps(identity, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    # The job on the wire: the protocol carries it as an opaque EncodedJob and its id beside it, so the wire
    # imports nothing of the job, and no role but the ventilator computes the id.
    def welcome(self, ventilator_id: str) -> Welcome:
        """The Welcome that gives a peer this job and its id (computed here, once)."""
        return Welcome(self.encoded(), self.job_id, ventilator_id)

    def encoded(self) -> EncodedJob:
        """This job as a Welcome carries it: the protocol's envelope, checked field by field when decoded."""
        return EncodedJob(envelope.encode(self, PROTOCOL_VERSION))

    @classmethod
    def from_welcome(cls, welcome: Welcome) -> JobConfig:
        """The job a Welcome carries, every field checked (ProtocolError otherwise: the receiving server
        counts and drops it), with the id the ventilator computed: it is used as it came, never computed
        again (``job_id`` is this cached property's value)."""
        config = envelope.decode(welcome.job, PROTOCOL_VERSION, {cls.__name__: cls}, ProtocolError)
        if not isinstance(config, cls):
            raise ProtocolError(f"Welcome.job is a {type(config).__name__}, not a job")
        vars(config)["job_id"] = welcome.job_id  # functools.cached_property keeps its value there
        return config
