"""Which task goes to whom, and when it comes back: leases, no sockets.

A task is PENDING until leased to a worker.  The lease lasts while the
worker's heartbeats list it; if they stop (the worker died, hung or lost the
network) it expires and the task is PENDING again.  When the worker reports
the shard written, the task is FINISHED: the sink still has to confirm it is
in the manifest, and if that does not come in time (the sink died with the
ack in its queue) the task is done again.  Only the sink's confirmation
makes it DONE.  A task that fails ``max_attempts`` times is QUARANTINED, and
so is one whose lease expires ``2 * max_attempts`` times (counted apart:
leases that ended any other way are not failures) (a task that kills
every worker it is given, say by running it out of memory; a worker lost to
a preemption is more common than a poison task, hence the larger budget).

Every redelivery is safe because a task always yields the same shard under
the same name, and the sink ignores acknowledgements it already has.

A job may have stages (a step's own tasks: dedup's before the normal pass,
the writer's finish after it; common/steps/base.py), planned in the order they
run: a task is leased only once every task of the earlier stages is DONE (or
quarantined).
A task that finds an earlier task's file missing or corrupt has that task
done again (:meth:`Dispatcher.redo`), which holds its own stage back again.
A job without such steps has one stage: nothing here changes for it.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import operator
from collections import Counter, deque
from dataclasses import dataclass

from common.job.tasks import Task


class State(enum.Enum):
    PENDING = "pending"
    LEASED = "leased"
    FINISHED = "finished"
    DONE = "done"
    QUARANTINED = "quarantined"

    # A member is its one instance: hashed by identity, in C (Enum's own hashes its name in Python, and the
    # counters are keyed by state at every change of every task: a million at a resume).
    __hash__ = object.__hash__


_state_of = operator.attrgetter("state")

#: Why a task went back to pending: its lease ran out, the sink never confirmed its output, its worker
#: reported a failure, a draining worker handed it back unstarted, or a later task found its files missing.
REQUEUE_REASONS = ("lease_expired", "unconfirmed", "failed", "returned", "redo")


@dataclass(slots=True)
class Entry:
    task: Task
    state: State = State.PENDING
    worker: str = ""
    deadline: float = 0.0
    attempts: int = 0  # leases
    failures: int = 0  # reported by a worker
    expiries: int = 0  # leases that ran out
    errors: list[str] | None = None  # what went wrong, oldest first (a list from the first error: most tasks have none)
    timer: int = 0  # which deadline of this entry the heap's item is for; a newer one makes older items stale

    def note(self, error: str) -> None:
        if self.errors is None:
            self.errors = []
        self.errors.append(error)


class Dispatcher:
    def __init__(self, tasks: list[Task], lease_seconds: float, confirm_seconds: float, max_attempts: int):
        self.lease_seconds = lease_seconds
        self.confirm_seconds = confirm_seconds
        self.max_attempts = max_attempts
        self.entries: dict[str, Entry] = {}
        entries = self.entries
        self._pending: dict[int, deque[str]] = {}
        self._open: dict[int, int] = {}  # stage rank -> its tasks neither DONE nor QUARANTINED
        #: Each stage's rank: the order of the stages' first tasks in the plan (they are planned in order).
        self.stage_rank: dict[str, int] = {}
        pending_bytes = 0
        for stage, group in itertools.groupby(tasks, key=lambda task: task.stage):  # one pass: a million tasks
            rank = self.stage_rank.setdefault(stage, len(self.stage_rank))
            pending = self._pending.setdefault(rank, deque())
            before = len(entries)
            for task in group:
                if task.task_id not in entries:
                    entries[task.task_id] = Entry(task)
                    pending.append(task.task_id)
                    pending_bytes += task.end - task.start
            self._open[rank] = self._open.get(rank, 0) + len(entries) - before
        self.counts = {state: 0 for state in State}
        self.counts[State.PENDING] = len(entries)
        self._bytes = {state: 0 for state in State}  # input bytes of the tasks in each state
        self._bytes[State.PENDING] = pending_bytes
        self.redeliveries = 0
        #: Tasks put back in the queue, by why (REQUEUE_REASONS): a lost worker's show as lease_expired once
        #: its leases run out, before any other worker takes them (the redeliveries).
        self.requeued = dict.fromkeys(REQUEUE_REASONS, 0)
        # Deadlines of LEASED and FINISHED entries, earliest first: (deadline, timer, task id).  An item is
        # stale once its entry left that state or got a new timer; a heartbeat only moves ``entry.deadline``
        # later, and the item is pushed again when it comes up early.  So expiry looks at what is due, not at
        # every task, and a heartbeat costs no heap operation.
        self._deadlines: list[tuple[float, int, str]] = []

    # State changes --------------------------------------------------------
    def _start_timer(self, entry: Entry, deadline: float) -> None:
        entry.timer += 1
        entry.deadline = deadline
        heapq.heappush(self._deadlines, (deadline, entry.timer, entry.task.task_id))

    def _move(self, entry: Entry, state: State) -> None:
        settled = (State.DONE, State.QUARANTINED)
        rank = self.stage_rank[entry.task.stage]
        self._open[rank] += (entry.state in settled) - (state in settled)
        self.counts[entry.state] -= 1
        self.counts[state] += 1
        self._bytes[entry.state] -= entry.task.length
        self._bytes[state] += entry.task.length
        entry.state = state
        if state is State.PENDING:
            entry.worker = ""
            if entry.attempts:  # back from a lease: first in line, it holds the job's end back
                self._pending[rank].appendleft(entry.task.task_id)
            else:
                self._pending[rank].append(entry.task.task_id)

    @property
    def current_rank(self) -> int | None:
        """The earliest stage with tasks not yet settled: the only one leased from."""
        return min((rank for rank, count in self._open.items() if count), default=None)

    def stage_settled(self, stage: str) -> bool:
        return not self._open.get(self.stage_rank.get(stage, -1), 0)

    def redo(self, task_ids) -> list[Entry]:
        """Do these tasks (of an earlier stage, done) again: a later task found
        their files missing or corrupt.  Returns the entries put back."""
        again = []
        for task_id in task_ids:
            entry = self.entries.get(task_id)
            if entry is not None and entry.state in (State.DONE, State.FINISHED):
                entry.note("its output was found missing or corrupt")
                self._move(entry, State.PENDING)
                self.requeued["redo"] += 1
                again.append(entry)
        return again

    def mark_done(self, task_ids) -> list[Entry]:
        """The sink has these tasks (written by this run: a resume's come through ``resync``)."""
        newly = []
        for task_id in task_ids:
            entry = self.entries.get(task_id)
            if entry is None or entry.state in (State.DONE,):
                continue
            self._move(entry, State.DONE)
            newly.append(entry)
        return newly

    def resync(self, done: dict[str, str]) -> list[Entry]:
        """A sink (re)introduced itself with every task its manifest holds (id: input version): those are
        DONE here, and tasks DONE here that it lacks are done again (returned).  One pass over the tasks,
        the counters settled in bulk."""
        newly, undone = [], []
        confirmed, finished = done.get, State.DONE  # (a million times: no lookups in the loop)
        for task_id, entry in self.entries.items():
            if confirmed(task_id) == entry.task.version:
                if entry.state is not finished:
                    newly.append(entry)
            elif entry.state is finished:
                undone.append(entry)
        self._settle_done(newly)
        for entry in undone:
            self._move(entry, State.PENDING)
        return undone

    def confirm(self, done: dict[str, str]) -> None:
        """Part of a sink's list of what its manifest holds (id: input version), when nothing is DONE here (a
        run's start): those tasks are DONE, one lookup each, as the parts come (no task DONE here can be one
        the sink lacks, so none is undone).  A resume at a million tasks does this instead of ``resync``."""
        entries, finished = self.entries.get, State.DONE
        self._settle_done([entry for task_id, version in done.items()
                           if (entry := entries(task_id)) is not None and entry.state is not finished
                           and entry.task.version == version])

    def _settle_done(self, newly: list[Entry]) -> None:
        """These entries (none DONE) DONE, the counters settled in bulk: ``_move`` a million times costs seconds.
        A state every one of whose tasks moves (a resume's PENDING) gives up its bytes whole, and a job of one
        stage closes what moved, so the common case reads no task."""
        settled = (State.DONE, State.QUARANTINED)
        moved = Counter(map(_state_of, newly))  # counted in C
        whole = {state for state, count in moved.items() if count == self.counts[state]}
        several_stages = len(self.stage_rank) > 1
        moved_bytes: Counter[State] = Counter()
        closed: Counter[int] = Counter()  # by stage rank
        if several_stages or len(whole) < len(moved):
            for entry in newly:
                state, task = entry.state, entry.task
                if state not in whole:
                    moved_bytes[state] += task.end - task.start
                if several_stages and state not in settled:
                    closed[self.stage_rank[task.stage]] += 1
        if not several_stages:
            for rank in self._open:
                closed[rank] = sum(count for state, count in moved.items() if state not in settled)
        done = State.DONE
        for entry in newly:
            entry.state = done
        for state, count in moved.items():
            change = self._bytes[state] if state in whole else moved_bytes[state]
            self.counts[state] -= count
            self.counts[done] += count
            self._bytes[state] -= change
            self._bytes[done] += change
        for rank, count in closed.items():
            self._open[rank] -= count

    def lease(self, worker: str, now: float) -> Entry | None:
        rank = self.current_rank
        pending = self._pending.get(rank) if rank is not None else None
        while pending:
            entry = self.entries[pending.popleft()]
            if entry.state is not State.PENDING:
                continue  # claimed by a heartbeat or done meanwhile
            entry.attempts += 1
            entry.worker = worker
            self._start_timer(entry, now + self.lease_seconds)
            self._move(entry, State.LEASED)
            if entry.attempts > 1:
                self.redeliveries += 1
            return entry
        return None

    def heartbeat(self, worker: str, held: list[str], now: float) -> None:
        """Extend the worker's leases; adopt pending tasks it says it holds
        (it got them from a previous ventilator)."""
        for task_id in held:
            entry = self.entries.get(task_id)
            if entry is None:
                continue
            if entry.state is State.PENDING:
                entry.attempts += 1
                entry.worker = worker
                self._start_timer(entry, now + self.lease_seconds)
                self._move(entry, State.LEASED)
            if entry.state is State.LEASED and entry.worker == worker:
                entry.deadline = now + self.lease_seconds

    def finished(self, worker: str, task_id: str, now: float) -> None:
        entry = self.entries.get(task_id)
        if entry is None or entry.state in (State.DONE, State.QUARANTINED, State.FINISHED):
            return
        entry.worker = worker
        self._start_timer(entry, now + self.confirm_seconds)
        self._move(entry, State.FINISHED)

    def failed(self, worker: str, task_id: str, error: str, now: float, permanent: bool = False) -> Entry | None:
        """Record a failed attempt; returns the entry if it is now quarantined."""
        entry = self.entries.get(task_id)
        if entry is None or entry.state not in (State.LEASED, State.PENDING):
            return None
        if entry.state is State.LEASED and entry.worker != worker:
            return None  # a stale report: someone else holds it now
        entry.note(error)
        entry.failures += 1
        if permanent or entry.failures >= self.max_attempts:
            self._move(entry, State.QUARANTINED)
            return entry
        if entry.state is State.LEASED:
            self._move(entry, State.PENDING)
            self.requeued["failed"] += 1
        return None

    def quarantine_pending(self, error: str) -> list[Entry]:
        """Quarantine every task waiting to be leased, of every stage, with ``error``: no worker can run the
        job (ventilator/declines.py).  Leased and finished tasks keep their course (a lease that expires
        brings its task back here next time)."""
        given_up = [entry for entry in self.entries.values() if entry.state is State.PENDING]
        for entry in given_up:
            entry.note(error)
            self._move(entry, State.QUARANTINED)
        return given_up

    def returned(self, worker: str, task_ids: list[str]) -> None:
        """Handed back unstarted: not an attempt."""
        for task_id in task_ids:
            entry = self.entries.get(task_id)
            if entry is not None and entry.state is State.LEASED and entry.worker == worker:
                entry.attempts -= 1
                self._move(entry, State.PENDING)
                self.requeued["returned"] += 1

    def expire(self, now: float) -> tuple[list[Entry], list[Entry]]:
        """Leases and confirmations past their deadline: (requeued, quarantined)."""
        requeued, quarantined = [], []
        heap = self._deadlines
        while heap and heap[0][0] < now:
            _, timer, task_id = heapq.heappop(heap)
            entry = self.entries[task_id]
            if entry.timer != timer or entry.state not in (State.LEASED, State.FINISHED):
                continue  # stale: the entry moved on since this deadline was set
            if entry.deadline >= now:  # extended by heartbeats meanwhile: wait for the new deadline
                heapq.heappush(heap, (entry.deadline, timer, task_id))
                continue
            reason = "lease expired" if entry.state is State.LEASED else "sink never confirmed"
            entry.note(f"{reason} (worker {entry.worker})")
            if entry.state is State.LEASED:
                entry.expiries += 1
            if entry.state is State.LEASED and entry.expiries >= 2 * self.max_attempts:
                self._move(entry, State.QUARANTINED)
                quarantined.append(entry)
            else:
                self.requeued["lease_expired" if entry.state is State.LEASED else "unconfirmed"] += 1
                self._move(entry, State.PENDING)
                requeued.append(entry)
        return requeued, quarantined

    # Questions ------------------------------------------------------------
    @property
    def total(self) -> int:
        return len(self.entries)

    @property
    def complete(self) -> bool:
        return self.counts[State.DONE] + self.counts[State.QUARANTINED] == len(self.entries)

    @property
    def has_pending(self) -> bool:
        """Some task can be leased now (of the current stage)."""
        rank = self.current_rank
        return self.counts[State.PENDING] > 0 and rank is not None and bool(self._pending.get(rank))

    def quarantined(self) -> list[Entry]:
        if not self.counts[State.QUARANTINED]:  # (a pass over a million tasks otherwise)
            return []
        return [e for e in self.entries.values() if e.state is State.QUARANTINED]

    def bytes_in(self, state: State) -> int:
        return self._bytes[state]
