"""README's "Training a ModernBERT-style encoder": its commands, run as written (their own directory and port), in
the suite's environment.  The same commands after the section's own install line, in a fresh venv: scripts/readme-venvs.sh."""

import pytest

from tests.e2e.readme_commands import check_modernbert_run, run_modernbert_section

pytestmark = pytest.mark.e2e


def test_the_readme_path_trains_a_tiny_modernbert(tmp_path):
    pytest.importorskip("transformers", reason="transformers (with ModernBERT) is in the test extras")
    check_modernbert_run(*run_modernbert_section(tmp_path))
