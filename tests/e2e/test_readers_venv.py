"""The pieces of scripts/readers-venv.sh's check (tests/e2e/readers_venv.py) that need no venv: the README line it
installs is the readers extra, its documents are the oracle's, and its rebuilding of documents refuses what it
should.  The venv itself is a step of .ci/run (minutes, ~6 GB), not of the suite."""

import configparser
from collections import Counter

import pytest

from tests.common.tokenization.test_document_tokens import EXAMPLES, wikiextractor_texts
from tests.e2e import readers_venv
from tests.support.helpers import REPO


def test_the_install_line_is_the_readmes_and_the_extra_holds_streaming_with_its_own_pins():
    assert readers_venv.install_line() == "pip install '.[readers]'"
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    extra = config["options.extras_require"]["readers"].split()
    assert "mosaicml-streaming==0.13.0" in extra and any(e.startswith("litdata") for e in extra)
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert "bash scripts/readers-venv.sh" in ci and ci[-1] == "python -m pytest"
    assert ci.index("bash scripts/readers-venv.sh") < len(ci) - 1


def test_the_readme_commands_it_runs_are_the_modernbert_sections():
    tokenizer, ventilator = readers_venv.modernbert_commands()
    assert ventilator[ventilator.index("--output-format") + 1] == "mds"
    assert ventilator[ventilator.index("--max-seq-length") + 1] == str(readers_venv.MAX)
    assert tokenizer[tokenizer.index("--output") + 1].startswith("/tmp/mb/")


def test_its_documents_are_the_oracles():
    assert readers_venv.document_texts(EXAMPLES) == wikiextractor_texts(EXAMPLES)


def test_rebuilding_documents_refuses_a_lost_chunk_or_a_missing_special():
    samples = [{"input_ids": [0, 5, 6, 2], "document_id": 9, "chunk_index": 0},
               {"input_ids": [0, 7, 2], "document_id": 9, "chunk_index": 1}]
    assert readers_venv.rebuilt(samples, 0, 2) == Counter({(5, 6, 7): 1})
    with pytest.raises(AssertionError):
        readers_venv.rebuilt(samples[1:], 0, 2)  # chunk 0 lost
    with pytest.raises(AssertionError):
        readers_venv.rebuilt([{**samples[0], "input_ids": [0, 5, 6]}], 0, 2)
