"""The ventilator's whole command line as one typed, frozen value: :class:`RunConfig`.

Every option is declared once, here, as a field of a group (input, job, tokenizer, network, sink, fleet,
delivery, metrics, display) whose default is the one its user keeps (ServerOptions, SinkOptions, JobConfig):
click parses, :func:`from_values` builds the RunConfig, and the run, the job, the server, the sink and the
workers read their settings from it.  The axes' parameters (common/job/params.py) are options too, made from every
variant's ``Params`` (:func:`component_options`) when the command is first used (parsing, --help), not when
this module is imported: the job's axes' values are collected in ``job.params``; a launcher's or a publisher's,
chosen here, in ``fleet.launcher_params`` and ``metrics.publisher_params``.  A step that says when it is on
(``Step.enabled``) declares its own options in its ``Params`` (:func:`step_options`), collected in
``job.steps``.  This module names no variant and no step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import click

from common.job.cli_settings import (
    Address,
    Deferred,
    DeferredCommand,
    Size,
    add_options,
    build,
    click_option,
    command_settings,
    data_argv,
    option,
    option_fields,
    option_flags,
)
from common.job.config import JobConfig
from common.job.params import (
    Configurable,
    OptionSpec,
    ParamClash,
    ParamValue,
    PluginError,
    defaults_text,
    option_of,
    option_specs,
    own_flag,
    type_hints,
)
from common.job.tasks import parse_size
from common.objectives import objectives
from common.readers import readers
from common.segmenters import segmenters
from common.steps import steps
from common.storage import StorageSettings
from common.wire.security import Curve
from common.wire.transport import SINK_PORT, address
from common.word_segmenters import NONE as NO_WORD_SEGMENTER
from common.word_segmenters import word_segmenters
from common.writers import writers
from sink.settings import SinkSettings
from ventilator.launchers import DEFAULT_LAUNCHER, launchers
from ventilator.publishers import DEFAULT_PUBLISHER, publishers
from ventilator.server import ServerOptions
from worker.settings import WorkerSettings

#: --task-size's default, as the command line shows it.
DEFAULT_TASK_SIZE = "8M"

EXIT_FAILED = 1


class ConfigError(ValueError):
    """A one-line reason the options given cannot make a run."""


def _load_variants() -> None:
    """Every axis's variants, installed plugins' included, before click builds the options from them: a
    broken plugin or two variants of one name is ConfigError, one line (--help included), not a traceback.
    Called when the options are made (parse time), never at import."""
    try:
        for axis in (readers, objectives, writers, word_segmenters, steps, segmenters, launchers, publishers):
            axis()
    except (PluginError, TypeError) as error:
        raise ConfigError(str(error)) from None


def _choice(variants: Callable[[], Mapping[str, object]], *also: str) -> Deferred:
    """--objective's (...) type: a choice among the axis's variants, found when the options are made."""
    return Deferred(lambda: click.Choice([*also, *sorted(variants())]))


class AddableStep(click.Choice):
    """--add-step's type: a step that does not say when it is on; one that does is refused naming the flags
    that switch it on (holdout's, dedup's), and with none installed the refusal says so."""

    def __init__(self) -> None:
        super().__init__(sorted(addable_steps()))

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str | None:
        """The installed steps as a choice shows its values (``[demo-drop-digits]``); STEP with none, not ``[]``."""
        return super().get_metavar(param, ctx) if self.choices else "STEP"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value in self.choices:
            return value
        step = steps().get(value)
        if step is not None and step.has_switch():
            flags = [own_flag(f) for f in dataclasses.fields(step.Params) if own_flag(f)]
            self.fail(f"{value} is switched on by its own flags ({', '.join(flags)}), not --add-step", param, ctx)
        known = ", ".join(map(repr, self.choices)) or "none is installed"
        self.fail(f"no step {value!r}: --add-step takes a step that does not say when it is on ({known})", param, ctx)


def addable_steps() -> dict:
    """The steps a user may add to a job (``--add-step``): those that do not say when they are on themselves."""
    return {name: step for name, step in steps().items() if not step.has_switch() and step.after is not None}


def _token(role: str, example: str) -> Any:
    return option(f"--{role}-token", default=None, show_envvar=True, described="the tokenizer's",
                  help=f"The {example} where the tokenizer does not say.")


@dataclass(frozen=True)
class InputSettings:
    section: ClassVar[str] = "Input"  # its heading in --help
    decides_data: ClassVar[bool] = True  # its options are the dataset card's command (cli_settings.data_argv)
    data: str = option("--data", required=True, type=click.Path(), metavar="DIR|FILE|s3://BUCKET/PREFIX",
                       describes="input.uri", show_envvar=True,
                       help="The corpus: WikiExtractor output (plain or --json), BERT's text format (one sentence per "
                            "line, blank line between documents), Parquet files or JSON Lines (docs/inputs.md).")
    corpus_format: str = option("--format", type=_choice(readers, "auto"), describes="reader.name",
                                default="auto", show_envvar=True,
                                help="Input format; auto detects it from the first file.")
    task_size: int = option("--task-size", default=parse_size(DEFAULT_TASK_SIZE), cli_default=DEFAULT_TASK_SIZE,
                            type=Size(), describes="input.task_size", show_envvar=True,
                            help="Bytes of input per task (8M, 256K, ...); compressed files are one task each.")
    shared_fs: bool = option("--shared-fs", is_flag=True, default=False, show_envvar=True, decides_data=False,
                             help="Workers can read --data themselves (same path): send byte ranges, not content. "
                                  "Implied for s3:// data.")
    s3_endpoint_url: str = option("--s3-endpoint-url", default="", show_envvar=True, decides_data=False,
                                  help="For S3-compatible stores (credentials from the standard AWS chain).")


@dataclass(frozen=True)
class JobSettings:
    section: ClassVar[str] = "Job"  # its heading in --help
    decides_data: ClassVar[bool] = True  # and its axes' parameters and steps' flags (data_command)
    output: str = option("--output", required=True, metavar="DIR|s3://BUCKET/PREFIX", show_envvar=True,
                         decides_data=False, section="Output",
                         help="Where shards and manifest.jsonl go.")
    objective: str = option("--objective", type=_choice(objectives), default="bert", section="Objective",
                            describes="objective.name", show_envvar=True,
                            help="What the documents become (see the README's objectives table).")
    output_format: str = option("--output-format", type=_choice(writers), section="Output",
                                describes="writer.name", default="tfrecord", show_envvar=True,
                                help="How the records are written (see the README's formats table).")
    segmenter: str = option("--segmenter", type=_choice(segmenters, "auto"), section="Segmentation and words",
                            describes="segmenter", default="auto", show_envvar=True,
                            help="How segments for next-sentence prediction are cut: blingfire sentences, lines "
                                 "as they are, or each document whole (document). auto: lines for --objective "
                                 "electra (its reference adds lines) and for the text format (already one sentence "
                                 "per line), the document for --objective tokens --max-seq-length N (its chunks "
                                 "keep no sentence), sentences otherwise.")
    word_segmenter: str = option(
        "--word-segmenter", type=_choice(word_segmenters, NO_WORD_SEGMENTER), section="Segmentation and words",
        describes="steps.words", default=NO_WORD_SEGMENTER, show_envvar=True,
        help="Find words inside runs of Han characters (Chinese) for whole-word masking and the output's word "
             "starts (docs/tokenizers.md, \"Chinese words\"); other scripts keep the tokenizer's words.")
    add_step: tuple[str, ...] = option(
        "--add-step", type=Deferred(AddableStep), multiple=True, default=(), describes="steps",
        show_envvar=True, help="Add a step to every task (one a plugin brings, say), right after the step it "
                               "names; its parameters are its own flags.  Repeat for several.")
    #: The axes' parameters given (readers', objectives', writers', word segmenters', added steps'; unset ones
    #: absent).
    params: dict[str, ParamValue] = field(default_factory=dict)
    #: The parameters of the steps that say when they are on (``Step.enabled``), from their own flags, by step
    #: name then field (:func:`step_options`; all of them, defaults included).
    steps: dict[str, dict[str, ParamValue]] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenizerSettings:
    section: ClassVar[str] = "Tokenizer"  # its heading in --help
    decides_data: ClassVar[bool] = True
    vocab_file: str | None = option("--vocab-file", type=click.Path(dir_okay=False), default=None,
                                    show_envvar=True, help="BERT vocab.txt (e.g. bert-base-uncased's). Or use "
                                                           "--tokenizer.")
    tokenizer: str | None = option("--tokenizer", type=click.Path(), default=None, show_envvar=True,
                                   help="A tokenizers JSON (WordPiece, BPE or Unigram model), a SentencePiece "
                                        ".model, or a local Hugging Face model directory (tokenizer.json, vocab.txt "
                                        "or a .model in it).")
    cls_token: str | None = _token("cls", "classifier token ([CLS], <s>)")
    sep_token: str | None = _token("sep", "separator token ([SEP], </s>)")
    mask_token: str | None = _token("mask", "mask token ([MASK], <mask>)")
    pad_token: str | None = _token("pad", "padding token ([PAD], <pad>)")
    unk_token: str | None = _token("unk", "unknown token ([UNK], <unk>)")
    do_lower_case: bool | None = option(
        "--do-lower-case/--no-do-lower-case", default=None, show_envvar=True,
        help="Lower-case the text before the tokenizer (and strip accents, for a vocab.txt), whatever its family.",
        described="on for a vocab.txt (BERT's); for a SentencePiece .model the objective's reference (on for bert, "
                  "albert, electra); a tokenizers JSON or model directory as it says")

    def special_tokens(self) -> dict[str, str]:
        """The special tokens given, by role (cls, sep, mask, pad, unk)."""
        return {role: getattr(self, f"{role}_token") for role in ("cls", "sep", "mask", "pad", "unk")
                if getattr(self, f"{role}_token")}


def _check_port(flag: str, port: int) -> None:
    """A port the roles are told to connect to: one they can connect to.  0 (the system picks one) is refused,
    not resolved: the workers and the sink are started with the port as given, before anything listens."""
    if not 1 <= port <= 65535:
        raise ConfigError(f"{flag} {port}: not a port workers and the sink can be sent to (1 to 65535)")


@dataclass(frozen=True)
class NetworkSettings:
    section: ClassVar[str] = "Network"  # its heading in --help
    vport: int = option("--vport", type=int, default=ServerOptions.port, show_envvar=True,
                        help="Port workers and the sink connect to.")
    bind_host: str = option("--bind-host", default=ServerOptions.bind_host, show_envvar=True,
                            help="Interface to listen on (* for all).")
    curve_dir: str | None = option("--curve-dir", type=click.Path(file_okay=False), default=None, show_envvar=True,
                                   help="Encrypt and authenticate with CURVE keys from this directory (made by "
                                        "mlm-keys).")

    def __post_init__(self):
        _check_port("--vport", self.vport)


@dataclass(frozen=True)
class SinkGroup:
    """The sink: one started elsewhere (``sink_address``), or the one this command starts and its settings."""
    section: ClassVar[str] = "Sink"  # its heading in --help

    sink_address: str = option("--sink", default="", type=Address(SINK_PORT), show_envvar=True,
                               help="Use a sink started elsewhere (python -m sink); without it, a local sink is "
                                    "started.")
    sink_port: int = option("--sink-port", type=int, default=SinkSettings.port, show_envvar=True,
                            help="Port of the sink started here.")
    state_dir: str = option("--state-dir", default=SinkSettings.state_dir, show_envvar=True,
                            help="For the local sink: where it journals the manifest of an S3 output.")
    sink_metrics_port: int | None = option(
        "--sink-metrics-port", type=click.IntRange(0, 65535), default=SinkSettings.metrics_port, show_envvar=True,
        help="The same for the sink started here (its --metrics-port).", described="off")
    instance_hourly_price: float | None = option(
        "--instance-hourly-price", type=click.FloatRange(min=0), default=SinkSettings.instance_hourly_price,
        show_envvar=True, described="hours only",
        help="For the sink started here (its --instance-hourly-price): USD per worker instance-hour, for the cost "
             "in its summary.")

    def __post_init__(self):
        if not self.sink_address:
            _check_port("--sink-port", self.sink_port)
        if self.sink_address and self.sink_metrics_port is not None:
            raise ConfigError("--sink-metrics-port is for the sink this command starts; with --sink, give that "
                              "sink its own --metrics-port")
        if self.sink_address and self.instance_hourly_price is not None:
            raise ConfigError("--instance-hourly-price is for the sink this command starts; with --sink, give that "
                              "sink its own --instance-hourly-price")

    @property
    def starts_sink(self) -> bool:
        return not self.sink_address


@dataclass(frozen=True)
class FleetSettings:
    section: ClassVar[str] = "Fleet"  # its heading in --help
    workers: int = option("--workers", type=click.IntRange(min=0), default=0, show_envvar=True,
                          help="Also start this many worker processes on this machine.")
    launcher: str = option("--launcher", type=_choice(launchers), default=DEFAULT_LAUNCHER,
                           show_envvar=True,
                           help="What starts and stops the sink and the workers this command runs "
                                "(ventilator/launchers/).")
    #: The chosen launcher's parameters (its Params' fields, as given or defaulted; another's are refused).
    launcher_params: dict[str, ParamValue] = field(default_factory=dict)


@dataclass(frozen=True)
class DeliverySettings:
    section: ClassVar[str] = "Leases and delivery"  # its heading in --help
    lease_seconds: float = option("--lease-seconds", type=float, default=JobConfig.lease_seconds, show_envvar=True,
                                  help="A task whose worker sends no heartbeat for this long is handed to another.")
    heartbeat_seconds: float = option("--heartbeat-seconds", type=float, default=JobConfig.heartbeat_seconds,
                                      show_envvar=True,
                                      help="How often workers and the sink tell the ventilator they are alive; one "
                                           "silent for three of these and 5 s more counts as gone.")
    max_attempts: int = option("--max-attempts", type=click.IntRange(min=1), default=ServerOptions.max_attempts,
                               show_envvar=True,
                               help="A task that fails this often is quarantined and reported; the run goes on.")
    report_seconds: float = option("--report-seconds", type=float, default=ServerOptions.report_seconds,
                                   show_envvar=True, help="Progress log interval.")
    confirm_seconds: float = option("--confirm-seconds", type=float, default=ServerOptions.confirm_seconds,
                                    show_envvar=True,
                                    help="A finished task the sink has not confirmed within this time is done again.")


@dataclass(frozen=True)
class MetricsSettings:
    section: ClassVar[str] = "Metrics and autoscaling"  # its heading in --help
    metrics_port: int | None = option(
        "--metrics-port", type=click.IntRange(0, 65535), default=ServerOptions.metrics_port, show_envvar=True,
        help="Serve Prometheus metrics (task states, workers, redeliveries) on this port.", described="off")
    backlog_publisher: str = option(
        "--backlog-publisher", type=_choice(publishers), default=DEFAULT_PUBLISHER, show_envvar=True,
        help="Where the backlog is published for autoscaling, when its options are given (ventilator/publishers/).")
    #: The chosen publisher's parameters (its Params' fields, as given or defaulted: declared in its module, shown
    #: in this section; another publisher's, given, are refused).
    publisher_params: dict[str, ParamValue] = field(default_factory=dict)


@dataclass(frozen=True)
class DisplaySettings:
    section: ClassVar[str] = "Display"  # its heading in --help
    progress: bool | None = option("--progress/--no-progress", default=None, show_envvar=True,
                                   described="when stderr is a terminal",
                                   help="A progress bar, with every local process's log lines above it.")
    verbose: int = option("-v", "--verbose", count=True, default=0, help="More logging.")
    show_steps: bool = option("--show-steps", is_flag=True, default=False,
                              help="Print the job's steps in the order every task runs them, each with its options, "
                                   "and exit: nothing is started or written.")


@dataclass(frozen=True)
class RunConfig:
    """One run of ``python -m ventilator``: everything its command line (and MLM_* variables) said."""

    input: InputSettings
    job: JobSettings
    storage: StorageSettings = field(default_factory=StorageSettings)
    tokenizer: TokenizerSettings = field(default_factory=TokenizerSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)
    sink: SinkGroup = field(default_factory=SinkGroup)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    delivery: DeliverySettings = field(default_factory=DeliverySettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    display: DisplaySettings = field(default_factory=DisplaySettings)
    #: The command line as typed, recorded in the output's dataset_info.json and card (not an option).
    command: str = ""

    def __post_init__(self):
        # The ports this command listens on (and its local sink): two on one would fail only once the job is
        # planned and the sink started, in a few lines of another process's log.
        listening = {"--vport": self.network.vport, "--metrics-port": self.metrics.metrics_port}
        if not self.sink.sink_address:
            listening.update({"--sink-port": self.sink.sink_port, "--sink-metrics-port": self.sink.sink_metrics_port})
        taken: dict[int, str] = {}
        for flag, port in listening.items():
            if port:  # None: off; 0: the system picks one
                if port in taken:
                    raise ConfigError(f"{taken[port]} and {flag} are both {port}: one port each")
                taken[port] = flag

    def server_options(self, **runtime) -> ServerOptions:
        """The ventilator server's options; ``runtime``: what only the running command has (on_progress,
        backlog_publisher)."""
        return ServerOptions(bind_host=self.network.bind_host, port=self.network.vport,
                             max_attempts=self.delivery.max_attempts, report_seconds=self.delivery.report_seconds,
                             confirm_seconds=self.delivery.confirm_seconds,
                             curve=Curve(self.network.curve_dir) if self.network.curve_dir else None,
                             metrics_port=self.metrics.metrics_port, **runtime)

    def sink_settings(self, ventilator_host: str) -> SinkSettings:
        """The settings of the sink this command starts, reaching the ventilator at ``ventilator_host``."""
        return SinkSettings(ventilator=address(ventilator_host, self.network.vport), port=self.sink.sink_port,
                            bind_host=self.network.bind_host, state_dir=self.sink.state_dir,
                            curve_dir=self.network.curve_dir, metrics_port=self.sink.sink_metrics_port,
                            instance_hourly_price=self.sink.instance_hourly_price, verbose=self.display.verbose,
                            storage=self.storage)

    def worker_settings(self, ventilator_host: str) -> WorkerSettings:
        """The settings of the ``--workers`` this command starts."""
        return WorkerSettings(ventilator=address(ventilator_host, self.network.vport), processes=self.fleet.workers,
                              curve_dir=self.network.curve_dir, verbose=self.display.verbose, storage=self.storage)


@dataclass(frozen=True)
class Axis:
    """An axis whose variants' parameters are options (common/job/params.py), shown under ``section``.

    ``choice``: for an axis whose variant is chosen on this command line (a launcher, a publisher), the
    (group, option) naming it and the group field its parameters go to: their options take their defaults as
    any option does, and another variant's option given is refused.  Without it (the job's axes, whose
    variants are resolved when the job is planned: --format auto), the options are unset (None) unless given,
    so each variant keeps its own default, and they go to ``job.params``."""

    section: str
    variants: Callable[[], Mapping[str, type[Configurable]]]
    choice: tuple[str, str, str] | None = None  # (group, option field, params field)


def axes() -> list[Axis]:
    return [Axis("Input", readers), Axis("Objective", objectives), Axis("Output", writers),
            Axis("Segmentation and words", word_segmenters), Axis("Segmentation and words", segmenters),
            Axis("Added steps (--add-step)", addable_steps),
            Axis("Fleet", launchers, ("fleet", "launcher", "launcher_params")),
            Axis("Metrics and autoscaling", publishers, ("metrics", "backlog_publisher", "publisher_params"))]


def axis_specs() -> list[tuple[Axis, list[OptionSpec]]]:
    """Each axis's options.  A flag is one variant's, or shared by variants of one axis that each declare it
    shared; any other two variants declaring one flag are ConfigError, one line naming both."""
    _load_variants()
    found = [(axis, list(axis.variants().values())) for axis in axes()]
    try:
        option_specs([variant for _, variants in found for variant in variants])  # across axes: refused
        by_axis = [(axis, option_specs(variants)) for axis, variants in found]
    except ParamClash as clash:
        raise ConfigError(str(clash)) from None
    own = {flag: name for name, flags in option_flags(RunConfig).items() for flag in flags}
    owner: dict[str, Axis] = {}
    job_field: dict[str, OptionSpec] = {}  # the job's values go by field name (job.params): one flag each
    for axis, specs in by_axis:
        for spec in specs:
            other = job_field.setdefault(spec.field_name, spec) if axis.choice is None else spec
            if other.flag != spec.flag:
                raise ConfigError(f"{other.flag} ({other.declared_by}) and {spec.flag} ({spec.declared_by}) set "
                                  f"one job parameter, {spec.field_name}: rename one of the fields")
            flags = [spec.flag, f"--no-{spec.flag[2:]}"] if spec.type is bool else [spec.flag]
            taken = next((flag for flag in flags if flag in own), None)
            if taken:
                raise ConfigError(f"{taken} is the ventilator's own option and a parameter of {spec.declared_by}: "
                                  f"give the parameter a flag of its own (param(..., flag=...))")
            if owner.setdefault(spec.flag, axis) is not axis:  # declared shared in two axes
                raise ConfigError(f"{spec.flag} is declared by variants of two axes ({owner[spec.flag].section}; "
                                  f"{axis.section}: {spec.declared_by}): only one axis's variants share a flag")
    return by_axis


def _flag(name: str) -> str:
    """The flag of RunConfig's option ``name`` (for messages)."""
    return next(flag for flag in option_flags(RunConfig)[name] if flag.startswith("--"))


def _own_default(axis: Axis, spec: OptionSpec) -> tuple[bool, Any]:
    """Whether the option shows its variant's default as any option does (a chosen axis, one default)."""
    defaults = set(map(repr, spec.defaults.values()))
    return axis.choice is not None and len(defaults) == 1, next(iter(spec.defaults.values()))


def component_options(command):
    """One option per flag of every variant's parameters (see :class:`Axis`)."""
    for axis, specs in reversed(axis_specs()):
        every = len(axis.variants())
        for spec in reversed(specs):
            declared = dataclasses.replace(spec.option, flag=spec.flag)
            own, default = _own_default(axis, spec)
            if own:  # click shows the one default, as any option's
                option = click_option(declared, spec.name, default, spec.type, section=axis.section)
            else:  # unset unless given: each variant keeps its own
                option = click_option(declared, spec.name, None, spec.type, section=axis.section,
                                      shown_default=defaults_text(spec, every))
            command = option(command)
    return command


def _variant_params(config: RunConfig, values: dict[str, Any]) -> RunConfig:
    """The axes' options taken out of ``values``: the job's into ``job.params``, a chosen variant's into its
    group (checked by its ``make_params``); an option of a variant not chosen, given, is ConfigError."""
    job_params: dict[str, ParamValue] = {}
    for axis, specs in axis_specs():
        if axis.choice is None:
            job_params.update({spec.field_name: values.pop(spec.name) for spec in specs
                               if values.get(spec.name) is not None})
            continue
        group_name, option_name, params_name = axis.choice
        group = getattr(config, group_name)
        chosen = getattr(group, option_name)
        given: dict[str, ParamValue] = {}
        for spec in specs:
            value = values.pop(spec.name, None)
            own, default = _own_default(axis, spec)
            if chosen in spec.defaults:
                if value is not None:
                    given[spec.field_name] = value
            elif value is not None and not (own and value == default):
                owners = " or ".join(spec.defaults)
                raise ConfigError(f"{spec.flag} is for {_flag(option_name)} {owners}")
        try:
            axis.variants()[chosen].make_params(given)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        config = dataclasses.replace(config, **{group_name: dataclasses.replace(group, **{params_name: given})})
    return dataclasses.replace(config, job=dataclasses.replace(config.job, params=job_params))


def described_flags() -> dict[str, str]:
    """The flag of each setting of dataset_info.json the run's own options set, by its path (``input.task_size``),
    from their declarations (``option(..., describes=...)``): what ``dataset_info.changed_options`` names."""
    declared = [option_of(f) for f in option_fields(RunConfig)]
    return {option.describes: option.flag for option in declared if option is not None and option.describes}


def variant_flag(field_name: str) -> str:
    """The flag of the variants' parameter ``field_name`` (``ids_dtype`` -> ``--mds-ids-dtype``), as declared;
    ``--`` and its name where no variant declares it."""
    for _, specs in axis_specs():
        for spec in specs:
            if spec.field_name == field_name:
                return spec.flag
    return "--" + field_name.replace("_", "-")


@dataclass(frozen=True)
class StepFlag:
    """One option a step declares itself: a field of its ``Params`` that names its ``flag`` (common/job/params.py),
    of a step that says when it is on (``Step.enabled``: holdout, dedup, a plugin's)."""

    step: str  # the step's name
    field: str  # the Params field
    name: str  # click's parameter name, from the flag (its env var is MLM_<NAME>)
    option: Callable  # the click option, as a decorator


def step_flags() -> list[StepFlag]:
    """Every step's own options, in the steps' order of discovery and their fields' order; ParamClash if two
    steps, or a step and the run's options, declare one flag."""
    made: list[StepFlag] = []
    taken = {f.name: "the ventilator's own options" for f in option_fields(RunConfig)}
    for axis, specs in axis_specs():  # a variant's flag: named here, not as click's "declared twice"
        taken.update({spec.name: f"{', '.join(map(repr, spec.defaults))} ({axis.section})" for spec in specs})
    for step_name, step_class in steps().items():
        if not step_class.has_switch():
            continue
        params_class = step_class.Params
        hints = type_hints(params_class)
        section = getattr(params_class, "section", "") or f"Step {step_name}"
        for f in dataclasses.fields(params_class):
            flag = own_flag(f)
            declared = option_of(f)
            if not flag or declared is None:
                continue  # a parameter the job sets (segment's segmenter) or fixed (dedup's seed)
            name = flag[2:].replace("-", "_")
            if name in taken:
                raise ParamClash(f"{flag} is declared by step {step_name} and {taken[name]}: one flag each")
            taken[name] = f"step {step_name}"
            option = click_option(declared, name, f.default, hints[f.name], section=section,
                                  section_after=getattr(params_class, "section_after", ""))
            made.append(StepFlag(step_name, f.name, name, option))
    return made


def step_options(command):
    """The steps' own options (:func:`step_flags`), each under its step's heading (``Params.section``)."""
    try:
        flags = step_flags()
    except ParamClash as clash:  # when the options are made: one line, not a traceback (--help included)
        raise ConfigError(str(clash)) from None
    for flag in reversed(flags):
        command = flag.option(command)
    return command


class VariantsError(click.ClickException):
    """The variants cannot make the options (a broken plugin, a flag two variants declare): one line, the
    command's failure status, when the command is first used."""

    exit_code = EXIT_FAILED

    def show(self, file=None) -> None:
        click.echo(f"mlm-ventilator: error: {self.message}", err=True)


def run_options(command):
    """Decorator: every option of the ventilator's command line (for :class:`common.job.cli_settings.DeferredCommand`:
    made when the command is first used; VariantsError if the variants cannot make them).  Two options of one
    name or flag (a step's own flag that is also a variant's or the run's) are refused in one line: click would
    let one silently win."""
    try:
        _load_variants()
        command = add_options(RunConfig)(component_options(step_options(command)))
    except ConfigError as error:
        raise VariantsError(str(error)) from None
    seen: dict[str, click.Parameter] = {}
    for param in getattr(command, "__click_params__", []):
        for key in {param.name, *param.opts, *param.secondary_opts} - {None}:
            if seen.setdefault(key, param) is not param:
                raise VariantsError(f"{key} is declared twice ({seen[key].opts[0]} and {param.opts[0]}): one flag each")
    return command


def from_values(values: dict[str, Any]) -> RunConfig:
    """The RunConfig from click's values (by parameter name): ConfigError, one line, if they do not go together."""
    values = dict(values)
    steps_given: dict[str, dict[str, ParamValue]] = {}
    for flag in step_flags():
        if flag.name in values:
            steps_given.setdefault(flag.step, {})[flag.field] = values.pop(flag.name)
    config = _variant_params(build(RunConfig, values), values)
    return dataclasses.replace(config, job=dataclasses.replace(config.job, steps=steps_given))


def data_command(config: RunConfig) -> str:
    """The command that makes this job's data, as its dataset card and dataset_info.json show it: the options
    that decide the data (the groups' and options' ``decides_data``, the job's axes' parameters given, the steps'
    flags away from their defaults), paths by their last part; not --output, ports, --workers or local
    directories, so every fleet that makes the same data shows the same command."""
    import math
    import shlex

    argv = ["python", "-m", "ventilator", *data_argv(config)]
    flags = {spec.field_name: spec.flag for axis, specs in axis_specs() if axis.choice is None for spec in specs}
    for name, value in config.job.params.items():
        argv += _flag_argv(flags[name], value)
    own = {(flag.step, flag.field): "--" + flag.name.replace("_", "-") for flag in step_flags()}
    for step_name, given in config.job.steps.items():
        defaults = {f.name: f.default for f in dataclasses.fields(steps()[step_name].Params)}
        for field_name, value in given.items():
            default = defaults.get(field_name)
            same = value == default or (isinstance(value, float) and isinstance(default, float)
                                        and math.isnan(value) and math.isnan(default))
            if not same and (step_name, field_name) in own:
                argv += _flag_argv(own[step_name, field_name], value)
    return shlex.join(argv)


def _flag_argv(flag: str, value: ParamValue) -> list[str]:
    if isinstance(value, bool):
        return [flag if value else f"--no-{flag[2:]}"]
    return [flag, str(value)]


def parse(argv: list[str]) -> RunConfig:
    """The RunConfig a command line (and the MLM_* variables) gives, as ``python -m ventilator`` builds it."""
    built: list[RunConfig] = []

    @click.command(cls=DeferredCommand, options=run_options, context_settings=command_settings("ventilator"))
    def command(**values):
        built.append(from_values(values))

    command.main(argv, standalone_mode=False)
    return built[0]
