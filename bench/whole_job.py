"""The whole job against each recipe's own reference script, as issue #33 measures it: BERT against
google-research/bert's create_pretraining_data.py, ALBERT against google-research/albert's, ELECTRA against
google-research/electra's build_pretraining_dataset.py.

Both sides run as child processes and are charged the CPU of every process they start (the job's
``python -m ventilator --workers 1`` waits for its sink and worker, so ``RUSAGE_CHILDREN`` holds them all):
marginal CPU-seconds per input MB, a one-document run's CPU subtracted, the two sides' runs alternated within
each round, the least of each run over the rounds kept (other work on the machine only adds); bench/run.py's
``job`` section runs the rounds.

The references are not part of this repository: ``MLM_BENCH_BERT_DIR``, ``MLM_BENCH_ALBERT_DIR`` and
``MLM_BENCH_ELECTRA_DIR`` name checkouts of github.com/google-research/bert, /albert and /electra.  BERT's
script is run as published, under TensorFlow's ``compat.v1`` (the script's ``import tensorflow as tf`` is given
``tensorflow.compat.v1``: it was written for TensorFlow 1), fed the same documents the job reads, as the worker
splits them into sentences: one sentence per line, a blank line between documents (the script's input format).
ALBERT's is run the same way as bench/objectives_bench.py runs it (its own ``compat.v1`` import, the BERT
vocabulary, an empty ``tensorflow_hub`` stand-in), on the same sentences; ELECTRA's on the documents' lines, the
unit it and ``--objective electra`` both take.  Without a checkout the bench uses the figures recorded here
(docs/benchmarks.md has the command that measured them).

``job_processes`` also splits a run's CPU by process (psutil, sampled every 20 ms): on one document, the fixed
cost every job pays; the difference to a full run, each role's marginal cost.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.procs import REPO, Watcher, free_ports

#: create_pretraining_data.py of google-research/bert (TensorFlow 2.21, compat.v1), seq 128, marginal CPU-s
#: per input MB on this kind of machine: used when no checkout is given (docs/benchmarks.md, "Whole job").
BERT_SCRIPT_MARGINAL_CPU_S_PER_MB = {10: 10.90, 1: 2.26}
#: The same for google-research/albert's create_pretraining_data.py at seq 128 (its other defaults: whole-word
#: 3-grams, sentence order), and google-research/electra's build_pretraining_dataset.py (seq 128, no dupe factor).
ALBERT_SCRIPT_MARGINAL_CPU_S_PER_MB = {10: 28.9, 1: 4.2}
ELECTRA_SCRIPT_MARGINAL_CPU_S_PER_MB = 1.70


@dataclass(frozen=True)
class Recipe:
    """One recipe of the job section: the job's flags beyond BERT's command, its dupe factors (None: the recipe
    has none), what its reference script is fed (``sentences`` as the worker splits them, or ``lines``), and the
    copies of the sample its d=10 runs read."""
    name: str
    flags: tuple[str, ...]
    dupes: tuple[int | None, ...]
    reference_input: str
    copies_at_d10: int = 3

    def copies(self, dupe: int | None) -> int:
        """Copies of the sample in the corpus a dupe factor runs on (None: the recipe has none).  A side's marginal
        work must be large beside the swing of the one-document run subtracted from it (±0.4 CPU-s between runs
        on this 2-vCPU host).  At d=1, and for ELECTRA, a job costs ~0.1 CPU-s per MB: 10 copies (20.7 MB) give it
        ~2 CPU-s.  At d=10 BERT's job costs ~0.2 CPU-s per MB: on 3 copies (6.2 MB, ~1.3 CPU-s) one window's d=10
        marginal came out below its d=1, so BERT's d=10 reads 10 copies too (~4 CPU-s).  ALBERT's d=10 job (~0.44
        CPU-s per MB, ~2.7 CPU-s on 3 copies) keeps 3, which keeps its reference's run (~30 CPU-s per MB) to
        minutes."""
        return self.copies_at_d10 if dupe is not None and dupe > 1 else 10

    def reference_rounds(self, dupe: int | None) -> int:
        """Runs of the reference per window: 2, or 1 for a run of ten copies at d=10 (~5-7 minutes of BERT's
        script: a run that long spans the host's swings, and its fixed cost, ~4 CPU-s, is ~1% of it)."""
        return 1 if dupe is not None and dupe > 1 and self.copies(dupe) >= 10 else 2


RECIPES = (Recipe("bert", (), (10, 1), "sentences", copies_at_d10=10),
           Recipe("albert", ("--objective", "albert"), (10, 1), "sentences"),
           Recipe("electra", ("--objective", "electra"), (None,), "lines"))

#: The job's processes by role (bench.procs.role_of), and the key of the exact total of them all.
ROLES = ("ventilator", "sink", "worker")
ALL_PROCESSES = "all processes (exact)"

#: Runs the reference's script with ``tensorflow`` bound to ``tensorflow.compat.v1``; argv[1] is the script.
_COMPAT_V1_RUNNER = ("import runpy, sys; import tensorflow.compat.v1 as tf; sys.modules['tensorflow'] = tf; "
                     "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def bert_checkout() -> Path | None:
    directory = os.environ.get("MLM_BENCH_BERT_DIR", "")
    if directory and (Path(directory) / "create_pretraining_data.py").is_file():
        return Path(directory)
    return None


def children_cpu(command: list, cwd: Path, env: dict | None = None) -> float:
    """CPU seconds (user + system) of ``command`` and every process it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command[:4]))} ...: exit {result.returncode}\n"
                           f"{(result.stdout + result.stderr)[-3000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def job_command(data: Path, output: Path, vocab: str, dupe_factor: int | None, flags: tuple[str, ...] = ()) -> list:
    """The one-machine command a user runs (BERT unless ``flags`` say otherwise; seq 128, TFRecord), on loopback
    ports of its own.  ``dupe_factor`` None: the objective takes none (ELECTRA)."""
    vport, sink_port = free_ports(2)
    dupe = ["--dupe-factor", dupe_factor] if dupe_factor is not None else []
    return [sys.executable, "-m", "ventilator", "--data", data, "--output", output, "--vocab-file", vocab,
            "--workers", "1", *flags, *dupe, "--max-seq-length", "128", "--vport", vport,
            "--sink-port", sink_port, "--bind-host", "127.0.0.1", "--state-dir", output.parent / "state",
            "--no-progress"]


def write_sentences(documents: list[list[str]], path: Path) -> None:
    """BERT's input format: one sentence per line, a blank line between documents."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for sentences in documents:
            for sentence in sentences:
                if sentence.strip():
                    out.write(sentence.strip() + "\n")
            out.write("\n")


def reference_cpu(checkout: Path, corpus: Path, work: Path, vocab: str, dupe_factor: int) -> float:
    work.mkdir(parents=True, exist_ok=True)
    try:
        cpu = children_cpu([sys.executable, "-c", _COMPAT_V1_RUNNER, checkout / "create_pretraining_data.py",
                             "--input_file", corpus, "--output_file", work / "out.tfrecord", "--vocab_file", vocab,
                             "--do_lower_case=True", "--max_seq_length", "128", "--max_predictions_per_seq", "20",
                             "--masked_lm_prob", "0.15", "--random_seed", "12345", "--dupe_factor", dupe_factor],
                            work, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(checkout),
                                       "CUDA_VISIBLE_DEVICES": ""})
        if not (work / "out.tfrecord").stat().st_size:
            raise RuntimeError("create_pretraining_data.py wrote no instances")
        return cpu
    finally:
        _remove(work)


def albert_reference_cpu(checkout: Path, corpus: Path, work: Path, vocab: str, dupe_factor: int) -> float:
    """google-research/albert's script on ``corpus`` (sentences), seq 128, its other defaults: CPU seconds."""
    from bench.objectives_bench import albert_command

    work.mkdir(parents=True, exist_ok=True)
    try:
        command, pythonpath = albert_command(checkout, work, corpus, work / "out.tfrecord", vocab, 128, dupe_factor)
        cpu = children_cpu(command, work, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": pythonpath,
                                               "CUDA_VISIBLE_DEVICES": ""})
        if not (work / "out.tfrecord").stat().st_size:
            raise RuntimeError("albert's create_pretraining_data.py wrote no instances")
        return cpu
    finally:
        _remove(work)


def electra_reference_cpu(checkout: Path, corpus: Path, work: Path, vocab: str) -> float:
    """google-research/electra's build_pretraining_dataset.py on the directory holding ``corpus`` (lines), seq
    128: CPU seconds."""
    work.mkdir(parents=True, exist_ok=True)
    try:
        corpus_dir = work / "corpus"
        corpus_dir.mkdir()
        (corpus_dir / "corpus.txt").symlink_to(corpus.resolve())
        cpu = children_cpu([sys.executable, "build_pretraining_dataset.py", "--corpus-dir", corpus_dir,
                            "--vocab-file", vocab, "--output-dir", work / "out", "--max-seq-length", "128"],
                           checkout, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(checkout),
                                          "CUDA_VISIBLE_DEVICES": ""})
        if not any(path.stat().st_size for path in (work / "out").iterdir()):
            raise RuntimeError("electra's build_pretraining_dataset.py wrote no examples")
        return cpu
    finally:
        _remove(work)


@dataclass(frozen=True)
class Marginal:
    """A side's CPU on the corpus and on its first document; marginal CPU-s per MB between them."""
    full: float
    one: float
    megabytes: float  # corpus MB minus the one document's

    @property
    def per_mb(self) -> float:
        return max(self.full - self.one, 1e-9) / self.megabytes


class _ExecWatcher(Watcher):
    """A Watcher that leaves a child alone until it has exec'd: between fork and exec a child has its parent's
    command line, and would be taken for the parent's role (the sink for the ventilator)."""

    def _track(self, pid: int, role: str | None) -> None:
        if role is None:
            try:
                process = psutil.Process(pid)
                if process.cmdline() == process.parent().cmdline():
                    return  # seen again at the next scan of the tree
            except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
                return
        super()._track(pid, role)


def job_processes(data: Path, work: Path, vocab: str, dupe_factor: int | None, flags: tuple[str, ...] = (),
                  tasks: list[TaskCpu] | None = None) -> dict[str, float]:
    """CPU seconds of each process of the job (by role; psutil, sampled every 20 ms), and the exact total.
    ``tasks``, if given, gets each task's own CPU as the worker measured it (the manifest's ``cpu_seconds``)."""
    work.mkdir(parents=True, exist_ok=True)
    command = [str(part) for part in job_command(data, work / "out", vocab, dupe_factor, flags)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        with _ExecWatcher(interval=0.02, tree_every=0.02) as watcher:
            process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       stdin=subprocess.DEVNULL)
            watcher.add(process.pid, "ventilator", tree=True)
            process.wait(timeout=900)
            time.sleep(0.05)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if process.returncode != 0:
            raise RuntimeError(f"one-document job: exit {process.returncode}")
        roles: dict[str, float] = {}
        for pid, watched in watcher.watched.items():
            roles[watched.role] = roles.get(watched.role, 0.0) + watcher.cpu_total(pid)
        roles[ALL_PROCESSES] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if tasks is not None:
            tasks.extend(task_cpu(work / "out" / "manifest.jsonl"))
        return roles
    finally:
        _remove(work)


@dataclass(frozen=True)
class TaskCpu:
    """One task of a job as its worker measured it: its input, and the CPU it took (the manifest's record)."""
    source: str
    bytes_in: int
    cpu_seconds: float

    @property
    def per_mb(self) -> float:
        return self.cpu_seconds / (self.bytes_in / 1e6)


def task_cpu(manifest: Path) -> list[TaskCpu]:
    """The tasks of a finished job's manifest, in the order they were acknowledged."""
    import json

    records = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    return [TaskCpu(str(r["source"]), int(r["bytes_in"]), float(r["cpu_seconds"]))
            for r in sorted(records, key=lambda r: r["at"])]


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
