"""A rank's loader state beside the Trainer's checkpoints, and the TrainingArguments a LoaderDataset needs
(loader/torch_data.py says why): apart from torch and transformers, so the dataset and its Trainer callback
(loader/trainer_callback.py) both use them without importing each other."""

from __future__ import annotations

import json
import os
from typing import Any

from loader.client import LoaderError

#: what ``TrainingArguments`` needs to train from a LoaderDataset (loader/torch_data.py says why)
TRAINER_ARGUMENTS: dict[str, Any] = {"per_device_train_batch_size": 1, "remove_unused_columns": False,
                                     "ignore_data_skip": True, "accelerator_config": {"dispatch_batches": False}}
STATE_FILE = "loader_state_{rank}.json"


def save_state(directory: str, rank: int, state: dict) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, STATE_FILE.format(rank=rank))
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(state, out)
    os.replace(tmp, path)
    return path


def load_state(directory: str, rank: int) -> dict:
    path = os.path.join(directory, STATE_FILE.format(rank=rank))
    try:
        with open(path, encoding="utf-8") as src:
            state = json.load(src)
    except FileNotFoundError:
        raise LoaderError(f"LoaderDataset: resuming from {directory}, which holds no {os.path.basename(path)} "
                          "(saved by LoaderDataset.callback()): the loader's position is unknown") from None
    if not isinstance(state, dict):
        raise LoaderError(f"LoaderDataset: {path} is not a loader state")
    return state
