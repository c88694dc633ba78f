"""The worker's settings (worker/settings.py): its command line and what the ventilator hands workers."""

import pytest

from common.job.cli_settings import parse, to_argv
from worker.runtime import WorkerOptions
from worker.settings import SettingsError, WorkerSettings


def test_defaults_are_the_workers():
    settings = parse(WorkerSettings, ["--ventilator", "h:1"])
    assert settings.worker_options() == WorkerOptions(ventilator="h:1")
    assert settings.lifecycle() is None


def test_handed_over_as_argv_and_back():
    settings = WorkerSettings(ventilator="127.0.0.1:5557", processes=3, credit=2, idle_exit_seconds=1.5,
                              spot_watch=True, lifecycle_hook="drain", autoscaling_group="g", verbose=2)
    assert parse(WorkerSettings, to_argv(settings)) == settings
    assert settings.lifecycle().name == "drain"


def test_a_lifecycle_hook_without_its_group_is_one_line():
    with pytest.raises(SettingsError, match="--lifecycle-hook and --autoscaling-group go together"):
        parse(WorkerSettings, ["--ventilator", "h:1", "--lifecycle-hook", "x", "--spot-watch"])


def test_the_number_of_processes_is_always_written():
    """Its default is the host's cores: a worker started elsewhere must get this side's number, not its own."""
    import os

    settings = WorkerSettings(ventilator="h:1", processes=os.cpu_count() or 1)
    assert to_argv(settings) == ["--ventilator", "h:1", "--processes", str(settings.processes)]


@pytest.mark.parametrize("argv, message", [
    (["--spot-watch-cloud", "gce"], "--spot-watch-cloud gce needs --spot-watch"),
    (["--gce-metadata-host", "127.0.0.1:1"], "--gce-metadata-host is for --spot-watch --spot-watch-cloud gce"),
    (["--spot-watch", "--gce-metadata-host", "127.0.0.1:1"],
     "--gce-metadata-host is for --spot-watch --spot-watch-cloud gce"),
    (["--spot-watch", "--spot-watch-cloud", "gce", "--imds-endpoint", "http://127.0.0.1:1"],
     "--imds-endpoint is EC2's: with --spot-watch-cloud gce, --gce-metadata-host"),
])
def test_a_watch_option_that_would_do_nothing_is_one_line(argv, message):
    """A cloud chosen without the watch, or the other cloud's endpoint, would be accepted and ignored: a Spot VM
    then goes without draining while its operator believes it watches."""
    with pytest.raises(SettingsError, match=message):
        parse(WorkerSettings, ["--ventilator", "h:1", *argv])


def _keys(directory, damage: str) -> None:
    """A --curve-dir mlm-keys made, then ``damage``d: a key file gone, garbage, or a directory in its place."""
    import shutil

    from common.wire.security import generate

    generate(str(directory))
    secret = directory / "client.key_secret"
    if damage == "missing":
        secret.unlink()
    elif damage == "corrupt":
        secret.write_text('public-key = "not a key"\nsecret-key = "nor this"\n')
    elif damage == "unreadable":
        secret.unlink()
        secret.mkdir()
    elif damage == "empty":
        shutil.rmtree(directory)
        directory.mkdir()


@pytest.mark.parametrize("damage, said", [("empty", "client.key_secret is missing"),
                                          ("missing", "client.key_secret is missing"),
                                          ("corrupt", "client.key_secret holds no valid public key"),
                                          ("unreadable", "client.key_secret cannot be read")])
def test_a_curve_dir_without_usable_keys_is_one_line_before_any_work(tmp_path, damage, said):
    """The real command, two processes: one line naming the file and mlm-keys, exit 2, no process started (each
    had printed a traceback and been restarted for ever)."""
    import os
    import subprocess
    import sys

    from tests.support.helpers import REPO

    keys = tmp_path / "keys"
    _keys(keys, damage)
    ran = subprocess.run([sys.executable, "-m", "worker", "--ventilator", "127.0.0.1:1", "--processes", "2",
                          "--curve-dir", str(keys)], capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={key: value for key, value in os.environ.items() if not key.startswith("MLM_")})
    assert ran.returncode == 2, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and f"mlm-keys {keys}" in lines[0], ran.stderr


def test_a_curve_dir_with_the_keys_mlm_keys_made_passes_the_check(tmp_path):
    from common.wire.security import Curve

    _keys(tmp_path / "keys", "none")
    Curve(str(tmp_path / "keys")).check_client()
