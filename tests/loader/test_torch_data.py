"""LoaderDataset's own rules, without a server: the Trainer's one-item batches, the settings its callback refuses in
one line, and resume states (the 2-rank Trainer run itself: tests/e2e/test_loader_trainer.py)."""

import json

import pytest

from loader.client import LoaderError

torch = pytest.importorskip("torch", reason="torch is in the test extras (the CPU wheel)")
pytest.importorskip("accelerate", reason="accelerate (the Trainer's) is in the trainer extra")

from loader.torch_data import TRAINER_ARGUMENTS, LoaderDataset, load_state, save_state  # noqa: E402


def test_the_collator_hands_the_one_batch_through_and_refuses_more():
    batch = {"input_ids": torch.ones(2, 3)}
    assert LoaderDataset.collate([batch]) is batch
    with pytest.raises(LoaderError, match="per_device_train_batch_size must be 1"):
        LoaderDataset.collate([batch, batch])


def test_rank_and_world_size_come_from_torch_distributed_or_default_to_one_process():
    assert not torch.distributed.is_initialized()
    dataset = LoaderDataset("127.0.0.1:1", "sdpa")
    assert (dataset.rank, dataset.world_size) == (0, 1)
    assert (LoaderDataset("127.0.0.1:1", "sdpa", rank=3, world_size=4).rank) == 3


def test_the_callback_refuses_trainer_settings_that_would_cut_skip_or_rebatch_the_stream(tmp_path):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    dataset = LoaderDataset("127.0.0.1:1", "sdpa")
    callback = dataset.callback()
    plain = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    with pytest.raises(LoaderError) as refused:
        callback.on_train_begin(plain, TrainerState(), TrainerControl())
    message = str(refused.value)
    assert "\n" not in message
    for setting in ("per_device_train_batch_size=1", "remove_unused_columns=False", "ignore_data_skip=True",
                    "'dispatch_batches': False"):
        assert setting in message
    right = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **TRAINER_ARGUMENTS)
    callback.on_train_begin(right, TrainerState(), TrainerControl())
    assert dataset.copies == 1
    # a resume whose checkpoint holds no loader state is refused, not started from the beginning
    resumed = TrainerState()
    resumed.global_step = 3
    with pytest.raises(LoaderError, match="holds no loader_state_0.json"):
        callback.on_train_begin(right, resumed, TrainerControl())
    save_state(str(tmp_path / "checkpoint-3"), 0, {"epoch": 1, "batch": 7, "rank": 0, "world_size": 1})
    callback.on_train_begin(right, resumed, TrainerControl())
    assert dataset.state_dict() == {"epoch": 1, "batch": 7, "rank": 0, "world_size": 1}


def test_a_state_file_that_is_not_a_state_is_refused(tmp_path):
    (tmp_path / "loader_state_0.json").write_text(json.dumps([1, 2]))
    with pytest.raises(LoaderError, match="is not a loader state"):
        load_state(str(tmp_path), 0)
