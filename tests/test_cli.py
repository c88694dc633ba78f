"""Command-line conventions every role keeps."""

import click
import pytest

from common.tokenization.training import main as train_vocab
from loader.cli import main as loader
from sink.cli import main as sink
from ventilator.cli import main as ventilator
from worker.cli import main as worker


def _envvar(command: click.Command, option: click.Option) -> str:
    prefix = command.context_settings.get("auto_envvar_prefix", "")
    return option.envvar or f"{prefix}_{option.name.upper()}"


@pytest.mark.parametrize("command, prefix", [(ventilator, "MLM"), (worker, "MLM"), (sink, "MLM"),
                                             (loader, "MLM"), (train_vocab, "MLM_VOCAB")])
def test_every_option_reads_the_variable_named_after_it(command, prefix):
    """README: every option can be set by MLM_ + its name (--sink: MLM_SINK)."""
    for option in command.params:
        if not isinstance(option, click.Option):
            continue
        name = max(option.opts, key=len).lstrip("-").replace("-", "_").upper()
        assert _envvar(command, option) == f"{prefix}_{name}", option.opts
