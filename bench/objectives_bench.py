"""The objectives' worker CPU, and google-research/electra's own script on
the same documents when a checkout of it is at hand.

The reference is not part of this repository: ``MLM_BENCH_ELECTRA_DIR``
names a checkout of github.com/google-research/electra (its
build_pretraining_dataset.py needs TensorFlow, which the tests install).
It is fed the very documents the worker reads, one line per WikiExtractor
paragraph line and a blank line between documents (its input format), and
its CPU is measured as a child process's; the CPU of a run on an empty file
(TensorFlow's import, its 1000 output writers) is subtracted.
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


def _child_cpu(command: list[str], cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(cwd)})
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
