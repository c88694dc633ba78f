"""The wire layer imports nothing of the job: held by importing it in a fresh interpreter.

``common/protocol.py`` once imported ``JobConfig``, whose module imports the steps, whose base imports the
protocol: a cycle held apart by a lazy import.  The Welcome now carries the job encoded (an ``EncodedJob``
the job layer decodes), so the wire's modules load alone, and the job's modules import the wire's at the top,
in any order.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: What the wire may load of the project: its own modules and the neutral outputs (``ShardFile``).
WIRE = {"common", "common.envelope", "common.protocol", "common.transport", "common.inbox", "common.outputs",
        "common.security", "loader", "loader.messages"}


def _project_modules_after(statement: str) -> set[str]:
    """The project's modules a fresh interpreter holds after ``statement``."""
    probe = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    roots = ("common", "ventilator", "worker", "sink", "loader", "report")
    return {name for name in json.loads(out) if name.split(".")[0] in roots}


def test_the_wire_loads_without_the_job():
    loaded = _project_modules_after("import common.protocol, common.envelope, common.transport, common.inbox, "
                                    "common.security, loader.messages")
    assert {"common.protocol", "common.inbox", "loader.messages"} <= loaded
    assert loaded <= WIRE, f"the wire imported {sorted(loaded - WIRE)}"


@pytest.mark.parametrize("first", ["common.config", "common.steps.base", "common.protocol"])
def test_the_job_and_the_wire_import_in_any_order(first):
    """No cycle: each module imports first in a fresh interpreter, and the rest follow."""
    loaded = _project_modules_after(f"import {first}\nimport common.config, common.steps, common.protocol")
    assert {"common.config", "common.steps.base", "common.protocol"} <= loaded
