"""scripts/numpy-only.sh, the CI step that runs the byte matrix on the numpy kernels, as a fresh clone runs it."""

from __future__ import annotations

import subprocess

from tests.support.helpers import REPO


def test_the_numpy_only_step_refuses_to_pass_without_the_shared_corpus(tmp_path):
    """In a clone with no ../shared beside it the byte matrix and BERT's golden shards skip, so the step passed
    having checked no byte: it must fail, in one line naming ../shared, before building anything."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True, timeout=120)
    assert not (tmp_path / "shared").exists()
    result = subprocess.run(["bash", "scripts/numpy-only.sh"], cwd=clone, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "../shared" in lines[0], result.stderr
    assert "passed" not in result.stdout
