"""What a role's process loads before it has a job: every job starts three Python processes, and the test suite
starts hundreds of jobs, so a module a role imports but does not need is paid again and again.  Checked in a
fresh interpreter (sys.modules), not by timing."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from common.job.params import type_hints

REPO = Path(__file__).resolve().parent.parent

#: What the sink and the worker import only when they serve a job (sink.server, worker.runtime): the steps, the
#: objectives, numpy, tokenizers.
JOB_ONLY = ("numpy", "tokenizers", "common.steps", "common.objectives", "common.job.config", "common.describe",
            "sink.server", "worker.runtime")
#: Loaded by no role before a job, whatever the job: the fast encoders, the Parquet and jieba libraries.
NEVER_AT_START = ("blingfire", "nanotoken", "kitoken", "pyarrow", "rjieba", "jieba", "ssl")


def _loaded(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return set(out.split())


def _help_loads(role: str) -> set[str]:
    """The modules ``python -m ROLE --help`` has loaded when it exits."""
    return _loaded("import runpy, sys\nsys.argv = ['x', '--help']\ntry:\n"
                   f"    runpy.run_module({role!r}, run_name='__main__')\nexcept SystemExit:\n    pass\n"
                   "print(*sorted(sys.modules), file=sys.stdout)")


@pytest.mark.parametrize("role", ["sink", "worker"])
def test_a_role_command_line_loads_no_job_module(role):
    """``import ROLE.cli`` (and with it ``--help``, a refused flag, the worker's supervisor of N processes)
    loads none of what serving a job needs: the server module is imported where the job is served."""
    loaded = _loaded(f"import sys, {role}.cli; print(*sorted(sys.modules))")
    assert f"{role}.cli" in loaded
    heavy = sorted(name for name in loaded if any(name == m or name.startswith(m + ".") for m in JOB_ONLY))
    assert heavy == []


@pytest.mark.parametrize("role", ["sink", "worker"])
def test_a_role_help_loads_no_job_module(role):
    loaded = _help_loads(role)
    assert f"{role}.settings" in loaded  # the help was built from the role's settings
    assert sorted(name for name in loaded if any(name == m or name.startswith(m + ".") for m in JOB_ONLY)) == []


def test_the_ventilator_loads_neither_server():
    """The ventilator launches the sink and the workers as processes and reads their settings' flags; it runs
    neither server, so it imports neither (nor what only they use: the dataset card, the manifest, the pipeline)."""
    loaded = _loaded("import sys, ventilator.cli; print(*sorted(sys.modules))")
    assert {"sink.settings", "worker.settings"} <= loaded
    assert sorted(loaded & {"sink.server", "sink.manifest", "sink.cost", "worker.runtime", "worker.pipeline",
                            "common.describe.dataset_card", "common.describe.dataset_info"}) == []


@pytest.mark.parametrize("role", ["sink", "worker", "ventilator"])
def test_no_role_loads_a_fast_encoder_or_pyarrow_at_start(role):
    loaded = _loaded(f"import sys, {role}.cli; print(*sorted(sys.modules))")
    assert sorted(name for name in loaded if name.split(".")[0] in NEVER_AT_START) == []


def test_the_options_are_the_servers():
    """The options split from the servers are the ones the servers take (one class, not a copy)."""
    from sink.options import SinkOptions
    from sink.server import SinkOptions as ServerSinkOptions
    from worker.options import WorkerOptions
    from worker.runtime import WorkerOptions as RuntimeWorkerOptions

    assert SinkOptions is ServerSinkOptions and WorkerOptions is RuntimeWorkerOptions


def test_type_hints_are_typing_s_and_read_only():
    from sink.settings import SinkSettings
    from ventilator.run_config import RunConfig

    for settings_class in (SinkSettings, RunConfig):
        assert dict(type_hints(settings_class)) == typing.get_type_hints(settings_class)
        assert type_hints(settings_class) is type_hints(settings_class)
        assert {f.name for f in dataclasses.fields(settings_class)} <= set(type_hints(settings_class))
        with pytest.raises(TypeError):
            type_hints(settings_class)["x"] = int  # type: ignore[index]
