"""Inside a Slurm allocation (sbatch or salloc): the sink a local process on this node (the batch step's),
the workers one ``srun`` step with a task on every node of the allocation, each starting ``--workers``
processes there.

``python -m ventilator --launcher slurm --workers 8 ...`` in a batch script is what
deploy/slurm/mlm-pipeline.sbatch spells out by hand; the workers reach the ventilator at this node's
NodeAddr (or MLM_SLURM_HEAD_ADDRESS).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable

from ventilator.launchers.base import Fleet, LaunchError, Role
from ventilator.launchers.local import LocalLauncher

log = logging.getLogger("ventilator")

#: The worker step's name: how its tasks are found to be told to drain.
STEP_NAME = "mlm-workers"


def _run(*command: str) -> str:
    try:
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as error:
        raise LaunchError(f"--launcher slurm: {' '.join(command)} failed: {error}") from None


def head_address() -> str:
    """How the other nodes reach this one: MLM_SLURM_HEAD_ADDRESS, or the first node's NodeAddr."""
    if os.environ.get("MLM_SLURM_HEAD_ADDRESS"):
        return os.environ["MLM_SLURM_HEAD_ADDRESS"]
    first = _run("scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]).split()[0]
    match = re.search(r"NodeAddr=(\S+)", _run("scontrol", "show", "node", first))
    if not match:
        raise LaunchError(f"--launcher slurm: no NodeAddr for node {first} (set MLM_SLURM_HEAD_ADDRESS)")
    return match.group(1)


class SlurmLauncher(LocalLauncher):
    name = "slurm"

    def __init__(self, params: object = None, fleet: Fleet | None = None,
                 relay: Callable[[str], None] | None = None):
        super().__init__(params, fleet, relay)
        if not os.environ.get("SLURM_JOB_ID") or not os.environ.get("SLURM_JOB_NODELIST"):
            raise LaunchError("--launcher slurm: not in a Slurm allocation (run it in an sbatch script or under "
                              "salloc)")
        self.job_id = os.environ["SLURM_JOB_ID"]
        self.ventilator_host = head_address()

    def start(self, role: Role) -> None:
        if role.module != "worker":
            super().start(role)
            return
        nodes = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES", "1")
        self.spawn(role.name, ["srun", f"--job-name={STEP_NAME}", f"--nodes={nodes}", "--ntasks-per-node=1",
                               "--overlap", "--kill-on-bad-exit=0", sys.executable, "-m", role.module, *role.args])

    def terminate(self, grace: float = 30.0) -> None:
        """The workers drain first: srun turns a SIGTERM of its own into SIGKILL for its tasks, so the step's
        tasks are signalled through scancel; then every local child (srun included) as the local launcher does."""
        try:
            steps = _run("squeue", "--noheader", "--steps", "--jobs", self.job_id, "--format", "%i %j")
        except LaunchError as error:
            log.warning("%s", error)
            steps = ""
        for line in steps.splitlines():
            step, _, name = line.strip().partition(" ")
            if name.strip() == STEP_NAME:
                subprocess.run(["scancel", "--signal=TERM", step], capture_output=True, timeout=30)
        super().terminate(grace)
