"""The Hugging Face Trainer's side of LoaderDataset (loader/torch_data.py): saves each rank's loader state with
the Trainer's checkpoints, resumes from it, and refuses settings that would cut, skip or re-batch the stream."""

from __future__ import annotations

import os
from typing import Any, Protocol

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from loader.checkpoints import TRAINER_ARGUMENTS, load_state, save_state
from loader.client import LoaderClient, LoaderError


class Trained(Protocol):
    """What the callback drives of a LoaderDataset (loader/torch_data.py, which makes the callback: named by
    what it uses, so neither module imports the other)."""

    copies: int
    client: LoaderClient | None

    @property
    def rank(self) -> int: ...

    def load_state_dict(self, state: dict) -> None: ...
    def forget_before(self, batches: int) -> None: ...
    def state_after(self, batches: int) -> dict: ...
    def close(self) -> None: ...


def _setting(args: TrainingArguments, name: str) -> Any:
    value = getattr(args, name)
    if name == "accelerator_config":
        return {"dispatch_batches": getattr(value, "dispatch_batches", None)}
    return value


class LoaderCallback(TrainerCallback):
    def __init__(self, dataset: Trained):
        self.dataset = dataset
        self.start_step = 0

    def _checkpoint(self, args: TrainingArguments, step: int) -> str:
        assert args.output_dir is not None, "TrainingArguments set output_dir before any callback runs"
        return os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")

    def _consumed(self, args: TrainingArguments, state: TrainerState) -> int:
        """This rank's batches trained on in this run: every step takes gradient_accumulation_steps of them."""
        return (state.global_step - self.start_step) * args.gradient_accumulation_steps

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        wrong = [f"{name}={value!r}" for name, value in TRAINER_ARGUMENTS.items() if _setting(args, name) != value]
        if args.dataloader_num_workers:
            wrong.append("dataloader_num_workers=0")
        if wrong:
            raise LoaderError(f"LoaderDataset: TrainingArguments need {', '.join(wrong)} "
                              "(**loader.torch_data.TRAINER_ARGUMENTS; docs/loader.md, \"Hugging Face Trainer\")")
        # accelerate keeps every world-size-th item of an IterableDataset on each rank: hand each batch out that
        # many times, so each rank keeps one copy of each of its own batches.
        self.dataset.copies = max(1, args.world_size)
        self.start_step = state.global_step
        if state.global_step > 0:
            if self.dataset.client is not None:
                raise LoaderError("LoaderDataset: resuming a dataset that has already served batches")
            self.dataset.load_state_dict(load_state(self._checkpoint(args, state.global_step), self.dataset.rank))

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        self.dataset.forget_before(self._consumed(args, state))

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        save_state(self._checkpoint(args, state.global_step), self.dataset.rank,
                   self.dataset.state_after(self._consumed(args, state)))

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        self.dataset.close()
