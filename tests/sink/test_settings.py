"""The sink's settings (sink/settings.py): its command line and what the ventilator hands a sink it starts."""

from common.job.cli_settings import parse, to_argv
from sink.server import SinkOptions
from sink.settings import SinkSettings


def test_defaults_are_the_servers():
    settings = parse(SinkSettings, ["--ventilator", "h:1"])
    options = settings.server_options()
    assert options == SinkOptions(ventilator="h:1")


def test_handed_over_as_argv_and_back():
    settings = SinkSettings(ventilator="127.0.0.1:5557", port=6000, bind_host="127.0.0.1", state_dir="/tmp/s",
                            metrics_port=0, instance_hourly_price=0.25, verbose=1)
    assert parse(SinkSettings, to_argv(settings)) == settings
    assert "--instance-hourly-price" in to_argv(settings)
