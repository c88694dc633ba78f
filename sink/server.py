"""The sink's event loop: PULL acknowledgements, keep the manifest, confirm.

An acknowledgement becomes a manifest line (fsync'd) before the ventilator
hears the task is done, so a crash anywhere loses at most work that will be
redone.  Acknowledgements of tasks already listed (a task redone after a
lease expired) are confirmed again but not listed twice.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import re
import socket
import time
import traceback

import zmq

from common import logs
from common.describe import dataset_card, dataset_info
from common.job.config import JobConfig
from common.job.tasks import task_id_of
from common.kernels import FORCE_NUMPY, NUMPY
from common.metrics import MetricsServer, counter, gauge
from common.objectives import objective_named
from common.output.files import manifest_file
from common.output.manifest import LINE_FIELDS, ManifestMismatch
from common.output.manifest import counters as step_counters
from common.steps import job_steps
from common.storage import StorageError, open_storage
from common.wire import protocol
from common.wire.inbox import Handlers, Inbox, Sender, serving
from common.wire.transport import (
    SINK_PORT,
    VENTILATOR_PORT,
    DroppedMessages,
    ListenError,
    endpoint,
    listen,
    make_socket,
    new_identity,
    parse_address,
    printable,
)
from common.writers import writer_named
from common.writers.base import finish_job
from sink.cost import CostLedger, describe, earlier_cost, job_cost, sequence_length
from sink.manifest import Manifest
from sink.options import SinkOptions
from sink.progress import Throughput

log = logging.getLogger("sink")

SUMMARY_NAME = "summary.json"
#: The largest count a message carries (common/wire/envelope.py: Count).
MAX_COUNT = 2**53
#: Task ids in one TasksDone (~100 KB, under the ventilator's inbound limit).
TASKS_DONE_BATCH = 5000
ACK_BATCH = 1000
#: Acknowledgements held while the sink knows no job (before its Welcome, or standing by for another sink).
#: Beyond this many, more are dropped and counted: their tasks stay unconfirmed, and the ventilator has them done
#: again, so a flood (a hostile peer, or a fleet acking into a sink that stands by for hours) costs a counter,
#: not the sink's memory.
MAX_EARLY_ACKS = 100_000
#: And at most about this many bytes of them (encoded): one may be up to the socket's 1 MiB (MAX_INBOUND_BYTES), so
#: the count alone let a hostile peer's bulky acknowledgements hold 100 GB.
MAX_EARLY_ACK_BYTES = 64 << 20


class SinkError(Exception):
    """The sink cannot go on.  ``final``: nor could another sink on this job (a component it lacks, an output
    of another job), so the ventilator is told to fail the job; otherwise (the store down while the manifest
    loads) a sink started again may carry on."""

    def __init__(self, message: str, final: bool = True):
        super().__init__(message)
        self.final = final


def _books(config: JobConfig) -> tuple:
    """What makes another manifest: the job, and where its output goes."""
    return config.job_id, config.output_uri, config.s3_endpoint_url


def cannot_keep(config: JobConfig) -> str:
    """Why this sink cannot keep and close ``config``'s books ("" when it can), found before any task is
    recorded: describing the output needs every step's class (a plugin step this sink lacks), closing the
    books needs the writer's (``finish_job``) and the objective's (dataset_info.json), and the output must
    open.  A Welcome is hostile input like any frame.  The job's id is not computed again: it came with the
    Welcome, and the manifest's lines are checked against it (``Manifest.load``)."""
    try:
        job_steps(config)  # every step's class and checked parameters
        writer_named(config.writer.name)
        objective_named(config.objective.name)  # dataset_info.json describes its features
        open_storage(config.output_uri, config.s3_endpoint_url)
    except Exception as error:  # whatever the components raise: one line, the job fails
        return f"{type(error).__name__}: {error}" if not isinstance(error, (ValueError, StorageError)) else str(error)
    return ""


def manifest_entry(ack: protocol.TaskAck) -> dict:
    stats = ack.stats
    files = [manifest_file(f) for f in ack.shards]
    entry = {
        "task": ack.task_id, "job": ack.job_id, "source": ack.source, "start": ack.start, "end": ack.end,
        "version": ack.version, "shards": [] if ack.stage else files, "records": ack.records,
        "documents": stats.documents, "skipped": stats.skipped, "tokens": stats.tokens, "bytes": stats.bytes_out,
        "worker": ack.worker_id,
        # When the sink recorded it and what it took: throughput over time, per worker (mlm-report).
        "at": round(time.time(), 3), "seconds": round(sum(stats.seconds.values()), 3), "bytes_in": stats.bytes_in,
        # What the task cost and made, so the job's cost adds up over its runs (sink/cost.py: job_cost).
        "cpu_seconds": round(stats.cpu_seconds, 3), "output_tokens": stats.output_tokens,
    }
    if ack.stage:  # a step's stage's task: its files are not training shards (docs/dedup.md)
        entry["stage"] = ack.stage
        entry["files"] = files
    for name, values in stats.counters.items():  # each step's (or split's) counters under its name
        if values and name not in LINE_FIELDS:
            entry[name] = dict(values)
    return entry


def _exposed(name: str) -> str:
    """A metric family's name as the exposition writes it (characters Prometheus names lack become _)."""
    return re.sub(r"[^a-zA-Z0-9_:]", "_", name)


class SinkServer:
    def __init__(self, options: SinkOptions):
        self.options = options
        self.sink_id = new_identity("sink")
        self.stopping = False
        self.dropped = DroppedMessages("sink")
        self.throughput = Throughput()
        self.cost = CostLedger(options.instance_hourly_price)
        self.config: JobConfig | None = None
        self.manifest: Manifest | None = None
        self.output = None
        self.ventilator_id = ""
        self.quarantined: dict[str, protocol.Quarantine] = {}
        self.earlier_cost: dict | None = None  # the cost of the job's earlier runs (their summary.json)
        self.duplicates = 0
        self.unrecorded = 0  # acknowledgements the manifest could not take (I/O errors), left unconfirmed
        self.finish_error = ""  # why the last _finish could not publish (its status was 1)
        self._tell_ventilator = None  # sends a message on the DEALER, once it is connected
        self.inbox = Inbox(protocol.CODEC, self.dropped)
        self._from_ventilator = (Handlers("the ventilator").on(protocol.Welcome, self._welcome)
                                 .on(protocol.HeartbeatReply, self._heartbeat_reply)
                                 .on(protocol.TasksQuarantined, self._tasks_quarantined)
                                 .on(protocol.WorkerHosts, self._worker_hosts).on(protocol.Shutdown, self._shutdown)
                                 .on(protocol.SinkStandby, self._stand_by))
        self._on_ack_socket = Handlers("a worker's ack socket").on(protocol.TaskAck, self._ack)
        # The loop's state the handlers share: welcomed since our last Hello, when we sent it, the
        # acknowledgements received (before the job: kept until it comes), the status once Shutdown closed
        # the books, the sockets.
        self._introduced = False
        self._standing_by = False  # told that the job has another sink: this one writes nothing
        self._ventilator_restarted = False  # the last "unknown" came from another ventilator than ours
        self._last_hello = 0.0
        self._acks: list[protocol.TaskAck] = []
        self._early_acks: list[protocol.TaskAck] = []
        self._early_ack_bytes = 0  # their size encoded (MAX_EARLY_ACK_BYTES)
        self._exit_code: int | None = None
        # Tasks recorded, not yet confirmed to the ventilator: held while our last TasksDone is unread there.
        self._held: list[str] = []
        self._held_documents = 0
        self._confirming_since: float | None = None  # when the last TasksDone (and its Heartbeat) went out
        self._pull: zmq.Socket | None = None
        self._dealer: zmq.Socket | None = None

    def _on_signal(self, name: str) -> None:
        log.info("sink: %s, flushing and exiting", name)
        self.stopping = True

    def run(self) -> int:
        with serving(zmq.PULL, self.options.curve, self._on_signal, linger_ms=0) as pull:
            return self._serve(pull)

    def _serve(self, pull: zmq.Socket) -> int:
        curve = self.options.curve
        host, port = parse_address(self.options.ventilator, VENTILATOR_PORT)
        # It connects to its ventilator only, like a worker, and the Welcome holds the tokenizer (over 1 MB for
        # vocabularies of 80k+ tokens): a limit here cut the connection at each Welcome and the job waited forever.
        dealer = make_socket(pull.context, zmq.DEALER, max_message_bytes=-1)
        dealer.setsockopt(zmq.IDENTITY, self.sink_id.encode())
        if curve:
            curve.connect_as_client(dealer)
        metrics = None
        try:
            listen(pull, self.options.bind_host, self.options.port)
            dealer.connect(endpoint(host, port))
            self._tell_ventilator = lambda message: dealer.send(protocol.encode(message))
            log.info("sink %s: acknowledgements on port %d, ventilator %s:%d", self.sink_id, self.options.port,
                     host, port)
            if self.options.metrics_port is not None:
                metrics = MetricsServer(self.metrics, self.options.metrics_port, self.options.bind_host)
            return self._loop(pull, dealer)
        except (SinkError, ListenError) as error:
            log.error("sink: %s", error)
            if getattr(error, "final", False):
                self._closed(str(error))
            return 1
        except Exception as error:  # a bug or a component's failure: one line, and the job fails
            log.error("sink: failed: %s: %s", type(error).__name__, error)
            log.debug("%s", traceback.format_exc())
            self._closed(f"{type(error).__name__}: {error}")
            return 1
        finally:
            if metrics is not None:
                metrics.close()
            if self.manifest is not None:
                self.manifest.close()
            dealer.close(linger=2000)

    def _loop(self, pull: zmq.Socket, dealer: zmq.Socket) -> int:
        poller = zmq.Poller()
        poller.register(pull, zmq.POLLIN)
        poller.register(dealer, zmq.POLLIN)
        self._pull, self._dealer = pull, dealer
        send = self._send
        last_heartbeat = 0.0
        last_report = last_publish = time.monotonic()
        # The ventilator's silence, said when a Hello or Heartbeat has had no answer that long (heartbeats may be
        # minutes apart): not running, unreachable, or of another version (it drops our messages).
        silence = logs.Reminder(logs.SILENCE_WARNING_SECONDS)
        asked_at: float | None = None  # when the oldest Hello or Heartbeat not answered since was sent
        while self._exit_code is None:
            now = time.monotonic()
            if self.stopping:
                return self._finish("stopped by signal")
            heartbeat_every = self.config.heartbeat_seconds if self.config else 1.0
            if not self._introduced and now - self._last_hello > 1.0:
                send(protocol.Hello(self.sink_id, socket.gethostname(), os.getpid(), "sink"))
                self._last_hello = now
                asked_at = now if asked_at is None else asked_at
            if self.config is not None and now - last_heartbeat > heartbeat_every:
                send(protocol.Heartbeat([]))
                last_heartbeat = now
                asked_at = now if asked_at is None else asked_at
            if now - last_report > self.options.report_seconds and self.config is not None:
                log.info("%s", self.throughput.line(now))
                last_report = now
            if self.manifest is not None and now - last_publish > self.options.publish_seconds:
                try:
                    self.manifest.publish()
                except (StorageError, OSError) as error:  # the journal is safe; publish again later
                    log.warning("sink: could not publish the manifest yet: %s", error)
                last_publish = now

            if self._held and self.config is not None:
                self._confirm(send)  # no answer within a heartbeat interval: they go out anyway
            events = dict(poller.poll(timeout=200))
            if pull in events:
                acks = self._drain_acks(pull)
                if self.config is None:
                    self._hold(acks)
                else:
                    self._record(acks, send)
            if dealer in events and self.inbox.receive(dealer, self._from_ventilator):
                asked_at = None
            unanswered = now - asked_at if asked_at is not None else 0.0
            if silence.due(unanswered, now):
                log.warning("sink: no answer from the ventilator at %s in %.0f s: is it running (and done "
                            "planning), reachable from here, and of this version (wire protocol %d)?  A ventilator "
                            "drops the messages of another version, and its log says so", self.options.ventilator,
                            unanswered, protocol.PROTOCOL_VERSION)
        return self._exit_code

    def _welcome(self, message: protocol.Welcome, _sender: Sender) -> None:
        if self._introduced and message.ventilator_id == self.ventilator_id:
            # The answer to a Hello repeated while the ventilator was still planning (queued
            # Hellos reach it together): it has our done list already, and at a million tasks
            # sending it again costs seconds on both sides.
            return
        config = JobConfig.from_welcome(message)  # a job that does not decode: counted and dropped
        self._introduced = True
        if self._standing_by:
            # The workers push their acknowledgements to the job's sink address: a sink listening on another
            # port (it stood by while the job's sink held that one) would take over books no ack reaches, and the
            # job would wait forever.  It steps aside; a sink started on that port (the old one gone) takes over.
            _host, ack_port = parse_address(config.sink_address, SINK_PORT)
            if ack_port != self.options.port:
                raise SinkError(f"cannot take over this job's books: its workers send acknowledgements to port "
                                f"{ack_port} (the job's sink address), this sink listens on "
                                f"{self.options.port}; start a sink with --port {ack_port} now that the job's "
                                f"sink is gone", final=False)
            log.warning("sink: the job's sink went silent: this sink takes over its books")
            self._standing_by = False
        refused = cannot_keep(config)
        if refused:
            raise SinkError(f"cannot keep this job's books: {refused}")
        if self.config is not None and _books(config) != _books(self.config):
            # A new ventilator with another job: close this one's books first.
            log.info("sink: the ventilator now runs job %s (was %s)", config.job_id, self.config.job_id)
            self._finish("another job started")
            self.manifest.close()
            self.manifest = None
            self.throughput, self.quarantined, self.duplicates = Throughput(), {}, 0
            self._held, self._held_documents, self._confirming_since = [], 0, None  # that job's, unsent
            self.cost = CostLedger(self.options.instance_hourly_price)
        if self.manifest is None:
            self._start_job(config)
        self.config = config  # the same job may come with other lease settings
        self.ventilator_id = message.ventilator_id
        self._hello_done(self._send)
        if self._early_acks:
            self._record(self._early_acks, self._send)
            self._early_acks, self._early_ack_bytes = [], 0

    def _heartbeat_reply(self, message: protocol.HeartbeatReply, _sender: Sender) -> None:
        # Every message the ventilator had queued before our Hello reached it is answered
        # "unknown": one Hello (repeated each second until welcomed) is enough.
        if self._introduced and (not message.known or message.ventilator_id != self.ventilator_id):
            log.info("sink: the ventilator does not know this sink (it restarted); telling it what is done")
            self._ventilator_restarted = message.ventilator_id != self.ventilator_id
            self._introduced = False
            self._last_hello = 0.0
        else:
            self._confirm(self._send, answered=True)  # our TasksDone before it were read

    def _stand_by(self, message: protocol.SinkStandby, _sender: Sender) -> None:
        """The ventilator's job has another sink (one job has one sink).  One that never held the books waits,
        writing nothing, and says Hello each second: it is welcomed once that sink has been silent
        ``takeover_seconds`` (it died).  One that held them was taken over while silent that long: it stops,
        publishing nothing (the books are the other sink's now).  One that held them when its ventilator
        restarted (kill -9, a new host) was silent for no one: the new ventilator welcomed another sink's Hello
        first.  It puts its books down and stands by, so that the job still has a sink when that one cannot
        keep them (it listens where no acknowledgement goes, say) or dies."""
        holder = f"{printable(message.sink_id)} on {printable(message.host)}"
        if self.manifest is not None and self._ventilator_restarted:
            log.warning("sink: the restarted ventilator welcomed another sink (%s) first: this sink puts this "
                        "job's books down and stands by, writing nothing", holder)
            self.manifest.close()
            self.manifest, self.config = None, None  # acknowledgements wait, as before a Welcome
        if self.manifest is not None:
            log.error("sink: another sink (%s) took over this job's books while this one was silent for %.0f s: "
                      "stopping, publishing nothing", holder, message.takeover_seconds)
            self._tell_ventilator = None  # not the job's sink: it has nothing to close
            self._exit_code = 1
            return
        if not self._standing_by:
            log.warning("sink: standing by, writing nothing: this job's sink is %s (one job has one sink); this "
                        "one takes over if that one is silent for %.0f s", holder, message.takeover_seconds)
            self._standing_by = True

    def _tasks_quarantined(self, message: protocol.TasksQuarantined, _sender: Sender) -> None:
        self.quarantined.update(message.failures)

    def _worker_hosts(self, message: protocol.WorkerHosts, _sender: Sender) -> None:
        self.cost.add_spans(message.hosts)

    def _shutdown(self, message: protocol.Shutdown, _sender: Sender) -> None:
        if self._pull is not None:
            self._record(self._drain_acks(self._pull), self._send)
        code = self._finish(message.reason, job_over=True)
        self._closed(self.finish_error)
        self._exit_code = code

    def _closed(self, error: str) -> None:
        """Tell the ventilator the books are closed, or why they cannot be (the DEALER's linger delivers it)."""
        if self._tell_ventilator is not None:
            try:
                self._tell_ventilator(protocol.SinkClosed(error[:2000]))
            except zmq.ZMQError:
                pass
            self._tell_ventilator = None

    def _start_job(self, config: JobConfig) -> None:
        self.config = config
        self.output = open_storage(config.output_uri, config.s3_endpoint_url)
        self.manifest = Manifest(self.output, config.job_id, self.options.state_dir,
                                 writer_named(config.writer.name).suffixes)
        try:
            entries = self.manifest.load()
        except ManifestMismatch as error:  # the output is another job's: no sink can keep this job's books there
            raise SinkError(str(error)) from None
        except StorageError as error:  # the store, for now: a sink started again may read it
            raise SinkError(str(error), final=False) from None
        self.earlier_cost = earlier_cost(self.output, config.job_id)
        log.info("sink: job %s, manifest %s holds %d tasks", config.job_id, self.manifest.path, len(entries))

    def _hello_done(self, send) -> None:
        done = self.manifest.done
        items = iter(done.items())  # (no list of a million pairs beside the done set)
        chunk = 5000  # ~300 KB a message, under the ventilator's inbound limit
        for start in range(0, max(len(done), 1), chunk):
            part = dict(itertools.islice(items, chunk))
            send(protocol.SinkHello(self.sink_id, self.config.job_id, part, start + chunk >= len(done)))

    def _drain_acks(self, pull: zmq.Socket) -> list[protocol.TaskAck]:
        """Up to ACK_BATCH waiting acknowledgements: one fsync for them all,
        and the sink's memory bounded by the batch, not by the job."""
        for _ in range(ACK_BATCH):
            try:
                self.inbox.receive(pull, self._on_ack_socket, zmq.NOBLOCK)
            except zmq.Again:
                break
        acks, self._acks = self._acks, []
        return acks

    def _hold(self, acks: list[protocol.TaskAck]) -> None:
        """Keep acknowledgements until the job is known, at most MAX_EARLY_ACKS of them (the rest dropped and
        counted: unconfirmed, their tasks are done again)."""
        for ack in acks:
            if len(self._early_acks) >= MAX_EARLY_ACKS or self._early_ack_bytes >= MAX_EARLY_ACK_BYTES:
                self.dropped.drop(f"acknowledgement while no job is known, beyond {MAX_EARLY_ACKS} held or "
                                  f"{MAX_EARLY_ACK_BYTES:,} bytes (its task is done again)")
                continue
            self._early_acks.append(ack)
            self._early_ack_bytes += len(protocol.encode(ack))

    def _ack(self, ack: protocol.TaskAck, _sender: Sender) -> None:
        self._acks.append(ack)

    def _send(self, message: object) -> None:
        """To the ventilator, on the DEALER."""
        self._dealer.send(protocol.encode(message))

    def _record(self, acks: list[protocol.TaskAck], send) -> None:
        valid = []
        for ack in acks:
            if ack.job_id != self.config.job_id:
                self.dropped.drop(f"ack for another job ({printable(ack.job_id)})")
                continue
            if ack.task_id != task_id_of(ack.source, ack.start, ack.end, ack.stage):
                # Not a task's: every task's id is its range's (common/job/tasks.py).  Listed, it would count in
                # the totals and summary.json until a later load dropped it.
                self.dropped.drop("ack whose task id is not its range's")
                continue
            valid.append(ack)
        if not valid:
            return
        try:
            fresh = {entry["task"] for entry in self.manifest.append([manifest_entry(ack) for ack in valid])}
        except OSError as error:  # a full or failing disk under the journal: never the sink's end
            self.unrecorded += len(valid)
            log.error("sink: could not write %d acknowledgement(s) to the manifest %s (%s); they stay unconfirmed, "
                      "so the ventilator has those tasks done again once the disk takes writes again",
                      len(valid), self.manifest.path, error)
            return
        documents = 0
        for ack in valid:
            if ack.task_id in fresh:
                self.throughput.add(ack.worker_id, ack.stats)
                self.cost.add(ack.worker_id, ack.stats, ack.records)
                documents += ack.stats.documents
            else:
                self.duplicates += 1
        self._held.extend(ack.task_id for ack in valid)
        self._held_documents += documents
        self._confirm(send)

    def _confirm(self, send, answered: bool = False) -> None:
        """Tell the ventilator the tasks held are in the manifest, unless our last TasksDone is still unread
        there (``answered``: the HeartbeatReply sent after it came; a heartbeat interval of silence counts
        too).  Its one socket reads its peers' messages in turn, one each: with 5,000 workers the sink's turn
        came every few thousand messages, and a TasksDone for every few acknowledgements queued up behind them
        until the confirmations ran minutes late (their tasks done again).  Held, they go out together, one
        TasksDone a turn, each followed by a Heartbeat whose reply says it was read."""
        now = time.monotonic()
        if answered:
            self._confirming_since = None
        wait = self.config.heartbeat_seconds if self.config is not None else 1.0
        if not self._held or (self._confirming_since is not None and now - self._confirming_since < wait):
            return
        held, documents, self._held, self._held_documents = self._held, self._held_documents, [], 0
        for start in range(0, len(held), TASKS_DONE_BATCH):
            # Each ack's count is within a Count's range, their sum need not be: past it, the ventilator would
            # drop the whole TasksDone (these tasks then never confirmed).  It is the progress line's figure only.
            send(protocol.TasksDone(held[start:start + TASKS_DONE_BATCH], min(documents, MAX_COUNT) if not start
                                    else 0))
        send(protocol.Heartbeat([]))
        self._confirming_since = now

    def _own_metrics(self):
        """The sink's own families (not the steps')."""
        manifest = self.manifest
        totals = dict(manifest.totals) if manifest is not None else {}
        for name, key, documentation in (
                ("mlm_sink_tasks", "tasks", "Tasks in the manifest."),
                ("mlm_sink_shards", "shards", "Shards in the manifest."),
                ("mlm_sink_records", "records", "Records (instances or sequences) in the manifest's shards."),
                ("mlm_sink_documents", "documents", "Documents turned into instances."),
                ("mlm_sink_tokens", "tokens", "Tokens of those documents."),
                ("mlm_sink_output_bytes", "bytes_written", "Bytes of the manifest's shards.")):
            count = totals.get(key, 0)
            yield counter(name, documentation, count if isinstance(count, int) else 0)
        skipped = totals.get("skipped_documents", {})
        yield counter("mlm_sink_skipped_documents", "Documents skipped as bad input, by reason.",
                      labels=dict(skipped) if isinstance(skipped, dict) else {}, label="reason")
        overall, per_worker = self.throughput.rates()
        yield gauge("mlm_sink_rate", "Per second over the last 30 s: documents, tokens, instances, input bytes.",
                    labels=overall, label="quantity")
        yield gauge("mlm_sink_worker_input_bytes_rate", "Input bytes per second over the last 30 s, per worker.",
                    labels={worker: rates["bytes_in"] for worker, rates in per_worker.items()}, label="worker")
        _tasks, _totals, timer_seconds = self.throughput.snapshot()
        yield counter("mlm_sink_worker_stage_seconds", "Workers' wall seconds per stage, summed over this run's tasks.",
                      labels=timer_seconds, label="stage")
        yield counter("mlm_sink_duplicate_acks", "Acknowledgements of tasks already in the manifest.", self.duplicates)
        yield gauge("mlm_sink_quarantined_tasks", "Tasks the ventilator gave up on.", len(self.quarantined))
        yield counter("mlm_sink_dropped_messages", "Malformed or unexpected messages dropped.", self.dropped.total)

    def metrics(self):
        """What Prometheus scrapes (see common/metrics.py): the manifest's
        totals (the whole job, earlier runs included), then this run's, and
        each step's counters as a family named after the step."""
        families = list(self._own_metrics())
        yield from families
        # A step's name is anyone's (a plugin's, a worker's frame): one that is, as Prometheus writes names,
        # one of the sink's own families or another step's would make the page hold two families of one name,
        # and Prometheus refuse every scrape.  Such a step's counters stay in summary.json only.
        taken = {_exposed(family.name) for family in families}
        for name, values in step_counters(dict(self.manifest.totals) if self.manifest else {}).items():
            family = counter(f"mlm_sink_{name}", f"The {name} step's counters, summed over the job's tasks.",
                             labels=dict(values), label="quantity")
            if _exposed(family.name) in taken:
                continue
            taken.add(_exposed(family.name))
            yield family

    def summary(self, reason: str) -> dict:
        elapsed = time.monotonic() - self.throughput.started
        tasks, totals, _stage_seconds = self.throughput.snapshot()
        this_run = self.cost.summary(sequence_length(self.config))
        return {
            "job": self.config.job_id if self.config else None,
            "reason": reason,
            **(self.manifest.totals if self.manifest else {}),  # with each step's summed counters, by its name
            "quarantined": {task: dataclasses.asdict(why) for task, why in self.quarantined.items()},
            "this_run": {"seconds": round(elapsed, 3), **totals, "tasks": tasks,
                         "duplicate_acks": self.duplicates, "cost": this_run,
                         "kernels_by_worker": self.throughput.kernels_by_worker()},
            "dropped_messages": dict(self.dropped.dropped),
            # Every run's: spent (CPU, instance-hours) summed over the runs' summaries, made (records,
            # tokens, input) from the manifest's tasks.
            "cost": job_cost(this_run, self.earlier_cost, self.manifest.work if self.manifest else None,
                             sequence_length(self.config), self.options.instance_hourly_price),
        }

    def _describe(self, complete: bool) -> None:
        """dataset_info.json and tokenizer.json; a job that cannot be described (a bug) still gets its summary."""
        try:
            dataset_info.write(self.output, self.config, self.manifest.totals, complete)
        except (StorageError, OSError):
            raise
        except Exception as error:
            log.error("sink: could not describe the output in %s: %s", dataset_info.DATASET_INFO, error)

    def _finish_job(self) -> None:
        """The format's files that describe the whole output (``Writer.finish_job``: a blend list, an index),
        then the dataset card README.md naming each side's files and saying how the format is read."""
        writer_class = writer_named(self.config.writer.name)
        finish_job(writer_class, self.output, self.config, self.manifest.totals, self.manifest.entries)
        try:
            dataset_card.write_card(self.output, self.config, writer_class.reading_text(), self.manifest.entries(),
                                    counted=self.manifest.listing.splits)
        except (StorageError, OSError):
            raise  # the store: the sink says so and exits 1
        except Exception as error:  # a card that cannot be made (a plugin's odd features): no failed job
            log.error("sink: could not write the dataset card %s: %s", dataset_card.CARD_NAME, error)

    def _finish(self, reason: str, job_over: bool = False) -> int:
        """Publish the manifest and the summary; the exit status (1 if the
        output store would not take them: the journal still holds every line)."""
        if self.manifest is None:
            if self._standing_by:
                log.info("sink: %s while this sink stood by: it wrote nothing", reason)
            return 0
        summary = self.summary(reason)
        # What readers check before serving (the loader): the job ended with every task's output in the manifest.
        summary["complete"] = bool(job_over and not self.quarantined)
        try:
            self.manifest.publish()
            removed = self.output.remove_temporaries() if job_over else 0
            if removed:
                log.info("sink: removed %d temporary shard(s) left by workers that died", removed)
            if summary["complete"]:  # no writer of the job is left: what the manifest does not list goes
                self.manifest.remove_unlisted()
            if self.config is not None:  # every format, complete or not: what a reader needs to know
                self._describe(summary["complete"])
            if job_over and not self.quarantined and self.config is not None:
                self._finish_job()
            self.output.put_bytes(SUMMARY_NAME,
                                  json.dumps(summary, indent=2, sort_keys=True, allow_nan=False).encode() + b"\n")
        except (StorageError, OSError) as error:  # a full local disk is an OSError, not a StorageError
            log.error("sink: could not publish the manifest and summary to %s: %s. The journal %s holds every "
                      "line: once the store is back, run the ventilator's command again (same --state-dir): it "
                      "finds the job done and this is published", self.output.uri(""), error, self.manifest.path)
            self.finish_error = f"could not publish the manifest and summary to {self.output.uri('')}: {error}"
            return 1
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(summary["skipped_documents"].items())) or "none"
        for name, values in step_counters(summary).items():
            log.info("sink: %s: %s", name, ", ".join(f"{key} {value}" for key, value in sorted(values.items())))
        log.info("sink: %s. %d tasks, %d shards, %d records, %d documents (skipped: %s), %d tokens, %.1f MB written; "
                 "%d quarantined; this run %.1fs", reason, summary["tasks"], summary["shards"], summary["records"],
                 summary["documents"], skipped, summary["tokens"], summary["bytes_written"] / 1e6,
                 len(self.quarantined), summary["this_run"]["seconds"])
        log.info("sink: this run's cost: %s", describe(summary["this_run"]["cost"]))
        slow = sorted(worker for worker, ran in summary["this_run"]["kernels_by_worker"].items() if ran.get(NUMPY))
        if slow:
            log.warning("sink: %d worker(s) ran the numpy kernels, several times slower than the compiled ones "
                        "(no C compiler where they were installed, or %s set): %s", len(slow), FORCE_NUMPY,
                        ", ".join(slow))
        if summary["cost"]["runs"] > 1:
            log.info("sink: the job's cost over its %d runs: %s", summary["cost"]["runs"], describe(summary["cost"]))
        return 0
