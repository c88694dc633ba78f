"""Many simulated workers in one process: ``python -m bench.sim_fleet --ventilator HOST:PORT --workers N``.

Each simulated worker is a real DEALER connection to the ventilator speaking
the real protocol (common/wire/protocol.py) as worker/runtime.py does: Hello,
Welcome, TaskRequest with credit, heartbeats listing the tasks it holds,
TaskFinished, and a TaskAck to the sink.  It computes nothing: it holds each
task for ``--hold`` seconds (0: acknowledges at once), so the ventilator and
the sink are measured at the scale of thousands of workers on one machine.

One thread serves all of them (a poller over their sockets and a timer heap
for holds and heartbeats), so thousands fit in one process; the
acknowledgements of all of them share one PUSH to the sink (the sink takes
acknowledgements from any connection; a real worker process has its own).

``--vanish-after S --vanish N``: after S seconds, once N of them hold tasks, N of them close their
sockets at once, holding their tasks, as hosts lost to a spot reclaim: their
leases must expire and the tasks go to others, none lost or done twice.

At exit it writes a JSON report (``--report``): grants, acknowledgements,
heartbeats, the times of the first and last grant, the vanished workers'
held tasks and when they vanished.
"""

from __future__ import annotations

import heapq
import json
import os
import resource
import signal
import socket
import time
from dataclasses import dataclass, field

import click
import zmq

from common.job.config import JobConfig
from common.job.tasks import Task
from common.wire import protocol
from common.wire.transport import endpoint, make_socket, new_identity, parse_address


@dataclass
class SimWorker:
    identity: str
    dealer: zmq.Socket
    introduced: bool = False
    held: dict[str, Task] = field(default_factory=dict)
    shutdown: bool = False
    gone: bool = False


@dataclass
class Report:
    workers: int = 0
    grants: int = 0
    acks: int = 0
    heartbeats: int = 0
    heartbeat_replies: int = 0
    first_grant: float = 0.0
    last_grant: float = 0.0
    shutdowns: int = 0
    vanished: int = 0
    vanished_at: float = 0.0  # time.time()
    vanished_held: list[str] = field(default_factory=list)


class SimFleet:
    def __init__(self, ventilator: str, workers: int, hold: float, credit: int):
        self.host, self.port = parse_address(ventilator, 5557)
        self.hold, self.credit = hold, credit
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # one descriptor per connection
        self.context = zmq.Context()
        self.context.set(zmq.MAX_SOCKETS, workers + 64)
        self.workers: list[SimWorker] = []
        self.by_socket: dict[zmq.Socket, SimWorker] = {}
        self.poller = zmq.Poller()
        prefix = new_identity("sim")
        for index in range(workers):
            dealer = make_socket(self.context, zmq.DEALER, max_message_bytes=-1)
            worker = SimWorker(f"{prefix}-{index}", dealer)
            dealer.setsockopt(zmq.IDENTITY, worker.identity.encode())
            dealer.connect(endpoint(self.host, self.port))
            self.workers.append(worker)
            self.by_socket[dealer] = worker
            self.poller.register(dealer, zmq.POLLIN)
        self.push: zmq.Socket | None = None
        self.config: JobConfig | None = None
        self.timers: list[tuple[float, int, str, SimWorker, str]] = []  # (due, seq, kind, worker, task id)
        self.seq = 0
        self.report = Report(workers=workers)
        self.stopping = False

    def _send(self, worker: SimWorker, message) -> None:
        worker.dealer.send(protocol.encode(message), zmq.NOBLOCK)

    def _at(self, due: float, kind: str, worker: SimWorker, task_id: str = "") -> None:
        self.seq += 1
        heapq.heappush(self.timers, (due, self.seq, kind, worker, task_id))

    def _on_message(self, worker: SimWorker, message, now: float) -> None:
        if isinstance(message, protocol.Welcome):
            if self.config is None:
                self.config = JobConfig.from_welcome(message)
                sink_host, sink_port = parse_address(self.config.sink_address, 5558)
                self.push = make_socket(self.context, zmq.PUSH, linger_ms=10000)
                self.push.connect(endpoint(sink_host or self.host, sink_port))
            if not worker.introduced:
                worker.introduced = True
                self._send(worker, protocol.TaskRequest(self.credit))
                # Heartbeats spread over the interval, as independent workers' are.
                beat = self.config.heartbeat_seconds
                self._at(now + beat * (hash(worker.identity) % 1000) / 1000, "beat", worker)
        elif isinstance(message, protocol.TaskAssignment):
            task = Task.from_wire(message.task)
            report = self.report
            report.grants += 1
            report.first_grant = report.first_grant or time.time()
            report.last_grant = time.time()
            worker.held[task.task_id] = task
            if self.hold > 0:
                self._at(now + self.hold, "ack", worker, task.task_id)
            else:
                self._ack(worker, task.task_id)
        elif isinstance(message, protocol.HeartbeatReply):
            self.report.heartbeat_replies += 1
            if not message.known:
                worker.introduced = False
                self._send(worker, protocol.Hello(worker.identity, socket.gethostname(), os.getpid(), "worker"))
        elif isinstance(message, protocol.Shutdown):
            worker.shutdown = True
            self.report.shutdowns += 1

    def _ack(self, worker: SimWorker, task_id: str) -> None:
        task = worker.held.pop(task_id, None)
        if task is None or worker.gone:
            return
        assert self.push is not None and self.config is not None, "acks follow the welcome"
        self.push.send(protocol.encode(protocol.TaskAck(
            task_id=task.task_id, job_id=self.config.job_id, worker_id=worker.identity, source=task.path,
            start=task.start, end=task.end, version=task.version, shards=[], records=0,
            stats=protocol.AckStats(bytes_in=task.length))))
        self._send(worker, protocol.TaskFinished(task.task_id))
        self._send(worker, protocol.TaskRequest(1))
        self.report.acks += 1

    def _vanish(self, count: int) -> None:
        """``count`` workers holding tasks (others if too few hold any) drop off the network at once."""
        holding = sorted((w for w in self.workers if not w.gone), key=lambda w: not w.held)[:count]
        for worker in holding:
            worker.gone = True
            self.report.vanished_held.extend(worker.held)
            self.poller.unregister(worker.dealer)
            worker.dealer.close(linger=0)
        self.report.vanished = len(holding)
        self.report.vanished_at = time.time()

    def run(self, duration: float, vanish_after: float | None, vanish: int) -> Report:
        for worker in self.workers:
            self._send(worker, protocol.Hello(worker.identity, socket.gethostname(), os.getpid(), "worker"))
        started = time.monotonic()
        deadline = started + duration
        last_hello = started
        while time.monotonic() < deadline and not self.stopping:
            now = time.monotonic()
            live = [w for w in self.workers if not w.gone]
            if all(w.shutdown for w in live):  # the job ended, or every worker here vanished
                break
            if (vanish_after is not None and not self.report.vanished and now - started >= vanish_after
                    and sum(1 for w in live if w.held) >= min(vanish, len(live))):
                self._vanish(vanish)  # not before they hold tasks: on a loaded machine the time alone may come first
            if now - last_hello > 1.0:  # a Hello can be lost before the connection is up
                for worker in live:
                    if not worker.introduced:
                        self._send(worker, protocol.Hello(worker.identity, socket.gethostname(), os.getpid(),
                                                          "worker"))
                last_hello = now
            while self.timers and self.timers[0][0] <= now:
                _, _, kind, worker, task_id = heapq.heappop(self.timers)
                if worker.gone or worker.shutdown:
                    continue
                if kind == "ack":
                    self._ack(worker, task_id)
                else:
                    assert self.config is not None, "beats are timed after the welcome"
                    self._send(worker, protocol.Heartbeat(list(worker.held), awaiting=None))
                    self.report.heartbeats += 1
                    self._at(now + self.config.heartbeat_seconds, "beat", worker)
            wait = 50 if not self.timers else max(0, min(50, int((self.timers[0][0] - now) * 1000)))
            for sock, _ in self.poller.poll(timeout=wait):
                worker = self.by_socket[sock]
                while True:
                    try:
                        frame = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._on_message(worker, protocol.decode(frame), time.monotonic())
        return self.report

    def close(self) -> None:
        for worker in self.workers:
            if not worker.gone:
                worker.dealer.close(linger=0)
        if self.push is not None:
            self.push.close(linger=10000)
        self.context.term()


@click.command()
@click.option("--ventilator", required=True)
@click.option("--workers", type=int, default=100)
@click.option("--hold", type=float, default=0.0, help="Seconds each task is held before it is acknowledged.")
@click.option("--credit", type=int, default=1)
@click.option("--duration", type=float, default=600.0, help="Give up after this many seconds.")
@click.option("--vanish-after", type=float, default=None)
@click.option("--vanish", type=int, default=0)
@click.option("--report", "report_path", default=None)
def main(ventilator, workers, hold, credit, duration, vanish_after, vanish, report_path):
    fleet = SimFleet(ventilator, workers, hold, credit)
    # SIGTERM (the benchmark stopping a fleet whose workers missed the Shutdown) ends the loop: the report is
    # still written.
    signal.signal(signal.SIGTERM, lambda *_: setattr(fleet, "stopping", True))
    try:
        report = fleet.run(duration, vanish_after, vanish)
    finally:
        fleet.close()
    text = json.dumps(report.__dict__)
    if report_path:
        with open(report_path, "w") as handle:
            handle.write(text)
    print(text)


if __name__ == "__main__":
    main()
