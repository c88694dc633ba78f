"""The ventilator's whole command line as one typed, frozen value: :class:`RunConfig`.

Every option is declared once, here, as a field of a group (input, job, tokenizer, network, sink, fleet,
delivery, metrics, display) whose default is the one its user keeps (ServerOptions, SinkOptions,
JobConfig): click parses, :func:`from_values` builds the RunConfig, and the run, the job, the
server, the sink and the workers read their settings from it.  The axes' parameters (common/params.py) are
options too, collected in ``job.params``; a step that says when it is on (``Step.enabled``) declares its
own options in its ``Params`` (:func:`step_options`), collected in ``job.steps``: this module names none.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import click

from common.cli_settings import SectionedOption, add_options, build, option, option_fields
from common.config import JobConfig
from common.objectives import objectives
from common.params import ParamClash, ParamValue, PluginError, defaults_text, option_specs
from common.readers import readers
from common.security import Curve
from common.segmenters import segmenters
from common.steps import steps
from common.tasks import parse_size
from common.word_segmenters import NONE as NO_WORD_SEGMENTER
from common.word_segmenters import word_segmenters
from common.writers import writers
from sink.settings import SinkSettings
from ventilator.job import DEFAULT_TASK_SIZE
from ventilator.launchers import DEFAULT_LAUNCHER, launchers
from ventilator.publishers import DEFAULT_PUBLISHER, publishers
from ventilator.publishers.cloud_monitoring import CloudMonitoringOptions
from ventilator.publishers.cloudwatch import CloudWatchOptions
from ventilator.server import ServerOptions
from worker.settings import WorkerSettings

EXIT_FAILED = 1


def _load_variants() -> None:
    """Every axis's variants, installed plugins' included, before click builds the options from them: a
    broken plugin or two variants of one name is one line (--help included), not a traceback."""
    try:
        for axis in (readers, objectives, writers, word_segmenters, steps, segmenters, launchers, publishers):
            axis()
    except (PluginError, TypeError) as error:
        print(f"mlm-ventilator: error: {error}", file=sys.stderr)
        sys.exit(EXIT_FAILED)


_load_variants()


def addable_steps() -> dict:
    """The steps a user may add to a job (``--add-step``): those that do not say when they are on themselves."""
    return {name: step for name, step in steps().items() if not step.has_switch() and step.after is not None}


class ConfigError(ValueError):
    """A one-line reason the options given cannot make a run."""


def _size(_ctx, _param, value):
    try:
        return parse_size(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _token(role: str, example: str) -> Any:
    return option(f"--{role}-token", default=None, show_envvar=True,
                  help=f"The {example} where the tokenizer does not say.  [default: the tokenizer's]")


@dataclass(frozen=True)
class InputSettings:
    section: ClassVar[str] = "Input"  # its heading in --help
    data: str = option("--data", required=True, metavar="DIR|FILE|s3://BUCKET/PREFIX", show_envvar=True,
                       help="The corpus: WikiExtractor output (plain or --json), BERT's text format (one sentence per "
                            "line, blank line between documents), Parquet files or JSON Lines (docs/inputs.md).")
    corpus_format: str = option("--format", type=click.Choice(["auto", *sorted(readers())]),
                                default="auto", envvar="MLM_FORMAT", show_envvar=True,
                                help="Input format; auto detects it from the first file.")
    task_size: int = option("--task-size", default=parse_size(DEFAULT_TASK_SIZE), cli_default=DEFAULT_TASK_SIZE,
                            callback=_size, show_envvar=True,
                            help="Bytes of input per task (8M, 256K, ...); compressed files are one task each.")
    shared_fs: bool = option("--shared-fs", is_flag=True, default=False, show_envvar=True,
                             help="Workers can read --data themselves (same path): send byte ranges, not content. "
                                  "Implied for s3:// data.")
    s3_endpoint_url: str = option("--s3-endpoint-url", default="", show_envvar=True,
                                  help="For S3-compatible stores (credentials from the standard AWS chain).")


@dataclass(frozen=True)
class JobSettings:
    section: ClassVar[str] = "Job"  # its heading in --help
    output: str = option("--output", required=True, metavar="DIR|s3://BUCKET/PREFIX", show_envvar=True,
                         help="Where shards and manifest.jsonl go.")
    objective: str = option("--objective", type=click.Choice(sorted(objectives())), default="bert",
                            show_envvar=True, help="What the documents become (see the README's objectives table).")
    output_format: str = option("--output-format", type=click.Choice(sorted(writers())),
                                default="tfrecord", show_envvar=True,
                                help="How the records are written (see the README's formats table).")
    segmenter: str = option("--segmenter", type=click.Choice(["auto", *sorted(segmenters())]),
                            default="auto", show_envvar=True,
                            help="How segments for next-sentence prediction are cut: blingfire sentences, or lines "
                                 "as they are. auto: lines for --objective electra (its reference adds lines) and "
                                 "for the text format (already one sentence per line), sentences otherwise.")
    word_segmenter: str = option(
        "--word-segmenter", type=click.Choice([NO_WORD_SEGMENTER, *sorted(word_segmenters())]),
        default=NO_WORD_SEGMENTER, show_envvar=True,
        help="Find words inside runs of Han characters (Chinese) for whole-word masking and the output's word "
             "starts (docs/tokenizers.md, \"Chinese words\"); other scripts keep the tokenizer's words.")
    add_step: tuple[str, ...] = option(
        "--add-step", type=click.Choice(sorted(addable_steps())), multiple=True, default=(),
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
        help="Lower-case the text before the tokenizer (and strip accents, for a vocab.txt), whatever its family.  "
             "[default: on for a vocab.txt (BERT's); for a SentencePiece .model the objective's reference (on for "
             "bert, albert, electra); a tokenizers JSON or model directory as it says]")

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

    sink_address: str = option("--sink", default="", metavar="HOST:PORT", envvar="MLM_SINK", show_envvar=True,
                               help="Use a sink started elsewhere (python -m sink); without it, a local sink is "
                                    "started.")
    sink_port: int = option("--sink-port", type=int, default=SinkSettings.port, show_envvar=True,
                            help="Port of the sink started here.")
    state_dir: str = option("--state-dir", default=SinkSettings.state_dir, show_envvar=True,
                            help="For the local sink: where it journals the manifest of an S3 output.")
    sink_metrics_port: int | None = option(
        "--sink-metrics-port", type=click.IntRange(0, 65535), default=SinkSettings.metrics_port, show_envvar=True,
        help="The same for the sink started here (its --metrics-port).  [default: off]")
    instance_hourly_price: float | None = option(
        "--instance-hourly-price", type=click.FloatRange(min=0), default=SinkSettings.instance_hourly_price,
        show_envvar=True, help="For the sink started here (its --instance-hourly-price): USD per worker "
                               "instance-hour, for the cost in its summary.  [default: hours only]")

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
    launcher: str = option("--launcher", type=click.Choice(sorted(launchers())), default=DEFAULT_LAUNCHER,
                           show_envvar=True,
                           help="What starts and stops the sink and the workers this command runs "
                                "(ventilator/launchers/).")


@dataclass(frozen=True)
class DeliverySettings:
    section: ClassVar[str] = "Leases and delivery"  # its heading in --help
    lease_seconds: float = option("--lease-seconds", type=float, default=JobConfig.lease_seconds, show_envvar=True,
                                  help="A task whose worker sends no heartbeat for this long is handed to another.")
    heartbeat_seconds: float = option("--heartbeat-seconds", type=float, default=JobConfig.heartbeat_seconds,
                                      show_envvar=True)
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
        help="Serve Prometheus metrics (task states, workers, redeliveries) on this port.  [default: off]")
    backlog_publisher: str = option(
        "--backlog-publisher", type=click.Choice(sorted(publishers())), default=DEFAULT_PUBLISHER, show_envvar=True,
        help="Where the backlog is published for autoscaling, when its options are given (ventilator/publishers/).")
    cloudwatch_namespace: str = option(
        "--cloudwatch-namespace", default="", metavar="NAMESPACE", show_envvar=True,
        help="Publish the backlog (Backlog, PendingTasks, LeasedTasks, Workers, WorkerHosts, JobActive) to "
             "CloudWatch under this namespace, for the workers' Auto Scaling group (docs/fleet.md).  [default: off]")
    cloudwatch_region: str = option(
        "--cloudwatch-region", default="", show_envvar=True,
        help="Region of --cloudwatch-namespace.  [default: boto3's (AWS_DEFAULT_REGION, ~/.aws/config)]")
    cloudwatch_seconds: float = option("--cloudwatch-seconds", type=click.FloatRange(min=0.1), show_envvar=True,
                                       default=CloudWatchOptions.interval_seconds,
                                       help="How often the backlog is published.")
    cloud_monitoring_project: str = option(
        "--cloud-monitoring-project", default="", metavar="PROJECT", show_envvar=True,
        help="With --backlog-publisher cloud-monitoring: publish the backlog (backlog, pending_tasks, leased_tasks, "
             "workers, worker_hosts, job_active) to Google Cloud Monitoring as this project's custom metrics, for the "
             "workers' managed instance group (docs/fleet.md).  [default: off]")
    cloud_monitoring_prefix: str = option(
        "--cloud-monitoring-prefix", default=CloudMonitoringOptions.prefix, show_envvar=True,
        help="The metrics' type prefix: <prefix>/backlog is what the group's autoscaler reads (terraform/gcp).")
    cloud_monitoring_endpoint: str = option(
        "--cloud-monitoring-endpoint", default=CloudMonitoringOptions.endpoint, show_envvar=True,
        help="The Cloud Monitoring API's address (a private endpoint, or a test's).")
    cloud_monitoring_seconds: float = option("--cloud-monitoring-seconds", type=click.FloatRange(min=0.1),
                                             default=CloudMonitoringOptions.interval_seconds, show_envvar=True,
                                             help="How often the backlog is published to Cloud Monitoring.")

    def __post_init__(self):
        chosen = self.backlog_publisher
        if self.cloud_monitoring_project and chosen != "cloud-monitoring":
            raise ConfigError("--cloud-monitoring-project is for --backlog-publisher cloud-monitoring")
        if chosen == "cloud-monitoring" and not self.cloud_monitoring_project:
            raise ConfigError("--backlog-publisher cloud-monitoring needs --cloud-monitoring-project")


@dataclass(frozen=True)
class DisplaySettings:
    section: ClassVar[str] = "Display"  # its heading in --help
    progress: bool | None = option("--progress/--no-progress", default=None, show_envvar=True,
                                   help="A progress bar, with every local process's log lines above it.  [default: "
                                        "when stderr is a terminal]")
    verbose: int = option("-v", "--verbose", count=True, default=0, help="More logging.")


@dataclass(frozen=True)
class RunConfig:
    """One run of ``python -m ventilator``: everything its command line (and MLM_* variables) said."""

    input: InputSettings
    job: JobSettings
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
        return SinkSettings(ventilator=f"{ventilator_host}:{self.network.vport}", port=self.sink.sink_port,
                            bind_host=self.network.bind_host, state_dir=self.sink.state_dir,
                            curve_dir=self.network.curve_dir, metrics_port=self.sink.sink_metrics_port,
                            instance_hourly_price=self.sink.instance_hourly_price, verbose=self.display.verbose)

    def worker_settings(self, ventilator_host: str) -> WorkerSettings:
        """The settings of the ``--workers`` this command starts."""
        return WorkerSettings(ventilator=f"{ventilator_host}:{self.network.vport}", processes=self.fleet.workers,
                              curve_dir=self.network.curve_dir, verbose=self.display.verbose)


def component_options(command):
    """One option per parameter of every reader, objective, writer and word segmenter (see
    common/params.py): unset ones stay None, so each component keeps its own default and a flag the chosen
    ones do not take can be refused."""
    axes = {"Input": readers(), "Objective": objectives(), "Output": writers(),
            "Segmentation and words": word_segmenters(), "Added steps (--add-step)": addable_steps()}
    try:
        specs = option_specs([component for variants in axes.values() for component in variants.values()])
    except ParamClash as clash:  # at import, before click runs: one line, not a traceback (--help included)
        print(f"mlm-ventilator: error: {clash}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    section_of = {name: section for section, variants in reversed(axes.items())
                  for component in variants.values() for name in component.Params.__dataclass_fields__}
    for spec in reversed(specs):
        decls = [f"{spec.flag}/--no-{spec.flag[2:]}" if spec.type is bool else spec.flag, spec.name]
        command = click.option(*decls, cls=SectionedOption, section=section_of.get(spec.name, ""),
                               type=None if spec.type is bool else spec.type, default=None,
                               show_default=False, show_envvar=True,
                               help=f"{spec.help}  {defaults_text(spec)}")(command)
    return command


#: Options of a group shown under another heading of --help than their group's.
FIELD_SECTIONS = {"output": "Output", "output_format": "Output", "objective": "Objective",
                  "segmenter": "Segmentation and words", "word_segmenter": "Segmentation and words"}


@dataclass(frozen=True)
class StepFlag:
    """One option a step declares itself: a field of its ``Params`` that names its ``flag`` (common/params.py),
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
    for step_name, step_class in steps().items():
        if not step_class.has_switch():
            continue
        params_class = step_class.Params
        hints = typing.get_type_hints(params_class)
        section = getattr(params_class, "section", "") or f"Step {step_name}"
        for f in dataclasses.fields(params_class):
            flag = f.metadata.get("flag")
            if not flag:
                continue  # a parameter the job sets (segment's segmenter) or fixed (dedup's seed)
            name = flag[2:].replace("-", "_")
            if name in taken:
                raise ParamClash(f"{flag} is declared by step {step_name} and {taken[name]}: one flag each")
            taken[name] = f"step {step_name}"
            hint = hints[f.name]
            option = click.option(
                f"{flag}/--no-{flag[2:]}" if hint is bool else flag, name, cls=SectionedOption, section=section,
                section_after=getattr(params_class, "section_after", ""),
                type=None if hint is bool else (f.metadata.get("option_type") or hint), default=f.default,
                show_envvar=True, help=f.metadata.get("help", ""))
            made.append(StepFlag(step_name, f.name, name, option))
    return made


def step_options(command):
    """The steps' own options (:func:`step_flags`), each under its step's heading (``Params.section``)."""
    try:
        flags = step_flags()
    except ParamClash as clash:  # at import, before click runs: one line, not a traceback (--help included)
        print(f"mlm-ventilator: error: {clash}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    for flag in reversed(flags):
        command = flag.option(command)
    return command


def run_options(command):
    """Decorator: every option of the ventilator's command line.  Two options of one name or flag (a step's own
    flag that is also a variant's or the run's) are refused in one line: click would let one silently win."""
    command = add_options(RunConfig, FIELD_SECTIONS)(component_options(step_options(command)))
    seen: dict[str, click.Parameter] = {}
    for param in getattr(command, "__click_params__", []):
        for key in {param.name, *param.opts, *param.secondary_opts} - {None}:
            if seen.setdefault(key, param) is not param:
                print(f"mlm-ventilator: error: {key} is declared twice ({seen[key].opts[0]} and {param.opts[0]}): "
                      "one flag each", file=sys.stderr)
                sys.exit(EXIT_FAILED)
    return command


def from_values(values: dict[str, Any]) -> RunConfig:
    """The RunConfig from click's values (by parameter name): ConfigError, one line, if they do not go together."""
    values = dict(values)
    steps_given: dict[str, dict[str, ParamValue]] = {}
    for flag in step_flags():
        if flag.name in values:
            steps_given.setdefault(flag.step, {})[flag.field] = values.pop(flag.name)
    config = build(RunConfig, values)
    params = {name: value for name, value in values.items() if value is not None}  # the axes' options given
    return dataclasses.replace(config, job=dataclasses.replace(config.job, params=params, steps=steps_given))


def parse(argv: list[str]) -> RunConfig:
    """The RunConfig a command line (and the MLM_* variables) gives, as ``python -m ventilator`` builds it."""
    built: list[RunConfig] = []

    @click.command(context_settings={"auto_envvar_prefix": "MLM"})
    @run_options
    def command(**values):
        built.append(from_values(values))

    command.main(argv, standalone_mode=False)
    return built[0]
