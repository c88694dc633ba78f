"""The local-processes launcher (ventilator/launchers/local.py): roles as real child processes."""

from sink.settings import SinkSettings
from ventilator.launchers import DEFAULT_LAUNCHER, Launcher, Role, launcher_named, launchers
from ventilator.launchers.local import LocalLauncher


def test_found_by_name_and_the_default():
    assert launchers()["local"] is LocalLauncher is launcher_named(DEFAULT_LAUNCHER)
    assert issubclass(LocalLauncher, Launcher)


def test_an_unknown_name_is_one_line():
    import pytest

    with pytest.raises(ValueError, match=r"unknown launcher 'nope' \(known: .*local"):
        launcher_named("nope")


def test_a_role_runs_its_module_with_the_settings_as_argv():
    role = Role.of("sink", "sink", SinkSettings(ventilator="127.0.0.1:1", port=7001, verbose=1))
    assert role.args == ("--ventilator", "127.0.0.1:1", "--port", "7001", "-v")
    lines: list[str] = []
    launcher = LocalLauncher(relay=lines.append)
    launcher.start(Role("help", "sink", ("--help",)))
    assert launcher.wait(timeout=60) == {"help": 0}
    assert launcher.all_exited() and launcher.failure() is None
    assert any("--instance-hourly-price" in line for line in lines)


def test_a_role_that_fails_is_reported_in_one_line():
    launcher = LocalLauncher()
    launcher.start(Role("workers", "worker", ("--credit", "0", "--ventilator", "127.0.0.1:1")))  # click refuses: 2
    codes = launcher.wait(timeout=60)
    assert codes == {"workers": 2}
    assert launcher.failure() == "the local workers exited with status 2"


def test_terminate_stops_what_runs():
    launcher = LocalLauncher()
    launcher.start(Role("workers", "worker", ("--ventilator", "127.0.0.1:9", "--processes", "1")))
    assert not launcher.all_exited()
    launcher.terminate(grace=30)
    assert launcher.all_exited()
    assert launcher.wait(timeout=5)["workers"] is not None
