"""Every README command a single machine can run, run after its install line in a fresh venv (scripts/readme-venvs.sh,
a step of .ci/run): the venvs have none of this machine's packages, and the project comes from a fresh ``git clone``
installed with the README's own line, so the compiled kernels are the ones ``pip install .`` built.

:data:`COVERAGE` classifies every command of every ```bash block of the README: run here (in which venv, with which
of its placeholders bound to what), or not run here and what covers it instead (a cloud or a cluster: the suite's
emulators; the readers' venv; CI's own steps).  tests/e2e/test_readme_venvs.py fails on a README command it does
not classify, so a new one is run or placed.

- ``python -m tests.e2e.readme_venvs install-lines VENV`` prints the README lines that make a venv, for the script
  to run as written;
- ``python -m tests.e2e.readme_venvs check VENV WORK`` (that venv's python, cwd the clone) runs the commands the
  table gives that venv, with inputs made in ``WORK``, and checks each output is what its section says.

Only the standard library is imported at the top: ``install-lines`` runs before the venv has anything.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.readme_commands import (
    MODERNBERT,
    REPO,
    Command,
    check_modernbert_run,
    free_ports,
    modernbert_install_commands,
    python_blocks,
    readme_commands,
    readme_section,
    run_modernbert_section,
    ventilator_sockets,
)


@dataclass(frozen=True)
class Here:
    """Run by this module, in ``venv`` ("base": the README's ``pip install .``; "report" and "gcs": that venv after
    the extra's line; "trainer": a venv of the ModernBERT section's install line); ``how`` binds its placeholders."""

    venv: str
    how: str = "as written"


@dataclass(frozen=True)
class Elsewhere:
    """Not run here: ``by`` runs it or what it does (a CI step, a suite test), ``why`` says why not here."""

    by: str
    why: str


#: Every README bash command, by (section, command as written): where it runs.
COVERAGE: dict[tuple[str, str], Here | Elsewhere] = {
    ("Install", "pip install ."): Here("base", "in a fresh clone, a venv without system site-packages"),
    ("Install", "pip install '.[report]'"): Here("report", "into the base venv"),
    ("Install", "pip install '.[gcs]'"): Here("gcs", "into the base venv; gs:// itself: tests/e2e/test_gcs.py"),
    ("Install", "pip install '.[readers]'"): Elsewhere("scripts/readers-venv.sh", "a ~6 GB venv of its own"),
    ("Quick start (one machine)", "pip install ."): Here("base", "the Install block's line, the same venv"),
    ("Quick start (one machine)", "mlm-train-vocab --data examples/corpus --output /tmp/vocab.txt --vocab-size 2000"):
        Here("base", "/tmp/ is the work directory"),
    ("Quick start (one machine)",
     "python -m ventilator --data examples/corpus --output /tmp/mlm-out --vocab-file /tmp/vocab.txt --workers 2"):
        Here("base", "/tmp/ is the work directory; free ports"),
    ("Recipes: `--objective`",
     "python -m ventilator --data corpus/ --output out-bert/ --vocab-file vocab.txt --workers 8"):
        Here("base", "corpus/ = examples/corpus, vocab.txt = the quick start's, --workers 2"),
    ("Recipes: `--objective`", "python -m ventilator --data corpus/ --output out-albert/ --tokenizer spiece.model "
                               "--objective albert --workers 8"):
        Here("base", "spiece.model = mlm-train-vocab --model sentencepiece on the corpus, --workers 2"),
    ("Recipes: `--objective`", "python -m ventilator --data corpus/ --output out-electra/ --vocab-file vocab.txt "
                               "--objective electra --workers 8"): Here("base", "--workers 2"),
    ("Recipes: `--objective`", "python -m ventilator --data corpus/ --output out-roberta/ --tokenizer roberta/ "
                               "--objective roberta --masking none --workers 8"):
        Here("base", "roberta/ = a model directory: mlm-train-vocab --model bpe's tokenizer.json and roberta-base's "
                     "tokenizer_config.json, --workers 2"),
    ("Recipes: `--objective`", "python -m ventilator --data corpus/ --output out-mosaic/ --vocab-file vocab.txt "
                               "--objective roberta --masking static --masked-lm-prob 0.3 --max-seq-length 128 "
                               "--dupe-factor 10 --workers 8"): Here("base", "--workers 2"),
    ("Tokenizers", "python -m ventilator --data zhwiki-extracted --output out-zh --vocab-file chinese-vocab.txt "
                   "--word-segmenter jieba --objective roberta --masking none --output-format parquet --chinese-ref "
                   "--workers 2"):
        Here("base", "zhwiki-extracted = WikiExtractor documents of tests/data/cjk's Chinese texts, "
                     "chinese-vocab.txt = mlm-train-vocab on them"),
    ("Input formats and the held-out split",
     "python -m ventilator --data s3://my-bucket/fineweb-edu/data/CC-MAIN-2024-10 --output "
     "s3://my-bucket/bert-128/fineweb-edu --vocab-file vocab.txt --text-column text --id-column id "
     "--holdout-fraction 0.001"):
        Here("base", "a real S3 store: a one-node Ceph radosgw (scripts/s3-server.sh; CI installs it) whose bucket "
                     "holds examples/corpus as Parquet (text, id); boto3 finds its endpoint and keys by its own "
                     "variables (AWS_ENDPOINT_URL), as a user's does; --workers 2 added (a fleet's start elsewhere)"),
    ("Output formats", "python -m ventilator --data corpus/ --output out-pq/ --vocab-file vocab.txt "
                       "--output-format parquet --bin-size 64 --workers 8"): Here("base", "--workers 2"),
    ("Output formats", "python -m ventilator --data corpus/ --output out-mg/ --vocab-file vocab.txt "
                       "--objective tokens --output-format megatron --workers 8"): Here("base", "--workers 2"),
    ("Output formats", "python -m ventilator --data corpus/ --output out-mds/ --vocab-file vocab.txt "
                       "--objective tokens --max-seq-length 1024 --output-format mds --workers 8"):
        Here("base", "--workers 2; read back by streaming: scripts/readers-venv.sh"),
    ("Output formats", "python -m ventilator --data corpus/ --output out-ld/ --vocab-file vocab.txt "
                       "--objective tokens --max-seq-length 1024 --output-format litdata --workers 8"):
        Here("base", "--workers 2; read back by litdata: scripts/readers-venv.sh"),
    ("Feeding trainers: the loader",
     "python -m loader --data /tmp/mlm-out --port 5560 --batch-size 256 [--dynamic-masking --vocab-file vocab.txt]"):
        Here("base", "the quick start's output, a free port, the optional part given; the section's LoaderClient "
                     "snippet reads it"),
    (MODERNBERT, "pip install torch==2.13.0"): Here("trainer", "a fresh venv of its own"),
    (MODERNBERT, "pip install -e '.[trainer]' torch==2.13.0"): Here("trainer", "in a fresh clone"),
    (MODERNBERT, "python -m common.tokenization.training --data examples/corpus --model bpe --vocab-size 2000 "
                 "--output /tmp/mb/tokenizer.json"): Here("trainer", "/tmp/mb/ is the work directory"),
    (MODERNBERT, "python -m ventilator --data examples/corpus --output /tmp/mb/out --tokenizer /tmp/mb/tokenizer.json "
                 "--objective tokens --max-seq-length 8192 --output-format mds --workers 2"):
        Here("trainer", "free ports"),
    (MODERNBERT, "python -m loader --data /tmp/mb/out --port 5560 --batch-tokens 8192 --batch-layout flat "
                 "--dynamic-masking --masked-lm-prob 0.3 --tokenizer /tmp/mb/tokenizer.json"):
        Here("trainer", "a free port"),
    (MODERNBERT, "python examples/train_tiny_modernbert.py --loader 127.0.0.1:5560 --tokenizer /tmp/mb/tokenizer.json "
                 "--steps 20"): Here("trainer", "the loader's port"),
    ("Looking at the data: `mlm-report`", "mlm-report out/"): Here("report", "out/ = the quick start's output"),
    ("Running on a fleet", "python -m ventilator --data s3://corpus/wiki --output s3://bucket/bert-128 "
                           "--vocab-file vocab.txt --vport 5557"):
        Here("base", "local paths for s3:// (examples/corpus, an output directory), a free --vport, "
                     "and --curve-dir keys/ as the section's Encryption says (every role)"),
    ("Running on a fleet", "python -m worker --ventilator VENTILATOR_HOST:5557 --processes 16"):
        Here("base", "127.0.0.1 and the ventilator's port, --processes 2, --curve-dir keys/"),
    ("Running on a fleet", "sbatch --nodes=8 deploy/slurm/mlm-pipeline.sbatch --data /shared/corpus "
                           "--output /shared/out --vocab-file /shared/vocab.txt"):
        Elsewhere("tests/slurm/test_slurm_job.py", "a Slurm cluster: the suite's single-host Slurm"),
    ("Running on a fleet", "sbatch --nodes=4 --wrap \"python -m ventilator --launcher slurm --workers 16 "
                           "--data /shared/corpus --output /shared/out --vocab-file /shared/vocab.txt\""):
        Elsewhere("tests/slurm/test_slurm_launcher.py", "a Slurm cluster: the suite's single-host Slurm"),
    ("Running on a fleet", "kubectl apply -k deploy/kubernetes/overlays/example"):
        Elsewhere("tests/kubernetes/test_manifests.py", "a Kubernetes cluster: validated offline"),
    ("Running on a fleet", "mlm-keys keys/"): Here("base", "keys/ in the work directory"),
    ("Running on a fleet", "python -m worker --ventilator HOST:5557 --curve-dir keys/"):
        Here("base", "127.0.0.1 and the ventilator's port"),
    ("Development", "pip install -e '.[test]' -r tests/fleet/requirements.txt"): Elsewhere(".ci/run", "CI's setup"),
    ("Development", "python setup.py build_ext --inplace -q"):
        Elsewhere(".ci/run (its pip install -e builds in place)", "a development checkout's step"),
    ("Development", "bash scripts/lint.sh"): Elsewhere(".ci/run", "CI's own step"),
    ("Development", 'python -m pytest -m "not slow"'): Elsewhere(".ci/run (python -m pytest, a superset)",
                                                                "CI's own step"),
    ("Development", "python -m bench.guard"): Elsewhere(".ci/run", "CI's own step"),
    ("Development", "python -m pytest"): Elsewhere(".ci/run", "CI's own step, its last"),
    ("Development", "bash scripts/numpy-only.sh"): Elsewhere(".ci/run", "CI's own step"),
    ("Development", "bash scripts/fleet-installs.sh"): Elsewhere(".ci/run", "CI's own step"),
    ("Development", "bash scripts/readme-venvs.sh"): Elsewhere(".ci/run", "CI's own step: this module's"),
}

STARTED = time.monotonic()
VENVS = ("base", "report", "gcs", "trainer")


def classify(command: Command) -> Here | Elsewhere:
    return COVERAGE[(command.section, command.text)]


def unclassified(found: list[Command]) -> list[Command]:
    """The commands of ``found`` (the README's) that :data:`COVERAGE` does not place."""
    return [c for c in found if (c.section, c.text) not in COVERAGE]


def commands_for(venv: str) -> list[Command]:
    """The README's commands this module runs in ``venv``, in README order."""
    found = []
    for command in readme_commands():
        where = COVERAGE.get((command.section, command.text))
        if isinstance(where, Here) and where.venv == venv:
            found.append(command)
    return found


def install_lines(venv: str) -> list[str]:
    """The README lines that make ``venv``: the Install block's for base and the extras, the ModernBERT
    section's for the trainer."""
    if venv == "trainer":
        return modernbert_install_commands()
    (line,) = [c.text for c in commands_for(venv) if c.section == "Install"]
    return [line]


# ---- placeholders ------------------------------------------------------------------------------------------------

#: README placeholders (whole arguments) and what they are here; ``{work}`` is the work directory, a path without
#: it is the clone's (the commands run with the clone as cwd).
PLACEHOLDERS = {
    "corpus/": "examples/corpus",
    "vocab.txt": "{work}/vocab.txt",
    "spiece.model": "{work}/spiece.model",
    "roberta/": "{work}/roberta",
    "zhwiki-extracted": "{work}/zhwiki-extracted",
    "chinese-vocab.txt": "{work}/chinese-vocab.txt",
    "keys/": "{work}/keys",
    "out/": "{work}/mlm-out",
    "s3://corpus/wiki": "examples/corpus",
    "s3://bucket/bert-128": "{work}/out-fleet",
}
#: A machine here has 2 cores: the README's fleet-sized process counts, and what they become.
PROCESS_COUNTS = {("--workers", "8"): "2", ("--processes", "16"): "2"}


def bind(text: str, work: Path, port: int | None = None) -> list[str]:
    """A README command's argv with its placeholders bound: ``/tmp/`` and ``out-*`` under ``work``, ``HOST:5557``
    and ``--vport 5557`` / ``--port 5560`` on ``port``, process counts for 2 cores, ``[optional parts]`` given,
    ``python`` and ``mlm-*`` this venv's."""
    argv = shlex.split(re.sub(r"\[(--[^]]*)\]", r"\1", text))
    out: list[str] = []
    for arg in argv:
        previous = out[-1] if out else ""
        if arg in PLACEHOLDERS:
            arg = PLACEHOLDERS[arg].format(work=work)
        elif arg.startswith("/tmp/"):
            arg = f"{work}/{arg.removeprefix('/tmp/')}"
        elif arg.startswith("out-"):
            arg = f"{work}/{arg.rstrip('/')}"
        elif (previous, arg) in PROCESS_COUNTS:
            arg = PROCESS_COUNTS[(previous, arg)]
        elif port is not None and (arg.endswith("HOST:5557") or arg == "127.0.0.1:5560"):
            arg = f"127.0.0.1:{port}"
        elif port is not None and (previous, arg) in (("--vport", "5557"), ("--port", "5560")):
            arg = str(port)
        out.append(arg)
    if out[0] == "python":
        out[0] = sys.executable
    elif out[0].startswith("mlm-"):
        out[0] = str(Path(sys.executable).parent / out[0])
    return out


def environment() -> dict[str, str]:
    """This process's environment as a new user's: no MLM_* setting, no PYTHONPATH."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MLM_") and k != "PYTHONPATH"}


def sh(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=environment())
    assert result.returncode == 0, (shlex.join(argv), result.stdout[-2000:], result.stderr[-3000:])
    return result


class Runs:
    """The commands of one venv as they are run: :meth:`done` at the end says none was left out."""

    def __init__(self, venv: str, work: Path) -> None:
        self.venv, self.work = venv, work
        self.ran: set[tuple[str, str]] = set()

    def argv(self, command: Command, port: int | None = None) -> list[str]:
        where = classify(command)
        assert isinstance(where, Here) and where.venv == self.venv, (command, where)
        self.ran.add((command.section, command.text))
        return bind(command.text, self.work, port)

    def section(self, title: str) -> list[Command]:
        return [c for c in commands_for(self.venv) if c.section == title]

    def done(self) -> None:
        left = [c.text for c in commands_for(self.venv) if (c.section, c.text) not in self.ran]
        assert not left, f"{self.venv}: README commands classified here and not run: {left}"


# ---- what the outputs must be --------------------------------------------------------------------------------------

def output_info(output: Path) -> tuple[dict, dict]:
    return (json.loads((output / "dataset_info.json").read_text()), json.loads((output / "summary.json").read_text()))


def verify(output: Path) -> None:
    """``mlm-verify OUT``: every shard against the manifest, the job finished."""
    sh([str(Path(sys.executable).parent / "mlm-verify"), str(output)])


#: Per output (its README name): objective, format, and feature names it must and must not have.
EXPECTED = {
    "mlm-out": ("bert", "tfrecord", {"masked_lm_positions", "next_sentence_labels"}, set()),
    "out-bert": ("bert", "tfrecord", {"masked_lm_positions", "next_sentence_labels"}, set()),
    "out-albert": ("albert", "tfrecord", {"masked_lm_positions", "next_sentence_labels", "token_boundary"}, set()),
    "out-electra": ("electra", "tfrecord", {"input_ids", "input_mask", "segment_ids"},
                    {"masked_lm_positions", "next_sentence_labels"}),
    "out-roberta": ("roberta", "tfrecord", {"input_ids"}, {"masked_lm_positions", "next_sentence_labels"}),
    "out-mosaic": ("roberta", "tfrecord", {"masked_lm_positions", "masked_lm_ids"}, {"next_sentence_labels"}),
    "out-zh": ("roberta", "parquet", {"input_ids", "chinese_ref"}, {"masked_lm_positions"}),
    "out-pq": ("bert", "parquet", {"masked_lm_positions", "next_sentence_labels"}, set()),
    "out-mg": ("tokens", "megatron", {"input_ids"}, set()),
    "out-mds": ("tokens", "mds", {"input_ids"}, set()),
    "out-ld": ("tokens", "litdata", {"input_ids"}, set()),
    "out-fleet": ("bert", "tfrecord", {"masked_lm_positions", "next_sentence_labels"}, set()),
    "fineweb-edu": ("bert", "tfrecord", {"masked_lm_positions", "next_sentence_labels"}, set()),
}


#: The tokenizer family each output's --tokenizer / --vocab-file gives (WordPiece where not named).
TOKENIZER_MODELS = {"out-albert": "Unigram", "out-roberta": "BPE"}
#: The objective's flags a command may give, checked against what the output records.
OBJECTIVE_FLAGS = ("--masking", "--masked-lm-prob", "--max-seq-length", "--dupe-factor")


def check_output(name: str, output: Path, argv: list[str] | None = None) -> dict:
    """The output is complete, passes mlm-verify, and is the objective, settings, tokenizer and format its command
    asks for, with the records its format's readers look for; its summary, for more checks."""
    verify(output)
    info, summary = output_info(output)
    objective, fmt, has, lacks = EXPECTED[name]
    assert summary["complete"] and summary["records"] > 0 and not summary["quarantined"], (name, summary)
    assert summary["kernels"] == {"compiled": summary["tasks"]}, (name, summary["kernels"])
    assert (info["objective"]["name"], info["format"]) == (objective, fmt), (name, info["objective"], info["format"])
    assert info["tokenizer"]["model"] == TOKENIZER_MODELS.get(name, "WordPiece"), (name, info["tokenizer"]["model"])
    for flag in OBJECTIVE_FLAGS:
        if argv and flag in argv:
            given, recorded = argv[argv.index(flag) + 1], info["objective"][flag[2:].replace("-", "_")]
            assert str(recorded) == given, (name, flag, given, recorded)
    names = set(info["feature_names"])
    assert has <= names and not lacks & names, (name, sorted(names))
    files = sorted(p.relative_to(output).as_posix() for p in output.rglob("*") if p.is_file())
    if fmt == "tfrecord":
        assert [f for f in files if f.endswith(".tfrecord")], (name, files)
    elif fmt == "parquet":
        import pyarrow.dataset

        table = pyarrow.dataset.dataset(output / "train", format="parquet").to_table()
        assert table.num_rows == summary["records"] and has <= set(table.column_names), (name, table.schema)
        if "chinese_ref" in has:  # whole-word refs inside each row, and the vocabulary knows the text
            rows = table.to_pylist()
            assert sum(bool(r["chinese_ref"]) for r in rows) > len(rows) // 2, (name, rows[:2])
            assert all(0 < i < len(r["input_ids"]) for r in rows for i in r["chinese_ref"]), name
            unk = info["tokenizer"]["special_tokens"]["unk"]["id"]
            ids = [i for r in rows for i in r["input_ids"]]
            assert ids.count(unk) < 0.01 * len(ids), (name, ids.count(unk), len(ids))
    elif fmt == "megatron":
        assert [f for f in files if f.endswith(".bin")] and [f for f in files if f.endswith(".idx")], (name, files)
    elif fmt == "mds":
        assert "train/index.json" in files, (name, files)
    elif fmt == "litdata":
        assert [f for f in files if f.endswith("index.json")], (name, files)
    print(f"  {name}: {summary['records']} records, {fmt}, mlm-verify passes ({time.monotonic() - STARTED:.0f} s)",
          flush=True)
    return summary


def run_ventilator(runs: Runs, command: Command, extra: list[str] | None = None) -> Path:
    argv = runs.argv(command) + ventilator_sockets(runs.work / "state") + (extra or [])
    sh(argv)
    output = Path(argv[argv.index("--output") + 1])
    check_output(output.name, output, argv)
    return output


# ---- inputs --------------------------------------------------------------------------------------------------------

def train_vocab(work: Path, data: str, output: Path, *args: str) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    sh([str(Path(sys.executable).parent / "mlm-train-vocab"), "--data", data, "--output", str(output), *args])


#: roberta-base's tokenizer_config.json, the special tokens by role (the ids are the trained tokenizer's own).
ROBERTA_CONFIG = {"tokenizer_class": "RobertaTokenizer", "model_max_length": 512, "bos_token": "<s>",
                  "eos_token": "</s>", "cls_token": "<s>", "sep_token": "</s>", "unk_token": "<unk>",
                  "pad_token": "<pad>", "mask_token": "<mask>", "add_prefix_space": False}


def chinese_corpus(directory: Path) -> None:
    """WikiExtractor documents of tests/data/cjk's Chinese texts (their sources and licenses: its README.md):
    Kong Yiji, ten paragraphs a document, and the GSDSimp sentences (spaces removed), twenty a document."""
    cjk = REPO / "tests" / "data" / "cjk"
    story = [p for p in (cjk / "kong_yiji.txt").read_text(encoding="utf-8").splitlines() if p.strip()]
    sentences = [s.replace(" ", "") for s in (cjk / "gsdsimp_test_segmented.txt").read_text(encoding="utf-8")
                 .splitlines() if s.strip()]
    bodies = ["\n".join(story[i:i + 10]) for i in range(0, len(story), 10)]
    bodies += ["".join(sentences[i:i + 20]) for i in range(0, len(sentences), 20)]
    directory.mkdir(parents=True)
    (directory / "wiki_00").write_text("".join(f'<doc id="{i}" url="" title="zh {i}">\nzh {i}\n\n{body}\n</doc>\n'
                                               for i, body in enumerate(bodies)), encoding="utf-8")


def make_inputs(work: Path) -> None:
    """The README's placeholders made real with this venv's own mlm-train-vocab (vocab.txt: the quick start's)."""
    train_vocab(work, "examples/corpus", work / "spiece.model", "--model", "sentencepiece", "--vocab-size", "1000")
    train_vocab(work, "examples/corpus", work / "roberta" / "tokenizer.json", "--model", "bpe", "--vocab-size", "2000")
    (work / "roberta" / "tokenizer_config.json").write_text(json.dumps(ROBERTA_CONFIG))
    chinese_corpus(work / "zhwiki-extracted")
    train_vocab(work, str(work / "zhwiki-extracted"), work / "chinese-vocab.txt", "--vocab-size", "3000")


# ---- the checks, by venv ---------------------------------------------------------------------------------------------

#: Run by the venv's python: (this project's installed top-level names, {another distribution: the names it shares}).
TOP_LEVEL_NAMES = """
import importlib.metadata as metadata, json
own = set((metadata.distribution("mlm-pipeline").read_text("top_level.txt") or "").split())
clashing = {}
for dist in metadata.distributions():
    if dist.metadata["Name"] in (None, "mlm-pipeline"):
        continue
    tops = {path.parts[0] for path in dist.files or [] if len(path.parts) > 1}
    tops |= {path.parts[0].removesuffix(".py") for path in dist.files or [] if len(path.parts) == 1}
    if tops & own:
        clashing[dist.metadata["Name"]] = sorted(tops & own)
print(json.dumps([sorted(own), clashing]))
"""


def check_venv() -> None:
    """A venv of its own: none of the machine's site-packages."""
    assert sys.prefix != sys.base_prefix, "not in a venv"
    assert not [p for p in sys.path if p.startswith(sys.base_prefix) and "site-packages" in p], \
        "the venv sees the machine's site-packages"


def quick_start(runs: Runs) -> None:
    """The quick start's block as written, in bash, in the fresh clone (whose ``common/`` comes first on
    ``python -m``'s path and has no build): both workers run the kernels ``pip install .`` compiled."""
    assert not list((REPO / "common").glob(f"_kernels{sysconfig.get_config_var('EXT_SUFFIX')}")), "not a fresh clone"
    own, clashing = json.loads(sh([sys.executable, "-c", TOP_LEVEL_NAMES]).stdout)
    # the names docs/architecture.md lists (bench/ and tests/ not shipped); no other distribution ships one
    assert set(own) == {"mlm_pipeline", "common", "ventilator", "worker", "sink", "loader", "report"}, own
    assert clashing == {}, clashing
    lines = []
    for command in runs.section("Quick start (one machine)"):
        argv = runs.argv(command)
        if argv[:2] == ["pip", "install"]:
            continue  # the venv's install, run by scripts/readme-venvs.sh
        if argv[1:3] == ["-m", "ventilator"]:
            argv += ventilator_sockets()
        lines.append(shlex.join(argv))
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", " && \\\n  ".join(lines)], cwd=REPO,
                            env=environment(), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "not built here" not in result.stderr + result.stdout, result.stderr[-3000:]
    summary = check_output("mlm-out", runs.work / "mlm-out")
    assert summary["kernels"] == {"compiled": summary["tasks"]} and summary["tasks"] >= 2, summary


def loader(runs: Runs) -> None:
    """The loader command on the quick start's output, read by the section's own LoaderClient snippet."""
    (command,) = runs.section("Feeding trainers: the loader")
    port = free_ports(1)[0]
    argv = runs.argv(command, port) + ["--bind-host", "127.0.0.1"]
    assert "--dynamic-masking" in argv and str(runs.work / "vocab.txt") in argv, argv
    (snippet,) = python_blocks(readme_section("Feeding trainers: the loader"))
    assert '"loader-host:5560"' in snippet, snippet
    batches: list[dict] = []

    class Enough(Exception):
        pass

    def train_step(batch: dict) -> None:
        batches.append(batch)
        if len(batches) == 3:
            raise Enough

    server = subprocess.Popen(argv, cwd=REPO, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        scope: dict[str, Any] = {"rank": 0, "world_size": 1, "saved_state": None, "train_step": train_step}
        try:
            exec(snippet.replace('"loader-host:5560"', f'"127.0.0.1:{port}"'), scope)
        except Enough:
            pass
    finally:
        server.terminate()
        log = server.communicate(timeout=30)[0]
    assert len(batches) == 3, log[-3000:]
    for batch in batches:
        assert {"input_ids", "attention_mask", "labels", "next_sentence_labels"} <= set(batch), sorted(batch)
        assert batch["input_ids"].shape == (256, 128), batch["input_ids"].shape
    assert scope["client"].state() is not None
    print(f"  loader: {len(batches)} batches of {sorted(batches[0])} to the README's LoaderClient", flush=True)


def fleet(runs: Runs) -> None:
    """mlm-keys, then the section's ventilator on local paths with --curve-dir keys/ and both its workers
    against it with the same keys: an encrypted fleet of one machine."""
    section = runs.section("Running on a fleet")
    (keys,) = [c for c in section if c.text.startswith("mlm-keys ")]
    (ventilator_command,) = [c for c in section if c.text.startswith("python -m ventilator ")]
    plain, encrypted = ([c for c in section if c.text.startswith("python -m worker ") and ("--curve-dir" in c.text)
                         == curve_flag] for curve_flag in (False, True))
    sh(runs.argv(keys))
    curve = runs.work / "keys"
    assert (curve / "server.key").is_file() and (curve / "client.key_secret").is_file(), sorted(curve.rglob("*"))
    vport, sink_port = free_ports(2)
    ventilator = runs.argv(ventilator_command, vport) + [
        "--curve-dir", str(curve), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1"]
    assert ventilator[ventilator.index("--vport") + 1] == str(vport)
    workers = [runs.argv(plain[0], vport) + ["--curve-dir", str(curve)], runs.argv(encrypted[0], vport)]
    assert all(f"127.0.0.1:{vport}" in w and str(curve) in w for w in workers), workers
    started = [subprocess.Popen(w, cwd=REPO, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True) for w in workers]
    try:
        sh(ventilator)
        for process in started:
            out = process.communicate(timeout=120)[0]
            assert process.returncode == 0, out[-3000:]
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.communicate()
    summary = check_output("out-fleet", runs.work / "out-fleet")
    by_worker = summary["this_run"]["kernels_by_worker"]
    assert len(by_worker) >= 1, summary["this_run"]


def wikiextractor_documents(root: Path) -> list[tuple[str, str]]:
    """(id, text) of every WikiExtractor document under ``root``: the lines after its title line."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
        for doc_id, body in re.findall(r'<doc id="([^"]*)"[^>]*>\n[^\n]*\n(.*?)</doc>', path.read_text(encoding="utf-8"),
                                       re.S):
            found.append((doc_id, body.strip("\n")))
    return found


def s3_input(runs: Runs) -> None:
    """The held-out split's command as written, against a real S3 store: a one-node Ceph radosgw started by
    scripts/s3-server.sh (CI installs it), its bucket holding examples/corpus as one Parquet file of ``text`` and
    ``id`` columns.  boto3 finds the endpoint and keys by its own variables (AWS_ENDPOINT_URL), as a user's does;
    a fleet's workers start elsewhere, so ``--workers 2`` is added.  The output, on S3, passes mlm-verify there and
    is checked as every other once copied down."""
    import boto3
    import pyarrow
    import pyarrow.parquet

    (command,) = runs.section("Input formats and the held-out split")
    state, (port,) = runs.work / "s3-server", free_ports(1)
    started = subprocess.run(["bash", "scripts/s3-server.sh", "start", str(state), str(port)], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert started.returncode == 0, ("scripts/s3-server.sh could not start radosgw", started.stderr[-3000:])
    try:
        exported = dict(re.findall(r"^export (\w+)=(\S*)$", started.stdout, re.M))
        env = {**environment(), **exported, "AWS_ENDPOINT_URL": exported["S3_ENDPOINT_URL"]}
        client = boto3.session.Session(aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                                       aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                                       region_name=env["AWS_DEFAULT_REGION"]).client(
                                           "s3", endpoint_url=env["AWS_ENDPOINT_URL"])
        argv = runs.argv(command) + ventilator_sockets(runs.work / "state-s3") + ["--workers", "2"]
        data, output = argv[argv.index("--data") + 1], argv[argv.index("--output") + 1]
        bucket, prefix = data.removeprefix("s3://").split("/", 1)
        documents = wikiextractor_documents(REPO / "examples" / "corpus")
        table = pyarrow.table({"id": [d for d, _ in documents], "text": [t for _, t in documents]})
        local = runs.work / "fineweb-edu.parquet"
        pyarrow.parquet.write_table(table, local, row_group_size=16)
        client.create_bucket(Bucket=bucket)
        client.upload_file(str(local), bucket, f"{prefix}/000_00000.parquet")
        ran = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert ran.returncode == 0, (shlex.join(argv), ran.stderr[-3000:])
        verified = subprocess.run([str(Path(sys.executable).parent / "mlm-verify"), output], cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=600)
        assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
        out_bucket, out_prefix = output.removeprefix("s3://").split("/", 1)
        copy = runs.work / "fineweb-edu"
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=out_bucket, Prefix=f"{out_prefix}/"):
            for item in page.get("Contents", []):
                target = copy / item["Key"].removeprefix(f"{out_prefix}/")
                target.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(out_bucket, item["Key"], str(target))
        summary = check_output("fineweb-edu", copy, argv)
        info, _ = output_info(copy)
        # every document read from S3 (one Parquet row each), on one side or the other, by the command's split
        assert summary["documents"] + summary["holdout"]["documents"] == len(documents), (summary, len(documents))
        assert info["holdout"]["fraction"] == 0.001 and info["input"]["uri"] == data, (info["holdout"], info["input"])
    finally:
        subprocess.run(["bash", "scripts/s3-server.sh", "stop", str(state)], cwd=REPO, capture_output=True,
                       timeout=120)


def check_base(work: Path) -> None:
    check_venv()
    runs = Runs("base", work)
    runs.argv(Command("Install", "pip install ."))  # run by scripts/readme-venvs.sh as written
    quick_start(runs)
    make_inputs(work)
    for title in ("Recipes: `--objective`", "Tokenizers", "Output formats"):
        for command in runs.section(title):
            run_ventilator(runs, command)
    loader(runs)
    fleet(runs)
    s3_input(runs)
    runs.done()


def check_report(work: Path) -> None:
    """``mlm-report out/`` on the quick start's output, after the README's report line in the same venv."""
    check_venv()
    runs = Runs("report", work)
    runs.argv(Command("Install", "pip install '.[report]'"))
    (command,) = runs.section("Looking at the data: `mlm-report`")
    sh(runs.argv(command))
    report = work / "mlm-out" / "report"
    page = (report / "index.html").read_text(encoding="utf-8")
    data = json.loads((report / "report.json").read_text())
    _, summary = output_info(work / "mlm-out")
    assert data["ok"] and not data["problems"], data["problems"]
    assert data["sides"]["train"]["sequences"] == summary["records"], (data["sides"], summary["records"])
    assert "<svg" in page and "<script" not in page, "a self-contained page with its plots"
    print(f"  mlm-report: {len(page)} bytes of page with its plots; report.json: {summary['records']} sequences, "
          "no problem", flush=True)
    runs.done()


def check_gcs(work: Path) -> None:
    """After the README's gcs line: Google's client imports, and the project's gs:// storage with it."""
    check_venv()
    runs = Runs("gcs", work)
    runs.argv(Command("Install", "pip install '.[gcs]'"))
    sh([sys.executable, "-c", "import google.cloud.storage, common.storage.gcs"])
    runs.done()


def check_trainer(work: Path) -> None:
    """The ModernBERT section's commands with this venv's python, after its install line: a tiny ModernBERT
    trains from the loader's flat batches."""
    check_venv()
    runs = Runs("trainer", work)
    for text in modernbert_install_commands():
        runs.argv(Command(MODERNBERT, text))
    probe = sh([sys.executable, "-c", "import torch, transformers, accelerate, numpy; "
                "print(torch.__version__, transformers.__version__, numpy.__version__)"]).stdout.split()
    assert probe[0].startswith("2.13.0") and probe[1].startswith("5."), probe
    for command in runs.section(MODERNBERT):
        runs.argv(command)
    summary, server_log = run_modernbert_section(work, sys.executable)
    check_modernbert_run(summary, server_log)
    print(f"  ModernBERT section: torch {probe[0]}, transformers {probe[1]}; {summary}", flush=True)
    runs.done()


CHECKS = {"base": check_base, "report": check_report, "gcs": check_gcs, "trainer": check_trainer}


def main(argv: list[str]) -> None:
    if len(argv) == 2 and argv[0] == "install-lines" and argv[1] in VENVS:
        print("\n".join(install_lines(argv[1])))
    elif len(argv) == 3 and argv[0] == "check" and argv[1] in VENVS:
        CHECKS[argv[1]](Path(argv[2]).resolve())
    else:
        raise SystemExit(f"usage: python -m tests.e2e.readme_venvs install-lines|check {'|'.join(VENVS)} [WORK]")


if __name__ == "__main__":
    main(sys.argv[1:])
