"""Flood a sink with acknowledgements: ``python -m bench.flood --ventilator HOST:PORT --data DIR --task-size N``.

It asks the ventilator for the job (a Hello as a worker: the Welcome holds
the job id the sink checks), lists the same tasks the ventilator planned
(the same input and task size give the same tasks), encodes one valid
TaskAck per task up front, then PUSHes them all to the sink as fast as ZMQ
takes them.  The sink writes one manifest line per ack and confirms to the
ventilator, which ends the job when every task is confirmed.

With ``--window N`` (the benchmark's way) at most N acks are in flight:
sent but not yet in the manifest, which it watches.  That keeps the sink
saturated without filling its receive queue (1000 messages).  With the
queue full for longer than the ZMTP heartbeat timeout (common/wire/transport.py
sets heartbeats on every socket), libzmq 4.3 either aborts the sink
("Assertion failed: !_io_error (src/stream_engine_base.cpp:310)", libzmq
issues #4364, #3937) or drops the connection and the acks queued on it;
``--window 0`` (unbounded) reproduces both when the sink is slower than the flood.

Prints a JSON line: acks sent and the wall-clock times (time.time()) the
first was sent and the last was queued.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

import click
import zmq

from common.job.config import JobConfig
from common.job.tasks import parse_size, plan_tasks
from common.storage import LocalStorage
from common.wire import protocol
from common.wire.transport import endpoint, make_socket, new_identity, parse_address
from common.writers import ShardFile


def ack_frames(config: JobConfig, data: str, task_size: int, worker_id: str) -> list[bytes]:
    tasks = list(plan_tasks(LocalStorage(data).list_inputs(), task_size))
    stats: dict[str, Any] = dict(documents=1, segments=10, tokens=300, instances=5, bytes_out=4000,
                                 seconds={"tokenize": 0.01}, cpu_seconds=0.01)
    return [protocol.encode(protocol.TaskAck(
        task_id=t.task_id, job_id=config.job_id, worker_id=worker_id, source=t.path, start=t.start, end=t.end,
        version=t.version, shards=[ShardFile(f"part-{t.task_id}.tfrecord", 5, "0" * 64, 4000)], records=5,
        stats=protocol.AckStats(**stats, bytes_in=t.length))) for t in tasks]


class _Lines:
    """Lines of a growing file, counted incrementally."""

    def __init__(self, path: str):
        self._handle = open(path, "rb")
        self._count = 0

    def count(self) -> int:
        self._count += self._handle.read().count(b"\n")
        return self._count


@click.command()
@click.option("--ventilator", required=True, metavar="HOST:PORT")
@click.option("--data", required=True, help="The ventilator's --data.")
@click.option("--task-size", required=True, help="The ventilator's --task-size.")
@click.option("--manifest", default=None, help="The sink's manifest.jsonl, to keep --window acks in flight.")
@click.option("--window", type=int, default=800, help="Acks in flight at most (0: no limit).")
def main(ventilator: str, data: str, task_size: str, manifest: str | None, window: int) -> None:
    host, port = parse_address(ventilator, 5557)
    identity = new_identity("flood")
    context = zmq.Context()
    dealer = make_socket(context, zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, identity.encode())
    dealer.connect(endpoint(host, port))
    config = None
    deadline = time.monotonic() + 60
    while config is None and time.monotonic() < deadline:
        dealer.send(protocol.encode(protocol.Hello(identity, socket.gethostname(), os.getpid(), "worker")))
        if dealer.poll(timeout=1000):
            message = protocol.decode(dealer.recv())
            if isinstance(message, protocol.Welcome):
                config = JobConfig.from_welcome(message)
    if config is None:
        raise SystemExit("flood: no Welcome from the ventilator")
    frames = ack_frames(config, data, parse_size(task_size), identity)
    sink_host, sink_port = parse_address(config.sink_address, 5558)
    push = make_socket(context, zmq.PUSH, linger_ms=60000)
    push.connect(endpoint(sink_host or host, sink_port))
    time.sleep(0.2)  # connected before the clock starts
    written = _Lines(manifest) if manifest and window > 0 else None
    started = time.time()
    for sent, frame in enumerate(frames):
        while written is not None and sent - written.count() >= window:
            time.sleep(0.0005)
        push.send(frame)
    queued = time.time()
    push.close()  # lingers until every ack is delivered
    dealer.close(linger=0)
    context.term()
    print(json.dumps({"acks": len(frames), "started": started, "queued": queued, "delivered": time.time()}))


if __name__ == "__main__":
    main()
