"""Cross-cutting: the command-line conventions every role (ventilator, worker, sink, loader, mlm-train-vocab) keeps."""

import os
import subprocess
import sys

import click
import pytest

from common.tokenization.training import main as train_vocab
from loader.cli import main as loader
from report.cli import main as report
from sink.cli import main as sink
from sink.verify import main as verify
from tests.support.helpers import REPO
from ventilator.cli import main as ventilator
from worker.cli import main as worker


@pytest.mark.parametrize("command, prefix", [(ventilator, "MLM_VENTILATOR"), (worker, "MLM_WORKER"),
                                             (sink, "MLM_SINK"), (loader, "MLM_LOADER"), (report, "MLM_REPORT"),
                                             (verify, "MLM_VERIFY"), (train_vocab, "MLM_TRAIN_VOCAB")])
def test_every_option_reads_the_variable_named_after_its_command_and_flag(command, prefix):
    """docs/cli.md: every option can be set by MLM_, its command's name and its flag (mlm-loader --data:
    MLM_LOADER_DATA), so no two roles read one variable."""
    context = click.Context(command, auto_envvar_prefix=command.context_settings["auto_envvar_prefix"])
    options = [param for param in command.get_params(context) if isinstance(param, click.Option)]
    assert len(options) > 1
    for option in options:
        name = next(flag for flag in option.opts if flag.startswith("--")).lstrip("-").replace("-", "_").upper()
        assert option.envvar == f"{prefix}_{name}", option.opts


def test_no_two_commands_read_one_variable():
    read: dict[str, str] = {}
    for command in (ventilator, worker, sink, loader, report, verify, train_vocab):
        context = click.Context(command, auto_envvar_prefix=command.context_settings["auto_envvar_prefix"])
        for param in command.get_params(context):
            if isinstance(param, click.Option) and param.envvar:
                other = read.setdefault(param.envvar, command.name)
                assert other == command.name, (param.envvar, other, command.name)


def test_train_vocab_reads_every_input_format(tmp_path):
    """mlm-train-vocab reads through the pipeline's readers: Parquet rows train a vocabulary too."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    rows = [f"Document {i} talks about rivers, valleys and the sea number {i}." for i in range(200)]
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"id": [str(i) for i in range(200)], "text": rows}), tmp_path / "data" / "a.parquet",
                   row_group_size=50)
    result = CliRunner().invoke(train_vocab, ["--data", str(tmp_path / "data"), "--output", str(tmp_path / "v.txt"),
                                              "--vocab-size", "120"])
    assert result.exit_code == 0, result.output
    vocabulary = (tmp_path / "v.txt").read_text().split("\n")
    assert "rivers" in vocabulary and "[MASK]" in vocabulary


def test_two_variants_giving_one_option_two_types_are_refused_naming_both(monkeypatch, capsys):
    """A plugin objective whose parameter shares a name (so a flag) with an installed one but not its type:
    one line naming both variants, at discovery, instead of a TypeError traceback that kills --help."""
    import dataclasses

    import pytest

    from common.job.params import ParamClash, option_specs
    from common.objectives import objectives
    from ventilator import run_config

    bert = objectives()["bert"]
    clashing = {f.name for f in dataclasses.fields(bert.Params)} & {"masked_lm_prob"}
    assert clashing, "the test needs a field of BERT's"

    @dataclasses.dataclass(frozen=True)
    class PluginParams:
        masked_lm_prob: str = "0.15"

    class PluginObjective(bert):
        name = "plugin"
        Params = PluginParams

    with pytest.raises(ParamClash) as clash:
        option_specs([bert, PluginObjective])
    message = str(clash.value)
    assert "--masked-lm-prob" in message and "'bert'" in message and "'plugin'" in message
    assert "float" in message and "str" in message

    monkeypatch.setattr(run_config, "objectives", lambda: {"bert": bert, "plugin": PluginObjective})
    with pytest.raises(run_config.VariantsError) as refused:  # when the options are made: parse time
        run_config.parse(["--data", "d", "--output", "o"])
    assert refused.value.exit_code == run_config.EXIT_FAILED
    refused.value.show()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mlm-ventilator: error: --masked-lm-prob is declared float by 'bert'")


#: A step plugin that cannot be imported: the loader, mlm-report and mlm-verify ask the steps for their sides
#: since the steps describe themselves, and it reached them as a traceback (the loader's at import, --help too).
BROKEN_STEP = ("entry point broken = broken_step:Step (group mlm_pipeline.steps, from broken 1.0) cannot be loaded: "
               "RuntimeError: boom at import")


@pytest.fixture(scope="module")
def broken_env(tmp_path_factory):
    """An environment whose installed plugin's step raises when imported."""
    from tests.support.plugins import fake_install

    site = fake_install(tmp_path_factory.mktemp("site"), "broken", "[mlm_pipeline.steps]\nbroken = broken_step:Step\n",
                        {"broken_step": "raise RuntimeError('boom at import')\n"})
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}


@pytest.mark.parametrize("argv", [["loader", "--help"], ["loader", "--data", "{out}"], ["report", "{out}"],
                                  ["sink.verify", "{out}"]], ids=lambda argv: " ".join(argv))
def test_a_broken_step_plugin_is_one_line_not_a_traceback(broken_env, tmp_path, argv):
    (tmp_path / "manifest.jsonl").write_text("")
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "dataset_info.json").write_text('{"complete": true, "records": 0, "files": 0, "features": {}}')
    ran = subprocess.run([sys.executable, "-m", *[arg.format(out=tmp_path) for arg in argv]], capture_output=True,
                         text=True, env=broken_env, timeout=120)
    assert ran.returncode == 1
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"error: {BROKEN_STEP}"), ran.stderr


def test_a_steps_flag_from_the_environment_with_the_step_off_is_one_line_before_any_work(tmp_path):
    """MLM_VENTILATOR_HOLDOUT_SEED set (a fleet's shared environment, say) and no --holdout-fraction: the real
    command exits 1 with one line naming the flag and its variable, and writes nothing."""
    from tests.support.helpers import VOCAB, WIKI, need_shared

    need_shared()
    out = tmp_path / "out"
    ran = subprocess.run([sys.executable, "-m", "ventilator", "--data", str(WIKI), "--output", str(out),
                          "--vocab-file", str(VOCAB), "--workers", "1", "--state-dir", str(tmp_path / "state")],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "MLM_VENTILATOR_HOLDOUT_SEED": "5"})
    assert ran.returncode == 1, ran.stderr
    said = [line for line in ran.stderr.splitlines() if "does nothing here" in line]
    assert len(said) == 1 and "--holdout-seed (from MLM_VENTILATOR_HOLDOUT_SEED)" in said[0], ran.stderr
    assert not out.exists()


def test_a_refusal_a_variable_caused_names_it_and_another_roles_variable_is_not_read(tmp_path):
    """MLM_DUPE_FACTOR, which a fleet's shared environment once set for the ventilator, refused every
    --objective tokens job without naming itself.  Now each command reads only its own variables
    (MLM_VENTILATOR_*), and the refusal one causes names it."""
    from tests.support.helpers import VOCAB, WIKI, need_shared

    need_shared()
    base = {key: value for key, value in os.environ.items() if not key.startswith("MLM_")}
    argv = [sys.executable, "-m", "ventilator", "--data", str(WIKI), "--output", str(tmp_path / "out"), "--vocab-file",
            str(VOCAB), "--objective", "tokens", "--state-dir", str(tmp_path / "state")]
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**base, "MLM_VENTILATOR_DUPE_FACTOR": "10"})
    errors = [line for line in ran.stderr.splitlines() if "error" in line]
    assert ran.returncode == 1 and len(errors) == 1, ran.stderr
    assert "--dupe-factor (from MLM_VENTILATOR_DUPE_FACTOR) does not apply to --objective tokens" in errors[0]
    # Another command's variable is not read: only the (deliberately too long) length is refused.
    ran = subprocess.run([*argv, "--max-seq-length", str(2**31)], capture_output=True, text=True, timeout=120,
                         cwd=REPO, env={**base, "MLM_LOADER_DATA": "/nowhere", "MLM_SINK_PORT": "1",
                                        "MLM_WORKER_CREDIT": "oops"})
    errors = [line for line in ran.stderr.splitlines() if "error" in line]
    assert ran.returncode == 1 and len(errors) == 1 and "--max-seq-length" in errors[0], ran.stderr
    # The name every role once shared is no command's: left set, it is named, not silently ignored.
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**base, "MLM_DUPE_FACTOR": "10"})
    errors = [line for line in ran.stderr.splitlines() if "rror" in line]
    assert ran.returncode == 2 and len(errors) == 1, ran.stderr
    assert "MLM_DUPE_FACTOR (this command's --dupe-factor is MLM_VENTILATOR_DUPE_FACTOR)" in errors[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("module, command, variable", [
    ("loader", ["--data", "s3://bucket/prefix"], "MLM_LOADER_S3_ENDPOINT_URL"),
    ("report", ["s3://bucket/prefix"], "MLM_REPORT_S3_ENDPOINT_URL"),
    ("sink.verify", ["s3://bucket/prefix"], "MLM_VERIFY_S3_ENDPOINT_URL"),
])
def test_an_endpoint_with_credentials_from_a_variable_is_refused_naming_the_variable_not_the_secret(
        module, command, variable):
    """--s3-endpoint-url from the environment, holding user:secret@: the loader's refusal named its variable,
    mlm-report's and mlm-verify's did not (their errors were printed without ``naming_variables``)."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("MLM_")}
    ran = subprocess.run([sys.executable, "-m", module, *command], capture_output=True, text=True, timeout=120,
                         cwd=REPO, env={**base, variable: "http://AKIAEXAMPLE:wJalrXUtnFEMI@127.0.0.1:7480"})
    errors = [line for line in ran.stderr.splitlines() if "rror" in line]
    assert ran.returncode == 1 and len(errors) == 1, ran.stderr
    assert f"--s3-endpoint-url (from {variable}) holds a user name or password" in errors[0], errors[0]
    assert "wJalrXUtnFEMI" not in ran.stderr + ran.stdout and "AKIAEXAMPLE" not in ran.stderr + ran.stdout


#: Malformed HOST:PORT forms a user types, each of which ZeroMQ took and waited on for ever.
BAD_ADDRESSES = ["[::1", "[::1]x:5555", ":5555", "host:", "host:99999", "host:0", "host :5555", "tcp://h:1",
                 "::1", "[host]:5555"]


def _refused(argv: list[str], flag: str, address: str) -> None:
    """The real command exits 2 (a usage error) at once, one Error line naming the flag and the text."""
    ran = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={key: value for key, value in os.environ.items() if not key.startswith("MLM_")})
    assert ran.returncode == 2, (address, ran.stderr)
    said = [line for line in ran.stderr.splitlines() if line.startswith("Error:")]
    assert len(said) == 1 and f"'{flag}'" in said[0] and repr(address) in said[0] and "HOST:PORT" in said[0], \
        ran.stderr
    assert "Traceback" not in ran.stderr


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_a_worker_given_a_malformed_ventilator_address_is_refused_before_any_work(address):
    _refused(["worker", "--ventilator", address], "--ventilator", address)


@pytest.mark.parametrize("argv, flag", [(["sink", "--ventilator", "{a}"], "--ventilator"),
                                        (["worker", "--ventilator", "127.0.0.1:1", "--sink", "{a}"], "--sink"),
                                        (["ventilator", "--data", "x", "--output", "y", "--sink", "{a}"], "--sink")])
@pytest.mark.parametrize("address", ["[::1", "host:"])
def test_every_host_port_option_of_the_fleet_refuses_a_malformed_address(argv, flag, address):
    _refused([arg.format(a=address) for arg in argv], flag, address)


@pytest.mark.parametrize("text, parsed", [("10.0.0.5:5557", ("10.0.0.5", 5557)), ("[::1]:5558", ("::1", 5558)),
                                          ("mlm-ventilator-0.svc.local", ("mlm-ventilator-0.svc.local", 5557)),
                                          ("[fe80::1]", ("fe80::1", 5557)), ("h:65535", ("h", 65535))])
def test_the_well_formed_addresses_parse(text, parsed):
    from common.wire.transport import parse_address

    assert parse_address(text, 5557, host_required=True) == parsed
    assert parse_address(":5558", 5557) == ("", 5558)  # the wire's "the ventilator's own host" (a job's sink)


#: A step plugin written as the demo's demo-drop-digits (tests/data/plugin_demo), by an author with click's
#: habits: its help given among click's settings, and a help text that says its default itself.
CLICK_HABIT_STEP = '''from dataclasses import dataclass
from mlm_pipeline.plugin import Step, param

@dataclass(frozen=True)
class P:
    habit_max_digits: int = param(1000, {help!r}, cli={{"help": "Documents with more digits than this are dropped."}})
    habit_min_digits: int = param(0, "Documents with fewer digits than this are dropped.  [default: 0]")

class DropDigits(Step):
    name = "habit-drop-digits"
    Params = P
    after = "read"
    makes = "documents"

    def run(self, run):
        pass
'''


def _habit_help(site, help_text: str) -> subprocess.CompletedProcess:
    from tests.support.plugins import fake_install

    fake_install(site, "habit", "[mlm_pipeline.steps]\nhabit-drop-digits = habit_step:DropDigits\n",
                 {"habit_step": CLICK_HABIT_STEP.format(help=help_text)})
    return subprocess.run([sys.executable, "-m", "ventilator", "--help"], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])})


def test_a_plugins_help_given_as_click_takes_it_is_its_help_and_a_default_it_states_is_shown_once(tmp_path):
    """``param(cli={"help": ...})`` raised a TypeError (click's "multiple values for 'help'") that killed --help;
    a help holding ``[default: 0]`` showed a second default."""
    ran = _habit_help(tmp_path / "site", "")
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    text = " ".join(ran.stdout.split())
    assert text.count("Documents with more digits than this are dropped.") == 1
    assert "default: 1000]" in text.split("--habit-max-digits", 1)[1].split("--habit-min-digits")[0]
    minimum = text.split("--habit-min-digits", 1)[1].split(" --")[0]
    assert minimum.count("default:") == 1 and "[default: 0]" in minimum, minimum


def test_a_plugin_giving_two_help_texts_is_one_line_naming_it(tmp_path):
    ran = _habit_help(tmp_path / "site", "Another help.")
    assert ran.returncode == 1
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "habit-drop-digits = habit_step:DropDigits" in lines[0] and "help" in lines[0], \
        ran.stderr


@pytest.mark.parametrize("argv, code, missing", [
    (["sink", "--ventilator", "127.0.0.1:1"], 2, "server.key_secret is missing"),
    (["ventilator", "--data", "{tmp}/in", "--output", "{tmp}/out", "--vocab-file", "{vocab}", "--workers", "0",
      "--bind-host", "127.0.0.1", "--vport", "{port}", "--sink-port", "{sink_port}", "--state-dir", "{tmp}/state"],
     1, "server.key_secret is missing"),
])
def test_a_server_whose_curve_dir_lacks_its_keys_is_one_line_before_any_work(tmp_path, argv, code, missing):
    """The sink and the ventilator serve with server.key_secret: without it each printed a traceback (the
    sink's after it had started)."""
    from tests.support.helpers import VOCAB, free_ports

    keys = tmp_path / "keys"
    keys.mkdir()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("A document that would be worked on.\n")
    port, sink_port = free_ports(2)
    argv = [arg.format(tmp=tmp_path, vocab=VOCAB, port=port, sink_port=sink_port) for arg in argv]
    ran = subprocess.run([sys.executable, "-m", *argv, "--curve-dir", str(keys)],
                         capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={key: value for key, value in os.environ.items() if not key.startswith("MLM_")})
    assert ran.returncode == code, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and missing in lines[0] and f"mlm-keys {keys}" in lines[0], ran.stderr
    assert not (tmp_path / "out").exists()
