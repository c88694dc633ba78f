"""The dedup stages without sockets: tasks and their wire form, the
dispatcher's stage barrier and redo, and the stage files in a real local
output store (written, read, found corrupt)."""

from __future__ import annotations

import numpy as np
import pytest

from common.job.tasks import Task
from common.readers.base import Document
from common.steps.dedup import stages
from common.steps.dedup.files import CorruptFile
from common.steps.dedup.keys import KeyMaker
from common.steps.dedup.settings import DedupSettings
from common.storage import LocalStorage
from ventilator.dispatcher import Dispatcher, State


def test_normal_tasks_keep_their_key_and_wire_form():
    task = Task("AA/wiki_00", 0, 100, 200, "v")
    assert task.key == "AA/wiki_00@0-100" and task.to_wire() == ["AA/wiki_00", 0, 100, 200, "v", ""]
    signature = stages.signature_task(task)
    assert signature.key == "signature:AA/wiki_00@0-100" and signature.task_id != task.task_id
    assert Task.from_wire(signature.to_wire()) == signature
    assert Task.from_wire(task.to_wire()) == task
    with pytest.raises(TypeError):
        Task.from_wire(["p", 0, 1, 1, "v", "", 3])


def test_a_stage_is_leased_only_once_the_earlier_stages_are_done():
    settings = DedupSettings(mode="exact", partitions=2)
    normal = [Task(f"f{i}", 0, 10, 10, "v") for i in range(3)]
    d = Dispatcher(stages.stage_tasks(normal, settings), 10, 30, 3)
    assert d.total == 3 + 2 + 1 + 3
    leased = [d.lease("w", 0) for _ in range(4)]
    assert [e.task.stage for e in leased[:3]] == ["signature"] * 3 and leased[3] is None
    assert not d.has_pending
    d.mark_done([e.task.task_id for e in leased[:2]])
    assert d.lease("w", 1) is None  # one signature task still out
    d.mark_done([leased[2].task.task_id])
    buckets = [d.lease("w", 2), d.lease("w", 2)]
    assert {e.task.stage for e in buckets} == {"bucket"} and d.lease("w", 2) is None
    # A bucket task finds a signature file corrupt: that signature task is done again first.
    again = d.redo([leased[1].task.task_id])
    d.failed("w", buckets[0].task.task_id, "CorruptFile", 3)
    assert again == [leased[1]] and leased[1].state is State.PENDING
    assert d.lease("w", 4) is leased[1]
    d.mark_done([leased[1].task.task_id])
    assert d.lease("w", 5) is buckets[0]
    d.mark_done([e.task.task_id for e in buckets])
    resolve = d.lease("w", 6)
    assert resolve.task.stage == "resolve" and d.lease("w", 6) is None
    d.mark_done([resolve.task.task_id])
    assert {d.lease("w", 7).task.stage for _ in range(3)} == {""}


def test_without_dedup_there_is_one_stage():
    d = Dispatcher([Task(f"f{i}", 0, 10, 10, "v") for i in range(3)], 10, 30, 3)
    assert [d.lease("w", 0) is not None for _ in range(3)] == [True] * 3


def _documents(texts):
    return [Document(offset=i * 100, lines=t.split("\n"), id=f"d{i}") for i, t in enumerate(texts)]


def test_stage_files_round_trip_and_corruption_names_the_writer(tmp_path):
    settings = DedupSettings(mode="minhash", partitions=3).resolved(0)
    output = LocalStorage(str(tmp_path))
    maker = KeyMaker(settings)
    words = " ".join(f"w{i}" for i in range(60))
    texts = [[words, "other text entirely here for once", "short"],
             ["short", words + " extra", "  other   text entirely here for once "]]
    normal = [Task("a", 0, 100, 200, "v"), Task("a", 100, 200, 200, "v")]
    output.put_bytes(stages.PLAN_NAME, stages.encode_plan("job1", normal))
    plan = stages.read_plan(output, "job1")
    assert plan == normal
    with pytest.raises(CorruptFile):
        stages.read_plan(output, "job2")
    for task, chunk in zip(normal, texts):
        result = stages.write_signatures(output, settings, maker, stages.signature_task(task), _documents(chunk))
        assert len(result.files) == settings.partitions + 1
        assert result.counters["too_short_documents"] == 1
    for partition in range(settings.partitions):
        stages.find_pairs(output, stages.bucket_task(partition), plan, set())
    result = stages.resolve(output, plan, settings.partitions, set())
    assert result.counters["clusters"] == 3
    removed = [stages.read_removals(output, task, settings.partitions) for task in normal]
    # Task 2's "short" copies task 1's (exact), its whitespace variant is exact, its words + extra is near.
    assert removed[0] == {}
    assert {ordinal: stages.METHODS[code] for ordinal, (code, _bytes) in removed[1].items()} == {
        0: "exact", 1: "minhash", 2: "exact"}

    # A flipped byte in a signature file: the bucket task names its writer.
    name = stages.signature_name(stages.signature_task(normal[1]).task_id, 0)
    data = bytearray((tmp_path / name).read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / name).write_bytes(bytes(data))
    with pytest.raises(CorruptFile) as caught:
        stages.find_pairs(output, stages.bucket_task(0), plan, set())
    assert caught.value.writer_task == stages.signature_task(normal[1]).task_id
    # A quarantined signature task is left out instead.
    stages.find_pairs(output, stages.bucket_task(0), plan, {stages.signature_task(normal[1]).task_id})
    # A lost removal list names the resolve task.
    (tmp_path / stages.removed_name(stages.removal_partition(normal[0].task_id, settings.partitions))).unlink()
    with pytest.raises(CorruptFile) as caught:
        stages.read_removals(output, normal[0], settings.partitions)
    assert caught.value.writer_task == stages.resolve_task().task_id


def test_bad_settings_are_refused_in_one_line():
    for settings, words in ((DedupSettings(mode="minhash", bands=3), "both"),
                            (DedupSettings(mode="minhash", bands=20, rows=10, perm=112), "exceeds"),
                            (DedupSettings(mode="minhash", threshold=1.5), "between")):
        with pytest.raises(ValueError, match=words):
            settings.validate()
    assert DedupSettings(mode="minhash").resolved(0).bands * DedupSettings(mode="minhash").resolved(0).rows <= 112
    assert DedupSettings(mode="exact").resolved(3 << 30).partitions == 12


def test_the_ventilator_refuses_bad_dedup_flags_in_one_line(tmp_path):
    from click.testing import CliRunner

    from ventilator.cli import main

    runner = CliRunner()
    base = ["--data", str(tmp_path), "--output", str(tmp_path / "out"), "--dedup", "minhash"]
    for extra, words in ((["--minhash-bands", "3"], "give both --minhash-bands and --minhash-rows"),
                         (["--minhash-bands", "20", "--minhash-rows", "10"], "exceeds --minhash-perm"),
                         (["--minhash-threshold", "1.2"], "between 0 and 1")):
        result = runner.invoke(main, base + extra)
        assert result.exit_code == 1, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in result.output, result.output
    assert runner.invoke(main, base[:-1] + ["bogus"]).exit_code == 2  # not a mode: click's usage error


def test_components_are_union_finds_clusters_rooted_at_the_smallest_handle():
    from common.steps.dedup.clusters import UnionFind, components

    rng = np.random.default_rng(5)
    for size, edges in ((10, 4), (200, 150), (1000, 2000)):
        first = rng.integers(0, size, edges).astype(np.uint64) * np.uint64(3)  # sparse handles
        other = rng.integers(0, size, edges).astype(np.uint64) * np.uint64(3)
        union = UnionFind()
        for a, b in zip(first.tolist(), other.tolist()):
            union.union(a, b)
        expected = {member: root for root, members in union.clusters().items() for member in members}
        nodes, roots = components(first, other)
        got = dict(zip(nodes.tolist(), roots.tolist()))
        assert got == expected
        assert all(root <= node for node, root in got.items())
    # A chain whose smallest member is at the far end: propagation must carry it all the way.
    chain = np.arange(50, dtype=np.uint64)
    nodes, roots = components(chain[1:][::-1], chain[:-1][::-1])
    assert (roots == 0).all() and len(nodes) == 50
