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
from common.job.cli_settings import SectionedCommand, Size, command_settings
from common.job.params import PluginError
from common.storage import StorageError, open_storage
from report.build import REPORT_DIRECTORY, build_report

PAGE_NAME = f"{REPORT_DIRECTORY}/index.html"
JSON_NAME = f"{REPORT_DIRECTORY}/report.json"


def write_report(output: str, s3_endpoint_url: str = "", sample: int = 64 << 20, input_sample: int = 1 << 20) -> dict:
    """Build the report of ``output`` and write its page and JSON there; the report.  ImportError before anything
    is read or written when matplotlib (the ``report`` extra) is missing."""
    from report import plots

    plots.require()
    storage = open_storage(output, s3_endpoint_url or None)
    report = build_report(storage, sample, input_sample,
                          input_storage_opener=lambda uri, recorded: open_storage(
                              uri, s3_endpoint_url or recorded or None))
    from report.page import render

    page = render(report).encode()  # before writing either file: both or neither
    storage.put_bytes(JSON_NAME, json.dumps(report, indent=1, sort_keys=True, default=str).encode() + b"\n")
    storage.put_bytes(PAGE_NAME, page)
    return report


def unread_input(report: dict) -> str:
    """Why the job's input could not be read again ([UNK] by script), or "" (read, or not asked for)."""
    skipped = (report.get("unknown_text") or {}).get("skipped") or ""
    return skipped if skipped.startswith("the input ") else ""


@click.command(cls=SectionedCommand, context_settings=command_settings("report"))
@click.argument("output", metavar="DIR|s3://BUCKET/PREFIX|gs://BUCKET/PREFIX")
@click.option("--s3-endpoint-url", default="", show_envvar=True, help="An S3-compatible endpoint instead of AWS.")
@click.option("--sample", default="64M", type=Size(), show_envvar=True,
              help="Bytes of shards to read (whole files, spread over the output; a quarter more for the held-out "
                   "side). The manifest's counts are exact whatever it is.")
@click.option("--input-sample", default="1M", type=Size(), show_envvar=True,
              help="Bytes of the job's input to tokenize again for [UNK] by script and the text behind it; 0: skip.")
@click.option("-v", "--verbose", count=True, help="More logging.")
def main(output: str, s3_endpoint_url: str, sample: int, input_sample: int, verbose: int) -> None:
    """Write OUTPUT/report/index.html and report.json: sequences, lengths,
    padding, [UNK], top tokens, masking, labels, skips, dedup, throughput
    and cost.  Exits 0 when the report is written (1 if it could not be);
    an output with problems still gets one, marked as such, and the
    problems are printed."""
    logs.configure(verbose)
    try:
        report = write_report(output, s3_endpoint_url, sample, input_sample)
    except (StorageError, OSError, PluginError) as error:
        click.echo(f"mlm-report: error: {error}", err=True)
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
