"""The wire layer imports nothing of the job: held by importing it in a fresh interpreter.

``common/wire/protocol.py`` once imported ``JobConfig``, whose module imports the steps, whose base imports the
protocol: a cycle held apart by a lazy import.  The Welcome now carries the job encoded (an ``EncodedJob``
the job layer decodes), so the wire's modules load alone, and the job's modules import the wire's at the top,
in any order.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: What the wire may load of the project: its own modules (``ShardFile`` is the wire's: common/wire/files.py).
WIRE = {"common", "common.wire", "common.wire.envelope", "common.wire.files", "common.wire.protocol",
        "common.wire.transport", "common.wire.inbox", "common.wire.security", "loader", "loader.messages"}


def _project_modules_after(statement: str) -> set[str]:
    """The project's modules a fresh interpreter holds after ``statement``."""
    probe = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    roots = ("common", "ventilator", "worker", "sink", "loader", "report")
    return {name for name in json.loads(out) if name.split(".")[0] in roots}


def test_the_wire_loads_without_the_job():
    loaded = _project_modules_after("import common.wire.protocol, common.wire.envelope, common.wire.transport, common.wire.inbox, "
                                    "common.wire.security, loader.messages")
    assert {"common.wire.protocol", "common.wire.inbox", "loader.messages"} <= loaded
    assert loaded <= WIRE, f"the wire imported {sorted(loaded - WIRE)}"


@pytest.mark.parametrize("first", ["common.job.config", "common.steps.base", "common.wire.protocol"])
def test_the_job_and_the_wire_import_in_any_order(first):
    """No cycle: each module imports first in a fresh interpreter, and the rest follow."""
    loaded = _project_modules_after(f"import {first}\nimport common.job.config, common.steps, common.wire.protocol")
    assert {"common.job.config", "common.steps.base", "common.wire.protocol"} <= loaded
