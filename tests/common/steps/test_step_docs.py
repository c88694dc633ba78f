"""The step order the docs and the step interface's docstrings show is the one the code computes
(``common.job.config.step_diagram``: ``step_order``, the order ``standard_steps`` places a job's steps in), made
by tests/support/step_docs.py; a step added or moved changes it, and this fails until the pages are rewritten
(``python -m tests.support.step_docs --write``)."""

from __future__ import annotations

import re

import pytest

from common import steps as steps_package
from common.job.config import step_diagram, step_order
from tests.support import step_docs
from tests.support.helpers import REPO


def test_design_and_architecture_hold_the_order_the_code_computes():
    pages = step_docs.marked_pages()
    assert {page.name for page in pages} >= {"design.md", "architecture.md"}
    for page, blocks in pages.items():
        for block in blocks:
            assert block == step_diagram(), f"{page.name}: run python -m tests.support.step_docs --write"


def test_the_order_is_read_segment_tokenize_objective_write_with_the_switched_steps_between():
    assert step_diagram() == "read → [dedup] → [holdout] → segment → [words] → tokenize → objective → write"


def test_the_step_interface_docstring_draws_the_same_order():
    """common/steps/base.py draws the order in ASCII; any other drawing in the code is the same."""
    drawn = {}
    for path in [*REPO.glob("common/**/*.py"), *REPO.glob("worker/*.py"), *REPO.glob("ventilator/*.py")]:
        text = re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))
        for match in re.finditer(r"read -> (?:[\[\]\w]+ -> )+write", text):
            drawn[path.relative_to(REPO).as_posix()] = match[0]
    assert "common/steps/base.py" in drawn
    for where, drawing in drawn.items():
        assert drawing == step_diagram(" -> "), where


STEP = '''
from common.steps.base import Step


class Census(Step):
    name = "test-docs-census"
    after = "tokenize"

    @classmethod
    def enabled(cls, params):
        return False

    def run(self, run):
        pass
'''


@pytest.fixture
def another_step(tmp_path, monkeypatch):
    extra = tmp_path / "extra_steps"
    extra.mkdir()
    (extra / "test_docs_census.py").write_text(STEP)
    monkeypatch.setattr(steps_package, "__path__", [*steps_package.__path__, str(extra)])
    steps_package.steps.cache_clear()
    yield
    steps_package.steps.cache_clear()


def test_a_new_step_changes_the_order_and_the_regenerated_pages(another_step):
    assert [step.name for step in step_order()][-4:] == ["tokenize", "test-docs-census", "objective", "write"]
    assert "tokenize → [test-docs-census] → objective" in step_diagram()
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert step_docs.regenerated(page) != page
    assert step_diagram() in step_docs.regenerated(page)
