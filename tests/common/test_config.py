"""common/job/config.py: a job's steps are the steps that are on, each after the step it names, with no parameter
per feature; steps added with --add-step go after the step their class names."""

from __future__ import annotations

import dataclasses

import pytest

from common.job.config import standard_steps
from common.job.params import Component
from common.steps import steps
from common.steps.base import Step
from common.steps.dedup.settings import DedupSettings
from tests.support.run_configs import steps_of


def names(made) -> list[str]:
    return [step.name for step in made]


def test_the_standard_list_in_its_order():
    assert names(standard_steps()) == ["read", "segment", "tokenize", "objective", "write"]
    assert names(steps_of("line")) == ["read", "segment", "tokenize", "objective", "write"]
    full = standard_steps({"holdout": {"fraction": 0.1}, "dedup": {"mode": "exact"}, "words": {"word_segmenter": "jieba"},
                           "segment": {"segmenter": "blingfire"}}, input_bytes=1 << 20)
    assert names(full) == ["read", "dedup", "holdout", "segment", "words", "tokenize", "objective", "write"]
    # each step's parameters as the job records them: dedup's resolved for the input's size
    assert full[1].params == dataclasses.asdict(DedupSettings(mode="exact").resolved(1 << 20))
    assert full[2].params == {"fraction": 0.1, "seed": 0}


def test_a_step_is_on_by_its_own_parameters_and_refuses_bad_ones():
    assert "holdout" not in names(standard_steps({"holdout": {"fraction": 0.0, "seed": 5}}))
    assert "dedup" not in names(standard_steps({"dedup": {"mode": "off", "partitions": 4}}))
    # (the ventilator refuses such idle flags before this: ventilator/job.py, tests/ventilator/test_job.py)
    with pytest.raises(ValueError, match="--minhash-ngram does nothing but with --dedup minhash"):
        standard_steps({"dedup": {"mode": "off", "ngram": 3}})  # the step's own declaration (When)
    with pytest.raises(ValueError, match="--holdout-fraction must be at least 0 and below 1"):
        standard_steps({"holdout": {"fraction": 1.5}})
    with pytest.raises(ValueError, match="no step named shuffle"):
        standard_steps({"shuffle": {}})


class _AfterRead(Step):
    name = "test-after-read"
    after = "read"

    def run(self, run):
        pass


class _AfterWords(_AfterRead):
    name = "test-after-words"
    after = "words"


class _SwitchedSplit(_AfterRead):
    """A step with its own switch after read that makes parts: after the steps that drop documents."""

    name = "test-switched-split"
    makes = "parts"

    @classmethod
    def enabled(cls, params) -> bool:
        return True


def test_added_steps_go_right_after_the_step_they_name(monkeypatch):
    monkeypatch.setitem(steps(), _AfterRead.name, _AfterRead)
    monkeypatch.setitem(steps(), _AfterWords.name, _AfterWords)
    made = steps_of("line", holdout_fraction=0.1, added_steps=(Component("test-after-read"),))
    assert names(made) == ["read", "test-after-read", "holdout", "segment", "tokenize", "objective", "write"]
    with pytest.raises(ValueError, match="--add-step test-after-words runs after the words step, which this job has not"):
        steps_of("line", added_steps=(Component("test-after-words"),))


def test_steps_after_the_same_step_run_in_the_order_of_what_they_make(monkeypatch):
    """dedup (documents), then the splits (parts: holdout, and a plugin's by name), then segment (segments)."""
    monkeypatch.setitem(steps(), _SwitchedSplit.name, _SwitchedSplit)
    made = standard_steps({"holdout": {"fraction": 0.1}, "dedup": {"mode": "exact"}})
    assert names(made)[:5] == ["read", "dedup", "holdout", "test-switched-split", "segment"]
    assert _SwitchedSplit.has_switch() and not _AfterRead.has_switch()


def test_a_steps_own_flag_that_another_option_has_is_one_line(monkeypatch, capsys):
    """A step's flag taken by a variant (ALBERT's --ngram) or the run (--task-size): refused, not one silently
    winning."""
    from dataclasses import dataclass

    from common.job.params import param
    from ventilator.run_config import VariantsError, parse

    for flag in ("--ngram", "--task-size"):
        @dataclass(frozen=True)
        class Taken:
            value: int = param(1, "help", flag=flag)

        class _Clashing(_SwitchedSplit):
            name = "test-clashing"
            Params = Taken

        monkeypatch.setitem(steps(), _Clashing.name, _Clashing)
        with pytest.raises(VariantsError) as refused:
            parse(["--data", "d", "--output", "o"])
        said = str(refused.value)
        assert "\n" not in said and flag in said, said
