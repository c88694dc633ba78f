"""The ventilator's command line as one RunConfig (ventilator/run_config.py): defaults from one source, the
MLM_* variables, the axes' options, one-line refusals, and the settings handed to the sink and the workers."""

from __future__ import annotations

import dataclasses

import pytest

from common.cli_settings import parse as parse_settings
from common.cli_settings import to_argv
from common.config import JobConfig, standard_steps
from common.steps.dedup.settings import DedupSettings
from sink.settings import SinkSettings
from ventilator.run_config import ConfigError, RunConfig, parse
from ventilator.server import ServerOptions
from worker.settings import WorkerSettings

REQUIRED = ["--data", "corpus", "--output", "out"]


@pytest.fixture(autouse=True)
def _no_mlm_variables(monkeypatch):
    import os

    for key in [key for key in os.environ if key.startswith("MLM_")]:
        monkeypatch.delenv(key)


def test_defaults_are_those_of_the_job_the_server_and_the_sink():
    config = parse(REQUIRED)
    assert config.input.data == "corpus" and config.job.output == "out" and config.job.params == {}
    assert config.server_options() == ServerOptions()
    assert config.sink_settings("127.0.0.1") == SinkSettings(ventilator="127.0.0.1:5557")
    assert config.input.task_size == 8 * 1024 * 1024
    assert config.delivery.lease_seconds == JobConfig.lease_seconds
    # the steps' own flags at their defaults: each step off
    assert DedupSettings(**config.job.steps["dedup"]) == DedupSettings()
    assert standard_steps(config.job.steps) == standard_steps()
    assert config.fleet.launcher == "local" and config.metrics.backlog_publisher == "cloudwatch"


def test_it_is_frozen():
    config = parse(REQUIRED)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.fleet.workers = 3  # type: ignore[misc]


def test_environment_variables_set_options_as_flags_do(monkeypatch):
    monkeypatch.setenv("MLM_DATA", "from-env")
    monkeypatch.setenv("MLM_TASK_SIZE", "256K")
    monkeypatch.setenv("MLM_FORMAT", "jsonl")
    monkeypatch.setenv("MLM_SINK", "sinkhost:7000")
    monkeypatch.setenv("MLM_DUPE_FACTOR", "4")
    config = parse(["--output", "out"])
    assert config.input.data == "from-env"
    assert config.input.task_size == 256 * 1024
    assert config.input.corpus_format == "jsonl"
    assert config.sink.sink_address == "sinkhost:7000" and not config.sink.starts_sink
    assert config.job.params == {"dupe_factor": 4}


def test_the_axes_options_given_are_the_jobs_params_and_unset_ones_absent():
    config = parse([*REQUIRED, "--objective", "albert", "--max-seq-length", "64", "--no-gzip",
                    "--cls-token", "<s>", "--dedup", "minhash", "--minhash-perm", "64"])
    assert config.job.params == {"max_seq_length": 64, "gzip": False}
    assert config.tokenizer.special_tokens() == {"cls": "<s>"}
    assert DedupSettings(**config.job.steps["dedup"]) == DedupSettings(mode="minhash", perm=64)


@pytest.mark.parametrize("flags, message", [
    (["--sink", "h:1", "--sink-metrics-port", "9100"], "--sink-metrics-port is for the sink this command starts"),
    (["--sink", "h:1", "--instance-hourly-price", "0.1"], "--instance-hourly-price is for the sink this command"),
    # the port is handed to the workers and the sink: a port the system picks (0) could not be
    (["--vport", "0"], r"--vport 0: not a port workers and the sink can be sent to \(1 to 65535\)"),
    (["--vport", "70000"], r"--vport 70000: not a port"),
    (["--sink-port", "0"], r"--sink-port 0: not a port workers and the sink can be sent to"),
    # this command's own listeners: two on one port, and the later one fails after the job was planned
    (["--vport", "6123", "--sink-port", "6123"], r"--vport and --sink-port are both 6123: one port each"),
    (["--metrics-port", "5557"], r"--vport and --metrics-port are both 5557: one port each"),
    (["--metrics-port", "9101", "--sink-metrics-port", "9101"],
     r"--metrics-port and --sink-metrics-port are both 9101: one port each"),
])
def test_options_that_do_not_go_together_are_one_line(flags, message):
    with pytest.raises(ConfigError, match=message) as refused:
        parse([*REQUIRED, *flags])
    assert "\n" not in str(refused.value)


def test_the_command_refuses_them_in_one_line_before_any_work(tmp_path):
    from click.testing import CliRunner

    from ventilator.cli import main

    result = CliRunner().invoke(main, ["--data", str(tmp_path / "none"), "--output", str(tmp_path / "out"),
                                       "--sink", "h:1", "--sink-metrics-port", "1"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "ventilator: error: --sink-metrics-port is for the sink this command starts; with --sink, give that sink "
        "its own --metrics-port"]
    assert not (tmp_path / "out").exists()


def test_the_sink_and_the_workers_get_their_settings_from_it_through_their_own_command_lines():
    config = parse([*REQUIRED, "--vport", "6000", "--sink-port", "6001", "--bind-host", "127.0.0.1",
                    "--state-dir", "/tmp/state", "--sink-metrics-port", "0", "--instance-hourly-price", "0.5",
                    "--curve-dir", "/keys", "--workers", "3", "-vv"])
    sink = config.sink_settings("10.0.0.1")
    assert sink == SinkSettings(ventilator="10.0.0.1:6000", port=6001, bind_host="127.0.0.1", state_dir="/tmp/state",
                                curve_dir="/keys", metrics_port=0, instance_hourly_price=0.5, verbose=2)
    assert parse_settings(SinkSettings, to_argv(sink)) == sink
    workers = config.worker_settings("10.0.0.1")
    assert workers == WorkerSettings(ventilator="10.0.0.1:6000", processes=3, curve_dir="/keys", verbose=2)
    assert parse_settings(WorkerSettings, to_argv(workers)) == workers


def test_every_option_is_a_field_of_one_group():
    from common.cli_settings import option_fields

    names = [f.name for f in option_fields(RunConfig)]
    assert len(names) == len(set(names))
    assert {"data", "output", "vport", "sink_address", "workers", "launcher", "verbose"} <= set(names)
