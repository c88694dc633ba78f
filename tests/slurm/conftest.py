"""A real Slurm for the tests of this folder: scripts/slurm-cluster.sh starts Debian's slurmctld, slurmd and munge on
this host, two nodes of one cpu each (a slurmd each).  Needs root and the Debian packages (.ci/run installs them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import REPO, need_shared

CLUSTER = REPO / "scripts" / "slurm-cluster.sh"
#: Nodes of one cpu each: two worker processes in all, as in a local run with --workers 2.
NODES = 2
#: Where Debian puts the daemons (root's PATH may lack them).
SBIN = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    """The environment (PATH, SLURM_CONF) of a Slurm started for this module, stopped after it."""
    if os.geteuid() != 0:
        pytest.skip("a real Slurm needs root here (slurmd starts the jobs): run the suite as root, as CI does")
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch") if not shutil.which(b, path=SBIN)]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing): "
                    "apt-get install slurmctld slurmd slurm-client munge (as .ci/run does)")
    need_shared()
    directory = tempfile.mkdtemp(prefix="mlm-sl-")  # short: the munge socket's path must fit
    # KillWait 5 s: after a plain scancel, a worker whose sink went with it lingers up to 30 s to deliver its last
    # acknowledgement; Slurm's SIGKILL ends that sooner, as on a real cluster (KillWait is 30 s by default).
    started = subprocess.run([str(CLUSTER), "start", directory, "1"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "SLURM_CLUSTER_KILL_WAIT": "5", "SLURM_CLUSTER_NODES": str(NODES)})
    assert started.returncode == 0, started.stderr
    conf = started.stdout.strip().removeprefix("export SLURM_CONF=")
    assert Path(conf).is_file(), started.stdout
    try:
        yield {**os.environ, "PATH": SBIN, "SLURM_CONF": conf}
    finally:
        subprocess.run([str(CLUSTER), "stop", directory], timeout=120)
