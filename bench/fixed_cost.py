"""``python -m bench.fixed_cost [--runs 3] [--dupe-factor 1]``: where a one-document job's CPU goes, process by
process (issue #33: the fixed cost every job, and every worker that starts, pays).

Runs ``python -m ventilator --workers 1`` on the first document of ../shared's corpus with every process it starts
instrumented by a ``sitecustomize`` module this puts first on PYTHONPATH (children inherit it): CPU time of the
calling thread (``time.thread_time``) around each outermost ``import`` statement and around a few named functions,
each charged its own time (a named function inside another is taken out of the outer one; an import inside a
named function is that function's: building the tokenizer imports ``tokenizers``), and the process's whole CPU
(``time.process_time``, interpreter start-up included) at exit.  Headings: interpreter start (CPU before the
``sitecustomize`` import); imports; variant discovery (``common.job.params.discover``: importing an axis's modules and
scanning the installed distributions' entry points); the entry-point scan itself; building the tokenizer
(``Vocabulary.from_tokenizer`` / ``from_json``, ``load_tokenizer``, ``make_fast_encoder``); the job id (hashing the
job's configuration); dataset_info.json (the sink); the rest.  No sampling and no profiler: the cost added is a
Python call per import statement and per named call.  The least of ``--runs`` runs per cell.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from bench import corpus as corpora
from bench.procs import REPO, compile_project, free_ports
from bench.run import VOCAB, WIKI

ENV = "BENCH_FIXED_COST_DIR"  # not MLM_*: the local launcher keeps those from its children

#: heading -> (module, attribute path) of the functions it times.
HEADINGS = {
    "variant discovery": [("common.job.params", "discover")],
    "entry-point scan": [("importlib.metadata", "entry_points")],
    "tokenizer build": [("common.tokenization.vocabulary", "Vocabulary.from_tokenizer"),
                        ("common.tokenization.vocabulary", "Vocabulary.from_json"),
                        ("common.tokenization.loading", "load_tokenizer"),
                        ("common.tokenization.fast_wordpiece", "make_fast_encoder")],
    "job id": [("common.job.config", "JobConfig.job_id")],
    "dataset_info.json": [("common.describe.dataset_info", "write")],
}

_SITECUSTOMIZE = """
import atexit, builtins, functools, json, os, sys, threading, time

_directory = os.environ.get(ENV)
_headings = HEADINGS
if _directory:
    _spent = {"interpreter start": time.process_time()}  # before site-packages' own start-up hooks
    _local = threading.local()
    _wrapped = set()

    def _enter():
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(0.0)  # CPU of inner headings, taken out of this one
        return time.thread_time()

    def _leave(heading, started):
        elapsed = time.thread_time() - started
        inner = _local.stack.pop()
        _spent[heading] = _spent.get(heading, 0.0) + elapsed - inner
        if _local.stack:
            _local.stack[-1] += elapsed

    def _timed(heading, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            started = _enter()
            try:
                return function(*args, **kwargs)
            finally:
                _leave(heading, started)
        wrapper.__bench_timed__ = True
        return wrapper

    def _wrap_loaded():
        for heading, targets in _headings.items():
            for module_name, path in targets:
                if (module_name, path) in _wrapped or module_name not in sys.modules:
                    continue
                owner = sys.modules[module_name]
                *parents, name = path.split(".")
                for parent in parents:
                    owner = getattr(owner, parent, None)  # None while its module is still being executed
                if owner is None:
                    continue
                raw = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
                if raw is None:
                    continue
                _wrapped.add((module_name, path))
                if isinstance(raw, classmethod):
                    setattr(owner, name, classmethod(_timed(heading, raw.__func__)))
                elif isinstance(raw, functools.cached_property):
                    timed = functools.cached_property(_timed(heading, raw.func))
                    timed.attrname = raw.attrname
                    setattr(owner, name, timed)
                else:
                    setattr(owner, name, _timed(heading, raw))

    _import = builtins.__import__

    def _timed_import(*args, **kwargs):
        if getattr(_local, "stack", None):  # inside a heading (an import inside one is its cost): not timed apart
            try:
                return _import(*args, **kwargs)
            finally:
                _wrap_loaded()  # a module's own code may call a named function as soon as its imports are done
        started = _enter()
        try:
            return _import(*args, **kwargs)
        finally:
            _leave("imports", started)
            _wrap_loaded()

    builtins.__import__ = _timed_import
    import importlib.metadata  # the roles import it anyway; wrapped now, before any scan

    _wrap_loaded()

    def _dump():
        _spent["all"] = time.process_time()
        with open(os.path.join(_directory, f"{os.getpid()}.json"), "w") as handle:
            json.dump({"argv": " ".join(getattr(sys, "orig_argv", sys.argv)), "spent": _spent,
                       "wrapped": sorted(map(list, _wrapped))}, handle)

    atexit.register(_dump)
""".replace("ENV", repr(ENV)).replace("HEADINGS", repr(HEADINGS))


def role_of(argv: str) -> str:
    for role in ("sink", "ventilator", "worker"):
        if f"-m {role}" in argv:
            return role
    return "worker" if "multiprocessing" in argv else "other"


def instrumented_job(data: Path, work: Path, dupe_factor: int) -> dict[str, dict[str, float]]:
    """role -> heading -> CPU seconds, of one run."""
    site = work / "site"
    site.mkdir(parents=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    spent = work / "spent"
    spent.mkdir()
    vport, sink_port = free_ports(2)
    env = {**os.environ, ENV: str(spent),
           "PYTHONPATH": os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-m", "ventilator", "--data", str(data), "--output", str(work / "out"),
                    "--vocab-file", str(VOCAB), "--workers", "1", "--dupe-factor", str(dupe_factor),
                    "--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1",
                    "--state-dir", str(work / "state"), "--no-progress"], cwd=REPO, env=env, check=True,
                   capture_output=True, stdin=subprocess.DEVNULL)
    out: dict[str, dict[str, float]] = {}
    for path in spent.glob("*.json"):
        record = json.loads(path.read_text())
        cells = out.setdefault(role_of(record["argv"]), {})
        for heading, value in record["spent"].items():
            cells[heading] = cells.get(heading, 0.0) + value
    for cells in out.values():
        cells["the rest"] = cells["all"] - sum(v for k, v in cells.items() if k != "all")
    return out


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--dupe-factor", type=click.IntRange(min=1), default=1, show_default=True)
def main(runs: int, dupe_factor: int) -> None:
    least: dict[tuple[str, str], float] = {}
    compile_project()  # interpreter start and imports without compiling the project's modules (bench/procs.py)
    with tempfile.TemporaryDirectory(prefix="mlm-fixed-") as tmp:
        data = Path(tmp) / "one" / "doc.txt"
        data.parent.mkdir()
        data.write_bytes(corpora.truncated(corpora.load_sources(WIKI)[0][1], 1))
        for run in range(runs):
            work = Path(tmp) / f"run{run}"
            for role, cells in instrumented_job(data.parent, work, dupe_factor).items():
                for heading, value in cells.items():
                    least[(role, heading)] = min(least.get((role, heading), float("inf")), value)
            shutil.rmtree(work)
    headings = ["all", "interpreter start", "imports", *HEADINGS, "the rest"]
    roles = sorted({role for role, _ in least}, key=["ventilator", "sink", "worker", "other"].index)
    print("| process | " + " | ".join(headings) + " |")
    print("| --- |" + " --- |" * len(headings))
    for role in roles:
        print(f"| {role} | " + " | ".join(f"{least.get((role, h), 0.0):.3f}" for h in headings) + " |")


if __name__ == "__main__":
    main(prog_name="python -m bench.fixed_cost")
