"""The step runner: TaskProcessor builds the job's steps by name and runs them in order, and a new step
is one new module: found by name, run, its counters and stages carried without touching any role."""

import sys
import textwrap

import pytest

from common import steps as steps_package
from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import Task
from common.storage import LocalStorage
from common.wire import protocol
from sink.server import manifest_entry
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor

WIKI_TEXT = "".join(f'<doc id="{i}" url="u" title="T{i}">\nT{i}\n\n' + "Short line.\n" * (1 if i % 2 else 4)
                    + "A longer sentence about the history of the world. It goes on for a while.\n" * 3 + "</doc>\n"
                    for i in range(12))

THROWAWAY = textwrap.dedent('''
    """A throwaway step: drops documents with fewer than ``min_lines`` lines, and has a stage of its own."""
    from dataclasses import dataclass

    from common.steps.base import StageResult, Step


    @dataclass(frozen=True)
    class Params:
        min_lines: int = 0


    class DropShort(Step):
        name = "drop_short"
        Params = Params
        makes = "documents"
        stages = ("survey",)

        def run(self, run):
            for part in run.parts:
                kept = [d for d in part.documents if len(d.lines) >= self.params.min_lines]
                run.stats.count(self.name, "dropped", len(part.documents) - len(kept))
                part.documents = kept

        def run_stage(self, task, payload, stats):
            return StageResult([], {"surveyed": len(payload)})
''')


@pytest.fixture
def throwaway_step(tmp_path, monkeypatch):
    """A new module in the step package's path, as a plugin's file would be."""
    extra = tmp_path / "extra_steps"
    extra.mkdir()
    (extra / "drop_short.py").write_text(THROWAWAY)
    monkeypatch.setattr(steps_package, "__path__", [*steps_package.__path__, str(extra)])
    steps_package.steps.cache_clear()
    yield "drop_short"
    steps_package.steps.cache_clear()
    sys.modules.pop("common.steps.drop_short", None)


def _config(output, steps) -> JobConfig:
    return JobConfig(data_uri="", output_uri=str(output), reader=Component("wikiextractor"), tokenizer_json="",
                     objective=Component("bert", {"dupe_factor": 1, "max_seq_length": 64}),
                     writer=Component("tfrecord"), steps=steps)


def _task_and_payload(tmp_path):
    data = WIKI_TEXT.encode()
    return Task("wiki_00", 0, len(data), len(data), "v"), data


def test_a_new_step_module_is_found_by_name_and_run(tmp_path, vocabulary, throwaway_step):
    plain = steps_of("blingfire")
    with_step = (plain[0], Component(throwaway_step, {"min_lines": 6}), *plain[1:])
    task, payload = _task_and_payload(tmp_path)
    before = TaskProcessor(_config(tmp_path / "a", plain), vocabulary, LocalStorage(str(tmp_path / "a")))
    after = TaskProcessor(_config(tmp_path / "b", with_step), vocabulary, LocalStorage(str(tmp_path / "b")))
    assert [type(s).name for s in after.steps] == ["read", "drop_short", "segment", "tokenize", "objective", "write"]
    full, dropped = before.process(task, payload), after.process(task, payload)
    assert full.stats.documents == 12 and dropped.stats.documents == 6  # the odd ones have 5 lines, the even ones 8
    assert dropped.stats.counters["drop_short"] == {"dropped": 6} and "drop_short" not in full.stats.counters
    assert 0 < dropped.records < full.records
    # Its counters go over the wire and into the manifest line under its name, with no role knowing it.
    ack = protocol.TaskAck(task.task_id, "j", "w", task.path, 0, task.end, "v", dropped.files, dropped.records,
                           dropped.stats.to_wire())
    assert manifest_entry(protocol.decode(protocol.encode(ack)))["drop_short"] == {"dropped": 6}
    # It is part of the job's identity, and its own stage's tasks run through the same processor.
    assert _config(tmp_path, with_step).job_id != _config(tmp_path, plain).job_id
    stage = after.process(Task("survey/all", 0, 0, 0, "", "", "survey"), b"abc")
    assert stage.files == [] and stage.stats.counters == {"drop_short": {"surveyed": 3}}


def test_steps_run_in_the_job_order_and_unknown_ones_are_refused(tmp_path, vocabulary):
    task, payload = _task_and_payload(tmp_path)
    steps = steps_of("line", holdout_fraction=0.5, holdout_seed=1)
    processor = TaskProcessor(_config(tmp_path, steps), vocabulary, LocalStorage(str(tmp_path)))
    assert [s.name for s in steps] == ["read", "holdout", "segment", "tokenize", "objective", "write"]
    result = processor.process(task, payload)
    held = result.stats.counters["holdout"]
    assert held["documents"] and result.stats.documents and held["documents"] + result.stats.documents == 12
    assert held["shards"] == sum(1 for f in result.files if f.split == "holdout") == 1
    assert result.records == sum(f.records for f in result.files if not f.split)
    with pytest.raises(ValueError, match="unknown step 'shuffle'"):
        TaskProcessor(_config(tmp_path, (Component("read"), Component("shuffle"))), vocabulary, None)
    with pytest.raises(ValueError, match="unknown stage 'survey'"):
        processor.process(Task("x", 0, 0, 0, "", "", "survey"), b"")


def test_a_jobs_steps_travel_with_it():
    config = JobConfig("d", "o", Component("text"), "", steps=steps_of("line", holdout_fraction=0.1))
    assert config.step("holdout").params == {"fraction": 0.1, "seed": 0} and config.step("dedup") is None
    again = JobConfig.from_welcome(protocol.decode(protocol.encode(config.welcome("v"))))
    assert again.steps == config.steps and again.job_id == config.job_id
