"""--add-step: steps a user adds, each placed after the step it names.  Two added steps after the same step
run in the order given, a step added twice is refused, and the order of added steps is part of the job's id
(it changes the output: a resume must not mix two orders under one id)."""

import textwrap

import pytest

from common import steps as steps_package
from common.job.config import JobConfig
from common.job.params import Component
from tests.support.run_configs import steps_of

STEPS = textwrap.dedent('''
    from common.steps.base import Step


    class Upper(Step):
        name = "test-upper"
        after = "read"
        makes = "documents"

        def run(self, run):
            for part in run.parts:
                for document in part.documents:
                    document.lines = [line.upper() for line in document.lines]


    class DropShouting(Step):
        name = "test-drop-shouting"
        after = "read"
        makes = "documents"

        def run(self, run):
            for part in run.parts:
                part.documents = [d for d in part.documents if not any(line.isupper() for line in d.lines)]
''')


@pytest.fixture
def added(tmp_path, monkeypatch):
    extra = tmp_path / "extra_steps"
    extra.mkdir()
    (extra / "test_added.py").write_text(STEPS)
    monkeypatch.setattr(steps_package, "__path__", [*steps_package.__path__, str(extra)])
    steps_package.steps.cache_clear()
    yield Component("test-upper"), Component("test-drop-shouting")
    steps_package.steps.cache_clear()


def names(steps) -> list[str]:
    return [step.name for step in steps]


def test_steps_after_the_same_step_run_in_the_order_given(added):
    upper, drop = added
    assert names(steps_of("line", added_steps=(upper, drop)))[:3] == ["read", "test-upper", "test-drop-shouting"]
    assert names(steps_of("line", added_steps=(drop, upper)))[:3] == ["read", "test-drop-shouting", "test-upper"]


def test_a_step_added_twice_is_refused(added):
    upper, _ = added
    with pytest.raises(ValueError, match="test-upper.*twice"):
        steps_of("line", added_steps=(upper, upper))


def job(*added_steps) -> JobConfig:
    return JobConfig(data_uri="d", output_uri="o", reader=Component("wikiextractor"), tokenizer_json="t",
                     steps=steps_of("line", added_steps=tuple(added_steps)))


def test_the_order_of_added_steps_is_part_of_the_job_id(added):
    upper, drop = added
    assert job(upper, drop).job_id != job(drop, upper).job_id
    assert job(upper).job_id != job(upper, drop).job_id
    explicit_twice = JobConfig(data_uri="d", output_uri="o", reader=Component("wikiextractor"), tokenizer_json="t",
                               steps=(*job(upper).steps[:2], upper, *job(upper).steps[2:]))
    assert explicit_twice.job_id != job(upper).job_id


def test_one_added_step_keeps_the_id_it_had(added):
    """Jobs with one added step (made since --add-step came) keep their ids: taken before order counted."""
    upper, drop = added
    assert job(upper).job_id == "f9e7018927b54ed5"
    assert job(drop).job_id == "b08505e37e64cb63"
