"""The ventilator's event loop: one ROUTER socket, one owner.

Workers and the sink connect with DEALER sockets.  A worker says Hello and
gets the job (Welcome), then asks for tasks with credit; the ventilator
leases it at most that many, so the first worker to connect cannot swallow
the queue.  Nothing is handed out before the sink has said which tasks its
manifest already holds, so a restarted run does not redo finished work.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from common import logs
from common.job.config import JobConfig
from common.job.tasks import InputFile, Task, encode_quarantined
from common.metrics import MetricsServer, counter, gauge
from common.readers import Reader
from common.readers.content import is_permanent
from common.steps import required_tasks
from common.storage import Storage
from common.wire import protocol
from common.wire.inbox import Handlers, Inbox, Sender, serving
from common.wire.security import Curve
from common.wire.transport import VENTILATOR_PORT, DroppedMessages, listen, printable
from ventilator.bulk import built_for_the_job
from ventilator.declines import Declines, sanitized
from ventilator.dispatcher import Dispatcher, Entry, State
from ventilator.hosts import HostLedger
from ventilator.publishers.base import Backlog, BacklogPublisher

log = logging.getLogger("ventilator")

#: TasksQuarantined frames: at most 100 tasks of 5 errors of 1,000 characters (~500 KB).
QUARANTINE_BATCH = 100
QUARANTINE_ERROR_CHARS = 1000
#: How long, after Shutdown, the sink may take to publish the manifest, dataset_info.json and summary.json.
SINK_CLOSE_SECONDS = 600.0
#: Sinks told to stand by that are named in the log (each once); more are counted only (hostile peers).
MAX_STANDBYS_LOGGED = 100
#: A ventilator without a sink this long says so (then once a minute): it hands out nothing until one comes.
NO_SINK_WARNING_SECONDS = logs.SILENCE_WARNING_SECONDS


@dataclass
class Peer:
    identity: bytes
    role: str
    name: str
    last_seen: float
    wanted: int = 0
    host: str = ""
    welcomed: float = 0.0  # when we last answered its Hello (or saw that Welcome still in our queue)
    #: Our last Welcome to it (sent without a copy: every peer's is the one encoded frame), done once ZeroMQ has
    #: written it to the connection or dropped it with the connection; None before.
    welcome: zmq.MessageTracker | None = None
    welcomes: int = 0  # Welcomes sent it since it last said anything but Hello
    declined: str = ""  # why this worker cannot run the job (JobDeclined): it is granted none of its tasks


@dataclass
class Job:
    """A job ready to serve (``ventilator.job.prepare_job`` makes it from the command line): its config, its
    tasks, and the inputs they read."""

    config: JobConfig
    tasks: list[Task]
    inputs: list[InputFile]
    skipped_inputs: dict[str, str]  # path -> reason
    input_storage: Storage
    reader: Reader


@dataclass(frozen=True)
class Unplanned:
    """A job identified (its config: what a Welcome carries) but not yet planned: the server plans it while it
    answers the first Hellos, so a sink resuming a large output reads its manifest meanwhile."""

    config: JobConfig
    plan: Callable[[], Job]


@dataclass
class ServerOptions:
    bind_host: str = "*"
    port: int = VENTILATOR_PORT
    max_attempts: int = 3
    confirm_seconds: float = 120.0
    report_seconds: float = 10.0
    max_message_bytes: int = protocol.MAX_INBOUND_BYTES
    curve: Curve | None = None
    metrics_port: int | None = None  # Prometheus metrics on this port (0: any free one)
    on_progress: Callable[[int, int], None] | None = None  # (tasks done, their input bytes), a few times a second
    #: Publishes the backlog (for the workers' Auto Scaling group, say): called with the server's observer.
    backlog_publisher: Callable[[Callable[[], Backlog]], BacklogPublisher] | None = None


@dataclass
class RunResult:
    completed: bool
    reason: str
    quarantined: list[Entry]
    #: A failure no task caused (the sink could not keep or close the job's books): the run failed with it.
    error: str = ""


class VentilatorServer:
    def __init__(self, job: Job | Unplanned, options: ServerOptions, should_stop=lambda: False,
                 peers_gone=lambda: False, output_held=lambda: True):
        self._job = job if isinstance(job, Job) else None  # planned in run() when Unplanned
        self._unplanned = job if isinstance(job, Unplanned) else None
        self.config = job.config
        self._required: dict[str, str] | None = None  # tasks a step requires (common/steps), by id: why
        self.options = options
        self.ventilator_id = uuid.uuid4().hex[:12]
        self._dispatcher: Dispatcher | None = None  # built in run(), while the first Hellos are answered
        self._early: list[tuple[bytes, object]] = []  # messages other than Hellos that came while it was built
        self.peers: dict[bytes, Peer] = {}
        self.waiting: deque[bytes] = deque()  # workers with credit, in arrival order
        #: The job's sink: the one welcomed, whose books these are.  Another sink stands by (SinkStandby) until
        #: this one is silent past _stale_after (it died), and its frames are not the job's sink's.
        self.sink: bytes | None = None
        self._standbys: set[bytes] = set()  # sinks told to stand by (the first MAX_STANDBYS_LOGGED: logged once)
        self.standby_hellos = 0
        #: The sink's manifest, while its SinkHellos arrive; None while they are applied as they come (nothing
        #: was done when its first came: see _sink_hello).
        self._sink_done: dict[str, str] | None = {}
        #: The job's sink said Hello and its last SinkHello has not come: the job is not called complete meanwhile.
        self._listing = False
        self._parts = 0  # SinkHellos heard since its Hello
        self.sink_ready = False
        self.sink_closed: str | None = None  # the sink's SinkClosed: None before it, else its error ("" none)
        self.dropped = DroppedMessages("ventilator")
        self.inbox = Inbox(protocol.CODEC, self.dropped)
        self._greeting = Handlers().on(protocol.Hello, self._hello)
        self._by_role = self._tables()
        self.documents_done = 0
        self.interrupted = False
        self.signals = 0  # SIGINT/SIGTERM received (one during the wait for the plan stops that wait)
        self.should_stop = should_stop
        #: Whether this run still holds the output's lock: a plan is waited for only while it does.
        self.output_held = output_held
        self.peers_gone = peers_gone
        self._started = time.monotonic()
        self._serving_since = self._started  # from when the task table is built
        self._no_sink = logs.Reminder(NO_SINK_WARNING_SECONDS)  # the "no sink" warning
        self._done_at_start = 0
        self.input_bytes = 0  # of all the tasks, once planned
        self._welcome = protocol.encode(self.config.welcome(self.ventilator_id))
        self._known = protocol.encode(protocol.HeartbeatReply(self.ventilator_id))  # the same for every peer
        # A peer repeats its Hello each heartbeat interval (the sink each second) until welcomed; a repeat
        # sooner than this after our Welcome left our queue is not answered again.
        self._rewelcome_after = max(2.0, self.config.heartbeat_seconds)
        self.repeated_hellos = 0
        self._forgot_at = 0.0  # when silent workers were last looked for
        self.hosts = HostLedger()  # each worker host's billed span, for the sink's cost
        #: Workers that cannot run the job; given up on once every live worker has declined for a lease period.
        self.declines = Declines(max(self.config.lease_seconds, self._stale_after))

    # ------------------------------------------------------------------
    def _on_signal(self, name: str) -> None:
        log.info("ventilator: %s, stopping (run the same command again to resume)", name)
        self.signals += 1
        self.interrupted = True

    def run(self) -> RunResult:
        with serving(zmq.ROUTER, self.options.curve, self._on_signal,
                     max_message_bytes=self.options.max_message_bytes) as router:
            return self._serve(router)

    def _serve(self, router: zmq.Socket) -> RunResult:
        metrics = publisher = None
        try:
            listen(router, self.options.bind_host, self.options.port)
            built = self._build_while_greeting(router)
            if built is None:  # interrupted, or a child failed, while the job was planned
                return RunResult(False, "stopped before the task table was built; run the same command to resume", [])
            self._job, self._dispatcher = built
            self.input_bytes = self.dispatcher.bytes_in(State.PENDING)  # every task, none moved yet
            self._serving_since = time.monotonic()
            if self.options.metrics_port is not None:  # up before the line that says the ventilator is
                metrics = MetricsServer(self.metrics, self.options.metrics_port, self.options.bind_host)
            log.info("ventilator %s: job %s, %d tasks (%.1f MB) from %s, listening on port %d",
                     self.ventilator_id, self.config.job_id, self.dispatcher.total,
                     self.input_bytes / 1e6, self.config.data_uri, self.options.port)
            if self.options.backlog_publisher is not None:
                publisher = self.options.backlog_publisher(self.backlog)
                publisher.start()
            return self._loop(router)
        finally:
            if metrics is not None:
                metrics.close()
            if publisher is not None:
                publisher.close()

    @property
    def job(self) -> Job:
        """The job planned (in run(), while the first Hellos are answered, when it came Unplanned)."""
        if self._job is None:
            raise RuntimeError("the job is used before it is planned")
        return self._job

    @property
    def dispatcher(self) -> Dispatcher:
        """The task table (built in run(), while the first Hellos are answered)."""
        if self._dispatcher is None:
            raise RuntimeError("the task table is used before it is built")
        return self._dispatcher

    def _build_while_greeting(self, router: zmq.Socket) -> tuple[Job, Dispatcher] | None:
        """The job planned (when it came Unplanned) and its task table built, in a thread, while this one
        answers Hellos.  The sink, started before the plan, has its Hello answered at once: it reads its
        manifest while the job is planned and the table built, which at a million tasks take seconds each.
        Every other frame waits for the table.  None if the run is stopped (a signal, a child's failure) first,
        once the thread has ended (:meth:`_wait_for_the_plan`)."""
        built: list[tuple[Job, Dispatcher]] = []
        failed: list[BaseException] = []
        unplanned, planned = self._unplanned, self._job

        def build() -> None:
            try:
                job = planned
                if job is None:
                    assert unplanned is not None  # (one of the two, from __init__)
                    job = unplanned.plan()
                    log.info("planned: %d tasks", len(job.tasks))
                with built_for_the_job():  # a million entries
                    built.append((job, Dispatcher(job.tasks, self.config.lease_seconds,
                                                  self.options.confirm_seconds, self.options.max_attempts)))
            except BaseException as error:  # raised again in the serving thread
                failed.append(error)

        builder = threading.Thread(target=build, name="build-dispatcher", daemon=True)
        builder.start()
        while builder.is_alive():
            if self.interrupted or self.should_stop():
                self._wait_for_the_plan(builder)
                return None
            if not router.poll(20):
                continue
            received = self.inbox.routed(router.recv_multipart())
            if received is not None and isinstance(received[1], protocol.Hello):
                self._handle(router, *received)
            elif received is not None:
                self._early.append(received)
        builder.join()
        if failed:
            raise failed[0]
        return built[0]

    def _wait_for_the_plan(self, builder: threading.Thread) -> None:
        """A run stopped while its job is planned waits for the plan to end: the plan writes to the output (dedup's
        plan file), and the caller releases the output's lock when this returns, after which another job may write
        there.  The plan is bounded work (seconds at a million tasks); a signal during the wait stops it.  A run
        whose lock another run has taken does not wait: the output is that run's now, and the sooner this process
        exits, the less likely the plan (a daemon thread, which cannot be stopped) writes there."""
        if not builder.is_alive():
            return
        if not self.output_held():
            log.warning("ventilator: the output's lock is another run's now: not waiting for the plan")
            return
        signals = self.signals
        log.info("ventilator: waiting for the plan to end before the output is released (Ctrl-C again: stop "
                 "waiting)")
        while builder.is_alive() and self.signals == signals and self.output_held():
            builder.join(0.1)
        if builder.is_alive() and not self.output_held():
            log.warning("ventilator: the output's lock is another run's now: not waiting for the plan")
        elif builder.is_alive():
            log.warning("ventilator: stopped before the plan ended; it may still write to the output")

    def _loop(self, router: zmq.Socket) -> RunResult:
        early, self._early = self._early, []
        for identity, message in early:  # in arrival order, before anything newer
            self._handle(router, identity, message)
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        last_housekeeping = last_progress = 0.0
        last_report = time.monotonic()
        while True:
            if self.interrupted or self.should_stop():
                return RunResult(False, self._interrupted_reason(), self.dispatcher.quarantined())
            if self.sink_closed:  # the sink cannot keep this job's books: nothing done now would be recorded
                reason = f"the sink failed: {self.sink_closed}"
                self._broadcast(router, protocol.Shutdown(f"job failed: {reason}"), roles=("worker",))
                return RunResult(False, reason, self.dispatcher.quarantined(), error=reason)
            if self.sink_ready and not self._listing and self.dispatcher.complete:
                self._show_progress()
                return self._finish(router)
            failed = self._required_task_failed() if self.sink_ready else None
            if failed:
                return RunResult(False, failed, self.dispatcher.quarantined())
            for _ in range(1000):  # drain what is there, then housekeeping
                if not poller.poll(timeout=0 if _ else 100):
                    break
                frames = router.recv_multipart()
                self._receive(router, frames)
            now = time.monotonic()
            if now - last_housekeeping > 0.5:
                self._expire(router, now)
                self._give_up_if_nobody_can_run(router, now)
                self._warn_without_sink(now)
                last_housekeeping = now
            self._dispatch(router, now)
            if now - last_report > self.options.report_seconds:
                self._report(now)
                last_report = now
            if self.options.on_progress is not None and now - last_progress > 0.2:
                self._show_progress()
                last_progress = now

    # Messages -----------------------------------------------------------
    def _tables(self) -> dict[str, Handlers]:
        """What each role may send, by role (built once, with the server); a Hello is anyone's."""
        worker = (Handlers("worker").on(protocol.Heartbeat, self._heartbeat).on(protocol.TaskRequest, self._request)
                  .on(protocol.TaskFinished, self._finished).on(protocol.TaskFailed, self._failed)
                  .on(protocol.TaskReturned, self._returned).on(protocol.JobDeclined, self._declined))
        sink = (Handlers("sink").on(protocol.Heartbeat, self._heartbeat).on(protocol.SinkHello, self._sink_hello)
                .on(protocol.TasksDone, self._tasks_done).on(protocol.SinkClosed, self._sink_said_closed))
        return {"worker": worker, "sink": sink}

    def _receive(self, router: zmq.Socket, frames: list[bytes]) -> None:
        received = self.inbox.routed(frames)
        if received is not None:
            self._handle(router, *received)

    def _handle(self, router: zmq.Socket, identity: bytes, message: object) -> None:
        sender = Sender(router, identity, protocol.CODEC)
        peer = self.peers.get(identity)
        if peer is not None:
            peer.last_seen = sender.at
            if peer.welcomes and not isinstance(message, protocol.Hello):
                peer.welcomes = 0  # it has its Welcome
            if peer.role == "worker":
                self.hosts.heard(peer.host, time.time())
        if isinstance(message, protocol.Hello):
            self.inbox.deliver(message, sender, self._greeting)
        elif peer is None:
            # A peer of a previous ventilator process, or one forgotten after
            # a long silence: told so, it introduces itself again.
            sender.reply(protocol.HeartbeatReply(self.ventilator_id, known=False))
            if not isinstance(message, protocol.Heartbeat):
                self.dropped.drop(f"{type(message).__name__} before Hello")
        else:
            self.inbox.deliver(message, sender, self._by_role[peer.role])

    def _hello(self, message: protocol.Hello, sender: Sender) -> None:
        if message.role not in ("worker", "sink"):
            raise protocol.ProtocolError(f"hello from role {message.role!r}")
        now, identity = sender.at, sender.identity
        name, host = printable(message.peer_id), printable(message.host)  # a peer's words, for the log
        peer = self.peers.get(identity)
        repeated = peer if peer is not None and (peer.name, peer.role) == (name, message.role) else None
        if repeated is not None and self._welcome_on_its_way(repeated, now):
            self.repeated_hellos += 1
            return
        if message.role == "sink" and self._stands_by(sender, name, host):
            return
        if identity == self.sink and message.role != "sink":
            self.sink, self._listing = None, False  # its identity now says it is a worker: no longer the sink
        peer = self.peers[identity] = Peer(identity, message.role, name, now, host=host, welcomed=now,
                                           welcomes=repeated.welcomes + 1 if repeated is not None else 1)
        if message.role == "sink":
            self.sink = identity  # the job's sink from now on: its SinkHellos follow
            self._sink_done, self._listing, self._parts = {}, True, 0
            self._standbys.discard(identity)
        else:
            self.hosts.joined(message.host, message.booted_at)
        peer.welcome = sender.socket.send_multipart([identity, self._welcome], copy=False, track=True)
        log.debug("%s %s joined from %s", message.role, name, host)

    def _welcome_on_its_way(self, peer: Peer, now: float) -> bool:
        """Whether a repeated Hello of ``peer`` is answered by the Welcome we sent it already: that Welcome (the
        job's config, the tokenizer included: ~0.5 MB for BERT's) is still in our queue to it, or left it less
        than a delay ago: _rewelcome_after, doubled for each Welcome it was sent since it last said anything
        else (up to 16 times).  A fleet of thousands joining at once queues thousands of Welcomes, one far back
        in that queue waits longer than any fixed delay, and a busy peer reads its own queue late: answering
        each repeat again queued more of them (twice, then ten times the peers' in the scale simulation of a
        loaded machine), which held the grants back.  A Welcome lost with its connection leaves our queue, so
        the peer's next Hello past the delay is answered."""
        if peer.welcome is not None and not peer.welcome.done:
            peer.welcomed = now  # the delay counts from when it was last seen queued
            return True
        return now - peer.welcomed < self._rewelcome_after * 2 ** min(max(peer.welcomes - 1, 0), 4)

    def _stands_by(self, sender: Sender, name: str, host: str) -> bool:
        """Whether the sink saying Hello as ``sender`` must stand by (told so: SinkStandby): the job has another
        sink, heard from within _stale_after.  Two sinks on one job each wrote summary.json and dataset_info.json
        from their own view of the manifest.  Past that silence the job's sink is taken for dead (killed, its
        host gone): it is forgotten (any frame it sends later is a stranger's, and it hears it is unknown) and
        this one takes over."""
        current = self.peers.get(self.sink) if self.sink is not None else None
        if current is None or current.role != "sink" or current.identity == sender.identity:
            return False
        silent = sender.at - current.last_seen
        if silent > self._stale_after:
            log.warning("sink %s (%s) silent for %.0f s: sink %s (%s) takes over the job's books", current.name,
                        current.host, silent, name, host)
            del self.peers[current.identity]
            return False
        self.standby_hellos += 1
        if sender.identity not in self._standbys and len(self._standbys) < MAX_STANDBYS_LOGGED:
            self._standbys.add(sender.identity)
            log.warning("sink %s (%s) stands by, writing nothing: sink %s (%s) keeps this job's books; one job has "
                        "one sink (it takes over if that one is silent for %.0f s)", name, host, current.name,
                        current.host, self._stale_after)
        sender.reply(protocol.SinkStandby(current.name, current.host, self._stale_after))
        return True

    def _the_sink(self, sender: Sender, kind: str) -> Peer:
        """The job's sink, which sent ``kind``; a ProtocolError (counted and dropped) if another peer did."""
        if sender.identity != self.sink:
            raise protocol.ProtocolError(f"{kind} from {sender.name}, not the job's sink")
        return self.peers[sender.identity]

    def _heartbeat(self, message: protocol.Heartbeat, sender: Sender) -> None:
        peer = self.peers[sender.identity]
        if peer.role == "worker":
            # A worker that declined the job holds and asks for nothing of it (a hostile one that says it does
            # is neither leased what it claims to hold nor granted what it asks for).
            held, awaiting = ([], None) if peer.declined else (message.held, message.awaiting)
            self.dispatcher.heartbeat(sender.name, held, sender.at)
            if awaiting is not None and awaiting > peer.wanted:
                # Assignments lost on the way (or still in flight: then it gets one extra, held in its queue).
                if peer.wanted == 0:
                    self.waiting.append(peer.identity)
                peer.wanted = awaiting
            elif awaiting is not None and awaiting < peer.wanted:
                peer.wanted = awaiting  # a draining worker takes its credit back
        sender.socket.send_multipart([sender.identity, self._known])  # HeartbeatReply(ventilator_id)

    def _request(self, message: protocol.TaskRequest, sender: Sender) -> None:
        peer = self.peers[sender.identity]
        if message.credit > 0 and not peer.declined:
            if peer.wanted == 0:
                self.waiting.append(peer.identity)
            peer.wanted += message.credit

    def _finished(self, message: protocol.TaskFinished, sender: Sender) -> None:
        self.dispatcher.finished(sender.name, message.task_id, sender.at)

    def _failed(self, message: protocol.TaskFailed, sender: Sender) -> None:
        again = self.dispatcher.redo(message.redo)
        for redone in again:
            log.warning("task %s: its output is missing or corrupt (found by task %s): doing it again",
                        redone.task.key, message.task_id)
        entry = self.dispatcher.failed(sender.name, message.task_id, message.error, sender.at, message.permanent)
        log.warning("task %s failed on %s: %s", message.task_id, self.peers[sender.identity].name,
                    message.error)
        if entry is not None:
            self._quarantine(sender.socket, [entry])

    def _returned(self, message: protocol.TaskReturned, sender: Sender) -> None:
        self.dispatcher.returned(sender.name, message.task_ids)

    def _declined(self, message: protocol.JobDeclined, sender: Sender) -> None:
        """A worker that cannot run this job: granted none of its tasks from now on (until it says Hello again,
        restarted); counted once, by its reason.  What it was granted comes back as TaskReturned."""
        if message.job_id != self.config.job_id:  # a late answer to another ventilator's Welcome
            raise protocol.ProtocolError(f"JobDeclined of job {message.job_id}, not {self.config.job_id}")
        peer = self.peers[sender.identity]
        if peer.declined:
            return
        peer.declined = sanitized(message.reason)
        peer.wanted = 0
        if self.declines.add(peer.name, peer.declined):
            log.warning("worker %s (%s) cannot run this job, it gets none of its tasks: %s", peer.name, peer.host,
                        peer.declined)

    def _sink_hello(self, message: protocol.SinkHello, sender: Sender) -> None:
        peer = self._the_sink(sender, "SinkHello")
        if message.job_id != self.config.job_id:
            log.error("sink %s is on job %s, not %s: restart it", peer.name, printable(message.job_id),
                      self.config.job_id)
            return
        if not self._parts:  # its first SinkHello since its Hello
            # Nothing done here (a run's start, a resume of a million tasks): no task done here can be one the
            # sink lacks, so each part is applied as it comes, one lookup a task.  Else the parts are gathered
            # and set against every task at the last (resync): marking each as it came could make the job look
            # complete between two of them, before tasks the sink lacks are put back.
            self._sink_done = None if self.dispatcher.counts[State.DONE] == 0 else {}
        self._parts += 1
        if self._sink_done is None:
            self.dispatcher.confirm(message.done)
        else:
            self._sink_done.update(message.done)
        if not message.last:
            return
        undone = self.dispatcher.resync(self._sink_done) if self._sink_done is not None else []
        self._sink_done, self._listing, self._parts = {}, False, 0
        if undone:
            log.warning("sink %s does not have %d task(s) a sink confirmed before: doing them again",
                        peer.name, len(undone))
        quarantined = self.dispatcher.quarantined()
        if quarantined:  # a new sink has not heard of them
            self._quarantine(sender.socket, quarantined, announce=False)
        if not self.sink_ready:
            self._done_at_start = self.dispatcher.counts[State.DONE]
            log.info("sink %s ready: %d of %d tasks already done", peer.name, self._done_at_start,
                     self.dispatcher.total)
        self.sink_ready = True

    def _tasks_done(self, message: protocol.TasksDone, sender: Sender) -> None:
        self._the_sink(sender, "TasksDone")
        self.dispatcher.mark_done(message.task_ids)
        self.documents_done += message.documents

    def _sink_said_closed(self, message: protocol.SinkClosed, sender: Sender) -> None:
        peer = self._the_sink(sender, "SinkClosed")  # a stray one (another peer's) must not end the job
        self.sink_closed = message.error
        if message.error:
            log.error("sink %s: %s", peer.name, message.error)

    # Work ---------------------------------------------------------------
    def _dispatch(self, router: zmq.Socket, now: float) -> None:
        if not self.sink_ready:
            return
        stale_after = self._stale_after
        silent: list[bytes] = []
        while self.waiting and self.dispatcher.has_pending:
            identity = self.waiting.popleft()
            peer = self.peers.get(identity)
            if peer is None or peer.wanted <= 0 or peer.declined:
                continue
            if now - peer.last_seen > stale_after:
                silent.append(identity)  # keep its credit, give it nothing now
                continue
            entry = self.dispatcher.lease(printable(identity), now)  # as Sender.name spells it
            if entry is None:
                self.waiting.appendleft(identity)
                break
            content = None
            if not entry.task.reads_input:  # a stage's task over no input: the earlier tasks to do without
                content = encode_quarantined([e.task.task_id for e in self.dispatcher.quarantined()])
            elif self.config.read_mode == "ship":
                try:
                    content = self.job.reader.read(self.job.input_storage, entry.task)
                except Exception as error:  # the file vanished or changed since it was listed
                    log.warning("task %s: cannot read it: %s", entry.task.key, error)
                    quarantined = self.dispatcher.failed(entry.worker, entry.task.task_id,
                                                         f"ventilator could not read it: {error}", now,
                                                         is_permanent(error))
                    if quarantined is not None:
                        self._quarantine(router, [quarantined])
                    self.waiting.appendleft(identity)
                    continue
            router.send_multipart([identity, protocol.encode(protocol.TaskAssignment(
                entry.task.to_wire(), self.config.lease_seconds, entry.attempts, content))])
            peer.wanted -= 1
            if peer.wanted > 0:
                self.waiting.append(identity)
        self.waiting.extend(silent)

    def _required_task_failed(self) -> str:
        """Why the job cannot go on: a task a step requires (dedup's resolve: no removal list would come, so no
        normal task could run) was quarantined; "" while none was."""
        if self._required is None:
            self._required = required_tasks(self.config)
        for task_id, why in self._required.items():
            entry = self.dispatcher.entries.get(task_id)
            if entry is not None and entry.state is State.QUARANTINED:
                return why
        return ""

    @property
    def _stale_after(self) -> float:
        """Silence after which a peer counts as gone for now (three missed heartbeats)."""
        return 3 * self.config.heartbeat_seconds + 5

    def _forget_silent_workers(self, now: float) -> None:
        """Workers that died (spot instances come and go) would otherwise stay
        in the peer table and the dispatch queue for the whole job.  Their
        leases have long expired; one that was only frozen is told it is
        unknown on its next message and says Hello again."""
        forget_after = 2 * max(self.config.lease_seconds, self._stale_after)
        if now - self._forgot_at < forget_after / 8:  # a look at every peer: not each housekeeping (0.5 s)
            return
        self._forgot_at = now
        gone = [identity for identity, peer in self.peers.items()
                if peer.role == "worker" and now - peer.last_seen > forget_after]
        for identity in gone:
            peer = self.peers.pop(identity)
            log.info("worker %s silent for %.0fs: forgotten", peer.name, now - peer.last_seen)
        if gone:
            self.waiting = deque(identity for identity in self.waiting if identity in self.peers)

    def _expire(self, router: zmq.Socket, now: float) -> None:
        self._forget_silent_workers(now)
        requeued, quarantined = self.dispatcher.expire(now)
        for entry in requeued:
            log.info("task %s back in the queue: %s", entry.task.key, (entry.errors or ["?"])[-1])
        if quarantined:
            self._quarantine(router, quarantined)

    def _give_up_if_nobody_can_run(self, router: zmq.Socket, now: float) -> None:
        """Every live worker declined the job (one at least), for a lease period: the tasks left are
        quarantined with why, so the job ends (exit 3, summary.json's quarantined tasks say why) instead of
        waiting for a worker that can run it.  A worker that can, or no worker at all, starts the wait again."""
        if not self.sink_ready or self.dispatcher.complete or not self.declines.count:
            return  # (no worker declined: some can run it, and no look at every peer is needed to say so)
        stale_after = self._stale_after
        live = [bool(peer.declined) for peer in self.peers.values()
                if peer.role == "worker" and now - peer.last_seen <= stale_after]
        if not self.declines.nobody_can_run(live, now):
            return
        why = f"no worker can run this job: {self.declines.line()}"
        given_up = self.dispatcher.quarantine_pending(why)
        if given_up:
            log.error("%s (every worker heard from declined it for %.0f s): %d task(s) quarantined", why,
                      self.declines.give_up_after, len(given_up))
            self._quarantine(router, given_up, announce=False)

    def _quarantine(self, router: zmq.Socket, entries: list[Entry], announce: bool = True) -> None:
        failures = {}
        for entry in entries:
            if announce:
                log.error("task %s quarantined after %d attempts: %s", entry.task.key, entry.attempts,
                          entry.errors[-1] if entry.errors else "")
            errors = [error[:QUARANTINE_ERROR_CHARS] for error in (entry.errors or [])[-5:]]
            failures[entry.task.task_id] = protocol.Quarantine(entry.task.path, entry.task.start, entry.task.end,
                                                               entry.attempts, errors)
        if self.sink is None:
            return
        # In frames well under the sink's inbound limit, however many tasks there are.
        items = list(failures.items())
        for start in range(0, len(items), QUARANTINE_BATCH):
            part = dict(items[start:start + QUARANTINE_BATCH])
            router.send_multipart([self.sink, protocol.encode(protocol.TasksQuarantined(part))])

    def _broadcast(self, router: zmq.Socket, message, roles=("worker", "sink")) -> None:
        frame = protocol.encode(message)
        for peer in self.peers.values():
            if peer.role in roles:
                router.send_multipart([peer.identity, frame])

    def _finish(self, router: zmq.Socket) -> RunResult:
        quarantined = self.dispatcher.quarantined()
        reason = "all tasks done" if not quarantined else f"{len(quarantined)} task(s) quarantined"
        if self.declines.count:  # summary.json's reason says it too
            reason = f"{reason}; {self.declines.line()}"
        shutdown = protocol.Shutdown(f"job finished: {reason}")
        if self.sink is not None:  # before Shutdown: the sink's summary counts each host's whole span
            for part in self.hosts.message_parts():
                router.send_multipart([self.sink, protocol.encode(protocol.WorkerHosts(part))])
        self._broadcast(router, shutdown)
        self._report(time.monotonic())
        log.info("ventilator: job %s finished: %s", self.config.job_id, reason)
        self._answer_late_peers(router, protocol.encode(shutdown))
        if self.sink is not None and self.sink_closed is None and not (self.interrupted or self.should_stop()):
            error = (f"the sink did not say within {SINK_CLOSE_SECONDS:.0f} s that it published the manifest and "
                     f"summary.json; see its log")
            return RunResult(False, error, quarantined, error=error)
        if self.sink_closed:
            error = f"the sink could not finish the job: {self.sink_closed}"
            return RunResult(False, error, quarantined, error=error)
        return RunResult(not quarantined, reason, quarantined)

    def _answer_late_peers(self, router: zmq.Socket, shutdown: bytes) -> None:
        """Peers that were busy, or joined after the end, hear Shutdown on
        their next message (a heartbeat at the latest); and the sink says it
        closed the job's books (SinkClosed), which may take it a while."""
        now = time.monotonic()
        deadline = now + 2 * self.config.heartbeat_seconds + 1
        sink_deadline = now + SINK_CLOSE_SECONDS
        while True:
            now = time.monotonic()
            if self.sink is not None and self.sink_closed is None:
                # A local sink that died says so through its status; Ctrl-C is not held up for the sink either.
                if now > sink_deadline or self.interrupted or self.should_stop():
                    return
            elif now > deadline or self.peers_gone():
                return
            if router.poll(timeout=100):
                received = self.inbox.routed(router.recv_multipart())
                if received is None:
                    continue
                identity, message = received
                if isinstance(message, protocol.SinkClosed) and identity == self.sink:
                    self._handle(router, identity, message)
                else:
                    router.send_multipart([identity, shutdown])

    def _show_progress(self) -> None:
        if self.options.on_progress is not None:
            self.options.on_progress(self.dispatcher.counts[State.DONE], self.dispatcher.bytes_in(State.DONE))

    @property
    def worker_count(self) -> int:
        """Workers heard from within the last three heartbeats."""
        now, stale_after = time.monotonic(), self._stale_after
        return sum(1 for peer in list(self.peers.values())
                   if peer.role == "worker" and now - peer.last_seen <= stale_after)

    def backlog(self) -> Backlog:
        """The work left and the workers at it, for the backlog publisher (ventilator/publishers/)."""
        now, stale_after = time.monotonic(), self._stale_after
        live = [peer for peer in list(self.peers.values())
                if peer.role == "worker" and now - peer.last_seen <= stale_after]
        counts = self.dispatcher.counts
        return Backlog(counts[State.PENDING], counts[State.LEASED], len(live), len({peer.host for peer in live}))

    def metrics(self):
        """What Prometheus scrapes (see common/metrics.py)."""
        d = self.dispatcher
        yield gauge("mlm_ventilator_tasks", "Tasks of the job by state: pending, leased to a worker, finished "
                    "(awaiting the sink's confirmation), done, quarantined.",
                    labels={state.name.lower(): count for state, count in dict(d.counts).items()}, label="state")
        yield gauge("mlm_ventilator_input_bytes", "Input bytes of all the job's tasks.", self.input_bytes)
        yield gauge("mlm_ventilator_input_bytes_done", "Input bytes of the tasks done.", d.bytes_in(State.DONE))
        yield counter("mlm_ventilator_documents", "Documents in tasks confirmed done by this process.",
                      self.documents_done)
        yield counter("mlm_ventilator_redeliveries", "Tasks handed out again after a lease expired or a failure.",
                      d.redeliveries)
        yield counter("mlm_ventilator_requeued", "Tasks put back in the queue, by reason: lease_expired (a lost "
                      "or stuck worker), unconfirmed (the sink never confirmed), failed, returned (by a draining "
                      "worker, unstarted), redo (a later task found its files missing).",
                      labels=dict(d.requeued), label="reason")
        yield gauge("mlm_ventilator_workers", "Worker processes heard from within the last three heartbeats.",
                    self.worker_count)
        yield gauge("mlm_ventilator_sink_ready", "1 once the sink has said which tasks are done.",
                    int(self.sink_ready))
        yield counter("mlm_ventilator_standby_hellos", "Hellos of sinks told to stand by: the job has its sink "
                      "(one job has one sink).", self.standby_hellos)
        yield counter("mlm_ventilator_repeated_hellos", "Hellos repeated before our Welcome arrived, not answered "
                      "again (a fleet joining at once).", self.repeated_hellos)
        yield counter("mlm_ventilator_declining_workers", "Workers that declined the job: they cannot run it (a "
                      "plugin step, tokenizer, output storage or segmenter they lack; the log says why) and get "
                      "none of its tasks.", self.declines.count)
        yield counter("mlm_ventilator_dropped_messages", "Malformed or unexpected messages dropped.",
                      self.dropped.total)

    def _interrupted_reason(self) -> str:
        left = self.dispatcher.total - self.dispatcher.counts[State.DONE]
        return f"interrupted with {left} of {self.dispatcher.total} tasks not done; run the same command to resume"

    def _warn_without_sink(self, now: float) -> None:
        """Said past NO_SINK_WARNING_SECONDS, then once a minute: silence here looked like a hang (a ventilator
        restarted after its job ended, the sink gone, printed "0 workers" forever)."""
        waited = now - self._serving_since
        if self.sink_ready or not self._no_sink.due(waited, now):
            return
        joined = [peer for peer in self.peers.values() if peer.role == "sink"]
        if joined:  # a sink resuming a large job reads its manifest and lists the output first
            log.warning("sink %s joined %.0f s ago and has not yet said which tasks are done: no task is handed "
                        "out until it does", joined[-1].name, now - joined[-1].welcomed)
        else:
            log.warning("no sink has said which tasks are done in %.0f s: no task is handed out until one does "
                        "(is the sink running, and can it reach this ventilator?)", waited)

    def _report(self, now: float) -> None:
        d = self.dispatcher
        done = d.counts[State.DONE]
        elapsed = max(now - self._started, 1e-9)
        done_now = done - self._done_at_start
        bytes_done = d.bytes_in(State.DONE)
        rate = done_now / elapsed
        remaining = d.total - done - d.counts[State.QUARANTINED]
        eta = f"{remaining / rate:.0f}s" if rate > 0 else "?"
        log.info("progress: %d/%d tasks done (%d leased, %d awaiting the sink, %d quarantined), %.1f/%.1f MB, "
                 "%d documents, %d workers, ETA %s%s%s", done, d.total, d.counts[State.LEASED],
                 d.counts[State.FINISHED], d.counts[State.QUARANTINED], bytes_done / 1e6, self.input_bytes / 1e6,
                 self.documents_done, self.worker_count, eta,
                 f", {self.dropped.total} bad messages dropped" if self.dropped.total else "",
                 f"; {self.declines.line()}" if self.declines.count else "")
