"""bench.stage_ab refuses a checkout it cannot run before it runs any: each is NAME=DIRECTORY."""

from click.testing import CliRunner

from bench.stage_ab import main


def test_a_checkout_that_is_not_name_equals_directory_is_refused(tmp_path):
    for spec in ["nameless", f"={tmp_path}", f"A={tmp_path / 'missing'}"]:
        result = CliRunner().invoke(main, [spec, "--alternations", "1", "--rounds", "1"])
        assert result.exit_code == 2 and "NAME=CHECKOUT" in result.output, spec
