"""The executor seam from outside: a throwaway launcher and backlog publisher, in a package "installed"
beside the test (a .dist-info with entry points, as pip leaves it), are found by name and used by the
ventilator's run; nothing in ventilator/ names them."""

import json
import os
import textwrap

import pytest

from tests.support.helpers import VOCAB, WIKI, manifest, need_shared, run_ventilator
from tests.support.plugins import fake_install

pytestmark = pytest.mark.e2e

PLUGIN = textwrap.dedent('''
    """A launcher that records each role before starting it locally, and a publisher that records the backlog;
    each with a flag of its own."""
    import json
    import os
    from dataclasses import dataclass

    from mlm_pipeline.plugin import BacklogPublisher, LocalLauncher, param


    @dataclass(frozen=True)
    class LauncherParams:
        recording_tag: str = param("none", "A word the launcher records.")


    @dataclass(frozen=True)
    class PublisherParams:
        recording_every: int = param(0, "Publish every N seconds (recorded only).")


    def _record(*item):
        with open(os.environ["THROWAWAY_RECORD"], "a") as out:
            out.write(json.dumps(item) + "\\n")


    class RecordingLauncher(LocalLauncher):
        name = "recording"
        Params = LauncherParams

        def start(self, role):
            _record("start", role.name, role.module, list(role.args), self.fleet.workers, self.params.recording_tag)
            super().start(role)


    class RecordingPublisher(BacklogPublisher):
        name = "recording"
        Params = PublisherParams

        def start(self):
            _record("publish", self.observe().backlog, self.params.recording_every)

        def close(self):
            _record("close", self.observe().backlog)
''')


def _install(site):
    fake_install(site, "throwaway-seams", "[mlm_pipeline.launchers]\nrecording = throwaway_seams:RecordingLauncher\n"
                 "[mlm_pipeline.publishers]\nrecording = throwaway_seams:RecordingPublisher\n",
                 {"throwaway_seams": PLUGIN}, version="0.1")


def test_a_launcher_and_a_publisher_from_an_installed_package_run_the_job(tmp_path):
    need_shared()
    site = tmp_path / "site"
    site.mkdir()
    _install(site)
    record = tmp_path / "record.jsonl"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
           "THROWAWAY_RECORD": str(record)}
    output = tmp_path / "out"
    result = run_ventilator(WIKI / "AA", output, "--vocab-file", VOCAB, "--task-size", "1M", "--workers", "1",
                            "--launcher", "recording", "--backlog-publisher", "recording", "--recording-tag", "fleet-a",
                            "--recording-every", "7", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in record.read_text().splitlines()]
    starts = [event for event in events if event[0] == "start"]
    assert [(name, module) for _, name, module, _, _, _ in starts] == [("sink", "sink"), ("workers", "worker")]
    assert {tag for *_, tag in starts} == {"fleet-a"}  # its own flag, given to it
    sink_args, worker_args = starts[0][3], starts[1][3]
    assert sink_args[:2] == ["--ventilator", sink_args[1]] and "--port" in sink_args
    assert worker_args[:2] == ["--ventilator", sink_args[1]] and starts[1][4] == 1
    publishes = [event for event in events if event[0] in ("publish", "close")]
    assert publishes[0][0] == "publish" and publishes[0][2] == 7 and publishes[-1] == ["close", 0]
    assert manifest(output) and all(entry["records"] > 0 for entry in manifest(output).values())


def test_a_launcher_name_nobody_declares_is_refused_by_the_command(tmp_path):
    result = run_ventilator(WIKI / "AA", tmp_path / "out", "--vocab-file", VOCAB, "--launcher", "nope")
    assert result.returncode == 2 and "Invalid value for '--launcher'" in result.stderr
    assert not (tmp_path / "out").exists()
