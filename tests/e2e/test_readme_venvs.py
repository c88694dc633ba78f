"""The pieces of scripts/readme-venvs.sh's check (tests/e2e/readme_venvs.py) that need no venv: every README bash
command is classified (run there, or what covers it), the ones run there have every placeholder bound, and CI runs
the step before the suite.  The venvs themselves are a step of .ci/run (minutes), not of the suite."""

import re
from pathlib import Path

import pytest

from tests.e2e import readme_venvs
from tests.e2e.readme_commands import Command, commands, modernbert_install_commands, readme_commands
from tests.support.helpers import REPO


def test_every_readme_bash_command_is_classified_and_every_entry_is_in_the_readme():
    found = readme_commands()
    assert len(found) >= 40, found  # the blocks are still found and split
    assert readme_venvs.unclassified(found) == [], "classify it in tests/e2e/readme_venvs.py's COVERAGE"
    assert set(readme_venvs.COVERAGE) == {(c.section, c.text) for c in found}, "an entry no README command has"


def test_a_command_the_readme_gains_is_unclassified():
    gained = Command("Output formats", "python -m ventilator --data corpus/ --output out-x/ --output-format x")
    assert readme_venvs.unclassified([*readme_commands(), gained]) == [gained]
    moved = Command("Tokenizers", "python -m ventilator --data corpus/ --output out-pq/ --vocab-file vocab.txt "
                                  "--output-format parquet --bin-size 64")
    assert readme_venvs.unclassified([moved]) == [moved], "a command is classified in its own section"


def test_bash_blocks_split_into_commands_as_written():
    block = ("mlm-train-vocab --data x --output v && \\\n  python -m ventilator --data x   # a comment\n"
             "python -m loader --data o [--dynamic-masking --vocab-file v] &\n"
             "pip install '.[report]'             # mlm-report's page\n"
             'sbatch --wrap "python -m ventilator --data d # not a comment"\n')
    assert commands(block, "S") == [
        Command("S", "mlm-train-vocab --data x --output v"), Command("S", "python -m ventilator --data x"),
        Command("S", "python -m loader --data o [--dynamic-masking --vocab-file v]", background=True),
        Command("S", "pip install '.[report]'"),
        Command("S", 'sbatch --wrap "python -m ventilator --data d # not a comment"')]


def test_the_venvs_are_made_by_the_readmes_install_lines():
    assert readme_venvs.install_lines("base") == ["pip install ."]
    assert readme_venvs.install_lines("report") == ["pip install '.[report]'"]
    assert readme_venvs.install_lines("gcs") == ["pip install '.[gcs]'"]
    assert readme_venvs.install_lines("trainer") == modernbert_install_commands()
    assert all(line.startswith("pip install ") for line in readme_venvs.install_lines("trainer"))


#: What a README command run on one machine must not keep: a cloud, a cluster's path, a host to fill in, the
#: fixed ports another run may hold, a fleet's process count.
UNBOUND = re.compile(r"s3://(?!my-bucket/)|gs://|/shared/|HOST|^/tmp/|\b5557\b|\b5560\b|^(corpus|out|keys|roberta)/$|"
                     r"^(vocab\.txt|spiece\.model|chinese-vocab\.txt|zhwiki-extracted|out-.*)$")


@pytest.mark.parametrize("venv", readme_venvs.VENVS)
def test_every_command_run_here_has_its_placeholders_bound(venv):
    work = Path("/work-dir")  # not under /tmp: a /tmp/ left unbound shows
    run_here = [c for c in readme_venvs.commands_for(venv) if not c.text.startswith("pip install")]
    assert run_here or venv == "gcs"
    for command in run_here:
        argv = readme_venvs.bind(command.text, work, 40000)
        assert not [a for a in argv if UNBOUND.search(a)], (command.text, argv)
        for flag in ("--workers", "--processes"):
            assert flag not in argv or int(argv[argv.index(flag) + 1]) <= 2, argv
        for arg in argv[1:]:
            if "/" in arg and not arg.startswith((f"{work}/", "127.0.0.1:", "s3://my-bucket/")):
                assert (REPO / arg).exists(), (command.text, arg)


def test_every_ventilator_run_on_one_machine_starts_its_workers():
    """Without --workers the ventilator waits for workers started elsewhere: on one machine, forever."""
    one_machine = [c for venv in readme_venvs.VENVS for c in readme_venvs.commands_for(venv)
                   if c.text.startswith("python -m ventilator ") and c.section != "Running on a fleet"
                   and "--data s3://" not in c.text]  # S3 at a fleet's scale: run here with --workers 2 added
    assert len(one_machine) >= 10
    assert [c.text for c in one_machine if "--workers" not in c.text] == []


def test_what_is_not_run_here_names_what_covers_it():
    elsewhere = {key: where for key, where in readme_venvs.COVERAGE.items()
                 if isinstance(where, readme_venvs.Elsewhere)}
    assert {section for section, _ in elsewhere} == {"Install", "Running on a fleet", "Development"}
    for (_, text), where in elsewhere.items():
        named = re.findall(r"(?:tests|scripts|\.ci)/[\w./-]+", where.by)
        assert named and all((REPO / path).exists() for path in named), (text, where)
        if text.startswith(("python -m ventilator", "python -m worker", "python -m loader", "mlm-")):
            assert "s3://" in text or "gs://" in text, f"a role not run here must need a cloud: {text}"


def test_ci_runs_the_step_before_the_suite():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    (step,) = [i for i, line in enumerate(ci) if re.fullmatch(r"timeout \d+ bash scripts/readme-venvs\.sh", line)]
    assert step < len(ci) - 1 and ci[-1] == "python -m pytest"
    script = (REPO / "scripts" / "readme-venvs.sh").read_text()
    assert "python -m venv " in script and "--system-site-packages" not in script and "git clone" in script
    assert not Path(REPO / "tests" / "e2e" / "test_fresh_install.py").exists(), "moved to scripts/readme-venvs.sh"
