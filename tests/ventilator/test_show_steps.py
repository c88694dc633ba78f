"""``python -m ventilator ... --show-steps`` prints the job's resolved steps, each with its options and their
values, and exits 0 without starting anything: no socket (the test holds --vport itself), no output written,
no worker started.  Bad options are refused first, as a run refuses them.  Plugin steps, installed as a
package installs them (a .dist-info with entry points on the path), show where they insert themselves, and one
that names a step that does not exist (``after = "tokenise"``) is refused in one line naming the known steps.

The real command line, run as users run it (``python -m ventilator``)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.helpers import REPO, VOCAB, need_shared
from tests.support.plugins import fake_install

CORPUS = "".join(f'<doc id="{i}" url="" title="T{i}">\nT{i}\n\nThe {i}th document has a sentence. And another one '
                 f"here.\n</doc>\n" for i in range(20))

PLUGIN = textwrap.dedent('''
    """Two plugin steps: one switched on by its own flag (after segmenting), one added with --add-step (after
    reading)."""
    from dataclasses import dataclass
    from typing import ClassVar

    from mlm_pipeline.plugin import Step, param


    @dataclass(frozen=True)
    class CountParams:
        section: ClassVar[str] = "Show census"
        show_census: bool = param(False, "Count the documents.", flag="--show-census")


    class Count(Step):
        name = "show-census"
        Params = CountParams
        after = "segment"

        @classmethod
        def enabled(cls, params):
            return params.show_census

        def run(self, run):
            pass


    @dataclass(frozen=True)
    class DropParams:
        show_max_digits: int = param(1000, "Documents with more digits are dropped.")


    class Drop(Step):
        name = "show-drop"
        Params = DropParams
        after = "read"
        makes = "documents"

        def run(self, run):
            pass
''')


@pytest.fixture
def corpus(tmp_path) -> Path:
    need_shared()
    path = tmp_path / "corpus" / "wiki_00"
    path.parent.mkdir()
    path.write_text(CORPUS)
    return path.parent


def show(corpus: Path, output: Path, *args: str, env: dict | None = None,
         show_steps: bool = True) -> subprocess.CompletedProcess:
    """The command with --show-steps (unless not ``show_steps``) and ``args``, its --vport held by this test all
    along: a command that opened its socket would fail to listen."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        command = [sys.executable, "-m", "ventilator", "--data", str(corpus), "--output", str(output),
                   "--vocab-file", str(VOCAB), "--bind-host", "127.0.0.1", "--vport", str(port), "--workers", "2",
                   *(["--show-steps"] if show_steps else []), *args]
        return subprocess.run(command, cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                              timeout=120)


def listed(stdout: str) -> list[tuple[str, dict[str, str]]]:
    """The steps printed, in order, each with its options (flag or name -> value)."""
    steps: list[tuple[str, dict[str, str]]] = []
    for line in stdout.splitlines():
        numbered = re.fullmatch(r"\s*(\d+)\. (\S+)", line)
        if numbered:
            assert int(numbered[1]) == len(steps) + 1, line
            steps.append((numbered[2], {}))
        elif line.startswith("      ") and steps:
            flag, value = line.strip().split(None, 1)
            steps[-1][1][flag] = value
    return steps


def test_the_default_job_prints_its_steps_and_starts_nothing(corpus, tmp_path):
    output = tmp_path / "out"
    result = show(corpus, output)
    assert result.returncode == 0, result.stderr
    steps = listed(result.stdout)
    assert [name for name, _ in steps] == ["read", "segment", "tokenize", "objective", "write"]
    options = dict(steps)
    assert options["read"] == {"--format": "wikiextractor"}
    assert options["segment"] == {"--segmenter": "blingfire"}
    assert options["tokenize"]["tokenizer"].startswith("WordPiece, 30522 ids")
    assert options["objective"]["--objective"] == "bert"
    assert options["objective"]["--max-seq-length"] == "128"
    assert options["objective"]["--do-whole-word-mask"] == "false"
    assert options["write"]["--output-format"] == "tfrecord"
    assert not output.exists()  # no lock, no manifest, no sink, no worker
    assert "serving" not in result.stderr and "listening" not in result.stderr


def test_options_change_the_steps_and_their_values(corpus, tmp_path):
    result = show(corpus, tmp_path / "out", "--dedup", "exact", "--holdout-fraction", "0.25", "--holdout-seed", "7",
                  "--segmenter", "line", "--objective", "roberta", "--max-seq-length", "64",
                  "--output-format", "parquet")
    assert result.returncode == 0, result.stderr
    steps = listed(result.stdout)
    assert [name for name, _ in steps] == ["read", "dedup", "holdout", "segment", "tokenize", "objective", "write"]
    options = dict(steps)
    assert options["dedup"]["--dedup"] == "exact"
    assert options["dedup"]["--dedup-partitions"] == "1"  # resolved from the input's size, as the job records it
    assert options["holdout"] == {"--holdout-fraction": "0.25", "--holdout-seed": "7"}
    assert options["segment"] == {"--segmenter": "line"}
    assert options["objective"]["--objective"] == "roberta"
    assert options["objective"]["--max-seq-length"] == "64"
    assert options["write"]["--output-format"] == "parquet"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mode", ["exact", "minhash"])
def test_only_the_options_that_apply_are_listed(corpus, tmp_path, mode):
    """MinHash's options do something only with --dedup minhash (their declarations' ``When``): under exact they
    were listed with their defaults as if they did; RoBERTa's masking options likewise only with --masking
    static."""
    result = show(corpus, tmp_path / "out", "--dedup", mode, "--objective", "roberta")
    assert result.returncode == 0, result.stderr
    options = dict(listed(result.stdout))
    minhash = {flag for flag in options["dedup"] if flag.startswith("--minhash-")}
    assert options["dedup"]["--dedup"] == mode and "--dedup-partitions" in options["dedup"]
    if mode == "exact":
        assert minhash == set(), options["dedup"]
    else:
        assert {"--minhash-ngram", "--minhash-threshold", "--minhash-bands"} <= minhash, options["dedup"]
    assert options["objective"]["--masking"] == "none" and "--masked-lm-prob" not in options["objective"]


@pytest.mark.parametrize("args, refused", [
    (("--holdout-seed", "5"), "--holdout-seed does nothing here: the holdout step is off"),
    (("--holdout-fraction", "1.5"), "--holdout-fraction"),
    (("--no-such-flag",), "No such option '--no-such-flag'"),
])
def test_bad_options_are_refused_before_anything_is_shown(corpus, tmp_path, args, refused):
    result = show(corpus, tmp_path / "out", *args)
    assert result.returncode != 0
    assert refused in result.stderr
    assert "steps" not in result.stdout
    assert not (tmp_path / "out").exists()


@pytest.fixture
def plugin_env(tmp_path) -> dict[str, str]:
    site = fake_install(tmp_path / "site", "show-steps-plugin",
                        "[mlm_pipeline.steps]\nshow-census = show_steps_plugin:Count\n"
                        "show-drop = show_steps_plugin:Drop\n", {"show_steps_plugin": PLUGIN})
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def test_plugin_steps_show_where_they_insert_themselves(corpus, tmp_path, plugin_env):
    result = show(corpus, tmp_path / "out", "--holdout-fraction", "0.1", "--show-census", "--add-step", "show-drop",
                  "--show-max-digits", "12", env=plugin_env)
    assert result.returncode == 0, result.stderr
    steps = listed(result.stdout)
    assert [name for name, _ in steps] == ["read", "show-drop", "holdout", "segment", "show-census", "tokenize",
                                           "objective", "write"]
    assert dict(steps)["show-drop"] == {"--show-max-digits": "12"}
    assert dict(steps)["show-census"] == {"--show-census": "true"}
    without = listed(show(corpus, tmp_path / "out", env=plugin_env).stdout)  # installed, not switched on: absent
    assert [name for name, _ in without] == ["read", "segment", "tokenize", "objective", "write"]


@pytest.mark.parametrize("step, args", [("show-census", ("--show-census",)),
                                        ("show-drop", ("--add-step", "show-drop"))])
def test_a_plugin_step_after_a_step_that_does_not_exist_is_refused_naming_the_steps(corpus, tmp_path, plugin_env,
                                                                                    step, args):
    site = Path(plugin_env["PYTHONPATH"].split(os.pathsep)[0])
    module = site / "show_steps_plugin.py"
    typo = {"show-census": ('after = "segment"', 'after = "segmnet"'), "show-drop": ('after = "read"',
                                                                                   'after = "tokenise"')}[step]
    module.write_text(module.read_text().replace(*typo))
    for show_steps in (True, False):  # shown or run: the same refusal, before any socket or file
        result = show(corpus, tmp_path / "out", *args, env=plugin_env, show_steps=show_steps)
        assert result.returncode == 1, (show_steps, result.stderr)
        error = [line for line in result.stderr.splitlines() if "error" in line]
        assert len(error) == 1, result.stderr
        assert f"runs after {typo[1].split(' = ')[1]}".replace('"', "'") in error[0], error[0]
        for name in ("read", "segment", "tokenize", "objective", "write", "holdout"):
            assert name in error[0]
        assert not (tmp_path / "out").exists()
