"""The ventilator's command line as one RunConfig (ventilator/run_config.py): defaults from one source, the
MLM_* variables, the axes' options, one-line refusals, and the settings handed to the sink and the workers."""

from __future__ import annotations

import dataclasses

import pytest

from common.job.cli_settings import parse as parse_settings
from common.job.cli_settings import to_argv
from common.job.config import JobConfig, standard_steps
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
    monkeypatch.setenv("MLM_VENTILATOR_DATA", "from-env")
    monkeypatch.setenv("MLM_VENTILATOR_TASK_SIZE", "256K")
    monkeypatch.setenv("MLM_VENTILATOR_FORMAT", "jsonl")
    monkeypatch.setenv("MLM_VENTILATOR_SINK", "sinkhost:7000")
    monkeypatch.setenv("MLM_VENTILATOR_DUPE_FACTOR", "4")
    monkeypatch.setenv("MLM_LOADER_DATA", "the loader's")  # another role's: not read here
    monkeypatch.setenv("MLM_SINK_PORT", "1")  # the sink's --port, not the ventilator's --sink-port
    config = parse(["--output", "out"])
    assert config.input.data == "from-env"
    assert config.input.task_size == 256 * 1024
    assert config.input.corpus_format == "jsonl"
    assert config.sink.sink_address == "sinkhost:7000" and not config.sink.starts_sink
    assert config.sink.sink_port == SinkSettings.port
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


def test_a_publisher_that_cannot_publish_is_one_line_before_any_work(tmp_path, monkeypatch):
    """--cloudwatch-namespace without a region anywhere (flag, AWS_DEFAULT_REGION, ~/.aws/config) was botocore's
    traceback after the sink and the workers had started; now the publisher's ``check``, before any work."""
    from click.testing import CliRunner

    from ventilator.cli import main

    for key in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    result = CliRunner().invoke(main, ["--data", str(tmp_path / "none"), "--output", str(tmp_path / "out"),
                                       "--cloudwatch-namespace", "ns"])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines() == [
        "ventilator: error: --cloudwatch-namespace: no AWS region to publish to: give --cloudwatch-region, or set "
        "AWS_DEFAULT_REGION"]
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
    from common.job.cli_settings import option_fields

    names = [f.name for f in option_fields(RunConfig)]
    assert len(names) == len(set(names))
    assert {"data", "output", "vport", "sink_address", "workers", "launcher", "verbose"} <= set(names)


def test_a_publishers_flags_are_its_own_params_and_another_publishers_are_refused():
    """CloudWatch's and Cloud Monitoring's flags are declared in their modules (ventilator/publishers/): the
    chosen one gets its own, typed, and a flag of one not chosen is refused in one line, for either."""
    config = parse([*REQUIRED, "--backlog-publisher", "cloud-monitoring", "--cloud-monitoring-project", "p",
                    "--cloud-monitoring-seconds", "5"])
    from ventilator.publishers import publisher_named

    chosen = publisher_named(config.metrics.backlog_publisher)
    params = chosen.make_params(config.metrics.publisher_params)
    assert (params.project, params.seconds) == ("p", 5.0) and chosen.enabled(params)
    assert not publisher_named("cloudwatch").enabled(publisher_named("cloudwatch").make_params({}))
    for argv, message in [
            (["--cloudwatch-namespace", "ns", "--backlog-publisher", "cloud-monitoring", "--cloud-monitoring-project",
              "p"], "--cloudwatch-namespace is for --backlog-publisher cloudwatch"),
            (["--cloud-monitoring-endpoint", "http://x"], "--cloud-monitoring-endpoint is for --backlog-publisher "
                                                          "cloud-monitoring")]:
        with pytest.raises(ConfigError) as refused:
            parse([*REQUIRED, *argv])
        assert str(refused.value) == message


def _variant(base, name: str, **fields):
    """A plugin's variant of ``base`` declaring ``fields`` (name -> param(...))."""
    params = dataclasses.make_dataclass(f"{name}Params", [(key, type(value.default), value)
                                                           for key, value in fields.items()], frozen=True)
    return type(name.title(), (base,), {"name": name, "Params": params, "__module__": "plugin"})


def test_two_plugin_variants_declaring_one_flag_are_refused_naming_both(monkeypatch):
    """Two publishers (or a launcher and a publisher) with a field of one name and type were one flag; now a
    one-line refusal when the options are made, naming both; the same field declared shared by both is one."""
    from common.job.params import param
    from ventilator import run_config
    from ventilator.launchers.local import LocalLauncher
    from ventilator.publishers import BacklogPublisher, publishers

    first = _variant(BacklogPublisher, "first", region=param("", "Where."))
    second = _variant(BacklogPublisher, "second", region=param("eu", "Where, too."))
    monkeypatch.setattr(run_config, "publishers", lambda: {**publishers(), "first": first, "second": second})
    with pytest.raises(run_config.VariantsError) as refused:
        parse(REQUIRED)
    assert str(refused.value.message).startswith("--region is declared by 'first' (plugin.First) and by 'second' (")

    monkeypatch.setattr(run_config, "publishers", lambda: {**publishers(), "first": first})
    monkeypatch.setattr(run_config, "launchers", lambda: {"local": LocalLauncher,
                                                          "far": _variant(LocalLauncher, "far", region=param("", "."))})
    with pytest.raises(run_config.VariantsError, match="--region is declared by 'far'.* and by 'first'"):
        parse(REQUIRED)

    sharing = [_variant(BacklogPublisher, name, region=param("", "Where.", shared=True)) for name in ("a", "b")]
    monkeypatch.setattr(run_config, "launchers", lambda: {"local": LocalLauncher})
    monkeypatch.setattr(run_config, "publishers", lambda: {**publishers(), "a": sharing[0], "b": sharing[1]})
    with pytest.raises(ConfigError, match="^--region is for --backlog-publisher a or b$"):  # one flag, theirs
        parse([*REQUIRED, "--region", "x"])

    from common.objectives import objectives

    flagged = _variant(objectives()["tokens"], "flagged", dupe_factor=param(2, "Copies.", flag="--flagged-copies"))
    monkeypatch.setattr(run_config, "objectives", lambda: {**objectives(), "flagged": flagged})
    with pytest.raises(run_config.VariantsError, match=r"^--dupe-factor \('albert'.*\) and --flagged-copies "
                                                      r"\('flagged' \(plugin.Flagged\)\) set one job parameter"):
        parse(REQUIRED)  # a flag of its own, but the job's values go by field name: --dupe-factor would set it
    monkeypatch.setattr(run_config, "objectives", objectives)

    monkeypatch.setattr(run_config, "publishers", lambda: {**publishers(), "o": _variant(
        BacklogPublisher, "o", workers=param(1, "A field named as the ventilator's own option."))})
    with pytest.raises(run_config.VariantsError, match="^--workers is the ventilator's own option and a parameter "
                                                      "of 'o' "):
        parse(REQUIRED)


def test_a_step_flag_that_is_a_variants_is_refused_naming_both(monkeypatch):
    """A plugin step switched on by its own flag, with another flag an objective or a publisher has: refused
    (click would let one win), naming the step and the variants, not "declared twice (--x and --x)"."""
    from common.job.params import param
    from common.steps import Step, steps
    from ventilator import run_config

    for flag, owner in [("--max-seq-length", "'albert', 'bert', 'electra', 'roberta', 'tokens' (Objective)"),
                        ("--cloudwatch-region", "'cloudwatch' (Metrics and autoscaling)")]:
        params = dataclasses.make_dataclass("CensusParams", [
            ("on", bool, param(False, "On.", flag="--census")), ("length", int, param(3, "A length.", flag=flag))],
            frozen=True)
        census = type("Census", (Step,), {"name": "census", "Params": params, "after": "read",
                                          "enabled": classmethod(lambda cls, p: p.on), "run": lambda self, run: None,
                                          "__module__": "plugin"})
        monkeypatch.setattr(run_config, "steps", lambda census=census: {**steps(), "census": census})
        with pytest.raises(run_config.VariantsError) as refused:
            parse(REQUIRED)
        assert refused.value.message == f"{flag} is declared by step census and {owner}: one flag each"


def test_adding_a_step_that_has_its_own_switch_names_its_flags():
    """--add-step holdout was "'holdout' is not one of ." (no step is added that way unless a plugin brings
    one): now the step's own flags, which switch it on."""
    import click

    for step, flags in [("holdout", "--holdout-fraction, --holdout-seed"), ("dedup", "--dedup, --minhash-")]:
        with pytest.raises(click.BadParameter, match=f"^{step} is switched on by its own flags \\({flags}"):
            parse([*REQUIRED, "--add-step", step])
    with pytest.raises(click.BadParameter, match="^no step 'nothing': --add-step takes a step that does not say "
                                                 "when it is on \\(none is installed\\)$"):
        parse([*REQUIRED, "--add-step", "nothing"])


def test_importing_the_command_line_with_a_broken_plugin_does_not_exit(tmp_path):
    """run_config.py found every variant (and exited on a broken plugin) when imported: now the options are made
    when the command is first used, and the broken plugin is its one-line error then."""
    import os
    import subprocess
    import sys

    from tests.support.helpers import REPO
    from tests.support.plugins import fake_install

    site = fake_install(tmp_path / "site", "broken", "[mlm_pipeline.publishers]\nbroken = no_such_module:Publisher\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    imported = subprocess.run([sys.executable, "-c", "import ventilator.cli, ventilator.run_config; print('ok')"],
                              capture_output=True, text=True, env=env, timeout=120)
    assert imported.returncode == 0 and imported.stdout == "ok\n", imported.stderr
    ran = subprocess.run([sys.executable, "-m", "ventilator", "--data", "d", "--output", str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert ran.returncode == 1 and not (tmp_path / "out").exists()
    assert ran.stderr.strip().splitlines() == [
        "mlm-ventilator: error: entry point broken = no_such_module:Publisher (group mlm_pipeline.publishers, from "
        "broken 1.0) cannot be loaded: ModuleNotFoundError: No module named 'no_such_module'"]


def test_the_cards_command_is_the_options_that_decide_the_data_from_their_declarations():
    from ventilator.run_config import data_command

    config = parse(["--data", "/home/me/corpus/wiki/", "--output", "/tmp/out", "--vocab-file", "/x/y/vocab.txt",
                    "--workers", "3", "--vport", "6000", "--shared-fs", "--s3-endpoint-url", "http://127.0.0.1:9",
                    "--task-size", "1M", "--objective", "albert", "--max-seq-length", "64", "--no-gzip",
                    "--holdout-fraction", "0.1", "--metrics-port", "9999", "--lease-seconds", "30", "-v"])
    assert data_command(config) == ("python -m ventilator --data wiki --task-size 1048576 --objective albert "
                                    "--vocab-file vocab.txt --max-seq-length 64 --no-gzip --holdout-fraction 0.1")
    assert data_command(parse(["--data", "s3://bucket/corpus/", "--output", "s3://bucket/out"])) == \
        "python -m ventilator --data corpus"


def test_the_address_handed_to_started_workers_and_sink_reads_back_for_an_ipv6_head():
    """A Slurm head node's NodeAddr may be IPv6: ``fe80::1:5557`` is no HOST:PORT (the worker refuses it), so the
    ventilator hands ``[fe80::1]:5557``."""
    from common.wire.transport import parse_address
    from tests.support.run_configs import run_config

    run = run_config("d", "o")
    for host in ("fe80::1", "10.0.0.5", "head-0"):
        for settings in (run.worker_settings(host), run.sink_settings(host)):
            assert parse_address(settings.ventilator, host_required=True) == (host, run.network.vport)
