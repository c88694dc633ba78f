"""A segmenter whose native library does not load on the machine (Bling Fire on aarch64 Linux: its one PyPI wheel
carries a library that does not load there, scripts/wheels.sh shows it) is refused before any work, in one line
naming the machine and another --segmenter; before, every task failed, was quarantined, and nothing was written.
The library is made unloadable here as it is there: ``import blingfire`` fails in the process."""

import subprocess
import sys

from tests.support.helpers import REPO, VOCAB, free_ports, need_shared

#: Runs the rest of the command line as ``python -m MODULE``, in a process where ``import blingfire`` fails.
NO_BLINGFIRE = ("import runpy, sys; sys.modules['blingfire'] = None; module = sys.argv[1]; "
                "sys.argv = [module, *sys.argv[2:]]; runpy.run_module(module, run_name='__main__')")


def sockets() -> list[str]:
    vport, sink_port = free_ports(2)
    return ["--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1"]


def without_blingfire(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_BLINGFIRE, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_a_job_on_a_segmenter_that_cannot_load_is_refused_in_one_line_before_any_work(tmp_path):
    need_shared()
    out = tmp_path / "out"
    ran = without_blingfire("ventilator", "--data", "examples/corpus", "--output", str(out), "--vocab-file", str(VOCAB),
                            "--workers", "1", *sockets())
    assert ran.returncode != 0
    errors = [line for line in ran.stderr.splitlines() if "error: " in line]
    assert len(errors) == 1, ran.stderr[-3000:]
    assert "--segmenter blingfire: Bling Fire's library does not load on this " in errors[0]
    assert "ModuleNotFoundError" in errors[0] and "choose another --segmenter (line" in errors[0], errors[0]
    assert not out.exists(), "refused before any work"


def test_another_segmenter_runs_where_bling_fire_does_not_load(tmp_path):
    """The refusal is Bling Fire's alone: the same machine plans a job on --segmenter line."""
    need_shared()
    ran = without_blingfire("ventilator", "--data", "examples/corpus", "--output", str(tmp_path / "out"),
                            "--vocab-file", str(VOCAB), "--segmenter", "line", "--show-steps")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "segment" in ran.stdout and "line" in ran.stdout


def test_a_worker_that_cannot_load_it_says_why_once_for_the_job():
    """A worker (another machine of a mixed fleet) builds the job's steps when the job comes: the segment step
    raises the same one line, which the worker gives as the reason it declines the job (worker/runtime.py _prepare)."""
    code = ("import sys; sys.modules['blingfire'] = None\n"
            "from common.segmenters.blingfire import BlingfireSegmenter\n"
            "try:\n    BlingfireSegmenter()\nexcept ValueError as error:\n    print(error)\n")
    ran = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.startswith("--segmenter blingfire: Bling Fire's library does not load"), ran.stdout
    assert len(ran.stdout.strip().splitlines()) == 1
