"""Cross-cutting: the docs say what the code does, whatever package it is in.  Numbers and names the README and
the shipped dashboard state, checked against their source (the metrics a live role serves are checked by
tests/e2e/test_grafana_dashboard.py)."""

from __future__ import annotations

import importlib
import json
import re
import shlex

import click
import pytest

from common.wire.protocol import PROTOCOL_VERSION
from tests.support.helpers import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_states_the_protocol_version_in_use():
    stated = re.findall(r"`common/wire/protocol\.py`, version (\d+)", README)
    assert stated == [str(PROTOCOL_VERSION)]


def test_the_dashboard_declares_only_inputs_it_uses():
    """Grafana's import asks for every `__inputs` entry; one no panel names (`${DS_PROMETHEUS}`) is a question
    whose answer goes nowhere.  Every `${variable}` a panel names is an input or a templating variable."""
    text = (REPO / "deploy" / "grafana" / "mlm-pipeline.json").read_text()
    dashboard = json.loads(text)
    inputs = {i["name"] for i in dashboard.get("__inputs", [])}
    variables = {v["name"] for v in dashboard.get("templating", {}).get("list", [])}
    used = set(re.findall(r"\$\{(\w+)\}", text))
    assert inputs <= used, f"declared, never used: {sorted(inputs - used)}"
    assert used <= inputs | variables, f"used, never declared: {sorted(used - inputs - variables)}"


def readme_metrics() -> set[str]:
    """The metric names the README's metric table lists (a name, or a name with its labels)."""
    start = README.index("| Role | Metrics |")
    table = README[start:README.index("\n\n", start)]
    return set(re.findall(r"`(mlm_[a-z0-9_]+)", table))


# ---- the README's commands, against the command lines they name ----------------------------------------------

def console_scripts() -> dict[str, str]:
    """setup.cfg's console scripts: name -> ``module:function``."""
    text = (REPO / "setup.cfg").read_text(encoding="utf-8")
    block = text[text.index("console_scripts ="):].split("\n\n")[0]
    return dict(re.findall(r"^\s+(mlm-[\w-]+) = ([\w.]+:\w+)$", block, re.M))


def project_command(argv: list[str]) -> tuple[str, list[str]] | None:
    """The project's entry point (``module:function``) an argv runs, and its arguments; None for another
    program (pip, sbatch's own flags, kubectl, pytest, an example script)."""
    scripts = console_scripts()
    if argv and argv[0] in scripts:
        return scripts[argv[0]], argv[1:]
    if len(argv) >= 3 and argv[0] == "python" and argv[1] == "-m":
        for target in scripts.values():
            module = target.split(":")[0]
            if module in (argv[2], f"{argv[2]}.cli"):
                return target, argv[3:]
    return None


def shell_commands(block: str) -> list[list[str]]:
    """Each command of a bash block as argv: continuation lines joined, comments dropped, split at ``&&``, ``;``,
    ``|`` and a trailing ``&``; optional parts written ``[--flag value]`` taken as given; a command sbatch runs
    with ``--wrap`` is a command too."""
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        argv: list[str] = []
        for token in [*lexer, "&&"]:
            if token in ("&&", "&", ";", "|", "||"):
                if argv:
                    commands.append(argv)
                argv = []
            else:
                argv.extend(t for t in (token.strip("[]"),) if t)
        for argv in list(commands):
            if argv[0] == "sbatch" and "--wrap" in argv:
                commands.append(shlex.split(argv[argv.index("--wrap") + 1]))
    return commands


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def check_against_cli(target: str, args: list[str]) -> None:
    """Parse ``args`` with the real click command, as click would, short of running it: an option it does not
    have, an option without its value, a stray argument, or a value its type refuses (a choice, a number) raises
    click.UsageError.  Paths are not looked for (the README's are examples), nor are required options (``...``
    stands for the rest of a command)."""
    module, function = target.split(":")
    command = getattr(importlib.import_module(module), function)
    args = [a for a in args if a != "..."]
    context = click.Context(command, info_name=target)  # nothing parsed, no callback run
    options, rest, _ = command.make_parser(context).parse_args(args)
    if rest:
        raise click.UsageError(f"unexpected arguments {rest}")
    for param in command.get_params(context):
        if param.name in options and not isinstance(param.type, (click.Path, click.File)):
            value = options[param.name]
            with click.core.augment_usage_errors(context, param=param):
                param.type_cast_value(context, value)


#: The guides whose commands are checked against the CLI.
GUIDES = ("README.md",)


def readme_project_commands(guide: str = "README.md") -> list[tuple[str, list[str], list[str]]]:
    found = []
    for block in bash_blocks((REPO / guide).read_text(encoding="utf-8")):
        for argv in shell_commands(block):
            command = project_command(argv)
            if command is not None:
                found.append((*command, argv))
    return found


@pytest.mark.parametrize("guide", GUIDES)
def test_every_project_command_in_the_readme_parses_with_its_real_command_line(guide):
    """Every ``python -m ROLE ...`` and ``mlm-* ...`` line in a ```bash block of the README: a flag renamed or
    removed, or a choice that is gone, fails here, with the line."""
    found = readme_project_commands(guide)
    assert len(found) >= 20, found  # the blocks are still found and split
    assert {target.split(":")[0].split(".")[0] for target, _, _ in found} >= {"ventilator", "worker", "loader",
                                                                              "report", "common"}
    failures = []
    for target, args, argv in found:
        try:
            check_against_cli(target, args)
        except click.UsageError as error:
            failures.append(f"{shlex.join(argv)}: {error.format_message()}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("argv", [
    "python -m ventilator --data d --output o --no-such-flag 3",
    "python -m ventilator --data d --output o --objective no-such-objective",
    "python -m loader --data d --batch-size many",
    "mlm-report out/ extra/ --temperature hot",
    "python -m worker --ventilator",
])
def test_a_readme_command_the_cli_refuses_fails_the_check(argv):
    """The check can fail: each of these is wrong in one way the README could be."""
    (target, args) = project_command(shlex.split(argv))
    with pytest.raises(click.UsageError):
        check_against_cli(target, args)


def test_the_bash_blocks_split_into_commands():
    block = ("mlm-train-vocab --data x --output v && \\\n  python -m ventilator --data x # a comment\n"
             "python -m loader --data o [--dynamic-masking --vocab-file v] &\n"
             'sbatch --nodes=4 --wrap "python -m ventilator --launcher slurm --data d"\n')
    assert shell_commands(block) == [
        ["mlm-train-vocab", "--data", "x", "--output", "v"], ["python", "-m", "ventilator", "--data", "x"],
        ["python", "-m", "loader", "--data", "o", "--dynamic-masking", "--vocab-file", "v"],
        ["sbatch", "--nodes=4", "--wrap", "python -m ventilator --launcher slurm --data d"],
        ["python", "-m", "ventilator", "--launcher", "slurm", "--data", "d"]]



def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped but ``-`` and ``_``, spaces made ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    found = {github_anchor(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}
    return found | set(re.findall(r'<a id="([^"]+)"', text))


#: The pages whose links are checked: the guides, every page of docs/, the changelog.
LINKED_PAGES = ("README.md", "CHANGELOG.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")))


@pytest.mark.parametrize("page", LINKED_PAGES)
def test_every_relative_link_leads_to_a_file_and_heading(page):
    """A renamed page or heading breaks no link silently."""
    path = REPO / page
    base = REPO if page in ("README.md", "CHANGELOG.md") else path.parent
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"),
                                                           flags=re.S)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (base / file) if file else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no such heading")
    assert not broken, broken


#: The user docs held to "a guide, not a diary" (CHANGELOG.md keeps the dates).
GUIDE_PAGES = ("README.md", "docs/architecture.md", "docs/results.md", "docs/benchmarks.md",
               "docs/design.md", "docs/dedup.md", "docs/tokenizers.md", "docs/clusters.md", "docs/report.md",
               "docs/inputs.md", "docs/reliability.md", "docs/fleet.md", "docs/formats.md", "docs/loader.md",
               "docs/objectives.md")
DIARY = re.compile(r"\(issue #?\d+|\bissue #\d+|\(#\d+\)|\b20\d\d-\d\d-\d\d\b|\b\d\d:\d\d(-\d\d:\d\d)? UTC\b")


@pytest.mark.parametrize("page", GUIDE_PAGES)
def test_a_guide_page_names_no_issue_and_no_date(page):
    """State what is true now, with the command (and commit) that made a figure: no "(issue #N)", no dated line."""
    lines = (REPO / page).read_text(encoding="utf-8").splitlines()
    diary = [f"{page}:{n}: {line.strip()[:100]}" for n, line in enumerate(lines, 1) if DIARY.search(line)]
    assert not diary, "\n".join(diary)


def test_the_readme_is_a_short_guide():
    assert len(README.splitlines()) <= 350
