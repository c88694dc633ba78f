"""A plugin step written against ``run(self, run)`` (before typed hand-offs) sees every side as the ``Part`` it
always had, wherever it is placed: its documents after tokenize, the objective and write as before, and the fields
not made yet as None (``part.tokenized is not None``), not an AttributeError that quarantines every task."""

from __future__ import annotations

import textwrap

import pytest

from common import steps as steps_package
from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import Task
from common.storage import LocalStorage
from tests.common.steps.test_base import WIKI_TEXT
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor

AFTER = ("read", "segment", "tokenize", "objective", "write")

OLD_STYLE = "from mlm_pipeline.plugin import Step\n" + "".join(textwrap.dedent(f'''
    class Census_{after}(Step):
        """The demo census (tests/data/plugin_demo), placed after {after}: documents, and token ids once made."""
        name = "test-old-{after}"
        after = "{after}"

        def run(self, run):
            for part in run.parts:
                run.stats.count(self.name, "documents", len(part.documents))
                if part.tokenized is not None:
                    run.stats.count(self.name, "tokenized", part.tokenized.num_documents)
                run.stats.count(self.name, "files", len(part.files))
''') for after in AFTER)


@pytest.fixture
def old_style(tmp_path, monkeypatch):
    extra = tmp_path / "extra_steps"
    extra.mkdir()
    (extra / "test_old_style.py").write_text(OLD_STYLE)
    monkeypatch.setattr(steps_package, "__path__", [*steps_package.__path__, str(extra)])
    steps_package.steps.cache_clear()
    yield
    steps_package.steps.cache_clear()


@pytest.mark.parametrize("after", AFTER)
def test_an_old_style_step_after_any_built_in_step_sees_the_part_it_always_had(tmp_path, vocabulary, old_style,
                                                                                after):
    data = WIKI_TEXT.encode()
    task = Task("wiki_00", 0, len(data), len(data), "v")
    name = f"test-old-{after}"
    steps = steps_of("line", holdout_fraction=0.5, holdout_seed=1, added_steps=(Component(name),))
    config = JobConfig(data_uri="", output_uri=str(tmp_path), reader=Component("wikiextractor"), tokenizer_json="",
                       objective=Component("bert", {"dupe_factor": 1, "max_seq_length": 64}),
                       writer=Component("tfrecord"), steps=steps)
    result = TaskProcessor(config, vocabulary, LocalStorage(str(tmp_path))).process(task, data)
    counted = result.stats.counters[name]
    assert counted["documents"] == 12  # both sides' documents, wherever the step sits
    assert counted.get("tokenized", 0) == (12 if after in ("tokenize", "objective", "write") else 0)
    assert counted.get("files", 0) == (2 if after == "write" else 0)
    assert result.records > 0 and len(result.files) == 2
