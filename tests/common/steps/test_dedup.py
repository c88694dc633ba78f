from common.job.tasks import Task
from common.steps.dedup import Dedup, stages
from common.steps.dedup.settings import DedupSettings
from tests.common.steps.conftest import a_run, documents


def test_removes_the_listed_documents_and_counts_them(job, tmp_path):
    settings = DedupSettings("exact", partitions=1)
    context = job(dedup=settings)
    task = Task("wiki_00", 0, 1000, 1000, "v")
    # The removal list the resolve stage would write: ordinals 1 and 3 of this task, as exact copies.
    import hashlib

    import numpy as np

    from common.steps.dedup import files

    data = files.encode({"partition": 0}, {"task": np.array([task.task_id.encode()] * 2, dtype="S20"),
                                            "ordinal": np.array([1, 3], dtype=np.uint32),
                                            "method": np.array([0, 0], dtype=np.uint8),
                                            "bytes": np.array([10, 20], dtype=np.int64)})
    context.output.put_bytes(stages.removed_name(0), data)
    assert hashlib.sha256(data).hexdigest()
    step = Dedup(Dedup.make_params(context.config.step("dedup").params), context)
    run = a_run(documents(5), task)
    step.run(run)
    assert [d.id for d in run.parts[0].documents] == ["doc-0", "doc-2", "doc-4"]
    assert run.stats.counters == {"dedup": {"removed_exact": 2, "removed_exact_bytes": 30}}
    assert "dedup" in run.stats.seconds
    assert set(Dedup.stages) == {"signature", "bucket", "resolve"}
    assert list(Dedup.required_tasks(step.params)) == [stages.resolve_task().task_id]
