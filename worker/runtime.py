"""A worker process: talks to the ventilator and the sink, computes shards.

Two threads, each owning its sockets.  The main thread owns the DEALER to
the ventilator and the PUSH to the sink: it asks for tasks (credit-based, so
no worker swallows the queue), keeps its leases alive with heartbeats, and
acknowledges finished shards.  The compute thread turns tasks into shards
and hands results back over an inproc PAIR socket, so heartbeats flow while
a long task computes.

A task is acknowledged only after its shard is committed; the sink learns
of it first (TaskAck), then the ventilator (TaskFinished).  If anything dies
in between, the lease or the confirmation times out and the task is done
again, into the same shard name with the same bytes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field

import zmq

from common import kernels, logs
from common.job.config import JobConfig
from common.job.tasks import EarlierTaskFileError, Task
from common.readers.content import is_permanent
from common.storage import Storage, open_storage, remove_stale_spool_files
from common.tokenization import Vocabulary
from common.wire import protocol
from common.wire.inbox import Handlers, Inbox, Sender, on_stop_signals
from common.wire.transport import (
    SINK_PORT,
    VENTILATOR_PORT,
    DroppedMessages,
    endpoint,
    make_socket,
    new_identity,
    parse_address,
)
from worker.backoff import Backoff, no_room
from worker.options import WorkerOptions
from worker.pipeline import ShardResult, TaskProcessor

log = logging.getLogger("worker")

#: The stage name under which a task's waits for room are reported (the sink sums it per stage).
WAIT_STAGE = "wait_for_room"


@dataclass
class _Job:
    config: JobConfig
    processor: TaskProcessor | None
    input_storage: Storage | None
    sink_endpoint: str
    job_id: str
    #: Why this worker cannot run the job (a plugin step it lacks, a tokenizer it cannot read): it declines the
    #: job with this (JobDeclined) and asks for none of its tasks; the fleet's other workers do them.
    unusable: str = ""


@dataclass
class _Outcome:
    job: _Job  # the job the task was computed for, which may no longer be the ventilator's
    task: Task
    result: ShardResult | None
    error: str = ""
    permanent: bool = False
    redo: list[str] = field(default_factory=list)  # earlier tasks whose files were missing or corrupt


class _Compute(threading.Thread):
    """Processes tasks one at a time; posts outcomes and pings the PAIR socket."""

    def __init__(self, context: zmq.Context, address: str, backoff: Backoff | None = None):
        super().__init__(name="compute", daemon=True)
        self.context = context
        self.address = address
        self.inbox: queue.Queue = queue.Queue()
        self.outbox: queue.Queue = queue.Queue()
        self.backoff = backoff or Backoff()
        self.stop_waiting = threading.Event()  # draining: a task waiting for room is given up, not waited on

    def run(self) -> None:
        notify = self.context.socket(zmq.PAIR)
        notify.connect(self.address)
        try:
            while True:
                item = self.inbox.get()
                if item is None:
                    return
                job, task, content = item
                self.outbox.put(self._process(job, task, content))
                notify.send(b"")
        finally:
            notify.close()

    def _process(self, job: _Job, task: Task, content: bytes | None) -> _Outcome:
        """The task's outcome; while the output has no room (worker/backoff.py) the task is retried after a
        growing wait, keeping its lease and its attempts."""
        backoff = dataclasses.replace(self.backoff)
        processor = job.processor
        if processor is None:  # never queued: a job this worker cannot run is declined (JobDeclined), not run
            return _Outcome(job, task, None, f"worker cannot run this job: {job.unusable or '?'}")
        while True:
            try:
                started = time.perf_counter()
                if content is None and task.reads_input:  # not shipped: read it here
                    content = processor.reader.read(job.input_storage, task)
                read_seconds = time.perf_counter() - started
                result = processor.process(task, content or b"", read_seconds)
                if backoff.waited:  # in the sink's per-stage seconds (mlm_sink_worker_stage_seconds_total)
                    result.stats.seconds[WAIT_STAGE] += backoff.waited
                return _Outcome(job, task, result)
            except EarlierTaskFileError as error:  # an earlier stage's file: that task is done again, then this one
                log.warning("task %s (%s): %s; asking for its writer to be done again", task.task_id, task.key, error)
                return _Outcome(job, task, None, f"{type(error).__name__}: {error}",
                                redo=[error.writer_task] if error.writer_task else [])
            except Exception as error:  # a bad task must not kill the worker
                reason = no_room(error)
                if reason and not self.stop_waiting.is_set():
                    delay = backoff.next_delay()
                    log.warning("task %s (%s): %s; retrying in %.0f s without spending an attempt (%.0f s waited "
                                "so far)", task.task_id, task.key, reason, delay, backoff.waited - delay)
                    self.stop_waiting.wait(delay)
                    continue
                log.error("task %s (%s) failed: %s", task.task_id, task.key, error)
                log.debug("%s", traceback.format_exc())
                return _Outcome(job, task, None, f"{type(error).__name__}: {error}", is_permanent(error))


@dataclass
class _State:
    job: _Job | None = None
    ventilator_id: str = ""
    introduced: bool = False  # the current ventilator has welcomed us
    # (job id, task id) leased to us, queued or computing: task ids name byte ranges, so two jobs on one
    # corpus share them.
    held: set[tuple[str, str]] = field(default_factory=set)
    requested: int = 0  # credit asked for and not yet answered
    last_hello: float = 0.0
    last_heartbeat: float = 0.0
    last_contact: float = field(default_factory=time.monotonic)  # last message from a ventilator
    asked_at: float | None = None  # when the oldest Hello or Heartbeat no message has answered since was sent
    beats_sent: int = 0  # heartbeats to the current ventilator, and its answers to them (in order)
    beats_answered: int = 0
    drain_mark: int = 0  # the first heartbeat that said "awaiting 0" while draining; answered, nothing more comes
    exit_now: bool = False  # told to stop (Shutdown) holding nothing


def host_booted_at() -> float:
    """This host's boot, wall clock (0 where the clock since boot is unknown): the cost counts an instance
    started for the job from it."""
    try:
        return round(time.time() - time.clock_gettime(time.CLOCK_BOOTTIME), 3)
    except (AttributeError, OSError):
        return 0.0


class WorkerProcess:
    def __init__(self, options: WorkerOptions):
        self.options = options
        self.worker_id = new_identity("worker")
        self.draining = False
        self.release_at: float | None = None  # wall clock: hand back what is held then (an interruption notice)
        self.dropped = DroppedMessages("worker")
        self.inbox = Inbox(protocol.CODEC, self.dropped)
        self.context = zmq.Context()
        self.push: zmq.Socket | None = None
        self.push_endpoint = ""

    def _on_signal(self, name: str) -> None:
        if not self.draining:
            log.info("%s: %s, draining (finishing the current task)", self.worker_id, name)
        self.draining = True

    def interrupt(self, release_at: float) -> None:
        """The instance is going (worker/interruption.py): drain, and at
        ``release_at`` hand back the task still computing rather than let
        its lease expire."""
        self.release_at = release_at if self.release_at is None else min(self.release_at, release_at)
        self.draining = True

    def run(self) -> int:
        on_stop_signals(self._on_signal)
        removed = remove_stale_spool_files()
        if removed:
            log.info("%s: removed %d spool file(s) of worker processes that died", self.worker_id, removed)
        host, port = parse_address(self.options.ventilator, VENTILATOR_PORT)
        log.info("%s: started, asking %s for work", self.worker_id, endpoint(host, port))
        dealer = make_socket(self.context, zmq.DEALER, max_message_bytes=-1)  # task content
        dealer.setsockopt(zmq.IDENTITY, self.worker_id.encode())
        if self.options.curve:
            self.options.curve.connect_as_client(dealer)
        dealer.connect(endpoint(host, port))
        pair = self.context.socket(zmq.PAIR)
        pair_address = f"inproc://compute-{self.worker_id}"
        pair.bind(pair_address)
        compute = _Compute(self.context, pair_address)
        compute.start()
        try:
            return self._loop(dealer, pair, compute, host)
        finally:
            compute.stop_waiting.set()
            compute.inbox.put(None)
            dealer.close()
            pair.close()
            if self.push is not None:
                self.push.close(linger=30000)  # deliver the last acks
            compute.join(timeout=5)
            if compute.is_alive():
                # A task handed back mid-computation: its thread holds a socket, so the context would never
                # terminate.  Leave it to the process's exit (the thread is a daemon); let queued messages out.
                time.sleep(1.0)
            else:
                self.context.term()

    def _loop(self, dealer: zmq.Socket, pair: zmq.Socket, compute: _Compute, ventilator_host: str) -> int:
        state = _State()
        drain_deadline = None
        poller = zmq.Poller()
        poller.register(dealer, zmq.POLLIN)
        poller.register(pair, zmq.POLLIN)
        send = lambda message: dealer.send(protocol.encode(message))  # noqa: E731
        ventilator = Sender(dealer, b"", protocol.CODEC)
        from_ventilator = self._from_ventilator(state, send, compute, ventilator_host)
        # A ventilator not running, not reachable, or of another version (it drops our messages) was a silent wait:
        # said when a Hello or Heartbeat has had no answer that long (not from the last message: heartbeats may be
        # minutes apart, and this loop may itself have been busy).
        silence = logs.Reminder(logs.SILENCE_WARNING_SECONDS)

        while True:
            now = time.monotonic()
            heartbeat_every = state.job.config.heartbeat_seconds if state.job else 1.0
            if self.draining:
                if drain_deadline is None:
                    drain_deadline = now + self.options.drain_seconds
                    compute.stop_waiting.set()  # a task waiting for room is not worth the drain's time
                    state.last_heartbeat = 0.0  # tell the ventilator now that we want nothing more
                self._hand_back_queued(send, compute, state)
                # Credit still out: an assignment may be on its way. Exit once the ventilator has
                # answered a draining heartbeat (it then sends nothing more; what came is handed back).
                drain_heard = state.drain_mark and state.beats_answered >= state.drain_mark
                # Holding nothing, with a ventilator silent for three heartbeats (gone with the supervisor, say):
                # nothing is lost by going now rather than at the end of --drain-seconds.
                silent = now - state.last_contact > 3 * heartbeat_every
                if not state.held and (state.requested == 0 or drain_heard or not state.introduced or silent):
                    log.info("%s: drained, exiting", self.worker_id)
                    return 0
                if now > drain_deadline or (self.release_at is not None and time.time() >= self.release_at):
                    self._release_held(send, state)
                    return 0

            unanswered = now - state.asked_at if state.asked_at is not None else 0.0
            if silence.due(unanswered, now):
                log.warning("%s: no answer from the ventilator at %s in %.0f s: is it running (and done "
                            "planning), reachable from here, and of this version (wire protocol %d)?  A ventilator "
                            "drops the messages of another version, and its log says so", self.worker_id,
                            self.options.ventilator, unanswered, protocol.PROTOCOL_VERSION)
            idle = self.options.idle_exit_seconds
            if idle is not None:
                idle = max(idle, 3 * heartbeat_every)  # a live ventilator answers every hello and heartbeat
            if idle is not None and not state.held and now - state.last_contact > idle:
                log.info("%s: no ventilator for %.0fs, exiting", self.worker_id, now - state.last_contact)
                return 0

            if not state.introduced and now - state.last_hello > heartbeat_every:
                send(protocol.Hello(self.worker_id, socket.gethostname(), os.getpid(), "worker", host_booted_at()))
                state.last_hello = now
                state.asked_at = now if state.asked_at is None else state.asked_at
            if state.introduced and now - state.last_heartbeat > heartbeat_every:
                # Only this job's tasks: a task id of an earlier job may name the same range of another job.
                current = state.job.job_id if state.job else ""
                send(protocol.Heartbeat(sorted(task_id for job_id, task_id in state.held if job_id == current),
                                        0 if self.draining else state.requested))
                state.last_heartbeat = now
                state.asked_at = now if state.asked_at is None else state.asked_at
                state.beats_sent += 1
                if self.draining and not state.drain_mark:
                    state.drain_mark = state.beats_sent
            if state.introduced and not self.draining and not (state.job and state.job.unusable):
                wanted = self.options.credit - len(state.held) - state.requested
                if wanted > 0:
                    send(protocol.TaskRequest(wanted))
                    state.requested += wanted

            events = dict(poller.poll(timeout=200))
            if pair in events:
                pair.recv()
                while not compute.outbox.empty():
                    outcome = compute.outbox.get()
                    self._report(send, state.job, outcome)
                    state.held.discard((outcome.job.job_id, outcome.task.task_id))
            if dealer in events:
                message = self.inbox.decode(dealer.recv())
                if message is None:  # counted and dropped
                    continue
                state.last_contact = now
                state.asked_at = None
                self.inbox.deliver(message, ventilator, from_ventilator)
                if state.exit_now:
                    return 0

    def _from_ventilator(self, state: _State, send, compute: _Compute, ventilator_host: str) -> Handlers:
        """What this worker does with each message of the ventilator (the table the servers use too): an
        unexpected one, or one hostile past its types, is counted and dropped.  ``state.exit_now`` says a
        handler ended the worker."""
        def welcome(message: protocol.Welcome, _sender: Sender) -> None:
            config = JobConfig.from_welcome(message)  # a job that does not decode: ProtocolError, dropped
            if state.job is None or state.job.config != config:
                if state.held:
                    log.warning("%s: a different job while holding tasks; finishing them first", self.worker_id)
                state.job = self._prepare(config, ventilator_host)
            state.ventilator_id = message.ventilator_id
            state.introduced = True
            state.requested = 0  # a new ventilator knows nothing of our credit
            state.beats_sent = state.beats_answered = state.drain_mark = 0
            state.last_heartbeat = 0.0  # tell it at once which leases we hold
            if state.job.unusable:  # each ventilator that welcomes us to it hears so (logged once, in _prepare)
                send(protocol.JobDeclined(message.job_id, state.job.unusable))

        def assignment(message: protocol.TaskAssignment, _sender: Sender) -> None:
            state.requested = max(0, state.requested - 1)
            try:
                task = Task.from_wire(message.task)
            except (TypeError, ValueError) as error:
                raise protocol.ProtocolError(f"bad task: {error}") from None
            if state.job is None or (state.job.job_id, task.task_id) in state.held:
                return
            if self.draining:
                send(protocol.TaskReturned([task.task_id]))
                return
            if state.job.unusable:  # granted before our JobDeclined arrived: back to the queue, not an attempt
                send(protocol.TaskReturned([task.task_id]))
                return
            state.held.add((state.job.job_id, task.task_id))
            compute.inbox.put((state.job, task, message.content))

        def heartbeat_reply(message: protocol.HeartbeatReply, _sender: Sender) -> None:
            if message.known and message.ventilator_id == state.ventilator_id:
                state.beats_answered += 1
            if (not message.known or message.ventilator_id != state.ventilator_id) and state.introduced:
                log.info("%s: the ventilator does not know me (it restarted, or I was silent too long); "
                         "introducing myself again", self.worker_id)
                state.introduced = False
                state.last_hello = 0.0

        def shutdown(message: protocol.Shutdown, _sender: Sender) -> None:
            log.info("%s: ventilator says: %s", self.worker_id, message.reason)
            self.draining = True
            self._hand_back_queued(send, compute, state)
            state.exit_now = not state.held

        return (Handlers("the ventilator").on(protocol.Welcome, welcome).on(protocol.TaskAssignment, assignment)
                .on(protocol.HeartbeatReply, heartbeat_reply).on(protocol.Shutdown, shutdown))

    def _prepare(self, config: JobConfig, ventilator_host: str) -> _Job:
        """The job as this worker runs it; every field of the Welcome is hostile input, so a job it cannot
        run (a step, tokenizer, output or sink address it cannot make sense of) is one line here, and the
        worker declines it with that line (JobDeclined): it asks for none of its tasks, which cost no attempt,
        and stays connected for the next job.  Never a crash."""
        try:
            job_id = config.job_id  # as it came with the Welcome; TaskProcessor refuses a step this worker lacks
            vocabulary = Vocabulary.from_json(config.tokenizer_json)
            output = open_storage(config.output_uri, config.s3_endpoint_url)
            input_storage = open_storage(config.data_uri, config.s3_endpoint_url) if config.read_mode == "range" \
                else None
            sink_host, sink_port = parse_address(self.options.sink or config.sink_address, SINK_PORT)
            sink_endpoint = endpoint(sink_host or ventilator_host, sink_port)
            processor = TaskProcessor(config, vocabulary, output)
        except Exception as error:  # whatever a component raises on a hostile job
            reason = f"{type(error).__name__}: {error}"
            log.error("%s: worker cannot run this job: %s; declining it (none of its tasks comes here; this worker "
                      "waits for the next job)", self.worker_id, reason)
            log.debug("%s", traceback.format_exc())
            return _Job(config, None, None, "", "", reason)
        log.info("%s: job %s, writing to %s, acknowledging to %s; kernels: %s", self.worker_id, job_id,
                 config.output_uri, sink_endpoint, kernels.status)
        return _Job(config, processor, input_storage, sink_endpoint, job_id)

    def _sink_socket(self, sink_endpoint: str) -> zmq.Socket:
        if self.push is not None and self.push_endpoint != sink_endpoint:
            self.push.close(linger=30000)
            self.push = None
        if self.push is None:
            self.push = make_socket(self.context, zmq.PUSH)
            if self.options.curve:
                self.options.curve.connect_as_client(self.push)
            self.push.connect(sink_endpoint)
            self.push_endpoint = sink_endpoint
        return self.push

    def _report(self, send, current: _Job | None, outcome: _Outcome) -> None:
        """Acknowledge to the sink of the task's own job; tell the ventilator
        only if it still runs that job (a new ventilator may run another)."""
        task, job = outcome.task, outcome.job
        same_job = current is not None and current.job_id == job.job_id
        if current is not None and same_job:
            job = current  # its sink may have moved with a restarted ventilator
        if outcome.result is None:
            if same_job:
                send(protocol.TaskFailed(task.task_id, outcome.error, outcome.permanent, outcome.redo))
            return
        result = outcome.result
        stats = result.stats.to_wire()
        stats.counters[kernels.COUNTER] = {kernels.kind(): 1}  # which kernels ran it: the numpy ones are slower
        ack = protocol.TaskAck(
            task_id=task.task_id, job_id=job.job_id, worker_id=self.worker_id, source=task.path,
            start=task.start, end=task.end, version=task.version, shards=result.files, records=result.records,
            stats=stats, stage=task.stage)
        self._sink_socket(job.sink_endpoint).send(protocol.encode(ack))
        if same_job:
            send(protocol.TaskFinished(task.task_id))
        else:
            log.info("%s: task %s of the earlier job %s done and acknowledged to its sink", self.worker_id,
                     task.task_id, job.job_id)

    def _release_held(self, send, state: _State) -> None:
        """Out of time: hand back the task still computing (its lease released, not left to expire)."""
        current = state.job.job_id if state.job else ""
        returned = sorted(task_id for job_id, task_id in state.held if job_id == current)
        if returned:
            send(protocol.TaskReturned(returned))
        log.warning("%s: out of drain time: released %d task(s) unfinished, exiting", self.worker_id,
                    len(returned))
        state.held.clear()

    @staticmethod
    def _hand_back_queued(send, compute: _Compute, state: _State) -> None:
        returned = []
        while True:
            try:
                item = compute.inbox.get_nowait()
            except queue.Empty:
                break
            if item is None:
                compute.inbox.put(None)
                break
            job, task, _content = item
            state.held.discard((job.job_id, task.task_id))
            if state.job is not None and job.job_id == state.job.job_id:
                returned.append(task.task_id)  # a task of an earlier job has no one to go back to
        if returned:
            send(protocol.TaskReturned(returned))
