"""``python -m ventilator --data DIR --output OUT [--workers N] [job flags]``."""

from __future__ import annotations

import contextlib
import logging
import sys

import click

from common import logs
from common.config import JobConfig
from common.dedup.settings import MODES, DedupSettings
from common.holdout import DEFAULT_SEED as DEFAULT_HOLDOUT_SEED
from common.objectives import objectives
from common.params import ParamClash, PluginError, defaults_text, option_specs
from common.readers import readers
from common.writers import writers
from common.word_segmenters import NONE as NO_WORD_SEGMENTER, word_segmenters
from common.security import Curve
from common.tasks import parse_size
from common.version import command_line
from common.transport import SINK_PORT, VENTILATOR_PORT, ListenError
from ventilator.cloudwatch import CloudWatchOptions
from ventilator.job import JobError, JobOptions, prepare_job
from ventilator.local import LocalFleet
from ventilator.display import TerminalDisplay
from ventilator.server import ServerOptions, VentilatorServer

log = logging.getLogger("ventilator")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_QUARANTINED = 3
EXIT_INTERRUPTED = 130


def _load_variants() -> None:
    """Every axis's variants, installed plugins' included, before click builds the options from them: a
    broken plugin or two variants of one name is one line (--help included), not a traceback."""
    try:
        for axis in (readers, objectives, writers, word_segmenters):
            axis()
    except (PluginError, TypeError) as error:
        print(f"mlm-ventilator: error: {error}", file=sys.stderr)
        sys.exit(EXIT_FAILED)


_load_variants()


def component_options(command):
    """One option per parameter of every reader, objective, writer and word
    segmenter (see common/params.py), and the word segmenter's choice: unset ones stay None, so each component keeps its own
    default and a flag the chosen ones do not take can be refused."""
    try:
        specs = option_specs([*readers().values(), *objectives().values(), *writers().values(),
                              *word_segmenters().values()])
    except ParamClash as clash:  # at import, before click runs: one line, not a traceback (--help included)
        print(f"mlm-ventilator: error: {clash}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    for spec in reversed(specs):
        decls = [f"{spec.flag}/--no-{spec.flag[2:]}" if spec.type is bool else spec.flag, spec.name]
        command = click.option(*decls, type=None if spec.type is bool else spec.type, default=None,
                               show_default=False, show_envvar=True,
                               help=f"{spec.help}  {defaults_text(spec)}")(command)
    command = click.option(
        "--word-segmenter", "word_segmenter", type=click.Choice([NO_WORD_SEGMENTER, *sorted(word_segmenters())]),
        default=NO_WORD_SEGMENTER, show_envvar=True,
        help="Find words inside runs of Han characters (Chinese) for whole-word masking and the output's word "
             "starts (docs/tokenizers.md, \"Chinese words\"); other scripts keep the tokenizer's words.")(command)
    return command


def _size(_ctx, _param, value):
    try:
        return parse_size(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


@click.command(context_settings={"auto_envvar_prefix": "MLM", "show_default": True,
                                 "help_option_names": ["-h", "--help"]})
@click.option("--data", required=True, metavar="DIR|FILE|s3://BUCKET/PREFIX", show_envvar=True,
              help="The corpus: WikiExtractor output (plain or --json), BERT's text format (one sentence per line, blank line between documents), Parquet files or JSON Lines (docs/inputs.md).")
@click.option("--output", required=True, metavar="DIR|s3://BUCKET/PREFIX", show_envvar=True,
              help="Where shards and manifest.jsonl go.")
@click.option("--vport", type=int, default=VENTILATOR_PORT, show_envvar=True, help="Port workers and the sink connect to.")
@click.option("--bind-host", default="*", show_envvar=True, help="Interface to listen on (* for all).")
@click.option("--sink", "sink_address", default="", metavar="HOST:PORT", envvar="MLM_SINK", show_envvar=True,
              help="Use a sink started elsewhere (python -m sink); without it, a local sink is started.")
@click.option("--sink-port", type=int, default=SINK_PORT, show_envvar=True, help="Port of the sink started here.")
@click.option("--workers", type=click.IntRange(min=0), default=0, show_envvar=True,
              help="Also start this many worker processes on this machine.")
@click.option("--format", "corpus_format", type=click.Choice(["auto", *sorted(readers())]), default="auto",
              envvar="MLM_FORMAT", show_envvar=True, help="Input format; auto detects it from the first file.")
@click.option("--objective", type=click.Choice(sorted(objectives())), default="bert", show_envvar=True,
              help="What the documents become (see the README's objectives table).")
@click.option("--output-format", type=click.Choice(sorted(writers())), default="tfrecord", show_envvar=True,
              help="How the records are written (see the README's formats table).")
@click.option("--segmenter", type=click.Choice(["auto", "blingfire", "line"]), default="auto", show_envvar=True,
              help="How segments for next-sentence prediction are cut: blingfire sentences, or lines as they are. "
                   "auto: lines for --objective electra (its reference adds lines) and for the text format (already one "
                   "sentence per line), sentences otherwise.")
@click.option("--vocab-file", type=click.Path(dir_okay=False), default=None, show_envvar=True,
              help="BERT vocab.txt (e.g. bert-base-uncased's). Or use --tokenizer.")
@click.option("--tokenizer", type=click.Path(), default=None, show_envvar=True,
              help="A tokenizers JSON (WordPiece, BPE or Unigram model), a SentencePiece .model, or a local Hugging "
                   "Face model directory (tokenizer.json, vocab.txt or a .model in it).")
@click.option("--cls-token", default=None, show_envvar=True,
              help="The classifier token ([CLS], <s>) where the tokenizer does not say.  [default: the tokenizer's]")
@click.option("--sep-token", default=None, show_envvar=True,
              help="The separator token ([SEP], </s>) where the tokenizer does not say.  [default: the tokenizer's]")
@click.option("--mask-token", default=None, show_envvar=True,
              help="The mask token ([MASK], <mask>) where the tokenizer does not say.  [default: the tokenizer's]")
@click.option("--pad-token", default=None, show_envvar=True,
              help="The padding token ([PAD], <pad>) where the tokenizer does not say.  [default: the tokenizer's]")
@click.option("--unk-token", default=None, show_envvar=True,
              help="The unknown token ([UNK], <unk>) where the tokenizer does not say.  [default: the tokenizer's]")
@click.option("--do-lower-case/--no-do-lower-case", default=None, show_envvar=True,
              help="Lower-case the text before the tokenizer (and strip accents, for a vocab.txt), whatever its "
                   "family.  [default: on for a vocab.txt (BERT's); for a SentencePiece .model the objective's "
                   "reference (on for bert, albert, electra); a tokenizers JSON or model directory as it says]")
@click.option("--task-size", default="8M", callback=_size, show_envvar=True,
              help="Bytes of input per task (8M, 256K, ...); compressed files are one task each.")
@click.option("--holdout-fraction", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_envvar=True,
              help="Hold out this fraction of the documents (by a hash of their id, or text, and --holdout-seed) "
                   "into OUT/holdout/, with its own shards; none of them is in a training instance. 0: off.")
@click.option("--holdout-seed", type=int, default=DEFAULT_HOLDOUT_SEED, show_envvar=True,
              help="Which documents --holdout-fraction holds out (not --random-seed: outputs made with other "
                   "objectives or seeds hold out the same ones).")
@click.option("--shared-fs", is_flag=True, default=False, show_envvar=True,
              help="Workers can read --data themselves (same path): send byte ranges, not content. Implied for s3:// data.")
@click.option("--s3-endpoint-url", default="", show_envvar=True,
              help="For S3-compatible stores (credentials from the standard AWS chain).")
@click.option("--lease-seconds", type=float, default=JobConfig.lease_seconds, show_envvar=True,
              help="A task whose worker sends no heartbeat for this long is handed to another.")
@click.option("--heartbeat-seconds", type=float, default=JobConfig.heartbeat_seconds, show_envvar=True)
@click.option("--max-attempts", type=click.IntRange(min=1), default=3, show_envvar=True,
              help="A task that fails this often is quarantined and reported; the run goes on.")
@click.option("--report-seconds", type=float, default=10.0, show_envvar=True, help="Progress log interval.")
@click.option("--state-dir", default="~/.cache/mlm-pipeline", show_envvar=True,
              help="For the local sink: where it journals the manifest of an S3 output.")
@click.option("--confirm-seconds", type=float, default=120.0, show_envvar=True,
              help="A finished task the sink has not confirmed within this time is done again.")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None, show_envvar=True,
              help="Encrypt and authenticate with CURVE keys from this directory (made by mlm-keys).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, show_envvar=True,
              help="Serve Prometheus metrics (task states, workers, redeliveries) on this port.  [default: off]")
@click.option("--sink-metrics-port", type=click.IntRange(0, 65535), default=None, show_envvar=True,
              help="The same for the sink started here (its --metrics-port).  [default: off]")
@click.option("--cloudwatch-namespace", default="", metavar="NAMESPACE", show_envvar=True,
              help="Publish the backlog (Backlog, PendingTasks, LeasedTasks, Workers, WorkerHosts, JobActive) to "
                   "CloudWatch under this namespace, for the workers' Auto Scaling group (docs/fleet.md).  "
                   "[default: off]")
@click.option("--cloudwatch-region", default="", show_envvar=True,
              help="Region of --cloudwatch-namespace.  [default: boto3's (AWS_DEFAULT_REGION, ~/.aws/config)]")
@click.option("--cloudwatch-seconds", type=click.FloatRange(min=0.1), default=60.0, show_envvar=True,
              help="How often the backlog is published.")
@click.option("--instance-hourly-price", type=click.FloatRange(min=0), default=None, show_envvar=True,
              help="For the sink started here (its --instance-hourly-price): USD per worker instance-hour, for the "
                   "cost in its summary.  [default: hours only]")
@click.option("--progress/--no-progress", default=None, show_envvar=True,
              help="A progress bar, with every local process's log lines above it.  [default: when stderr is a "
                   "terminal]")
@click.option("--dedup", type=click.Choice(MODES), default="off", show_envvar=True,
              help="Remove duplicate documents across the whole corpus before the normal pass: exact (same "
                   "normalised text) or minhash (also near-duplicates). See docs/dedup.md.")
@click.option("--minhash-ngram", type=click.IntRange(min=1), default=DedupSettings.ngram, show_envvar=True,
              help="Words per shingle (--dedup minhash).")
@click.option("--minhash-perm", type=click.IntRange(1, 1024), default=DedupSettings.perm, show_envvar=True,
              help="MinHash permutations (--dedup minhash).")
@click.option("--minhash-threshold", type=float, default=DedupSettings.threshold, show_envvar=True,
              help="Jaccard similarity the LSH bands and rows are chosen for, as datasketch does (--dedup minhash).")
@click.option("--minhash-bands", type=click.IntRange(min=0), default=0, show_envvar=True,
              help="LSH bands, with --minhash-rows, instead of --minhash-threshold's choice.  [default: derived]")
@click.option("--minhash-rows", type=click.IntRange(min=0), default=0, show_envvar=True,
              help="Rows (permutations) per LSH band, with --minhash-bands.  [default: derived]")
@click.option("--dedup-partitions", type=click.IntRange(0, 65535), default=0, show_envvar=True,
              help="Bucket tasks (each holds 1/N of the keys).  [default: one per 256 MiB of input]")
@click.option("-v", "--verbose", count=True, help="More logging.")
@component_options
def main(data, output, vport, bind_host, sink_address, sink_port, workers, corpus_format, objective, output_format,
         segmenter, vocab_file, tokenizer, cls_token, sep_token, mask_token, pad_token, unk_token, do_lower_case,
         task_size, holdout_fraction, holdout_seed, shared_fs, s3_endpoint_url, lease_seconds, heartbeat_seconds,
         max_attempts, report_seconds, state_dir, confirm_seconds, curve_dir, metrics_port, sink_metrics_port,
         cloudwatch_namespace,
         cloudwatch_region, cloudwatch_seconds, instance_hourly_price, progress, dedup, minhash_ngram, minhash_perm,
         minhash_threshold, minhash_bands, minhash_rows, dedup_partitions, verbose, **component_params) -> None:
    """Cut a corpus into tasks and hand them to workers over ZeroMQ.

    Serves the job (tokenizer, BERT parameters, output) to every worker and
    sink that connects on --vport, leases tasks to workers, and exits 0 once
    the sink has every task in OUT/manifest.jsonl.  Run the same command
    again after a crash or Ctrl-C to resume.

    One machine, everything: python -m ventilator --data DIR --output OUT
    --vocab-file vocab.txt --workers 2
    """
    logs.configure(verbose)
    options = JobOptions(
        data=data, output=output, vocab_file=vocab_file, tokenizer=tokenizer, do_lower_case=do_lower_case,
        special_tokens={role: token for role, token in (("cls", cls_token), ("sep", sep_token), ("mask", mask_token),
                                                        ("pad", pad_token), ("unk", unk_token)) if token},
        corpus_format=corpus_format, segmenter=segmenter, objective=objective, output_format=output_format,
        word_segmenter=component_params.pop("word_segmenter"),
        params={name: value for name, value in component_params.items() if value is not None},
        task_size=task_size, holdout_fraction=holdout_fraction, holdout_seed=holdout_seed, shared_fs=shared_fs,
        s3_endpoint_url=s3_endpoint_url, sink_address=sink_address or f":{sink_port}",
        lease_seconds=lease_seconds, heartbeat_seconds=heartbeat_seconds,
        dedup=DedupSettings(mode=dedup, ngram=minhash_ngram, perm=minhash_perm, bands=minhash_bands,
                            rows=minhash_rows, threshold=minhash_threshold, partitions=dedup_partitions),
        command=command_line())
    if sink_address and sink_metrics_port is not None:
        click.echo("ventilator: error: --sink-metrics-port is for the sink this command starts; with --sink, "
                   "give that sink its own --metrics-port", err=True)
        sys.exit(EXIT_FAILED)
    if sink_address and instance_hourly_price is not None:
        click.echo("ventilator: error: --instance-hourly-price is for the sink this command starts; with --sink, "
                   "give that sink its own --instance-hourly-price", err=True)
        sys.exit(EXIT_FAILED)
    try:
        job = prepare_job(options)
    except JobError as error:
        click.echo(f"ventilator: error: {error}", err=True)
        sys.exit(EXIT_FAILED)

    show_progress = sys.stderr.isatty() if progress is None else progress
    display = TerminalDisplay(len(job.tasks), sum(task.length for task in job.tasks)) if show_progress else None
    relay = display.print_line if display is not None else None
    if display is not None:
        logs.route_to(display.print_line)

    fleet = LocalFleet()
    verbosity = ["-v"] * verbose + (["--curve-dir", curve_dir] if curve_dir else [])
    if not sink_address:
        metrics = [] if sink_metrics_port is None else ["--metrics-port", str(sink_metrics_port)]
        if instance_hourly_price is not None:
            metrics += ["--instance-hourly-price", str(instance_hourly_price)]
        fleet.start("sink", "sink", ["--port", str(sink_port), "--bind-host", bind_host,
                                     "--ventilator", f"127.0.0.1:{vport}", "--state-dir", state_dir, *metrics,
                                     *verbosity], relay)
    if workers:
        fleet.start("workers", "worker", ["--ventilator", f"127.0.0.1:{vport}", "--processes", str(workers),
                                          *verbosity], relay)

    server_options = ServerOptions(bind_host=bind_host, port=vport, max_attempts=max_attempts,
                                   report_seconds=report_seconds, confirm_seconds=confirm_seconds,
                                   curve=Curve(curve_dir) if curve_dir else None, metrics_port=metrics_port,
                                   on_progress=display.update if display is not None else None,
                                   cloudwatch=CloudWatchOptions(cloudwatch_namespace, cloudwatch_region,
                                                                cloudwatch_seconds) if cloudwatch_namespace else None)
    with display if display is not None else contextlib.nullcontext():
        code, message = _run(job, server_options, fleet)
    click.echo(f"ventilator: {message}", err=True)
    sys.exit(code)


def _run(job, server_options: ServerOptions, fleet: LocalFleet) -> tuple[int, str]:
    """Run the job to its end; the exit status and its one-line reason."""
    failure: list[str] = []

    def child_failed() -> bool:
        reason = fleet.failure()
        if reason:
            failure.append(reason)
        return bool(reason)

    server = VentilatorServer(job, server_options, should_stop=child_failed, peers_gone=fleet.all_exited)
    try:
        result = server.run()
    except ListenError as error:
        fleet.terminate()
        fleet.wait(timeout=30)
        return EXIT_FAILED, f"error: {error}"
    except BaseException:
        fleet.terminate()
        raise
    if server.interrupted or failure:
        fleet.terminate()  # SIGTERM: workers drain, the sink flushes
    codes = fleet.wait(timeout=120)
    if failure:
        return EXIT_FAILED, f"error: {failure[0]}"
    if server.interrupted:
        return EXIT_INTERRUPTED, result.reason
    bad = {name: code for name, code in codes.items() if code not in (0, None)}
    if not result.completed:
        return EXIT_QUARANTINED, f"error: {result.reason} (see the sink's summary)"
    if bad:
        return EXIT_FAILED, f"error: local processes exited badly: {bad}"
    return EXIT_OK, f"done: {result.reason}"
