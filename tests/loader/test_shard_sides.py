"""Which files each --split serves.  Since protocol 5 a file's side is a named split (ShardFile.split), and a
step a plugin brings may make a side of its own ("validation", say): its files are no more training data than
the held-out side's, as the sink's totals (training shards: split "") and the dataset card already say."""

from common.storage import LocalStorage
from loader.shards import ShardList
from sink.manifest import Manifest

ENTRIES = [
    {"task": "a", "shards": [{"name": "part-a.tfrecord", "records": 3, "bytes": 9, "sha256": ""},
                             {"name": "holdout/part-a.tfrecord", "records": 1, "bytes": 9, "sha256": "",
                              "split": "holdout"},
                             {"name": "validation/part-a.tfrecord", "records": 2, "bytes": 9, "sha256": "",
                              "split": "validation"}],
     "records": 3, "validation": {"records": 2, "shards": 1}, "holdout": {"records": 1, "shards": 1}},
    {"task": "b", "shards": [{"name": "part-b.tfrecord", "records": 4, "bytes": 9, "sha256": ""},
                             {"name": "holdout/part-b.tfrecord", "records": 5, "bytes": 9, "sha256": "",
                              "holdout": True}],  # a line written before protocol 5
     "records": 4, "holdout": {"records": 5}},
]


def test_the_training_side_is_only_the_training_files():
    train = ShardList.from_entries(ENTRIES, "train")
    assert train.names == ("part-a.tfrecord", "part-b.tfrecord")
    assert train.records == 3 + 4


def test_the_loaders_training_records_are_the_sinks(tmp_path):
    storage = LocalStorage(str(tmp_path))
    for entry in ENTRIES:
        for f in entry["shards"]:
            (tmp_path / f["name"]).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / f["name"]).write_bytes(b"x" * 9)
    manifest = Manifest(storage, "job", str(tmp_path / "state"))
    manifest.load()
    manifest.append([{**entry, "job": "job"} for entry in ENTRIES])
    assert ShardList.from_entries(ENTRIES, "train").records == manifest.totals["records"]
    assert len(ShardList.from_entries(ENTRIES, "train").names) == manifest.totals["shards"]


def test_the_held_out_side_is_only_the_holdout_split():
    held = ShardList.from_entries(ENTRIES, "holdout")
    assert held.names == ("holdout/part-a.tfrecord", "holdout/part-b.tfrecord")
    assert held.records == 1 + 5
