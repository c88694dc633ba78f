"""The sink's side of "one job has one sink", and what it lets into the manifest: a real SinkServer (in a thread)
over real ZeroMQ sockets, its ventilator played by the test.  Told to stand by, it writes nothing until it is
welcomed; told so while it holds the books (another sink took them over), it stops without publishing.
Acknowledgements are fed well-typed hostile values drawn by hypothesis: one whose task id is not its range's
(a forged one) is dropped and counted at receipt; the rest make strict JSON lines."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import msgpack
import orjson
import zmq
from hypothesis import strategies as st

from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import task_id_of
from common.wire import protocol
from sink.server import SinkOptions, SinkServer
from tests.common.test_protocol import _well_typed
from tests.support.helpers import drawn_values, free_ports
from tests.support.run_configs import steps_of


class PlayedVentilator:
    """A ROUTER the sink connects to, and a PUSH to the sink's acknowledgement port."""

    def __init__(self, tmp_path):
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.vport = self.router.bind_to_random_port("tcp://127.0.0.1")
        (self.port,) = free_ports(1)
        self.server = SinkServer(SinkOptions(ventilator=f"127.0.0.1:{self.vport}", port=self.port,
                                             bind_host="127.0.0.1", state_dir=str(tmp_path / "state"),
                                             report_seconds=3600))
        self.status: list[int] = []
        self.thread = threading.Thread(target=lambda: self.status.append(self.server.run()), daemon=True)
        self.thread.start()
        self.push = self.context.socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.connect(f"tcp://127.0.0.1:{self.port}")
        self.identity = b""

    def receive(self, kind: type, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.router.poll(100):
                self.identity, frame = self.router.recv_multipart()
                message = protocol.decode(frame)
                if isinstance(message, kind):
                    return message
        raise AssertionError(f"no {kind.__name__} from the sink")

    def send(self, message) -> None:
        self.router.send_multipart([self.identity, protocol.encode(message)])

    def close(self) -> None:
        self.server.stopping = True
        self.thread.join(30)
        self.push.close()
        self.router.close()
        self.context.term()


def _config(out) -> JobConfig:
    return JobConfig(data_uri="d", output_uri=str(out), reader=Component("wikiextractor"), steps=steps_of("line"),
                     tokenizer_json="")


def test_a_sink_told_to_stand_by_writes_nothing_until_welcomed(tmp_path, caplog):
    out = tmp_path / "out"
    config = _config(out)
    played = PlayedVentilator(tmp_path)
    config = dataclasses.replace(config, sink_address=f":{played.port}")  # the workers' acks reach this sink
    try:
        for _ in range(3):  # it says Hello each second, and is told each time: it says so once
            played.receive(protocol.Hello)
            played.send(protocol.SinkStandby("sink-a\x00", "host-a", 7.0))
        task = task_id_of("src", 0, 1)
        played.push.send(protocol.encode(protocol.TaskAck(task, config.job_id, "w", "src", 0, 1, "v", [], 0,
                                                          protocol.AckStats())))
        played.receive(protocol.Hello)
        assert not out.exists(), "a stand-by sink wrote into the output"
        played.send(protocol.Welcome(config.encoded(), config.job_id, "v1"))  # the job's sink went silent
        assert played.receive(protocol.SinkHello).job_id == config.job_id
        assert played.receive(protocol.TasksDone).task_ids == [task]  # what it was sent while it stood by
    finally:
        played.close()
    said = [record.getMessage() for record in caplog.records if "standing by" in record.getMessage()]
    assert len(said) == 1 and "sink-a\\x00 on host-a" in said[0] and "7 s" in said[0]
    assert "takes over its books" in caplog.text


def test_a_sink_whose_books_another_took_over_stops_without_publishing(tmp_path):
    out = tmp_path / "out"
    config = _config(out)
    played = PlayedVentilator(tmp_path)
    try:
        played.receive(protocol.Hello)
        played.send(protocol.Welcome(config.encoded(), config.job_id, "v1"))
        played.receive(protocol.SinkHello)
        played.send(protocol.SinkStandby("sink-b", "host-b", 6.5))
        played.thread.join(30)
        assert played.status == [1]
        told = []
        while played.router.poll(500):
            told.append(protocol.decode(played.router.recv_multipart()[1]))
        assert not [m for m in told if isinstance(m, protocol.SinkClosed)], "it is not the job's sink any more"
    finally:
        played.close()
    assert not (out / "summary.json").exists() and not (out / "dataset_info.json").exists()


def test_hostile_acknowledgements_are_dropped_at_receipt_or_make_strict_json_lines(tmp_path):
    """Well-typed TaskAcks with hostile values (hypothesis): those of this job whose id is their range's are
    listed, as strict JSON; the others (a forged id: the first half; another job) are dropped and counted, and
    never reach the manifest or summary.json."""
    out = tmp_path / "out"
    config = _config(out)
    acks = drawn_values(_well_typed(protocol.TaskAck, in_range=True), 120)
    frames, genuine = [], set()
    for number, fields in enumerate(acks):
        fields = {**fields, "v": protocol.PROTOCOL_VERSION, "t": "TaskAck", "job_id": config.job_id, "shards": []}
        if number % 2:  # its id made its range's: a task's as a worker sends it
            fields["task_id"] = task_id_of(fields["source"], fields["start"], fields["end"], fields["stage"])
        frames.append(msgpack.packb(fields, use_bin_type=True))
        try:
            ack = protocol.decode(frames[-1])
        except protocol.ProtocolError:
            continue
        if ack.task_id == task_id_of(ack.source, ack.start, ack.end, ack.stage):
            genuine.add(ack.task_id)
    assert len(genuine) >= 20
    forged = protocol.TaskAck("f" * 20, config.job_id, "w", "forged-source", 0, 1, "v", [], 0,
                              protocol.AckStats(documents=10**6))
    frames.append(protocol.encode(forged))
    played = PlayedVentilator(tmp_path)
    try:
        played.receive(protocol.Hello)
        played.send(protocol.Welcome(config.encoded(), config.job_id, "v1"))
        played.receive(protocol.SinkHello)
        for frame in frames:
            played.push.send(frame)
        confirmed: set[str] = set()
        deadline = time.monotonic() + 60
        while not genuine <= confirmed:
            assert time.monotonic() < deadline, f"confirmed {len(confirmed & genuine)} of {len(genuine)}"
            confirmed.update(played.receive(protocol.TasksDone).task_ids)
        assert confirmed == genuine, f"{len(confirmed - genuine)} forged acknowledgement(s) confirmed"
        played.send(protocol.Shutdown("job finished"))
        assert played.receive(protocol.SinkClosed).error == ""
        played.thread.join(30)
    finally:
        played.close()
    lines = [orjson.loads(line) for line in (out / "manifest.jsonl").read_bytes().splitlines()]
    assert {line["task"] for line in lines} == genuine
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"] == len(genuine)
    assert summary["dropped_messages"]["ack whose task id is not its range's"] >= 1


def test_the_stand_by_message_carries_only_checked_values():
    """SinkStandby's numbers are checked where they are decoded, like every message's."""
    for seconds in drawn_values(st.sampled_from([float("inf"), float("nan"), -1.0, 1e300]), 4):
        frame = msgpack.packb({"v": protocol.PROTOCOL_VERSION, "t": "SinkStandby", "sink_id": "s", "host": "h",
                               "takeover_seconds": seconds})
        try:
            protocol.decode(frame)
        except protocol.ProtocolError:
            continue
        raise AssertionError(f"SinkStandby with takeover_seconds={seconds} decoded")
