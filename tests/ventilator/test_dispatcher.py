"""Leases: expiry, heartbeats, confirmation, quarantine, hand-back."""

from common.job.tasks import Task
from ventilator.dispatcher import Dispatcher, State


def tasks(n):
    return [Task(f"f{i}", 0, 10, 10, "v") for i in range(n)]


def test_lease_expires_without_heartbeat_and_is_redelivered():
    d = Dispatcher(tasks(1), lease_seconds=10, confirm_seconds=30, max_attempts=3)
    entry = d.lease("w1", now=0)
    assert d.lease("w2", now=0) is None
    d.heartbeat("w1", [entry.task.task_id], now=8)  # alive and slow: keeps it
    assert d.expire(now=15) == ([], [])
    requeued, _ = d.expire(now=19)
    assert requeued == [entry]
    assert d.requeued["lease_expired"] == 1 and d.redeliveries == 0  # back in the queue, not yet handed out
    again = d.lease("w2", now=20)
    assert again is entry and entry.attempts == 2 and d.redeliveries == 1


def test_finished_waits_for_the_sink_then_done():
    d = Dispatcher(tasks(2), 10, 30, 3)
    first = d.lease("w", 0)
    d.finished("w", first.task.task_id, 1)
    assert first.state is State.FINISHED and not d.complete
    requeued, _ = d.expire(32)  # the sink never confirmed: do it again
    assert requeued == [first]
    d.mark_done([t.task_id for t in tasks(2)])
    assert d.complete


def test_poison_task_is_quarantined_after_max_attempts():
    d = Dispatcher(tasks(1), 10, 30, max_attempts=2)
    e = d.lease("w1", 0)
    assert d.failed("w1", e.task.task_id, "boom", 1) is None
    e = d.lease("w2", 2)
    assert d.failed("w2", e.task.task_id, "boom", 3) is e
    assert e.state is State.QUARANTINED and d.complete


def test_stale_failure_from_previous_holder_is_ignored():
    d = Dispatcher(tasks(1), 10, 30, 3)
    e = d.lease("w1", 0)
    d.expire(11)
    d.lease("w2", 12)
    assert d.failed("w1", e.task.task_id, "late", 13) is None
    assert e.state is State.LEASED and e.worker == "w2"


def test_returned_tasks_do_not_count_as_attempts():
    d = Dispatcher(tasks(1), 10, 30, 1)
    e = d.lease("w1", 0)
    d.returned("w1", [e.task.task_id])
    assert e.state is State.PENDING and e.attempts == 0
    assert d.lease("w2", 1) is e


def test_heartbeat_adopts_tasks_held_from_a_previous_ventilator():
    d = Dispatcher(tasks(3), 10, 30, 3)
    held = tasks(3)[1].task_id
    d.heartbeat("w1", [held], 0)
    assert d.entries[held].state is State.LEASED
    leased = [d.lease("w2", 0), d.lease("w2", 0), d.lease("w2", 0)]
    assert held not in {e.task.task_id for e in leased if e}


def test_resume_skips_done_tasks_only_when_the_version_matches():
    ts = tasks(2)
    d = Dispatcher(ts, 10, 30, 3)
    d.resync({ts[0].task_id: "v", ts[1].task_id: "old"})
    assert d.entries[ts[0].task_id].state is State.DONE
    assert d.entries[ts[1].task_id].state is State.PENDING


def test_permanent_failure_is_quarantined_at_once():
    d = Dispatcher(tasks(1), 10, 30, max_attempts=5)
    e = d.lease("w1", 0)
    assert d.failed("w1", e.task.task_id, "VersionChanged: object changed", 1, permanent=True) is e
    assert e.state is State.QUARANTINED and d.complete


def test_a_task_whose_workers_keep_dying_is_quarantined_eventually():
    d = Dispatcher(tasks(1), lease_seconds=1, confirm_seconds=30, max_attempts=2)
    now = 0
    for attempt in range(4):
        e = d.lease(f"w{attempt}", now)
        assert e is not None, attempt
        now += 2
        requeued, quarantined = d.expire(now)
    assert quarantined == [e] and e.expiries == 4


def test_counts_and_bytes_per_state_follow_random_events():
    """The per-state counts and input bytes kept as tasks move agree with
    the entries themselves, whatever happens."""
    import random

    rng = random.Random(5)
    planned = [Task(f"f{i % 3}", i * 100, i * 100 + rng.randint(1, 99), 10_000, "v") for i in range(40)]
    d = Dispatcher(planned, lease_seconds=5, confirm_seconds=5, max_attempts=3)
    now = 0.0
    workers = ["w1", "w2", "w3"]
    for _ in range(2000):
        now += rng.random()
        held = [e for e in d.entries.values() if e.state is State.LEASED]
        finished = [e for e in d.entries.values() if e.state is State.FINISHED]
        action = rng.randrange(6)
        if action == 0:
            d.lease(rng.choice(workers), now)
        elif action == 1 and held:
            entry = rng.choice(held)
            d.finished(entry.worker, entry.task.task_id, now)
        elif action == 2 and held:
            entry = rng.choice(held)
            d.failed(entry.worker, entry.task.task_id, "boom", now, permanent=rng.random() < 0.1)
        elif action == 3 and finished:
            d.mark_done([rng.choice(finished).task.task_id])
        elif action == 4:
            d.expire(now)
        elif action == 5 and held:
            entry = rng.choice(held)
            d.returned(entry.worker, [entry.task.task_id])
        for state in State:
            members = [e for e in d.entries.values() if e.state is state]
            assert d.counts[state] == len(members)
            assert d.bytes_in(state) == sum(e.task.length for e in members)
    assert d.counts[State.DONE] > 5 and d.counts[State.QUARANTINED] > 0  # the walk went places


def test_preemptions_and_lost_confirmations_are_not_failures():
    """Two leases that ran out and one finish the sink never confirmed, then
    one real failure: still far from --max-attempts failures."""
    (only,) = tasks(1)
    d = Dispatcher([only], lease_seconds=1, confirm_seconds=1, max_attempts=3)
    now = 0.0
    for _ in range(2):
        d.lease("w", now)
        now += 5
        d.expire(now)
    d.lease("w", now)
    d.finished("w", only.task_id, now)
    now += 5
    d.expire(now)
    d.lease("w", now)
    assert d.failed("w", only.task_id, "transient S3 error", now) is None
    assert d.entries[only.task_id].state is State.PENDING
    for _attempt in range(2):  # the third failure quarantines it
        d.lease("w", now)
        quarantined = d.failed("w", only.task_id, "S3 error", now)
    assert quarantined is not None and quarantined.failures == 3 and quarantined.attempts == 6


def test_a_new_sink_without_some_done_tasks_gets_them_done_again():
    """A sink restarted elsewhere from an older published manifest: what the
    old sink confirmed after that is done again, not left out of the output."""
    all_tasks = tasks(4)
    d = Dispatcher(all_tasks, lease_seconds=10, confirm_seconds=10, max_attempts=3)
    d.resync({t.task_id: t.version for t in all_tasks})
    assert d.complete
    undone = d.resync({t.task_id: t.version for t in all_tasks[:2]})
    assert sorted(e.task.task_id for e in undone) == sorted(t.task_id for t in all_tasks[2:])
    assert d.counts[State.DONE] == 2 and d.counts[State.PENDING] == 2 and not d.complete
    assert d.lease("w", 0.0).task.task_id in {t.task_id for t in all_tasks[2:]}


def _due(d: Dispatcher, now: float) -> set[str]:
    """The oracle: every entry a scan of all tasks would expire."""
    return {e.task.task_id for e in d.entries.values()
            if e.state in (State.LEASED, State.FINISHED) and e.deadline < now}


def test_deadline_heap_expires_exactly_what_a_scan_would():
    """Random leases, heartbeats, finishes, failures, returns and confirmations:
    at every expiry the heap gives exactly the entries a scan of every task
    would, in any interleaving."""
    import random

    for seed in range(30):
        rng = random.Random(seed)
        d = Dispatcher(tasks(40), lease_seconds=5, confirm_seconds=7, max_attempts=3)
        now, workers = 0.0, ["w1", "w2", "w3"]
        for _ in range(400):
            now += rng.random()
            worker = rng.choice(workers)
            action = rng.random()
            held = [e.task.task_id for e in d.entries.values() if e.state is State.LEASED and e.worker == worker]
            if action < 0.3:
                d.lease(worker, now)
            elif action < 0.5 and held:
                d.heartbeat(worker, rng.sample(held, rng.randint(1, len(held))), now)
            elif action < 0.6 and held:
                d.finished(worker, rng.choice(held), now)
            elif action < 0.65 and held:
                d.failed(worker, rng.choice(held), "boom", now)
            elif action < 0.7 and held:
                d.returned(worker, [rng.choice(held)])
            elif action < 0.75:
                finished = [e.task.task_id for e in d.entries.values() if e.state is State.FINISHED]
                d.mark_done(rng.sample(finished, min(len(finished), 2)))
            else:
                expected = _due(d, now)
                requeued, quarantined = d.expire(now)
                assert {e.task.task_id for e in requeued + quarantined} == expected, (seed, now)
                assert not _due(d, now)


class _CountingEntries(dict):
    looked_up = 0

    def __getitem__(self, key):
        self.looked_up += 1
        return super().__getitem__(key)

    def values(self):
        raise AssertionError("expire scanned every task")


def test_expiry_looks_only_at_what_is_due():
    """100,000 leased tasks, heartbeats keep all but three alive: an expiry
    pass looks at the due items only (no scan of every task)."""
    d = Dispatcher(tasks(100_000), lease_seconds=10, confirm_seconds=30, max_attempts=3)
    leased = [d.lease("w", now=0).task.task_id for _ in range(100_000)]
    d.heartbeat("w", leased[3:], now=5)  # the first three are left to expire
    d.entries = _CountingEntries(d.entries)
    requeued, _ = d.expire(now=10.5)
    assert sorted(e.task.task_id for e in requeued) == sorted(leased[:3])
    # Items due at 10 whose leases were extended are pushed again once; none is looked at twice.
    assert d.entries.looked_up <= 100_000
    d.entries.looked_up = 0
    assert d.expire(now=11) == ([], [])
    assert d.entries.looked_up == 0  # nothing due: nothing looked at


def test_an_expired_task_is_handed_out_before_the_untouched_ones():
    """A task back from a lost worker holds the job's end back: it goes first,
    not behind the whole backlog (the scale simulation: with a million tasks
    pending, a lost worker's task would otherwise wait for all of them)."""
    d = Dispatcher(tasks(1000), lease_seconds=10, confirm_seconds=30, max_attempts=3)
    lost = d.lease("w1", now=0)
    d.expire(now=11)
    assert d.lease("w2", now=12) is lost and lost.attempts == 2
    failed = d.lease("w2", now=13)
    d.failed("w2", failed.task.task_id, "boom", now=14)
    assert d.lease("w3", now=15) is failed
    untouched = d.lease("w3", now=16)
    d.returned("w3", [untouched.task.task_id])  # handed back unstarted: no attempt, its place is the end
    assert d.lease("w3", now=17) is not untouched


def _recounted(d: Dispatcher) -> tuple[dict, dict, dict]:
    """The oracle for the bulk counters: counts, input bytes and open tasks per stage rank, from scratch."""
    counts, in_bytes, opened = {s: 0 for s in State}, {s: 0 for s in State}, {}
    for entry in d.entries.values():
        counts[entry.state] += 1
        in_bytes[entry.state] += entry.task.length
        rank = d.stage_rank[entry.task.stage]
        opened[rank] = opened.get(rank, 0) + (entry.state not in (State.DONE, State.QUARANTINED))
    return counts, in_bytes, opened


def test_resync_settles_what_one_task_at_a_time_would():
    """A sink's hello after random work (leases, finishes, failures, quarantines, confirmations): resync's
    bulk counters equal a recount, a task the sink holds in its version is DONE, one it lacks (or holds in
    another version) that was DONE is handed out again, and every other task keeps its state."""
    import random

    for seed in range(30):
        rng = random.Random(seed)
        ts = tasks(30)
        d = Dispatcher(ts, lease_seconds=5, confirm_seconds=7, max_attempts=2)
        now = 0.0
        for _ in range(120):
            now = _random_step(d, rng, now, failed_below=0.7, confirmed_below=0.85)
        before = {task_id: e.state for task_id, e in d.entries.items()}
        sink = {t.task_id: rng.choice([t.version, t.version, "other"]) for t in rng.sample(ts, rng.randint(0, 30))}
        undone = d.resync(sink)
        assert (d.counts, d._bytes, {r: c for r, c in d._open.items()}) == _recounted(d), seed
        for task_id, entry in d.entries.items():
            if sink.get(task_id) == entry.task.version:
                assert entry.state is State.DONE, seed
            elif before[task_id] is State.DONE:
                assert entry.state is State.PENDING and entry in undone, seed
            else:
                assert entry.state is before[task_id], seed


def test_requeues_are_counted_by_reason():
    """Every way a task goes back to pending is counted under its own reason, and nothing else is."""
    d = Dispatcher(tasks(5), lease_seconds=10, confirm_seconds=30, max_attempts=3)
    a, b, c, e = (d.lease("w", 0) for _ in range(4))
    d.failed("w", a.task.task_id, "boom", 1)
    d.returned("w", [b.task.task_id])
    d.finished("w", c.task.task_id, 1)
    d.expire(now=11)  # e's lease runs out; c waits for the sink until 31
    d.expire(now=32)  # c was never confirmed
    d.mark_done([d.lease("w", 40).task.task_id])
    done = next(x for x in d.entries.values() if x.state is State.DONE)
    d.redo([done.task.task_id])
    assert d.requeued == {"lease_expired": 1, "unconfirmed": 1, "failed": 1, "returned": 1, "redo": 1}
    assert e.state is State.PENDING and c.state is State.PENDING


def test_confirm_part_by_part_settles_what_one_task_at_a_time_would():
    """A sink's list applied part by part as it comes (nothing DONE yet: a run's start, where workers of a
    previous ventilator may already hold tasks), over one stage and over several: the bulk counters equal a
    recount (whether a part moves every task of a state or some), a task listed in its version is DONE, and
    every other task keeps its state."""
    import random

    for seed in range(40):
        rng = random.Random(seed)
        staged = seed % 2 == 1
        ts = [Task(f"f{i}", 0, 10 + i, 100, "v", stage=("dedup" if staged and i < 8 else "")) for i in range(30)]
        d = Dispatcher(ts, lease_seconds=5, confirm_seconds=7, max_attempts=2)
        now = 0.0
        for _ in range(rng.randint(0, 60)):  # leases (adopted by heartbeats), finishes, failures, expiries
            now = _random_step(d, rng, now, failed_below=0.8, confirmed_below=0.8)
        before = {task_id: e.state for task_id, e in d.entries.items()}
        listed = ts if rng.random() < 0.3 else rng.sample(ts, rng.randint(0, 30))
        sink = {t.task_id: t.version if rng.random() < 0.8 or len(listed) == 30 else "other" for t in listed}
        items = list(sink.items())
        cut = sorted(rng.sample(range(len(items) + 1), min(3, len(items) + 1)))
        for start, end in zip([0, *cut], [*cut, len(items)]):
            d.confirm(dict(items[start:end]))
            assert (d.counts, d._bytes, d._open) == _recounted(d), seed
        for task_id, entry in d.entries.items():
            expected = State.DONE if sink.get(task_id) == entry.task.version else before[task_id]
            assert entry.state is expected, seed


def _random_step(d: Dispatcher, rng, now: float, failed_below: float, confirmed_below: float) -> float:
    """One random event on ``d`` a little after ``now`` (its time returned): a lease (below 0.4), a leased task
    finished (below 0.6), one failed (below ``failed_below``), up to three finished tasks confirmed (below
    ``confirmed_below``), else the leases' expiry."""
    now += rng.random()
    action = rng.random()
    if action < 0.4:
        d.lease(rng.choice(["w1", "w2"]), now)
    elif action < failed_below:
        leased = [e for e in d.entries.values() if e.state is State.LEASED]
        if leased:
            e = rng.choice(leased)
            if action < 0.6:
                d.finished(e.worker, e.task.task_id, now)
            else:
                d.failed(e.worker, e.task.task_id, "boom", now)
    elif action < confirmed_below:
        finished = [e.task.task_id for e in d.entries.values() if e.state is State.FINISHED]
        d.mark_done(rng.sample(finished, min(len(finished), 3)))
    else:
        d.expire(now)
    return now
