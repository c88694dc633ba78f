"""What the loader must not serve: the held-out side as training batches, a
half-written output, shards that are missing or cut; and a shard failing
while serving ends one rank's stream with an error, never the server."""

from __future__ import annotations

import json
import shutil

import pytest

from loader.client import LoaderClient, LoaderError, server_status
from loader.shards import DatasetError, open_dataset
from tests.support.factories import finished_job
from tests.support.helpers import WIKI, need_shared, run_ventilator
from tests.support.loader_helpers import DATASET_ARGS, LoaderProcess, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def held_out_dataset(tmp_path_factory):
    """The wiki sample with a fifth of its documents held out."""
    return finished_job(tmp_path_factory.mktemp("loader-holdout"), *DATASET_ARGS, "--holdout-fraction", "0.2")


def one_epoch_records(address: str) -> list[int]:
    with LoaderClient(address, timeout_seconds=60) as client:
        ids = []
        while True:
            batch = client.next_batch()
            ids += batch.record_ids.tolist()
            if batch.last_in_epoch:
                return ids


def test_training_side_by_default_and_the_held_out_side_on_request(held_out_dataset):
    summary = json.loads((held_out_dataset / "summary.json").read_text())
    assert summary["records"] > 0 and summary["holdout"]["records"] > 0
    _, train = open_dataset(str(held_out_dataset))
    _, held = open_dataset(str(held_out_dataset), split="holdout")
    assert train.records == summary["records"] and held.records == summary["holdout"]["records"]
    assert all(not name.startswith("holdout/") for name in train.names)
    assert all(name.startswith("holdout/") for name in held.names)
    with LoaderProcess(held_out_dataset, "--batch-size", 64) as server:
        assert sorted(one_epoch_records(server.address)) == list(range(summary["records"]))
    with LoaderProcess(held_out_dataset, "--batch-size", 64, "--split", "holdout") as server:
        assert sorted(one_epoch_records(server.address)) == list(range(summary["holdout"]["records"]))


def test_holdout_of_a_job_without_one_is_a_one_line_error(loader_dataset):
    with pytest.raises(DatasetError, match="the held-out side is empty"):
        open_dataset(str(loader_dataset), split="holdout")
    server = LoaderProcess(loader_dataset, "--split", "holdout")
    output = server.wait()
    assert server.process.returncode == 1 and "the held-out side is empty" in output and "Traceback" not in output


@pytest.mark.parametrize("damage, reason", [
    ("no summary", "no summary.json"),
    ("stopped", "did not finish (stopped by signal)"),
    ("quarantined", "1 task(s) were quarantined"),
])
def test_an_unfinished_output_is_refused_unless_allow_partial(loader_dataset, tmp_path, damage, reason):
    copy = tmp_path / "out"
    shutil.copytree(loader_dataset, copy)
    summary_path = copy / "summary.json"
    summary = json.loads(summary_path.read_text())
    if damage == "no summary":
        summary_path.unlink()
    elif damage == "stopped":
        summary.update(reason="stopped by signal", complete=False)
        summary_path.write_text(json.dumps(summary))
    else:
        summary.update(quarantined={"t1": {"path": "AA/wiki_00", "attempts": 3}}, complete=False)
        summary_path.write_text(json.dumps(summary))
    server = LoaderProcess(copy)
    output = server.wait()
    assert server.process.returncode == 1 and "Traceback" not in output
    assert reason in output and "--allow-partial" in output
    with LoaderProcess(copy, "--batch-size", 256, "--allow-partial") as server:
        with LoaderClient(server.address, timeout_seconds=60) as client:
            assert client.next_batch().features["input_ids"].shape[0] == 256


@pytest.mark.parametrize("damage", ["missing", "cut"])
def test_every_shard_is_checked_at_start_not_only_the_first(loader_dataset, tmp_path, damage):
    copy = tmp_path / "out"
    shutil.copytree(loader_dataset, copy)
    _, shards = open_dataset(str(copy))
    last = copy / shards.names[-1]
    if damage == "missing":
        last.unlink()
    else:
        last.write_bytes(last.read_bytes()[:-1])
    with pytest.raises(DatasetError, match="mlm-verify"):
        open_dataset(str(copy))
    server = LoaderProcess(copy)
    output = server.wait()
    assert server.process.returncode == 1 and shards.names[-1] in output and "Traceback" not in output
    assert ("missing" if damage == "missing" else "another size") in output


def test_a_shard_lost_while_serving_fails_that_batch_not_the_server(loader_dataset, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(loader_dataset, copy)
    _, shards = open_dataset(str(copy))
    # A cache of 1 MB holds about one shard: every shard is read again as the epoch moves on.
    server = LoaderProcess(copy, "--batch-size", 128, "--cache-mb", 1, "--shuffle-window", 1)
    try:
        with LoaderClient(server.address, timeout_seconds=60) as client:
            client.next_batch()
            saved = {name: (copy / name).read_bytes() for name in shards.names}
            for name in shards.names:
                (copy / name).unlink()
            with pytest.raises(LoaderError, match="cannot be built.*missing"):
                for _ in range(200):
                    client.next_batch()
        assert server.process.poll() is None, "the server ended"
        wait_for(lambda: not server_status(server.address).ranks)
        for name, data in saved.items():
            (copy / name).write_bytes(data)
        assert sorted(one_epoch_records(server.address)) == list(range(shards.records))
        assert server.process.poll() is None
    finally:
        output = server.stop()
    assert "cannot be built" in output and "Traceback" not in output


def test_torch_dataloader_worker_processes_are_refused(loader_dataset):
    """In a worker process the client is a copy: its state() in the trainer
    would never move, and a resume would replay the epoch."""
    pytest.importorskip("torch", reason="torch is in the test extras (the CPU wheel)")
    from torch.utils.data import DataLoader

    with LoaderProcess(loader_dataset, "--batch-size", 8) as server:
        with LoaderClient(server.address, timeout_seconds=60) as client:
            loader = DataLoader(client.torch_dataset(), batch_size=None, num_workers=1)
            with pytest.raises(Exception, match="num_workers=0"):
                next(iter(loader))
            assert client.state()["batch"] == 0


def test_the_readmes_parquet_example_loads_the_training_side_only(tmp_path):
    """docs/formats.md's data_files globs, with --bin-size and --holdout-fraction: each side in its split's
    directory (train/, validation/), its bins below it."""
    datasets = pytest.importorskip("datasets")
    need_shared()
    output = tmp_path / "out-pq"
    result = run_ventilator(WIKI, output, *DATASET_ARGS, "--output-format", "parquet", "--bin-size", "64",
                            "--holdout-fraction", "0.2")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((output / "summary.json").read_text())
    train = datasets.load_dataset("parquet", data_files=f"{output}/train/bin-*/part-*.parquet", split="train",
                                  cache_dir=str(tmp_path / "hf"))
    held = datasets.load_dataset("parquet", data_files=f"{output}/validation/bin-*/part-*.parquet", split="train",
                                 cache_dir=str(tmp_path / "hf"))
    assert len(train) == summary["records"] and len(held) == summary["holdout"]["records"] > 0
