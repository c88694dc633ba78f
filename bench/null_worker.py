"""A worker that does no work: ``python -m bench.null_worker --ventilator HOST:PORT``.

It speaks the real protocol (common/wire/protocol.py) as worker/runtime.py does
— Hello, Welcome, TaskRequest with credit, heartbeats — but acknowledges
every TaskAssignment at once: a TaskAck to the sink (no shard, no records)
and TaskFinished to the ventilator, then asks for one more task.  With
these, the ventilator and the sink are measured alone: how fast they hand
out and record tasks when workers cost nothing.

At exit it writes a JSON report (``--report``): tasks, bytes received, and
the monotonic times of the first assignment and of the Shutdown.
"""

from __future__ import annotations

import json
import os
import socket
import time

import click
import zmq

from common.job.config import JobConfig
from common.job.tasks import Task
from common.wire import protocol
from common.wire.transport import endpoint, make_socket, new_identity, parse_address


def run(ventilator: str, credit: int, report: str | None, timeout: float) -> int:
    host, port = parse_address(ventilator, 5557)
    identity = new_identity("nullworker")
    context = zmq.Context()
    dealer = make_socket(context, zmq.DEALER, max_message_bytes=-1)
    dealer.setsockopt(zmq.IDENTITY, identity.encode())
    dealer.connect(endpoint(host, port))
    push = None
    config: JobConfig | None = None
    job_id = ""
    tasks = received = 0
    first = last = shutdown = 0.0
    last_hello = last_heartbeat = 0.0
    deadline = time.monotonic() + timeout
    send = lambda message: dealer.send(protocol.encode(message))  # noqa: E731
    try:
        while time.monotonic() < deadline:
            now = time.monotonic()
            if config is None and now - last_hello > 0.5:
                send(protocol.Hello(identity, socket.gethostname(), os.getpid(), "worker"))
                last_hello = now
            if config is not None and now - last_heartbeat > config.heartbeat_seconds:
                send(protocol.Heartbeat([]))
                last_heartbeat = now
            if not dealer.poll(timeout=100):
                continue
            message = protocol.decode(dealer.recv())
            if isinstance(message, protocol.Welcome):
                if config is None:
                    config = JobConfig.from_welcome(message)
                    job_id = config.job_id
                    sink_host, sink_port = parse_address(config.sink_address, 5558)
                    push = make_socket(context, zmq.PUSH, linger_ms=10000)
                    push.connect(endpoint(sink_host or host, sink_port))
                    send(protocol.TaskRequest(credit))
            elif isinstance(message, protocol.TaskAssignment):
                assert push is not None, "a ventilator sends the welcome before any task"
                task = Task.from_wire(message.task)
                size = len(message.content) if message.content is not None else task.length
                now = time.monotonic()
                first = first or now
                last = now
                push.send(protocol.encode(protocol.TaskAck(
                    task_id=task.task_id, job_id=job_id, worker_id=identity, source=task.path, start=task.start,
                    end=task.end, version=task.version, shards=[], records=0,
                    stats=protocol.AckStats(bytes_in=size))))
                send(protocol.TaskFinished(task.task_id))
                send(protocol.TaskRequest(1))
                tasks += 1
                received += size
            elif isinstance(message, protocol.Shutdown):
                shutdown = time.monotonic()
                break
        else:
            return 1
    finally:
        if report:
            with open(report, "w") as handle:
                json.dump({"tasks": tasks, "bytes": received, "first": first, "last": last,
                           "shutdown": shutdown}, handle)
        dealer.close(linger=0)
        if push is not None:
            push.close()
        context.term()
    return 0


@click.command()
@click.option("--ventilator", required=True, metavar="HOST:PORT")
@click.option("--credit", type=click.IntRange(min=1), default=2, help="Tasks asked for at once.")
@click.option("--report", default=None, help="JSON file to write the counts and times to.")
@click.option("--timeout", type=float, default=600.0, help="Give up (exit 1) after this many seconds.")
def main(ventilator: str, credit: int, report: str | None, timeout: float) -> None:
    raise SystemExit(run(ventilator, credit, report, timeout))


if __name__ == "__main__":
    main()
