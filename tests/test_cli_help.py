"""Every option users know keeps its flags, metavar, help text, env var and default (snapshots recorded from
``--help`` before the run configuration was rebuilt: tests/data/cli_help/, written by tests/support/cli_help.py).

New options and new choices may appear (an axis gains a variant); none may change or go.  The options the
axes' variants declare (common/job/params.py) are their modules' business and are checked apart: each is shown
with its env var and its variants' defaults.
"""

import pytest

from tests.support import cli_help


def _component_flags() -> set[str]:
    from common.job.params import option_specs
    from common.objectives import objectives
    from common.readers import readers
    from common.word_segmenters import word_segmenters
    from common.writers import writers

    specs = option_specs([*readers().values(), *objectives().values(), *writers().values(),
                          *word_segmenters().values()])
    return {spec.flag for spec in specs} | {f"--no-{spec.flag[2:]}" for spec in specs if spec.type is bool}


@pytest.mark.parametrize("module", ["ventilator", "sink", "worker"])
def test_every_option_shows_as_before(module):
    before = cli_help.snapshot(module)
    now = cli_help.options(cli_help.help_text(module))
    variants = _component_flags() if module == "ventilator" else set()
    for flag, was in before.items():
        if flag in variants:
            continue
        assert flag in now, f"{flag} is gone"
        assert now[flag]["head"] == was["head"], flag
        assert now[flag]["text"] == was["text"], flag
        assert set(was["choices"]) <= set(now[flag]["choices"]), flag


def test_variants_options_show_their_env_var_and_defaults():
    from common.job.params import defaults_text, option_specs
    from common.objectives import objectives
    from common.readers import readers
    from common.word_segmenters import word_segmenters
    from common.writers import writers

    now = cli_help.options(cli_help.help_text("ventilator"))
    specs = option_specs([*readers().values(), *objectives().values(), *writers().values(),
                          *word_segmenters().values()])
    assert specs
    for spec in specs:
        flag = f"--no-{spec.flag[2:]}" if spec.type is bool else spec.flag
        text = now[flag]["text"]
        assert f"[env var: MLM_VENTILATOR_{spec.name.upper()}]" in text, flag
        assert " ".join(defaults_text(spec).split()) in text.replace("- ", "-"), flag


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


@pytest.mark.parametrize("module", ["ventilator", "sink", "worker", "loader"])
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
