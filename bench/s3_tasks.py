"""The ventilator on an S3 corpus of many objects: ``python -m bench.s3_tasks``.

Uploads N small WikiExtractor objects to a local Ceph radosgw (started by
scripts/s3-server.sh), then times the real ventilator listing them and
handing out one byte-range task per object to null workers: tasks/s, and
the bytes of a task message on the wire.  The ventilator never reads the
objects (``--format`` is given, so not even the first one for detection):
the workers receive ranges, no content.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from bench.procs import free_ports, start_module, stop
from common.job.tasks import Task
from common.wire import protocol


@click.command(help="Time the ventilator handing out tasks of an S3 corpus of many objects.")
@click.option("--objects", type=click.IntRange(min=1), default=10_000, show_default=True)
@click.option("--workers", "null_workers", type=click.IntRange(min=1), default=4, show_default=True,
              help="Null workers taking the tasks.")
@click.option("--vocab-file", type=click.Path(exists=True, dir_okay=False),
              default=str(Path(__file__).resolve().parents[2] / "shared" / "vocab" / "bert-base-uncased-vocab.txt"),
              show_default=True)
def main(objects: int, null_workers: int, vocab_file: str) -> None:

    from tests.support.s3_server import S3Server

    doc = b'<doc id="1" url="u" title="t">\nt\n\nA sentence. Another sentence here.\n</doc>\n'
    with S3Server() as s3, tempfile.TemporaryDirectory() as tmp:
        client = s3.client()
        client.create_bucket(Bucket="corpus")
        started = time.monotonic()
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda i: client.put_object(Bucket="corpus", Key=f"c/{i // 1000:02d}/wiki_{i:05d}", Body=doc),
                          range(objects)))
        upload = time.monotonic() - started

        vport, sink_port = free_ports(2)
        os.environ.update(s3.env())  # the roles read the S3 credentials from the environment
        work = Path(tmp)
        sink = start_module("sink", "--ventilator", f"127.0.0.1:{vport}", "--port", sink_port, "--bind-host",
                            "127.0.0.1", "--state-dir", work / "state", log=work / "sink.log")
        workers = [start_module("bench.null_worker", "--ventilator", f"127.0.0.1:{vport}", "--credit", "4",
                                "--report", work / f"null-{i}.json", log=work / f"null-{i}.log")
                   for i in range(null_workers)]
        started = time.monotonic()
        ventilator = start_module("ventilator", "--data", "s3://corpus/c", "--output", work / "out", "--vport", vport,
                                  "--bind-host", "127.0.0.1", "--sink", f"127.0.0.1:{sink_port}", "--s3-endpoint-url",
                                  s3.endpoint_url, "--vocab-file", vocab_file, "--format", "wikiextractor",
                                  log=work / "ventilator.log")
        code = ventilator.wait(timeout=900)
        elapsed = time.monotonic() - started
        stop([sink, *workers])
        log = (work / "ventilator.log").read_text()
        assert code == 0, log[-3000:]
        reports = [json.loads((work / f"null-{i}.json").read_text()) for i in range(null_workers)]
        tasks = sum(r["tasks"] for r in reports)
        first = min(r["first"] for r in reports if r["first"])
        last = max(r["last"] for r in reports if r["last"])
        message = protocol.encode(protocol.TaskAssignment(
            Task("00/wiki_00000", 0, len(doc), len(doc), '"0123456789abcdef0123456789abcdef"').to_wire(), 60.0, 1,
            None))
        print(f"| S3 corpus of {objects} objects (upload {upload:.0f} s) | |")
        print(f"| ventilator command, start to exit (list, plan, hand out, wait for the sink) | {elapsed:.1f} s |")
        print(f"| tasks handed out / s, first to last assignment | {tasks / max(last - first, 1e-9):,.0f} |")
        print(f"| tasks received by null workers | {tasks} |")
        print(f"| bytes of a task message (TaskAssignment, no content) | {len(message)} |")


if __name__ == "__main__":
    main(prog_name="python -m bench.s3_tasks")
