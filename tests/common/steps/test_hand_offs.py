"""Typed hand-offs: each step takes the sides' values the step before returned and returns its own
(``Step[In, Out].apply``), as datatrove's steps map a typed stream to a typed stream.  The built-in steps'
declared types chain from the task's side to its files, whatever steps a job switches on; a plugin step typed
the same way runs in a real task; one written against ``run(run)`` still runs through ``run.parts``; a step that
implements neither is refused by name."""

from __future__ import annotations

import typing

import pytest

from common import steps as steps_package
from common.job.config import JobConfig, standard_steps
from common.job.params import Component
from common.job.tasks import Task
from common.steps import Documents, Lane, Step, TaskRun, TaskStats, Worded, Written, step_named
from common.storage import LocalStorage
from tests.common.steps.test_base import WIKI_TEXT
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor

TYPED = '''
from dataclasses import dataclass

from common.steps.base import Documents, Step


@dataclass(frozen=True)
class Params:
    keep_every: int = 2


class KeepSome(Step[Documents, Documents]):
    name = "test-keep-some"
    Params = Params
    after = "read"
    makes = "documents"

    def apply(self, parts: list[Documents], run) -> list[Documents]:
        kept = [Documents(p.split, p.key, p.stem, p.documents[::self.params.keep_every]) for p in parts]
        run.stats.count(self.name, "dropped", sum(len(p.documents) for p in parts) - sum(len(p.documents) for p in kept))
        return kept


class Neither(Step):
    name = "test-neither"
    after = "read"
'''


def hand_off(step_class: type[Step]) -> tuple[type, type]:
    """The (In, Out) a step class declares (``Step[In, Out]``)."""
    for base in getattr(step_class, "__orig_bases__", ()):
        if typing.get_origin(base) is Step:
            first, second = typing.get_args(base)
            return first, second
    raise AssertionError(f"{step_class.name} declares no Step[In, Out]")


@pytest.mark.parametrize("features", [{}, {"dedup": {"mode": "exact"}, "holdout": {"fraction": 0.1}},
                                      {"words": {"word_segmenter": "jieba"}}])
def test_the_built_in_steps_types_chain_from_a_side_to_its_files(features):
    chain = [hand_off(step_named(component.name)) for component in standard_steps(features)]
    assert chain[0][0] is Lane and chain[-1][1] is Written
    for (_, made), (taken, _) in zip(chain, chain[1:]):
        assert issubclass(made, taken), chain  # a Worded is the Segmented tokenize takes
    if "words" in features:
        assert (Worded in {made for _, made in chain})


@pytest.fixture
def typed_step(tmp_path, monkeypatch):
    extra = tmp_path / "extra_steps"
    extra.mkdir()
    (extra / "test_keep_some.py").write_text(TYPED)
    monkeypatch.setattr(steps_package, "__path__", [*steps_package.__path__, str(extra)])
    steps_package.steps.cache_clear()
    yield
    steps_package.steps.cache_clear()


def _processor(tmp_path, vocabulary, steps) -> TaskProcessor:
    config = JobConfig(data_uri="", output_uri=str(tmp_path), reader=Component("wikiextractor"), tokenizer_json="",
                       objective=Component("bert", {"dupe_factor": 1, "max_seq_length": 64}),
                       writer=Component("tfrecord"), steps=steps)
    return TaskProcessor(config, vocabulary, LocalStorage(str(tmp_path)))


def test_a_typed_plugin_step_runs_in_a_task_and_hands_on_its_documents(tmp_path, vocabulary, typed_step):
    data = WIKI_TEXT.encode()
    task = Task("wiki_00", 0, len(data), len(data), "v")
    plain = steps_of("line", holdout_fraction=0.5, holdout_seed=1)
    with_step = steps_of("line", holdout_fraction=0.5, holdout_seed=1,
                         added_steps=(Component("test-keep-some", {"keep_every": 3}),))
    assert [s.name for s in with_step][:3] == ["read", "test-keep-some", "holdout"]
    full = _processor(tmp_path / "a", vocabulary, plain).process(task, data)
    kept = _processor(tmp_path / "b", vocabulary, with_step).process(task, data)
    assert kept.stats.counters["test-keep-some"] == {"dropped": 8}  # 12 documents, every third kept
    held = full.stats.counters["holdout"]["documents"], kept.stats.counters["holdout"]["documents"]
    assert full.stats.documents + held[0] == 12 and kept.stats.documents + held[1] == 4
    written = _processor(tmp_path / "c", vocabulary, with_step).run_steps(task, data, TaskStats())
    assert [type(part) for part in written] == [Written, Written]
    assert [part.split for part in written] == ["", "holdout"] and all(part.files for part in written)


def test_a_step_implementing_neither_apply_nor_run_is_refused_by_name(tmp_path, vocabulary, typed_step):
    step = step_named("test-neither")(step_named("test-neither").make_params({}), None)
    with pytest.raises(NotImplementedError, match="step test-neither implements neither apply"):
        step.apply([Documents("", "k", "s")], TaskRun(None, b"", TaskStats(), None))
