"""mlm-report's per-side numbers: a split a step names other than "holdout" is neither side's (its files are
not training data, and not --holdout-fraction's held-out side)."""

from report.stats import manifest_numbers

ENTRY = {"task": "a", "documents": 2, "records": 3, "tokens": 30,
         "shards": [{"name": "part-a.tfrecord", "records": 3, "bytes": 100, "sha256": ""},
                    {"name": "holdout/part-a.tfrecord", "records": 1, "bytes": 10, "sha256": "", "split": "holdout"},
                    {"name": "validation/part-a.tfrecord", "records": 2, "bytes": 1000, "sha256": "",
                     "split": "validation"}],
         "holdout": {"documents": 1, "records": 1, "tokens": 5, "shards": 1},
         "validation": {"documents": 1, "records": 2, "tokens": 20, "shards": 1}}


def test_another_split_is_not_counted_as_the_training_side():
    sides = manifest_numbers([ENTRY])["sides"]
    assert sides["train"]["files"] == 1 and sides["train"]["bytes"] == 100
    assert sides["holdout"]["files"] == 1 and sides["holdout"]["bytes"] == 10
