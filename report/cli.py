"""``mlm-report OUT``: look at the data before training on it.

Writes ``OUT/report/index.html`` (one self-contained page, plots inline)
and ``OUT/report/report.json`` (the same numbers), and nothing else in OUT.
"""

from __future__ import annotations

import json
import sys

import click

import common.one_blas_thread  # noqa: F401  (before numpy: see the module)
from common import logs
from common.job.cli_settings import SectionedCommand, Size, command_option, command_settings, naming_variables
from common.job.params import PluginError
from common.storage import StorageError, open_storage
from report.build import REPORT_DIRECTORY, build_report

PAGE_NAME = f"{REPORT_DIRECTORY}/index.html"
JSON_NAME = f"{REPORT_DIRECTORY}/report.json"


def write_report(output: str, s3_endpoint_url: str = "", sample: int = 64 << 20, input_sample: int = 1 << 20,
                 mixture: dict | None = None) -> dict:
    """Build the report of ``output`` and write its page and JSON there; the report.  ImportError before anything
    is read or written when matplotlib (the ``report`` extra) is missing.  ``mixture``: the Mixture section
    (report.mixture.describe_mixture) of several outputs, ``output`` the first."""
    from report import plots

    plots.require()
    storage = open_storage(output, s3_endpoint_url or None)
    report = build_report(storage, sample, input_sample,
                          input_storage_opener=lambda uri, recorded: open_storage(
                              uri, s3_endpoint_url or recorded or None))
    if mixture is not None:
        report["mixture"] = mixture
    from report.page import render

    page = render(report).encode()  # before writing either file: both or neither
    storage.put_bytes(JSON_NAME, json.dumps(report, indent=1, sort_keys=True, default=str).encode() + b"\n")
    storage.put_bytes(PAGE_NAME, page)
    return report


def _mixture(outputs, weights, temperature, schedule, seed, shuffle_window, by_tokens, mix_tokens,
             s3_endpoint_url) -> dict:
    """The Mixture section, or a one-line usage error (the loader's own checks of the flags and the outputs)."""
    from report.mixture import MixtureError, describe_mixture, open_mixture

    try:
        opened = open_mixture(outputs, weights, temperature, schedule, seed, shuffle_window, by_tokens,
                              s3_endpoint_url or None)
    except MixtureError as error:
        raise click.UsageError(str(error)) from None
    except (StorageError, OSError) as error:
        click.echo(f"mlm-report: error: {naming_variables(str(error))}", err=True)
        sys.exit(1)
    if opened is None:
        raise click.UsageError("a mixture needs several outputs")
    plan, names = opened
    return describe_mixture(plan, names, mix_tokens)


def unread_input(report: dict) -> str:
    """Why the job's input could not be read again ([UNK] by script), or "" (read, or not asked for)."""
    skipped = (report.get("unknown_text") or {}).get("skipped") or ""
    return skipped if skipped.startswith("the input ") else ""


@click.command(cls=SectionedCommand, context_settings=command_settings("report"))
@click.argument("outputs", metavar="DIR|s3://BUCKET/PREFIX|gs://BUCKET/PREFIX...", nargs=-1, required=True)
@command_option("--s3-endpoint-url", default="", show_envvar=True, help="An S3-compatible endpoint instead of AWS.")
@command_option("--sample", default="64M", type=Size(), show_envvar=True,
              help="Bytes of shards to read (whole files, spread over the output; a quarter more for the held-out "
                   "side). The manifest's counts are exact whatever it is.")
@command_option("--input-sample", default="1M", type=Size(), show_envvar=True,
              help="Bytes of the job's input to tokenize again for [UNK] by script and the text behind it; 0: skip.")
@command_option("--weights", default=None, show_envvar=True,
              help="Several outputs: describe them mixed as mlm-loader --weights mixes them (0.7,0.3; or OUT=WEIGHT).")
@command_option("--temperature", type=click.FloatRange(0, 10), default=None, show_envvar=True,
              help="Several outputs: shares proportional to each one's tokens ** this, as mlm-loader --temperature.")
@command_option("--mix-schedule", type=click.Path(dir_okay=False, exists=True), default=None, show_envvar=True,
              help="Several outputs: mlm-loader's --mix-schedule file of phases (docs/loader.md, Mixtures).")
@command_option("--seed", type=int, default=0, show_envvar=True,
              help="Several outputs: the loader's --seed (the sources' orders, so which records fill each phase).")
@command_option("--shuffle-window", type=click.IntRange(min=1), default=65536, show_envvar=True,
              help="Several outputs: the loader's --shuffle-window.")
@command_option("--batch-tokens", type=click.IntRange(min=1), default=None, show_envvar=True,
              help="Several outputs: the loader's --batch-tokens, if it has one: the plan then counts each record's "
                   "own tokens, not its sequence length.",
              described="as given, else on when a source's records vary in length")
@command_option("--mix-tokens", type=click.IntRange(min=1), default=None, show_envvar=True,
              help="Several outputs: tokens of the stream to describe.",
              described="to the last phase and one mixture epoch more")
@command_option("-v", "--verbose", count=True, help="More logging.")
def main(outputs: tuple[str, ...], s3_endpoint_url: str, sample: int, input_sample: int, weights: str | None,
         temperature: float | None, mix_schedule: str | None, seed: int, shuffle_window: int, batch_tokens: int | None,
         mix_tokens: int | None, verbose: int) -> None:
    """Write OUTPUT/report/index.html and report.json: sequences, lengths,
    padding, [UNK], top tokens, masking, labels, skips, dedup, throughput
    and cost.  Exits 0 when the report is written (1 if it could not be);
    an output with problems still gets one, marked as such, and the
    problems are printed.  Several outputs (with mlm-loader's mixture
    flags): a Mixture section too, target and realized token shares per
    source and phase, in the first output's report."""
    logs.configure(verbose)
    mixture = None
    output = outputs[0]
    if len(outputs) > 1 or weights or temperature is not None or mix_schedule:
        mixture = _mixture(outputs, weights, temperature, mix_schedule, seed, shuffle_window,
                           True if batch_tokens else None, mix_tokens,
                           s3_endpoint_url)
        output = mixture["sources"][0]
    try:
        report = write_report(output, s3_endpoint_url, sample, input_sample, mixture)
    except (StorageError, OSError, PluginError) as error:
        click.echo(f"mlm-report: error: {naming_variables(str(error))}", err=True)
        sys.exit(1)
    except ImportError as error:
        click.echo(f"mlm-report: error: {error.name or error} is not installed: pip install "
                   "'mlm-pipeline[report]'", err=True)
        sys.exit(1)
    for problem in report["problems"]:
        click.echo(f"mlm-report: {problem}", err=True)
    unread = unread_input(report)
    if unread:
        click.echo(f"mlm-report: {unread}", err=True)
    sample_info = report["sample"]
    click.echo(f"{output.rstrip('/')}/{PAGE_NAME}: {report['sides']['train']['sequences']:,} sequences; read "
               f"{sample_info['files_read']} of {sample_info['files_total']} files "
               f"({sample_info['bytes_read'] / 1e6:,.1f} of {sample_info['bytes_total'] / 1e6:,.1f} MB) in "
               f"{report['seconds']:.1f} s; " + ("no problem found" if report["ok"]
                                                 else f"{len(report['problems'])} problem(s)")
               + ("; the input was not read: no [UNK] by script" if unread else ""))


if __name__ == "__main__":
    main()
