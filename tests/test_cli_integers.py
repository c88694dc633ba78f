"""Every integer option of every command takes an int64 and no more: 2**64 (or -2**64), from the command line or
from the command's variable, is one line naming the flag and a usage error, not a traceback where the value is
first encoded (``cannot encode int``) or an allocation that never ends."""

import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from common.job.cli_settings import INT_MAX, Size
from common.tokenization.training import main as train_vocab
from loader.cli import main as loader
from report.cli import main as report
from sink.cli import main as sink
from sink.verify import main as verify
from tests.support.helpers import REPO
from ventilator.cli import main as ventilator
from worker.cli import main as worker

#: Each command, with what it needs besides the option tried (a later required option would be refused first
#: only if it were parsed first: the one tried is given first, and click parses the given ones first).
COMMANDS = {"ventilator": (ventilator, ["--data", "corpus", "--output", "out"]),
            "worker": (worker, ["--ventilator", "127.0.0.1:1"]), "sink": (sink, ["--ventilator", "127.0.0.1:1"]),
            "loader": (loader, ["--data", "out"]), "report": (report, ["out"]), "verify": (verify, ["out"]),
            "train-vocab": (train_vocab, ["--data", str(REPO / "tests"), "--output", "vocab.txt"])}

HUGE = [2**64, -(2**64), INT_MAX + 1]


def integer_options(command: click.Command) -> list[click.Option]:
    """The options that take an integer: a number, or a size (--task-size 8M)."""
    context = click.Context(command, auto_envvar_prefix=command.context_settings["auto_envvar_prefix"])
    return [param for param in command.get_params(context) if isinstance(param, click.Option)
            and not param.is_flag and not param.count
            and isinstance(param.type, (click.types.IntParamType, Size))]


def _cases():
    for name, (command, _) in COMMANDS.items():
        for option in integer_options(command):
            yield pytest.param(name, option.opts[-1], id=f"{name} {option.opts[-1]}")


def test_every_command_has_integer_options():
    assert all(integer_options(command) for name, (command, _) in COMMANDS.items() if name != "verify")


def _refused_in_one_line(result, flag: str) -> None:
    assert result.exit_code in (1, 2), (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if "rror" in line]
    assert len(errors) == 1 and flag in errors[0], result.output


@pytest.mark.parametrize("name, flag", list(_cases()))
def test_every_integer_option_refuses_a_value_past_int64_in_one_line(name, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in [key for key in os.environ if key.startswith("MLM_")]:
        monkeypatch.delenv(key)
    command, required = COMMANDS[name]
    option = next(option for option in integer_options(command) if flag in option.opts)
    for value in HUGE:
        result = CliRunner().invoke(command, [flag, str(value), *required], prog_name=name)
        _refused_in_one_line(result, flag)
        result = CliRunner().invoke(command, required, prog_name=name, env={option.envvar: str(value)})
        _refused_in_one_line(result, flag)
        assert option.envvar in result.output  # the variable that gave the value is named


@pytest.mark.parametrize("flag", ["--random-seed", "--holdout-seed", "--dupe-factor", "--max-seq-length"])
def test_the_ventilator_refuses_a_huge_integer_in_one_line_through_its_command_line(flag, tmp_path):
    """The flags a user met this with (a 25-line traceback ending in "cannot encode int"), as run."""
    ran = subprocess.run([sys.executable, "-m", "ventilator", "--data", str(REPO / "tests" / "data"), "--output",
                          str(tmp_path / "out"), flag, str(2**64)], capture_output=True, text=True, timeout=120,
                         cwd=REPO, env={key: value for key, value in os.environ.items() if not key.startswith("MLM_")})
    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr
    errors = [line for line in ran.stderr.splitlines() if "rror" in line]
    assert len(errors) == 1 and flag in errors[0] and "out of range" in errors[0], ran.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("objective, length", [("bert", 8193), ("albert", 100_000), ("electra", 8193),
                                               ("roberta", 2**40), ("tokens", 2**31)])
def test_a_max_seq_length_the_records_cannot_hold_is_one_line_before_any_work(objective, length, tmp_path):
    """A length no worker can allocate (every instance padded to it: MemoryError in every task, or the workers
    OOM-killed) is refused by the command, naming the bound, and nothing is written."""
    from tests.support.helpers import VOCAB, WIKI, need_shared

    need_shared()
    out = tmp_path / "out"
    ran = subprocess.run([sys.executable, "-m", "ventilator", "--data", str(WIKI), "--output", str(out),
                          "--vocab-file", str(VOCAB), "--objective", objective, "--max-seq-length", str(length),
                          "--workers", "1", "--state-dir", str(tmp_path / "state")],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={key: value for key, value in os.environ.items() if not key.startswith("MLM_")})
    assert ran.returncode == 1, ran.stderr
    errors = [line for line in ran.stderr.splitlines() if "error" in line]  # beside the INFO lines
    most = "2,147,483,647" if objective == "tokens" else "8,192"
    assert len(errors) == 1 and f"--max-seq-length {length} is too long: at most {most}" in errors[0], ran.stderr
    assert "Traceback" not in ran.stderr
    assert not out.exists()


def test_the_bounds_themselves_are_taken():
    from common.objectives import objective_named

    for name in ("bert", "albert", "electra", "roberta"):
        assert objective_named(name).make_params({"max_seq_length": 8192}).max_seq_length == 8192
    assert objective_named("tokens").make_params({"max_seq_length": 2**31 - 1}).max_seq_length == 2**31 - 1
