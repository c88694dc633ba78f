"""The flag an output's description names for each of its settings is the one the option's declaration names
(common/job/params.py ``Option``): a refused resume says ``changed: --dupe-factor 10 → 3`` from the descriptions
(``dataset_info.changed_options``), and the dataset card's command is made from the same declarations
(``data_command``).  No table of flags is kept beside the declarations, so a renamed flag is named right
everywhere; these tests change each declared setting on a real command line and read the flag back."""

from __future__ import annotations

import dataclasses
import functools
import shutil

import pytest

from common.describe import dataset_info
from common.job.cli_settings import option_fields
from common.job.params import flag_of, option_of, own_flag
from common.objectives import objective_named
from common.steps import described_steps
from common.writers import writer_named
from tests.support.byte_matrix import small_corpus
from tests.support.helpers import VOCAB, need_shared
from ventilator.job import identify, validate
from ventilator.run_config import RunConfig, data_command, described_flags, parse


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    need_shared()
    root = tmp_path_factory.mktemp("flags")
    corpus = small_corpus(root)
    other = root / "other"
    shutil.copytree(corpus, other)
    return corpus, other, root


@functools.cache
def _described(corpus, root, *argv: str) -> tuple[dict, str]:
    """The description and the card's command of the job this command line makes (validated and identified: what
    a refused resume compares), with BERT, a vocab.txt and the small corpus unless ``argv`` says otherwise."""
    run = parse(["--data", str(corpus), "--output", str(root / "out"), "--vocab-file", str(VOCAB), *argv])
    config = identify(run, validate(run))
    return dataset_info.describe(config, {}, complete=False), data_command(run)


def _other_value(value, choices=()):
    """A value of the same type as ``value`` that differs from it (another choice for a string that has them)."""
    if isinstance(value, bool):
        return not value
    if choices:
        return next(choice for choice in choices if choice != value)
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.5
    return f"{value}x"


def _argv(flag: str, value) -> list[str]:
    if isinstance(value, bool):
        return [flag if value else f"--no-{flag[2:]}"]
    return [flag, str(value)]


def test_the_run_options_settings_are_named_by_their_declared_flags(corpus):
    """--data, --task-size, --format, --segmenter, --objective, --output-format, --word-segmenter: each changed
    alone, the change names the flag its declaration names (``describes``)."""
    data, other, root = corpus
    base, _ = _described(data, root)
    flags = described_flags()
    declared = {option_of(f).describes: option_of(f).flag for f in option_fields(RunConfig) if option_of(f).describes}
    assert flags == declared and {"input.uri", "input.task_size", "reader.name", "segmenter", "objective.name",
                                  "writer.name", "steps.words", "steps"} <= set(flags), flags
    changed = {"input.task_size": ["--task-size", "1M"], "reader.name": ["--format", "text"],
               "segmenter": ["--segmenter", "line"], "objective.name": ["--objective", "albert"],
               "writer.name": ["--output-format", "parquet"], "steps.words": ["--word-segmenter", "jieba"]}
    for path, argv in changed.items():
        assert argv[0] == flags[path], (path, argv)
        needs = ["--do-whole-word-mask"] if path == "steps.words" else []  # else jieba's words do nothing
        new, command = _described(data, root, *needs, *argv)
        changes = dataset_info.changed_options(_described(data, root, *needs)[0] if needs else base, new, flags)
        assert any(change.startswith(f"{flags[path]} ") for change in changes), (path, changes)
        assert argv[0] in command.split(), command  # the card's command: the same declaration's flag
    moved = dataset_info.changed_options(base, _described(other, root)[0], flags)
    assert any(change.startswith(f"{flags['input.uri']} ") for change in moved), moved


def _objective_and_writer_fields():
    for section, variant in (("objective", objective_named("bert")), ("writer", writer_named("tfrecord")),
                             ("writer", writer_named("parquet"))):
        for f in dataclasses.fields(variant.Params):
            yield section, variant.name, f


@pytest.mark.parametrize("section,variant,f", list(_objective_and_writer_fields()),
                         ids=lambda value: getattr(value, "name", value))
def test_a_variants_settings_are_named_by_their_declared_flags(corpus, section, variant, f):
    """Every parameter of BERT, TFRecord and Parquet: changed on the command line, the change and the card's
    command name the variant's declared flag."""
    data, _, root = corpus
    option = option_of(f)
    flag = flag_of(objective_named(variant).Params if section == "objective" else writer_named(variant).Params,
                   f.name)
    value = _other_value(f.default, option.choices or getattr(option.click.get("type"), "choices", ()))
    chosen = [] if section == "objective" else ["--output-format", variant]
    if f.name == "chinese_ref":  # written from word starts: RoBERTa's unmasked records have them
        chosen += ["--objective", "roberta", "--masking", "none"]
    base, _ = _described(data, root, *chosen)
    new, command = _described(data, root, *chosen, *_argv(flag, value))
    changes = dataset_info.changed_options(base, new, described_flags())
    if isinstance(value, bool):  # a switch: each side as it is typed (it said ``--gzip False → True``)
        assert f"{_argv(flag, f.default)[0]} → {_argv(flag, value)[0]}" in changes, (flag, changes)
    else:
        assert any(change.startswith(f"{flag} ") for change in changes), (flag, changes)
    assert _argv(flag, value)[0] in command.split(), command


def _step_flags():
    for step in described_steps():
        for f in dataclasses.fields(step.Params):
            if own_flag(f):
                yield step, f


#: What turns each described step on, so a flag of its that does nothing while it is off can be changed.
_ON = {"holdout": ["--holdout-fraction", "0.2"], "dedup": ["--dedup", "minhash"]}


@pytest.mark.parametrize("step,f", list(_step_flags()), ids=lambda value: getattr(value, "name", value))
def test_a_steps_settings_are_named_by_their_declared_flags(corpus, step, f):
    """Every flag of the steps with a section of their own (holdout's, dedup's): changed, the change and the
    card's command name it as the step's ``Params`` declare it (no ``setting_flag`` table beside them)."""
    data, _, root = corpus
    flag = own_flag(f)
    option = option_of(f)
    on = _ON[step.name]
    value = _other_value(f.default, option.choices or getattr(option.click.get("type"), "choices", ()))
    if flag == "--minhash-bands" or flag == "--minhash-rows":  # given together: 4 bands x 7 rows of 112
        on = [*on, "--minhash-bands", "4", "--minhash-rows", "7"]
        value = 8 if flag == "--minhash-bands" else 14
    if flag == "--dedup-partitions":  # 0 is worked out from the input's size: 1 here
        value = 3
    base, _ = _described(data, root, *on)
    given = [] if flag == on[0] else on
    new, command = _described(data, root, *given, *_argv(flag, value))
    if flag == on[0]:
        base, _ = _described(data, root)
    changes = dataset_info.changed_options(base, new, described_flags())
    assert any(change.startswith(f"{flag} ") for change in changes), (flag, changes)
    assert flag in command.split(), command


_CHANGES = """
import json, sys
from common.describe import dataset_info
from ventilator.job import identify, validate
from ventilator.run_config import described_flags, parse

base, *argvs = json.loads(sys.argv[1])
def described(argv):
    run = parse([*base, *argv])
    return dataset_info.describe(identify(run, validate(run)), {}, complete=False)
before, after = (described(argv) for argv in argvs)
print(json.dumps([dataset_info.changed_options(before, after, described_flags()),
                  dataset_info.changed_options(after, before, described_flags())]))
"""


@pytest.mark.parametrize("argv, flag", [(["--show-census"], "--show-census"),
                                        (["--add-step", "show-drop"], "--add-step show-drop")])
def test_a_plugin_step_switched_on_or_off_is_named_by_what_switches_it(corpus, tmp_path, argv, flag):
    """A plugin step on by its own flag (``--show-census``), turned on or off since the output was made: the refused
    resume named ``--add-step show-census``, which is refused (the step is switched on by its own flag), instead of
    the flag the step declares.  A step added with --add-step is still named so.  A real plugin, found by its
    entry point in a subprocess (tests/ventilator/test_show_steps.py's)."""
    import json
    import os
    import subprocess
    import sys

    from tests.support.helpers import REPO
    from tests.support.plugins import fake_install
    from tests.ventilator.test_show_steps import PLUGIN

    data, _, root = corpus
    site = fake_install(tmp_path / "site", "show-steps-plugin",
                        "[mlm_pipeline.steps]\nshow-census = show_steps_plugin:Count\n"
                        "show-drop = show_steps_plugin:Drop\n", {"show_steps_plugin": PLUGIN})
    base = ["--data", str(data), "--output", str(root / "out"), "--vocab-file", str(VOCAB)]
    result = subprocess.run([sys.executable, "-c", _CHANGES, json.dumps([base, [], argv])], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                                str(site), os.environ.get("PYTHONPATH")]))},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    added, removed = json.loads(result.stdout)
    assert len(added) == 1 and added[0].startswith(f"{flag} ") and added[0].endswith("added"), added
    assert len(removed) == 1 and removed[0].startswith(f"{flag} ") and removed[0].endswith("removed"), removed


SEGMENTER = '''
from dataclasses import dataclass

from mlm_pipeline.plugin import Segmenter, param


@dataclass(frozen=True)
class ChunkParams:
    chunk_words: int = param(1, "Words per segment.", flag="--chunk-size-words")


class Chunks(Segmenter):
    name = "chunk-words"
    Params = ChunkParams

    def segments(self, lines):
        n = self.params.chunk_words
        return [[" ".join(words[i:i + n])] for words in (line.split() for line in lines)
                for i in range(0, len(words), n)]
'''


def test_a_segmenters_own_parameter_changed_is_named_by_its_flag(corpus, tmp_path):
    """A segmenter's own parameter (a plugin's: the built-in ones have none) changed since the output was made: the
    refused resume said "no option changed: the corpus changed since", as the segment step's section was compared by
    the segmenter's name alone.  Now it names the parameter's declared flag; another segmenter is --segmenter's
    change alone (its parameters are its own)."""
    import json
    import os
    import subprocess
    import sys

    from tests.support.helpers import REPO
    from tests.support.plugins import fake_install

    data, _, root = corpus
    site = fake_install(tmp_path / "site", "chunk-segmenter", "[mlm_pipeline.segmenters]\nchunk-words = chunk_seg:Chunks\n",
                        {"chunk_seg": SEGMENTER})
    base = ["--data", str(data), "--output", str(root / "out"), "--vocab-file", str(VOCAB)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}

    def changes(before: list[str], after: list[str]) -> list[str]:
        result = subprocess.run([sys.executable, "-c", _CHANGES, json.dumps([base, before, after])], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)[0]

    chosen = ["--segmenter", "chunk-words"]
    assert changes(chosen, [*chosen, "--chunk-size-words", "3"]) == ["--chunk-size-words 1 → 3"]
    assert changes(["--segmenter", "line"], [*chosen, "--chunk-size-words", "3"]) == ["--segmenter line → chunk-words"]


def test_a_step_turned_on_since_says_its_switch_went_from_the_value_its_flag_takes_for_off(corpus):
    """A refused resume after --dedup minhash was added said ``--dedup none → minhash``: --dedup takes ``off``
    (``--dedup none`` is refused).  Each described step's "off" is its switch's default, a value its flag takes."""
    data, _, root = corpus
    for step in described_steps():
        switch = step.info_section
        assert switch is not None, step.name
        default = next(f.default for f in dataclasses.fields(step.Params) if f.name == switch.switch)
        assert switch.off == default, (step.name, switch.off, default)
    base, _ = _described(data, root)
    on, _ = _described(data, root, "--dedup", "minhash")
    assert dataset_info.changed_options(base, on, described_flags()) == ["--dedup off → minhash"]
    assert dataset_info.changed_options(on, base, described_flags()) == ["--dedup minhash → off"]
