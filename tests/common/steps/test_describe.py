"""A step describes itself (common/steps/base.py ``Describes``): a plugin step that writes a side of its own and
counts things gets its side and its sections in dataset_info.json, the dataset card, mlm-report's numbers and
page, and the loader's ``--split``, with none of those modules edited.

The step is installed as another package installs one: a module on the path and a distribution's entry point
in the group ``mlm_pipeline.steps``.  One real task runs through the job's steps (TaskProcessor), its
acknowledgement goes through the wire codec into the sink's manifest line, and every describer reads that.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from common import steps as steps_package
from common.describe import dataset_card, dataset_info
from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import Task
from common.output.files import SUMMARY_NAME
from common.output.manifest import read_entries
from common.steps import split_of
from common.storage import LocalStorage
from common.wire import protocol
from loader.shards import ShardList, splits
from report import build, page
from sink.manifest import Manifest
from sink.server import manifest_entry
from sink.verify import verify_output
from tests.support.helpers import REPO
from tests.support.plugins import fake_install
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor

PLUGIN = textwrap.dedent('''
    """A plugin step: every ``demo_every``-th training document goes to a side of its own, "dev"."""
    from dataclasses import dataclass

    from mlm_pipeline.plugin import InfoSection, Part, ReportSection, Side, Step, param

    SIDE = Side("dev", "dev", label="development", flag="--add-step demo-validation")


    @dataclass(frozen=True)
    class Params:
        demo_every: int = param(3, "Every this many documents, one is set aside for validation.")


    class DemoValidation(Step):
        name = "demo-validation"
        Params = Params
        after = "read"
        makes = "parts"
        sides = (SIDE,)
        info_section = InfoSection(switch="demo_every", off=0)
        report_section = ReportSection("Demo validation", "The job ran without --add-step demo-validation.")

        def run(self, run):
            (train,) = run.parts
            kept = [d for i, d in enumerate(train.documents) if i % self.params.demo_every]
            aside = [d for i, d in enumerate(train.documents) if not i % self.params.demo_every]
            run.stats.count(self.name, "set_aside", len(aside))
            train.documents = kept
            run.parts.append(Part(SIDE.split, "dev:" + train.key, SIDE.stem(train.stem), aside))

        @classmethod
        def card_lines(cls, section):
            return [f"- set aside for validation: one document in {section['demo_every']}" if section else
                    "- set aside for validation: nothing"]
''')

WIKI_TEXT = "".join(f'<doc id="{i}" url="u" title="T{i}">\nT{i}\n\n'
                    + "A longer sentence about the history of the world. It goes on for a while.\n" * 4 + "</doc>\n"
                    for i in range(12))


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    """The step's module and its distribution's metadata, as pip would install them."""
    return fake_install(tmp_path_factory.mktemp("plugin"), "mlm-demo-validation",
                        "[mlm_pipeline.steps]\ndemo-validation = demo_validation_step\n",
                        {"demo_validation_step": PLUGIN}, version="0.1")


@pytest.fixture
def installed(monkeypatch, plugin_path):
    monkeypatch.syspath_prepend(str(plugin_path))
    steps_package.steps.cache_clear()
    yield
    monkeypatch.undo()
    steps_package.steps.cache_clear()
    sys.modules.pop("demo_validation_step", None)


@pytest.fixture
def output(tmp_path, vocabulary, installed):
    """A finished one-task output of a job with the plugin step and the held-out split."""
    plain = steps_of("line", holdout_fraction=0.25, holdout_seed=1)
    steps = (plain[0], Component("demo-validation", {"demo_every": 3}), *plain[1:])
    config = JobConfig(data_uri="", output_uri=str(tmp_path), reader=Component("wikiextractor"),
                       tokenizer_json=vocabulary.tokenizer.to_str(),
                       objective=Component("bert", {"dupe_factor": 1, "max_seq_length": 64}),
                       writer=Component("parquet"), steps=steps)
    storage = LocalStorage(str(tmp_path))
    data = WIKI_TEXT.encode()
    task = Task("wiki_00", 0, len(data), len(data), "v")
    result = TaskProcessor(config, vocabulary, storage).process(task, data)
    ack = protocol.TaskAck(task.task_id, config.job_id, "w", task.path, 0, task.end, "v", result.files,
                           result.records, result.stats.to_wire())
    manifest = Manifest(storage, config.job_id, str(tmp_path / "state"))
    manifest.load()
    manifest.append([manifest_entry(protocol.decode(protocol.encode(ack)))])
    manifest.close()
    storage.put_bytes(SUMMARY_NAME, json.dumps({"complete": True, "reason": "all tasks done"}).encode())
    dataset_info.write(storage, config, manifest.totals, complete=True)
    dataset_card.write_card(storage, config)
    return storage, config, manifest.totals


def test_a_plugin_steps_side_and_counters_are_described_everywhere(output, plugin_path):
    storage, config, totals = output
    entries = read_entries(storage)
    validation = [f for e in entries for f in e["shards"] if split_of(f) == "dev"]
    assert validation and all(f["name"].startswith("dev/") for f in validation)
    assert totals["demo-validation"] == {"set_aside": 4} and totals["dev"]["documents"] == 4

    info = dataset_info.read(storage)
    assert info["demo-validation"] == {"demo_every": 3}
    assert info["dev_totals"] == totals["dev"] and info["dev_totals"]["shards"] == 1
    assert info["holdout"]["fraction"] == 0.25 and info["dedup"] is None  # the built-in sections are unchanged
    off = {**info, "demo-validation": None}
    from ventilator.run_config import described_flags

    assert "--demo-every none → 3" not in dataset_info.changed_options(off, info, described_flags())
    assert "--demo-every 0 → 3" in dataset_info.changed_options(off, info, described_flags())

    # mlm-verify checks each side's totals against the manifest's files of that side
    assert verify_output(storage).problems == []
    wrong = {**info, "dev_totals": {**info["dev_totals"], "shards": 2}}
    storage.put_bytes(dataset_info.DATASET_INFO, json.dumps(wrong).encode())
    assert verify_output(storage).problems == [f"dataset_info.json counts {info['dev_totals']['records']} records in 2 "
                                               f"files on the development side, the manifest "
                                               f"{info['dev_totals']['records']} in 1"]
    storage.put_bytes(dataset_info.DATASET_INFO, json.dumps(info).encode())

    card = storage.get_bytes(dataset_card.CARD_NAME).decode()
    assert '  - split: dev\n    path: "dev/part-*.parquet"' in card
    assert '  - split: validation\n    path: "validation/part-*.parquet"' in card
    assert '  - split: train\n    path: "train/part-*.parquet"' in card
    assert "- set aside for validation: one document in 3" in card

    report = build.build_report(storage, input_budget_bytes=0)
    assert report["sides"]["dev"]["files"] == 1 and report["sides"]["dev"]["documents"] == 4
    assert report["sample"]["records_read"]["dev"] == sum(f["records"] for f in validation)
    assert report["demo-validation"] == {"counters": {"set_aside": 4}} and report["dedup"] is None
    html = page.render(report)
    assert "<h2>Demo validation</h2>" in html and "set_aside" in html
    read = report["sample"]["records_read"]
    assert (f"{read['train']:,} training, {read['dev']:,} development and {read['holdout']:,} held-out records"
            in html)
    assert "The job ran without --dedup." in html

    assert "dev" in splits()
    assert ShardList.from_entries(entries, "dev").names == tuple(f["name"] for f in validation)
    assert not set(ShardList.from_entries(entries, "train").names) & {f["name"] for f in validation}
    help_text = subprocess.run([sys.executable, "-m", "loader", "--help"], cwd=REPO, capture_output=True, text=True,
                               timeout=120, env={**os.environ,
                                                 "PYTHONPATH": os.pathsep.join([str(plugin_path), str(REPO)])}).stdout
    assert "--split [train|dev|holdout]" in help_text
    flat = re.sub(r"(?<=\w-) (?=\w)", "", " ".join(help_text.split()))  # click's wrapping undone
    assert "or the development side (--add-step demo-validation)" in flat


def test_lines_written_before_splits_had_names_are_read_through_the_steps_own_mark():
    """The held-out step knows its old mark (``"holdout": true`` on a file), not the manifest."""
    assert split_of({"name": "holdout/part-a.tfrecord", "records": 1, "holdout": True}) == "holdout"
    assert split_of({"name": "part-a.tfrecord", "records": 1}) == ""
    assert split_of({"name": "part-a.tfrecord", "records": 1, "unknown": True}) == ""
