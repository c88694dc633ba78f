"""The end of a resumed job reads the sink's journal no more.

At its end a resumed job removes the files its manifest does not list and writes the dataset card naming each
side's files: each was a pass over the whole journal, after the load's (three passes of ~9 s each at a million
lines: the scale bench's resume went from 12.8 s to 37.1 s).  What they need is gathered as the lines are read at
load and appended (``sink.manifest.Listing``), and the outputs are what reading the journal again made.
"""

from __future__ import annotations

import json

import pytest

from common.describe.dataset_card import write_card
from common.job.config import JobConfig
from common.job.params import Component
from common.storage import LocalStorage
from common.writers import writer_named
from sink.manifest import Manifest
from sink.server import SinkOptions, SinkServer
from tests.support.helpers import VOCAB, need_shared
from tests.support.run_configs import steps_of


@pytest.fixture(scope="module")
def tokenizer_json() -> str:
    need_shared()
    from common.tokenization import Vocabulary, load_tokenizer

    return Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB))).tokenizer.to_str()


def _line(config: JobConfig, task: str, files: list[dict]) -> dict:
    return {"task": task, "job": config.job_id, "source": f"wiki_{task}", "start": 0, "end": 100, "version": "v",
            "shards": files, "records": sum(f["records"] for f in files), "documents": 1, "skipped": {},
            "tokens": 10, "bytes": 10, "worker": "w"}


def _file(out, name: str, records: int, split: str = "") -> dict:
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_bytes(b"x" * records)
    return {"name": name, "records": records, "sha256": "0" * 64, "bytes": records, **({"split": split} if split
                                                                                       else {})}


def test_the_end_of_a_resumed_job_reads_the_journal_once_at_load_and_writes_what_a_reread_would(
        tmp_path, tokenizer_json):
    out = tmp_path / "out"
    config = JobConfig(data_uri="d", output_uri=str(out), reader=Component("wikiextractor"),
                       tokenizer_json=tokenizer_json, objective=Component("tokens", {"max_seq_length": 64}),
                       writer=Component("parquet"), steps=steps_of("line", holdout_fraction=0.25, holdout_seed=1))
    storage = LocalStorage(str(out))
    out.mkdir()
    # The earlier run: two sides, a task listed twice (both lines count in the card), and a file of a task it
    # did otherwise (written, never acknowledged) that nothing lists.
    lines = [_line(config, "a", [_file(out, "train/part-a.parquet", 3), _file(out, "validation/part-a.parquet", 1,
                                                                              "holdout")]),
             _line(config, "b", [_file(out, "train/part-b.parquet", 2)]),
             _line(config, "b", [_file(out, "train/part-b.parquet", 2)])]
    (out / "manifest.jsonl").write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    stale = out / "train" / "part-z.parquet"
    stale.write_bytes(b"an earlier run's")

    server = SinkServer(SinkOptions(ventilator="127.0.0.1:1", state_dir=str(tmp_path / "state")))
    server.config, server.output = config, storage
    server.manifest = Manifest(storage, config.job_id, str(tmp_path / "state"), writer_named("parquet").suffixes)
    server.manifest.load()
    assert server.manifest.passes == 1
    # This run's task, and a file its worker wrote for a task acknowledged by another (a lease ran out).
    server.manifest.append([_line(config, "c", [_file(out, "train/part-c.parquet", 5)])])
    orphan = out / "train" / "part-y.parquet"
    orphan.write_bytes(b"this run's, unacknowledged")

    assert server._finish("all tasks done", job_over=True) == 0
    assert server.manifest.passes == 1, "the end of the job read the journal again"
    assert not stale.exists() and not orphan.exists()
    assert all((out / name).exists() for name in ("train/part-a.parquet", "validation/part-a.parquet",
                                                  "train/part-b.parquet", "train/part-c.parquet"))
    card = (out / "README.md").read_bytes()
    assert b'path: "validation/part-*.parquet"' in card and b'path: "train/part-*.parquet"' in card
    write_card(storage, config)  # the whole published manifest read again, as the card was made before
    assert (out / "README.md").read_bytes() == card
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"] == 3 and summary["records"] == 4 + 2 + 5
    server.manifest.close()


def test_lines_dropped_at_load_list_nothing_their_files_are_removed_if_not_listed_again(tmp_path):
    """Lines dropped at load (their files gone) list nothing: their files are not kept from removal."""
    out = tmp_path / "out"
    out.mkdir()
    storage = LocalStorage(str(out))
    kept = {"task": "a", "job": "j", "shards": [{"name": "part-a.tfrecord", "records": 1, "sha256": "0",
                                                 "bytes": 1}]}
    gone = {"task": "b", "job": "j", "shards": [{"name": "part-b.tfrecord", "records": 1, "sha256": "0", "bytes": 1},
                                                {"name": "part-b2.tfrecord", "records": 1, "sha256": "0",
                                                 "bytes": 1}]}
    (out / "part-a.tfrecord").write_bytes(b"a")
    (out / "part-b.tfrecord").write_bytes(b"b")  # its companion is gone: the line is dropped, the task redone
    (out / "manifest.jsonl").write_text("".join(json.dumps(e) + "\n" for e in (kept, gone)))
    manifest = Manifest(storage, "j", str(tmp_path / "state"), writer_named("tfrecord").suffixes)
    manifest.load()
    assert manifest.listing.names == {"part-a.tfrecord"}
    assert not (out / "part-b.tfrecord").exists()  # removed at load, before its task is done again
    (out / "part-b.tfrecord").write_bytes(b"b, written again but not acknowledged")
    assert manifest.remove_unlisted() == ["part-b.tfrecord"]
    manifest.close()
