"""The loader's command line as a user meets it: flags that would do nothing with the rest are refused in one
line before anything is served (as the ventilator refuses a step's flags while the step is off), naming the
variable when one gave the value, and its refusals say what is so and what to do."""

from __future__ import annotations

import os

import pytest

from tests.support.factories import finished_job, wiki_prefix
from tests.support.helpers import VOCAB
from tests.support.loader_helpers import LoaderProcess

pytestmark = pytest.mark.e2e

CLEAN = {key: "" for key in os.environ if key.startswith("MLM_")}  # no role's variable from the test's environment


@pytest.fixture(scope="module")
def tokens_output(tmp_path_factory):
    """A finished --objective tokens output (records of their documents' lengths) whose holdout step was on but
    held out no document (a fraction too small for a few hundred documents)."""
    work = tmp_path_factory.mktemp("loader-flags")
    return finished_job(work, "--vocab-file", VOCAB, "--objective", "tokens", "--output-format", "parquet",
                        "--holdout-fraction", "0.0000001", "--workers", "1",
                        data=wiki_prefix(work / "corpus", 200_000))


def refusal(output_dir, *args, env: dict | None = None, code: int = 2) -> str:
    server = LoaderProcess(output_dir, *args, env={**CLEAN, **(env or {})})
    output = server.wait(timeout=120)
    assert server.process.returncode == code, output
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if "rror" in line]
    assert len(errors) == 1, output
    return errors[0]


@pytest.mark.parametrize("args, said", [
    (["--batch-tokens", "512", "--batch-size", "8"], "--batch-size does nothing here: --batch-tokens sizes"),
    (["--batch-tokens", "512", "--masked-lm-prob", "0.3"], "--masked-lm-prob does nothing here: --dynamic-masking "
                                                          "is off"),
    (["--max-predictions-per-seq", "20"], "--max-predictions-per-seq does nothing here: --dynamic-masking is off"),
    (["--batch-size", "8", "--masked-lm-prob", "0.3"], "--masked-lm-prob does nothing here"),
])
def test_a_flag_that_would_do_nothing_is_refused(tokens_output, args, said):
    assert said in refusal(tokens_output, *args)


def test_a_refusal_names_the_variable_that_gave_the_value(tokens_output):
    said = refusal(tokens_output, "--batch-tokens", "512", env={"MLM_LOADER_MASKED_LM_PROB": "0.3"})
    assert "--masked-lm-prob (from MLM_LOADER_MASKED_LM_PROB) does nothing here" in said


def test_a_variable_of_the_name_every_role_once_shared_is_refused_naming_it(tokens_output):
    """MLM_MAX_PREDICTIONS_PER_SEQ, set for the ventilator, once made the loader refuse without naming it; the
    shared names are no command's now, and one left set is named rather than silently ignored."""
    said = refusal(tokens_output, "--batch-tokens", "65536", env={"MLM_MAX_PREDICTIONS_PER_SEQ": "20"})
    assert "MLM_MAX_PREDICTIONS_PER_SEQ (this command's --max-predictions-per-seq is " \
           "MLM_LOADER_MAX_PREDICTIONS_PER_SEQ)" in said


def test_another_roles_variables_are_not_the_loaders(tokens_output):
    """The ventilator's MLM_VENTILATOR_DATA (its corpus) and MLM_VENTILATOR_MAX_PREDICTIONS_PER_SEQ, in a
    fleet's shared environment, leave the loader alone."""
    server = LoaderProcess(tokens_output, "--batch-tokens", "65536",
                           env={**CLEAN, "MLM_VENTILATOR_DATA": "/nowhere",
                                "MLM_VENTILATOR_MAX_PREDICTIONS_PER_SEQ": "20"})
    try:
        from loader.client import LoaderClient

        with LoaderClient(server.address, timeout_seconds=60) as client:
            assert client.next_batch().record_ids.size
    finally:
        server.stop()


def test_a_variable_length_output_without_batch_tokens_says_to_use_them(tokens_output):
    said = refusal(tokens_output, "--batch-size", "8")
    assert "holds records of varying length" in said and "--batch-tokens" in said
    assert "mlm-verify" not in said  # nothing is corrupt


def test_an_empty_held_out_side_says_it_is_empty(tokens_output):
    """The job ran with --holdout-fraction and held out nothing: "run without --holdout-fraction" would be false."""
    said = refusal(tokens_output, "--batch-tokens", "512", "--split", "holdout", code=1)
    assert "the held-out side is empty" in said and "was run without" not in said
