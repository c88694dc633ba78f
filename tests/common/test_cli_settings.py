"""Settings dataclasses as command lines (common/job/cli_settings.py): one declaration gives the option, its
default and the typed value, and a settings object written as argv comes back equal."""

from __future__ import annotations

from dataclasses import dataclass, field

import click
import pytest

from common.job.cli_settings import add_options, build, option, option_fields, parse, to_argv


@dataclass(frozen=True)
class Inner:
    size: int = option("--size", type=int, default=8, cli_default=8, show_envvar=True)
    fast: bool = option("--fast/--no-fast", default=None)


@dataclass(frozen=True)
class Outer:
    target: str = option("--target", required=True)
    inner: Inner = field(default_factory=Inner)
    flag: bool = option("--flag", is_flag=True, default=False)
    verbose: int = option("-v", "--verbose", count=True, default=0)
    name: str = option("--name", default="x y")


def test_groups_are_opened_in_field_order():
    assert [f.name for f in option_fields(Outer)] == ["target", "size", "fast", "flag", "verbose", "name"]


def test_a_settings_object_written_as_argv_comes_back_equal():
    settings = Outer("t", Inner(3, False), flag=True, verbose=2, name="a b")
    argv = to_argv(settings)
    assert argv == ["--target", "t", "--size", "3", "--no-fast", "--flag", "-v", "-v", "--name", "a b"]
    assert parse(Outer, argv) == settings


def test_defaults_are_left_out_and_come_from_the_dataclass():
    assert to_argv(Outer("t")) == ["--target", "t"]
    assert parse(Outer, ["--target", "t"]) == Outer("t")


def test_environment_variables_are_read(monkeypatch):
    monkeypatch.setenv("MLM_TOOL_SIZE", "12")
    monkeypatch.setenv("MLM_LOADER_SIZE", "13")  # another command's (env_prefix: one rule, the command's name)
    assert parse(Outer, ["--target", "t"], "tool").inner.size == 12


def test_values_not_the_settings_are_left_for_others():
    values = {"target": "t", "size": 1, "fast": None, "flag": False, "verbose": 0, "name": "n", "other": 5}
    assert build(Outer, values) == Outer("t", Inner(1), name="n")
    assert values == {"other": 5}


def test_one_option_name_twice_is_refused():
    @dataclass(frozen=True)
    class Twice:
        inner: Inner = field(default_factory=Inner)
        size: int = option("--other-size", default=1)

    with pytest.raises(TypeError, match="two options named size"):
        add_options(Twice)(click.command()(lambda **_: None))
