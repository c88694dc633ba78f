"""The objectives' worker CPU, and the reference scripts on the same
documents when a checkout of them is at hand.

The references are not part of this repository:

* ``MLM_BENCH_ELECTRA_DIR`` names a checkout of
  github.com/google-research/electra (its build_pretraining_dataset.py needs
  TensorFlow, which the tests install).  It is fed the very documents the
  worker reads, one line per WikiExtractor paragraph line and a blank line
  between documents (its input format).
* ``MLM_BENCH_ALBERT_DIR`` names a checkout of
  github.com/google-research/albert.  Its create_pretraining_data.py runs
  as ``python -m albert.create_pretraining_data`` (it imports
  ``albert.tokenization``), with the BERT vocabulary (no SentencePiece
  model), on the worker's own sentences: one per line, a blank line between
  documents.  Its tokenization module imports ``tensorflow_hub`` for
  ``from_hub_module`` alone; an empty stand-in module is put on its path.

Each reference's CPU is measured as a child process's; the CPU of a run on
an empty file (TensorFlow's import, its output writers) is subtracted.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

#: build_pretraining_dataset.py (seq 128) on this kind of machine, CPU-s per input MB, start-up
#: subtracted: used when no checkout is given (docs/benchmarks.md has the command that measured it).
ELECTRA_SCRIPT_CPU_S_PER_MB = 0.91


#: create_pretraining_data.py of google-research/albert, CPU-s per input MB (start-up subtracted), measured here
#: (docs/benchmarks.md has the command): used when no checkout is given.
ALBERT_SCRIPT_CPU_S_PER_MB = {(128, 10): 17.65, (512, 40): 85.4}


def albert_checkout() -> Path | None:
    directory = os.environ.get("MLM_BENCH_ALBERT_DIR", "")
    if directory and (Path(directory) / "create_pretraining_data.py").is_file():
        return Path(directory)
    return None


def electra_checkout() -> Path | None:
    directory = os.environ.get("MLM_BENCH_ELECTRA_DIR", "")
    if directory and (Path(directory) / "build_pretraining_dataset.py").is_file():
        return Path(directory)
    return None


def write_reference_input(documents: list[list[str]], directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "corpus.txt", "w", encoding="utf-8") as out:
        for lines in documents:
            for line in lines:
                if line.strip():
                    out.write(line.strip() + "\n")
            out.write("\n")


def _child_cpu(command: list[str], cwd: Path, pythonpath: str | None = None) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": pythonpath or str(cwd)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def electra_reference_cpu(checkout: Path, documents: list[list[str]], vocab: Path, tmp: Path) -> float:
    """CPU seconds the reference spends on ``documents`` beyond its start-up."""
    write_reference_input(documents, tmp / "electra-in")
    write_reference_input([], tmp / "electra-empty")

    def run(corpus: Path, output: Path) -> float:
        return _child_cpu([sys.executable, "build_pretraining_dataset.py", "--corpus-dir", str(corpus),
                           "--vocab-file", str(vocab), "--output-dir", str(output), "--max-seq-length", "128"],
                          checkout)

    start_up = run(tmp / "electra-empty", tmp / "electra-out-empty")
    return max(run(tmp / "electra-in", tmp / "electra-out") - start_up, 1e-9)


def albert_command(checkout: Path, tmp: Path, corpus: Path, output: Path, vocab: Path | str, max_seq_length: int,
                   dupe_factor: int) -> tuple[list[str], str]:
    """The command running google-research/albert's script (``python -m albert.create_pretraining_data``: it
    imports ``albert.tokenization``), and the PYTHONPATH it needs: a directory in ``tmp`` holding ``albert`` (a
    link to the checkout) and the ``tensorflow_hub`` stand-in."""
    package_parent = tmp / "albert-path"
    package_parent.mkdir(parents=True, exist_ok=True)
    if not (package_parent / "albert").exists():
        (package_parent / "albert").symlink_to(checkout.resolve(), target_is_directory=True)
    (package_parent / "tensorflow_hub.py").write_text('"""Stand-in: only from_hub_module uses it."""\n')
    return ([sys.executable, "-m", "albert.create_pretraining_data", "--input_file", str(corpus),
             "--output_file", str(output), "--vocab_file", str(vocab), "--max_seq_length", str(max_seq_length),
             "--dupe_factor", str(dupe_factor)], str(package_parent))


def albert_reference_cpu(checkout: Path, sentences: list[list[str]], vocab: Path, tmp: Path, max_seq_length: int,
                         dupe_factor: int) -> float:
    """CPU seconds google-research/albert's script spends on these documents
    (each a list of sentences) beyond its start-up."""
    write_reference_input(sentences, tmp / "albert-in")
    write_reference_input([], tmp / "albert-empty")

    def run(corpus: Path) -> float:
        command, pythonpath = albert_command(checkout, tmp, corpus / "corpus.txt", tmp / "albert.tfrecord", vocab,
                                             max_seq_length, dupe_factor)
        return _child_cpu(command, tmp, pythonpath=pythonpath)

    start_up = run(tmp / "albert-empty")
    return max(run(tmp / "albert-in") - start_up, 1e-9)
