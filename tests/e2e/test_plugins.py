"""Variants from installed packages: a throwaway plugin package
(tests/data/plugin_demo) is installed with pip and adds an input format, a
step, a segmenter, a word segmenter, an objective, an output format, a
launcher and a storage backend (a URI scheme) through the entry-point groups ``mlm_pipeline.<axis>``; a job runs
on them end to end over the real command line, without a line of
mlm-pipeline changed, and mlm-verify checks its files through the format.
Broken or clashing plugins are refused in one line before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.helpers import REPO, VOCAB, WIKI, manifest, need_shared, run_ventilator
from tests.support.plugins import fake_install

pytestmark = pytest.mark.e2e

PLUGIN = Path(__file__).resolve().parents[1] / "data" / "plugin_demo"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The plugin package, installed by pip into a directory of its own (offline: no index, no build isolation)."""
    target = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                             "--no-build-isolation", "--target", str(target), str(PLUGIN)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (target / "mlm_plugin_demo").is_dir()
    return target


def with_path(*directories: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([*map(str, directories), str(REPO)])}


def lines_corpus(directory: Path, limit: int = 1500) -> list[str]:
    """Plain lines of ../shared's articles, one document each for the plugin's reader."""
    lines = []
    for path in sorted(WIKI.rglob("wiki_*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("<"):
                lines.append(line.strip())
    lines = lines[:limit] + ["short", "汉字的词"]
    directory.mkdir(parents=True)
    (directory / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def test_a_job_runs_on_variants_from_an_installed_package(tmp_path, installed):
    need_shared()
    lines = lines_corpus(tmp_path / "in")
    out = tmp_path / "out"
    # --data through the plugin's storage backend (its URI scheme): workers read their byte ranges themselves
    result = run_ventilator(f"demo://{tmp_path / 'in'}", out, "--vocab-file", VOCAB, "--do-lower-case", "--workers", "2",
                            "--task-size", "64K", "--format", "demo-lines", "--demo-min-chars", "20",
                            "--objective", "demo-ids", "--demo-copies", "2", "--output-format", "demo-jsonl",
                            "--word-segmenter", "demo-chars", "--add-step", "demo-drop-digits",
                            "--demo-max-digits", "10", "--segmenter", "demo-words", "--demo-words-per-segment", "2",
                            "--launcher", "demo-announce", "--demo-census", env=with_path(installed))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "word segmenter: demo-chars" in result.stderr
    assert "demo-announce: starting the sink" in result.stderr and "demo-announce: starting the workers" in result.stderr

    entries = manifest(out)
    assert len(entries) > 1
    files = sorted(out.glob("part-*.demo.jsonl"))
    assert sorted(f.name for f in files) == sorted(s["name"] for e in entries.values() for s in e["shards"])
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]

    # The oracle: the tokenizers library's own encoding of each whole line.
    from tokenizers import BertWordPieceTokenizer

    oracle = BertWordPieceTokenizer(str(VOCAB), lowercase=True)
    long_enough = [line for line in lines if len(line) >= 20]
    kept = [line for line in long_enough if sum(ch.isdigit() for ch in line) <= 10]
    assert 0 < len(kept) < len(long_enough)
    expected = [(tuple(encoding.ids), -(-len(line.split()) // 2))  # its segments: --demo-words-per-segment 2
                for line, encoding in zip(kept, oracle.encode_batch(kept, add_special_tokens=False))]
    got = [(tuple(record["input_ids"]), record["segments"][0]) for record in records]
    assert sorted(got) == sorted(expected * 2)  # every document, --demo-copies 2 times

    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped_documents"]["demo_short_line"] == len(lines) - len(long_enough)
    assert summary["demo-drop-digits"]["dropped"] == len(long_enough) - len(kept)
    # the step its own flag switched on (--demo-census), after the segmenter, counting what the drop step kept
    assert summary["demo-census"] == {"documents": len(kept), "characters": sum(map(len, kept))}

    verify = subprocess.run([sys.executable, "-m", "sink.verify", str(out)], cwd=REPO, capture_output=True,
                            text=True, env={**os.environ, **with_path(installed)}, timeout=300)
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]


def test_help_lists_the_plugin_variants_and_their_flags(installed):
    result = subprocess.run([sys.executable, "-m", "ventilator", "--help"], cwd=REPO, capture_output=True,
                            text=True, env={**os.environ, **with_path(installed), "COLUMNS": "200"}, timeout=120)
    assert result.returncode == 0, result.stderr
    for text in ("demo-lines", "demo-ids", "demo-jsonl", "demo-chars", "--demo-min-chars", "--demo-copies",
                 "demo-drop-digits", "--demo-max-digits", "demo-words", "--demo-words-per-segment", "demo-announce",
                 "Demo census:\n  --demo-census / --no-demo-census"):
        assert text in result.stdout
    plain = subprocess.run([sys.executable, "-m", "ventilator", "--help"], cwd=REPO, capture_output=True,
                           text=True, env={**os.environ, **with_path(), "COLUMNS": "200"}, timeout=120)
    assert plain.returncode == 0 and "demo-ids" not in plain.stdout
    # --add-step shows the installed steps as a choice does, and STEP (not "[]") with none installed
    assert "--add-step [demo-drop-digits]" in result.stdout and "--add-step STEP" in plain.stdout


def test_a_plugin_step_is_off_until_its_own_flag_turns_it_on(installed, monkeypatch):
    """As holdout: its flag is generated from its Params, off by default (the job, and its id, as without the
    plugin), on by the flag; --add-step does not take it (it says itself when it runs)."""
    from common import steps
    from common.job.config import standard_steps
    from ventilator.run_config import addable_steps, parse

    monkeypatch.syspath_prepend(str(installed))
    steps.steps.cache_clear()
    try:
        required = ["--data", "d", "--output", "o"]
        off, on = parse(required).job.steps, parse([*required, "--demo-census"]).job.steps
        assert off["demo-census"] == {"demo_census": False} and on["demo-census"] == {"demo_census": True}
        assert standard_steps(off) == standard_steps()
        assert [step.name for step in standard_steps(on)] == ["read", "segment", "demo-census", "tokenize", "objective",
                                                              "write"]
        assert "demo-census" not in addable_steps() and "demo-drop-digits" in addable_steps()
    finally:
        monkeypatch.undo()
        steps.steps.cache_clear()


@pytest.mark.parametrize("entry_points,modules,says", [
    ("[mlm_pipeline.objectives]\nbroken = no_such_module:Objective\n", {},
     "entry point broken = no_such_module:Objective (group mlm_pipeline.objectives, from broken-plugin 1.0) "
     "cannot be loaded: ModuleNotFoundError"),
    ("[mlm_pipeline.writers]\nnothing = broken_plugin_empty\n", {"broken_plugin_empty": "X = 1\n"},
     "gives no Writer"),
    ("[mlm_pipeline.objectives]\nbert = broken_plugin_bert:Bert\n",
     {"broken_plugin_bert": "from common.objectives.tokens import TokensObjective\n"
                            "class Bert(TokensObjective):\n    name = 'bert'\n"},
     "two Objectives named 'bert': common.objectives.bert.BertObjective and broken_plugin_bert.Bert"),
    # a field of the name and type of BERT's --dupe-factor, not declared shared: no silent share of one flag
    ("[mlm_pipeline.objectives]\ncopies = broken_plugin_copies:Copies\n",
     {"broken_plugin_copies": "from dataclasses import dataclass\n"
                              "from common.objectives.tokens import TokensObjective\n"
                              "from common.job.params import param\n"
                              "@dataclass(frozen=True)\nclass P:\n    dupe_factor: int = param(3, 'Copies.')\n"
                              "class Copies(TokensObjective):\n    name = 'copies'\n    Params = P\n"},
     "--dupe-factor is declared by 'albert' (common.objectives.albert.AlbertObjective) and by 'copies' "
     "(broken_plugin_copies.Copies): two variants share a flag only if both declare it shared"),
])
def test_a_broken_or_clashing_plugin_is_one_line_before_any_work(tmp_path, entry_points, modules, says):
    fake_install(tmp_path / "site", "broken-plugin", entry_points, modules)
    result = subprocess.run([sys.executable, "-m", "ventilator", "--help"], cwd=REPO, capture_output=True,
                            text=True, env={**os.environ, **with_path(tmp_path / "site")}, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlm-ventilator: error: ") and says in lines[0], result.stderr


def _apart(tmp_path: Path, installed: Path, *args: str, sink_apart: bool = False):
    """A ventilator (and the sink it starts, unless ``sink_apart``) with the plugin installed; its Popen and
    its ports."""
    from tests.support.helpers import free_ports, python_module

    vport, sink_port = free_ports(2)
    lines_corpus(tmp_path / "in", limit=300)
    sink = ["--sink", f"127.0.0.1:{sink_port}"] if sink_apart else ["--sink-port", sink_port]
    ventilator = python_module(
        "ventilator", "--data", tmp_path / "in", "--output", tmp_path / "out", "--vport", vport, *sink,
        "--bind-host", "127.0.0.1", "--state-dir", tmp_path / "state", "--vocab-file", VOCAB, "--do-lower-case",
        "--task-size", "16K", "--heartbeat-seconds", "1", *args, env=with_path(installed))
    return ventilator, vport, sink_port


def test_a_job_no_worker_can_run_ends_with_the_reason(tmp_path, installed):
    """The step is installed beside the ventilator (and its sink), not beside the worker: the worker printed a
    traceback at the Welcome and exited 1, and the ventilator showed 0/N tasks done forever.  Now the worker
    says so in one line and declines the job; once every worker heard from has declined it for a lease
    period (``--lease-seconds 4``: 3 heartbeats + 5 s here) the tasks left are quarantined with the reason,
    and the job ends as any job whose tasks cannot be done: exit status 3, the reason in summary.json."""
    from tests.support.helpers import python_module

    need_shared()
    ventilator, vport, _ = _apart(tmp_path, installed, "--format", "text", "--add-step", "demo-drop-digits",
                                  "--workers", "0", "--max-attempts", "2", "--lease-seconds", "4")
    worker = python_module("worker", "--ventilator", f"127.0.0.1:{vport}", "--processes", "1",
                           env=with_path())  # no plugin here
    try:
        said, _ = ventilator.communicate(timeout=300)
        worker_said, _ = worker.communicate(timeout=120)
    finally:
        for process in (ventilator, worker):
            process.kill()
    assert ventilator.returncode == 3 and "task(s) quarantined" in said, said[-3000:]
    last = said.strip().splitlines()[-1]
    assert "no worker can run this job" not in last and "1 worker(s) cannot run this job: " in last, last
    assert "unknown step 'demo-drop-digits'" in last, last
    assert worker.returncode == 0, worker_said[-3000:]
    assert "Traceback" not in worker_said + said
    lines = [line for line in worker_said.splitlines() if " E worker: " in line]
    assert len(lines) == 1 and "unknown step 'demo-drop-digits'" in lines[0], worker_said[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["quarantined"] and summary["complete"] is False
    assert all("unknown step 'demo-drop-digits'" in why["errors"][-1] for why in summary["quarantined"].values())
    assert all(why["errors"][-1].startswith("no worker can run this job: 1 worker(s) cannot run this job: ")
               for why in summary["quarantined"].values())
    assert "1 worker(s) cannot run this job: " in summary["reason"]


def test_a_sink_apart_without_the_writer_plugin_fails_the_job_in_one_line(tmp_path, installed):
    """A sink started apart without the job's output format wrote every manifest line, then crashed at the
    finish with a traceback, and the ventilator exited 0 "done" over an output with no summary.json.  Now the
    sink refuses the job at its Welcome, before any task, in one line, and the ventilator fails the job."""
    from tests.support.helpers import python_module

    need_shared()
    ventilator, vport, sink_port = _apart(tmp_path, installed, "--format", "demo-lines", "--objective", "demo-ids",
                                          "--output-format", "demo-jsonl", "--workers", "1", sink_apart=True)
    sink = python_module("sink", "--ventilator", f"127.0.0.1:{vport}", "--port", sink_port, "--bind-host",
                         "127.0.0.1", "--state-dir", tmp_path / "state", env=with_path())  # no plugin here
    try:
        said, _ = ventilator.communicate(timeout=300)
        sink_said, _ = sink.communicate(timeout=120)
    finally:
        for process in (ventilator, sink):
            process.kill()
    assert sink.returncode == 1 and "Traceback" not in sink_said + said, sink_said[-3000:]
    (line,) = [line.split(" E sink: sink: ", 1)[1] for line in sink_said.splitlines() if " E sink: " in line]
    assert "cannot keep this job's books: unknown output format 'demo-jsonl'" in line, sink_said
    assert ventilator.returncode == 1, said[-3000:]
    assert said.strip().splitlines()[-1] == f"ventilator: error: the sink failed: {line}", said
    assert not (tmp_path / "out" / "manifest.jsonl").exists() or not (tmp_path / "out" / "manifest.jsonl").read_text()


def _read_lines(process, lines: list[str], said: threading.Event, marker: str) -> threading.Thread:
    """A thread that keeps ``process``'s output in ``lines`` and sets ``said`` once a line holds ``marker``."""
    def read() -> None:
        for line in process.stdout:
            lines.append(line)
            if marker in line:
                said.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def test_a_worker_that_cannot_run_the_job_declines_it_and_the_others_finish_it(tmp_path, installed):
    """A mixed fleet: one worker without the job's plugin step among workers with it.  It failed each task it
    asked for in microseconds and asked for more, a black hole that spent every task's attempts (here it
    quarantined the whole job before the good worker joined).  Now it declines the job once, costs no task an
    attempt and asks for no task of it; the good worker does the job, complete, byte for byte as a run of
    good workers only, and summary.json counts the worker that could not run it."""
    from tests.support.helpers import python_module, shard_digests

    need_shared()
    job = ("--format", "demo-lines", "--demo-min-chars", "20", "--add-step", "demo-drop-digits", "--max-attempts",
           "2")
    ventilator, vport, _ = _apart(tmp_path, installed, *job, "--workers", "0")
    address = ("--ventilator", f"127.0.0.1:{vport}", "--processes", "1")
    bad = python_module("worker", *address, env=with_path())  # no plugin here
    good = None
    bad_lines: list[str] = []
    declined = threading.Event()
    reader = _read_lines(bad, bad_lines, declined, "cannot run this job")
    try:
        # the good worker joins once the bad one has been welcomed to the job and said it cannot run it
        assert declined.wait(timeout=120), "".join(bad_lines)[-3000:]
        good = python_module("worker", *address, env=with_path(installed))
        said, _ = ventilator.communicate(timeout=300)
        good_said, _ = good.communicate(timeout=120)
        bad.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        for process in (ventilator, bad, good):
            if process is not None:
                process.kill()
    bad_said = "".join(bad_lines)
    assert ventilator.returncode == 0, said[-3000:]
    assert bad.returncode == 0 and good.returncode == 0, bad_said[-2000:] + good_said[-2000:]
    assert "Traceback" not in said + bad_said + good_said
    lines = [line for line in bad_said.splitlines() if " E worker: " in line]
    assert len(lines) == 1 and "unknown step 'demo-drop-digits'" in lines[0], bad_said[-3000:]
    assert " failed on " not in said and "quarantined" not in said.replace("0 quarantined", ""), said[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["complete"] is True and summary["quarantined"] == {}
    assert "1 worker(s) cannot run this job: " in summary["reason"], summary["reason"]
    assert "unknown step 'demo-drop-digits'" in summary["reason"], summary["reason"]

    # the same job run by good workers only: the same shards, byte for byte
    clean = run_ventilator(tmp_path / "in", tmp_path / "clean", "--vocab-file", VOCAB, "--do-lower-case",
                           "--task-size", "16K", "--heartbeat-seconds", "1", *job, "--workers", "1",
                           env=with_path(installed))
    assert clean.returncode == 0, clean.stderr[-3000:]
    digests = shard_digests(tmp_path / "out")
    assert digests and digests == shard_digests(tmp_path / "clean")
    assert manifest(tmp_path / "out").keys() == manifest(tmp_path / "clean").keys()
