"""The dataset card's "how it was made" and dataset_info.json's command show the options that decide the data,
paths by their last part: two fleets (other directories, ports, workers, an option from its variable) that make
the same data make the same card, and no local path is published."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.support.factories import finished_run, wiki_prefix
from tests.support.helpers import VOCAB

pytestmark = pytest.mark.e2e


def test_two_fleets_making_the_same_data_make_the_same_card(tmp_path):
    """One corpus on a shared filesystem (its path is part of the job's id, so a resume finds its job), made by
    two fleets: other outputs, vocab copies, state directories, ports and workers, a flag given on the command
    line by one and by its variable by the other."""
    data = wiki_prefix(tmp_path / "shared" / "wiki", 150_000)
    clean = {key: "" for key in os.environ if key.startswith("MLM_")}
    runs = []
    for fleet, workers, env, extra in [("fleet-a", 1, {}, ["--dupe-factor", "2"]),
                                       ("fleet-b", 2, {"MLM_VENTILATOR_DUPE_FACTOR": "2"}, ["-v"])]:
        root = tmp_path / fleet / "deep"
        vocab = root / "vocab" / VOCAB.name
        vocab.parent.mkdir(parents=True)
        shutil.copy(VOCAB, vocab)
        runs.append(finished_run(data, root / "out", "--vocab-file", vocab, "--max-seq-length", 64,
                                 "--workers", workers, *extra, env={**clean, **env}).output)
    cards = [(out / "README.md").read_text() for out in runs]
    commands = [json.loads((out / "dataset_info.json").read_text())["made_by"]["command"] for out in runs]
    assert commands[0] == commands[1] and cards[0] == cards[1]
    assert commands[0] == (f"python -m ventilator --data wiki --vocab-file {VOCAB.name} --max-seq-length 64 "
                           "--dupe-factor 2")
    assert commands[0] in cards[0]
    for text in (cards[0], commands[0]):
        assert str(tmp_path) not in text and "--workers" not in text and "--vport" not in text
        assert "--output" not in text and "--state-dir" not in text and "--bind-host" not in text
