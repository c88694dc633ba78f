"""common/config.py: a job's steps from its features, and steps added with --add-step placed after the step
their class names."""

from __future__ import annotations

import pytest

from common.config import standard_steps
from common.steps.dedup.settings import DedupSettings
from common.params import Component
from common.steps import steps
from common.steps.base import Step


def names(made) -> list[str]:
    return [step.name for step in made]


def test_the_standard_list_in_its_order():
    assert names(standard_steps("line")) == ["read", "segment", "tokenize", "objective", "write"]
    full = standard_steps("blingfire", dedup=DedupSettings(mode="exact").resolved(1 << 20), holdout_fraction=0.1,
                          word_segmenter=Component("jieba"))
    assert names(full) == ["read", "dedup", "holdout", "segment", "words", "tokenize", "objective", "write"]


class _AfterRead(Step):
    name = "test-after-read"
    after = "read"

    def run(self, run):
        pass


class _AfterWords(_AfterRead):
    name = "test-after-words"
    after = "words"


def test_added_steps_go_right_after_the_step_they_name(monkeypatch):
    monkeypatch.setitem(steps(), _AfterRead.name, _AfterRead)
    monkeypatch.setitem(steps(), _AfterWords.name, _AfterWords)
    made = standard_steps("line", holdout_fraction=0.1, added=(Component("test-after-read"),))
    assert names(made) == ["read", "test-after-read", "holdout", "segment", "tokenize", "objective", "write"]
    with pytest.raises(ValueError, match="--add-step test-after-words runs after the words step, which this job has not"):
        standard_steps("line", added=(Component("test-after-words"),))
