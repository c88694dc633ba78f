"""A step that says when it is on and names, as the step it runs after, itself or a step that runs after it (a
loop) is never reached from the first step: refused in one line naming the loop, not left out of every job that
switches it on (its documents silently not filtered)."""

from __future__ import annotations

import textwrap

import pytest

from common import steps as steps_package
from common.job.config import check_places, standard_steps

LOOPED = textwrap.dedent('''
    from dataclasses import dataclass

    from common.steps.base import Step


    @dataclass(frozen=True)
    class Params:
        on: bool = False


    class Itself(Step):
        name = "test-itself"
        Params = Params
        after = "test-itself"

        @classmethod
        def enabled(cls, params):
            return params.on

        def run(self, run):
            pass
''')


@pytest.fixture
def looped(tmp_path, monkeypatch):
    extra = tmp_path / "extra_steps"
    extra.mkdir()
    (extra / "test_looped.py").write_text(LOOPED)
    monkeypatch.setattr(steps_package, "__path__", [*steps_package.__path__, str(extra)])
    steps_package.steps.cache_clear()
    yield
    steps_package.steps.cache_clear()


def test_a_step_after_itself_is_refused_not_left_out(looped):
    with pytest.raises(ValueError, match="test-itself runs after 'test-itself'.*loop"):
        check_places()
    with pytest.raises(ValueError, match="test-itself"):
        standard_steps({"test-itself": {"on": True}})
