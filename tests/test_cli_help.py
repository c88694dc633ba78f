"""``--help`` as users read it: every role's options held to a snapshot (tests/data/cli_help/, recorded on
purpose with ``python -m tests.support.cli_help --write``: its diff is the change users see), and the rules every
option's entry keeps whoever declared it (common/job/params.py ``Option``): help that says something, one
default in one bracket, choices shown as choices.
"""

import re

import pytest

from tests.support import cli_help


@pytest.mark.parametrize("module", cli_help.ROLES)
def test_help_matches_its_snapshot(module):
    """No option appears, goes or changes its flags, metavar, choices, help, env var or default unnoticed."""
    before = cli_help.snapshot(module)
    now = cli_help.options(cli_help.help_text(module))
    assert sorted(now) == sorted(before), f"options added or gone: {sorted(set(now) ^ set(before))}"
    for flag, was in before.items():
        assert now[flag] == was, f"{flag} changed: re-record on purpose (python -m tests.support.cli_help --write)"


def test_variants_options_show_their_env_var_and_defaults():
    """A job axis's option is unset unless given, so each variant keeps its own default: --help shows each
    variant's, or the one value with the variants that take it (an option only RoBERTa takes says so)."""
    from common.job.params import defaults_text
    from ventilator.run_config import axis_specs

    now = cli_help.options(cli_help.help_text("ventilator"))
    checked = 0
    for axis, specs in axis_specs():
        if axis.choice is not None:
            continue
        for spec in specs:
            flag = f"--no-{spec.flag[2:]}" if spec.type is bool else spec.flag
            text = now[flag]["text"]
            assert f"[env var: MLM_VENTILATOR_{spec.name.upper()}; default: " in text, flag
            assert text.endswith(f"default: {defaults_text(spec, len(axis.variants()))}]"), (flag, text)
            checked += 1
    assert checked > 20
    assert now["--pack"]["text"].endswith("default: full-sentences (roberta)]"), now["--pack"]
    assert "albert 512, bert 128" in now["--max-seq-length"]["text"]


def test_ventilator_help_is_in_sections():
    """``--help`` shows the options under headings, each option under its own: a group's section, the axis of a
    variant's option, --help last."""
    import re

    text = cli_help.help_text("ventilator")
    headings = re.findall(r"^([A-Z][^\n]*):$", text, re.M)
    assert headings[:6] == ["Input", "Output", "Objective", "Segmentation and words", "Holdout", "Job"], headings
    for expected in ("Tokenizer", "Dedup", "Network", "Sink", "Fleet", "Leases and delivery",
                     "Metrics and autoscaling", "Display"):
        assert expected in headings
    assert headings[-1] == "Options", "--help alone at the end"
    sections = {}
    for heading, body in re.findall(r"^([A-Z][^\n]*):\n(.*?)(?=^[A-Z][^\n]*:$|\Z)", text, re.M | re.S):
        sections[heading] = set(re.findall(r"^  (--[\w-]+)", body, re.M))
    expected = {"Input": {"--data", "--format", "--task-size"}, "Output": {"--output", "--output-format", "--gzip"},
                "Objective": {"--objective", "--dupe-factor", "--masked-lm-prob"},
                "Holdout": {"--holdout-fraction", "--holdout-seed"}, "Dedup": {"--dedup", "--minhash-threshold"},
                "Tokenizer": {"--vocab-file", "--tokenizer"}, "Network": {"--vport"},
                "Metrics and autoscaling": {"--metrics-port", "--cloudwatch-namespace"}}
    for heading, flags in expected.items():
        assert flags <= sections[heading], (heading, flags - sections[heading])
    everywhere = [flag for flags in sections.values() for flag in flags]
    assert len(everywhere) == len(set(everywhere)), "an option shown twice"


@pytest.mark.parametrize("module", cli_help.ROLES)
def test_every_option_says_what_it_does(module):
    """An option whose help is only its env var and default tells a user nothing (--heartbeat-seconds had none)."""
    now = cli_help.options(cli_help.help_text(module))
    assert now
    bare = sorted(flag for flag, option in now.items() if not option["text"].strip() or option["text"].lstrip()
                  .startswith("["))
    assert not bare, f"options without help: {', '.join(bare)}"


def test_a_parameter_with_choices_shows_them_and_the_command_line_refuses_others():
    """--pack, --masking, --megatron-level and --column-names showed as TEXT: their choices are declared once, on
    the parameter (param(..., choices=...)), and shown and checked from there."""
    import subprocess
    import sys

    now = cli_help.options(cli_help.help_text("ventilator"))
    for flag, choices in {"--pack": "full-sentences|doc-sentences", "--masking": "none|static",
                          "--megatron-level": "sentence|document", "--column-names": "ours|hf"}.items():
        assert now[flag]["head"] == flag and sorted(now[flag]["choices"]) == sorted(choices.split("|")), now[flag]
    result = subprocess.run([sys.executable, "-m", "ventilator", "--objective", "roberta", "--pack", "docs",
                             "--show-steps"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "'docs' is not one of" in result.stderr, result.stderr[-500:]


#: The one bracket click closes every entry with: its variable, its default, its range, "required".
_BRACKET = re.compile(r"\[(?:env var: [A-Z0-9_]+)?(?:; )?(?:default: (?P<default>[^\]]*?))?(?:; [^;\]]+)*\]$")


@pytest.mark.parametrize("module", cli_help.ROLES)
def test_every_entry_shows_one_default_in_one_bracket(module):
    """One bracket style: a default is said once, in click's bracket at the end ([env var: ...; default: ...]),
    never in the help text too (``[default: derived] ... default: 0`` said two things), and a string is shown as
    typed, not quoted as Python writes it (``'text'``)."""
    now = cli_help.options(cli_help.help_text(module))
    problems = []
    for flag, entry in now.items():
        text = entry["text"]
        if flag == "--help":
            continue
        match = _BRACKET.search(text)
        if match is None:
            problems.append(f"{flag}: no closing bracket of click's: {text}")
        elif text.count("default:") > 1 or "default:" in text[:match.start()]:
            problems.append(f"{flag}: more than one default, or one outside click's bracket: {text}")
        elif match["default"] and re.fullmatch(r"'.*'", match["default"]):
            problems.append(f"{flag}: a quoted default: {match['default']}")
    assert not problems, "\n".join(problems)


def test_a_derived_default_says_so_once():
    """A default worked out when the job is planned is declared as such (``Option.derived``) and shown
    ``default: derived: <how>``, instead of the 0 that stands for it."""
    now = cli_help.options(cli_help.help_text("ventilator"))
    for flag in ("--minhash-bands", "--minhash-rows", "--dedup-partitions"):
        assert "default: derived: " in now[flag]["text"] and "default: 0" not in now[flag]["text"], now[flag]


def _declared_choices() -> dict[str, list[str]]:
    """Every ventilator option declared with choices (``Option.choices`` or a click.Choice), by flag."""
    import dataclasses

    import click

    from common.job.cli_settings import option_fields
    from common.job.params import option_of
    from common.steps import steps
    from ventilator.run_config import RunConfig, axis_specs

    declared: dict[str, list[str]] = {}
    for f in option_fields(RunConfig):
        option = option_of(f)
        kind = option.click.get("type")
        if isinstance(kind, click.Choice):
            declared[option.flag] = list(kind.choices)
    for _, specs in axis_specs():
        for spec in specs:
            if spec.option.choices:
                declared[spec.flag] = list(spec.option.choices)
    for step in steps().values():
        for f in dataclasses.fields(step.Params):
            option = option_of(f)
            if option is not None and option.flag and option.choices:
                declared[option.flag] = list(option.choices)
    return declared


def test_every_declared_choice_is_shown_as_a_choice():
    """An option declared with choices shows them ([a|b]), not TEXT, whoever declared it: a step, a variant or
    the ventilator's own settings."""
    declared = _declared_choices()
    assert {"--dedup", "--pack", "--masking", "--column-names"} <= set(declared), sorted(declared)
    now = cli_help.options(cli_help.help_text("ventilator"))
    for flag, choices in declared.items():
        assert sorted(now[flag]["choices"]) == sorted(choices), (flag, now[flag])
        assert not now[flag]["head"].endswith(" TEXT"), now[flag]


@pytest.mark.parametrize("command", ["ventilator.cli", "sink.cli", "worker.cli", "loader.cli", "report.cli",
                                     "sink.verify", "common.tokenization.training"])
def test_every_option_of_every_command_is_declared_one_way(command):
    """Each option is made from its declaration (``Option``, through ``cli_settings.click_option``), whoever
    declared it (a settings field, a step's or a variant's parameter, a command written as a function): none
    is a bare ``click.option`` whose default, variable or help would follow rules of its own."""
    import importlib

    import click

    main = importlib.import_module(command).main
    with click.Context(main, info_name=command) as ctx:
        params = main.get_params(ctx)
        help_option = main.get_help_option(ctx)
    bare = [param.opts[0] for param in params if isinstance(param, click.Option) and param is not help_option
            and getattr(param, "declaration", None) is None]
    assert len(params) > 1 and not bare, f"options not made from a declaration: {bare}"


#: The click hooks the commands' options override, and the click release that first calls each as they are
#: written: click 8.1 never calls ``get_help_extra`` (every derived default, "[default: off]" and the like, gone
#: from --help) and calls ``get_metavar(param)`` without ``ctx`` (``python -m ventilator --help`` a TypeError).
CLICK_HOOKS = {"SectionedOption.get_help_extra": (8, 2), "AddableStep.get_metavar(param, ctx)": (8, 2)}


def test_the_declared_click_floor_calls_every_hook_the_options_override():
    """setup.cfg's ``click>=`` is what a user's environment may hold: every hook overridden must be called there."""
    import configparser
    import inspect

    from common.job.cli_settings import SectionedOption
    from tests.support.helpers import REPO
    from ventilator.run_config import AddableStep

    assert "get_help_extra" in vars(SectionedOption)  # overridden: the table above says since when it is called
    assert list(inspect.signature(AddableStep.get_metavar).parameters) == ["self", "param", "ctx"]
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    floor = re.search(r"^\s*click>=(\d+)\.(\d+)", config["options"]["install_requires"], re.M)
    assert floor, config["options"]["install_requires"]
    assert (int(floor[1]), int(floor[2])) >= max(CLICK_HOOKS.values()), (floor[0], CLICK_HOOKS)
