"""The loader as a torch ``IterableDataset``: for a torch DDP loop and for the Hugging Face Trainer.

    dataset = LoaderDataset("loader-host:5560", model)   # rank and world size from torch.distributed
    # torch, DDP or not: the server batches, so no batching or collating here
    for inputs in DataLoader(dataset, batch_size=None):
        model(**inputs).loss.backward() ...
    # transformers.Trainer
    trainer = Trainer(model=model, args=TrainingArguments(output_dir, max_steps=..., **TRAINER_ARGUMENTS),
                      train_dataset=dataset, data_collator=dataset.collate, callbacks=[dataset.callback()])

Each item is one of this rank's batches laid out for the model
(``Batch.to_model_inputs``: flash-attention varlen kwargs for a flash
model, padded rows with ``attention_mask`` otherwise), as CPU tensors.

What the Trainer needs, and why (``TRAINER_ARGUMENTS``; the callback
refuses a run without them, in one line, before the first batch):

* ``per_device_train_batch_size=1`` and ``data_collator=dataset.collate``
  (it hands the one item through): the Trainer batches a dataset's items
  with its collator, and an item here is already a batch (a token budget,
  not a count of rows);
* ``accelerator_config={"dispatch_batches": False}``: by default rank 0
  would read every rank's batches and split them by rows;
* accelerate cuts an ``IterableDataset`` again by rank (each rank keeps
  every world-size-th item of its own stream), so under the Trainer each
  batch is handed out world-size times in a row and each rank keeps one
  copy: the same object, nothing rebuilt or sent again;
* ``ignore_data_skip=True``: a resume continues from the loader state saved
  in the checkpoint (``loader_state_{rank}.json``, beside the Trainer's
  ``rng_state_{rank}.pth``), instead of the Trainer reading and dropping
  every batch already trained on;
* ``remove_unused_columns=False``: the flash-attention kwargs are not named
  in a model's ``forward`` and would be dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from loader.checkpoints import TRAINER_ARGUMENTS, load_state, save_state
from loader.client import LoaderClient, LoaderError
from loader.model_inputs import attention_implementation

if TYPE_CHECKING:
    from loader.trainer_callback import LoaderCallback


def distributed_rank() -> tuple[int, int]:
    """(rank, world size) from torch.distributed; (0, 1) when it is not initialized."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class LoaderDataset(IterableDataset):
    """One rank's endless stream of batches from a loader server, as model inputs.

    ``state_dict()`` is where the next batch starts (the client's state);
    ``load_state_dict`` before iterating resumes there.  Under the Trainer,
    ``callback()`` saves and restores it with the Trainer's checkpoints.
    """

    def __init__(self, address: str, model_or_attn_impl: Any, rank: int | None = None, world_size: int | None = None,
                 state: dict | None = None, keep_record_ids: bool = False, **client_kwargs: Any):
        self.address = address
        self.attn_impl = attention_implementation(model_or_attn_impl)
        self._model = None if isinstance(model_or_attn_impl, str) else model_or_attn_impl
        self._rank, self._world_size = rank, world_size
        self._resume = dict(state) if state else None
        self.client_kwargs = client_kwargs
        self.client: LoaderClient | None = None
        self.copies = 1  # each batch handed out this many times in a row (world size under the Trainer)
        self._states: dict[int, dict] = {}  # batch number (this run) -> the client's state before it
        self.batches = 0  # batches taken from the client in this run
        self.keep_record_ids = keep_record_ids
        self.record_ids: list[list[int]] = []  # each batch's records, in order (keep_record_ids: tests, audits)

    @property
    def rank(self) -> int:
        return self._rank if self._rank is not None else distributed_rank()[0]

    @property
    def world_size(self) -> int:
        return self._world_size if self._world_size is not None else distributed_rank()[1]

    def __iter__(self) -> Iterator[dict]:
        if get_worker_info() is not None:
            raise LoaderError("LoaderDataset: use num_workers=0 (dataloader_num_workers=0): in a worker process "
                              "the state would not follow the batches, and a resume would replay them (the server "
                              "batches and the client prefetches already)")
        if self.client is None:
            self.client = LoaderClient(self.address, rank=self.rank, world_size=self.world_size, state=self._resume,
                                       **self.client_kwargs)
        client, target = self.client, self._model if self._model is not None else self.attn_impl
        while True:
            self._states[self.batches] = client.state()
            batch = client.next_batch()
            self.batches += 1
            if self.keep_record_ids:
                self.record_ids.append(batch.record_ids.tolist())
            inputs = batch.to_model_inputs(target, "cpu")
            for _ in range(self.copies):
                yield inputs

    # State ---------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where the next batch starts (after every batch handed out so far)."""
        return self.state_after(self.batches)

    def state_after(self, batches: int) -> dict:
        """The stream's state after this run's first ``batches`` batches (some may be fetched ahead, unused)."""
        if batches == 0 and self.client is None:
            return dict(self._resume) if self._resume else {"epoch": 0, "batch": 0, "rank": self.rank,
                                                            "world_size": self.world_size}
        if batches == self.batches and self.client is not None:
            return self.client.state()
        if batches not in self._states:
            raise LoaderError(f"LoaderDataset: no state after batch {batches} (fetched {self.batches})")
        return self._states[batches]

    def forget_before(self, batches: int) -> None:
        """Drops the states of batches already trained on (memory stays bounded by the look-ahead)."""
        for key in [key for key in self._states if key < batches]:
            del self._states[key]

    def load_state_dict(self, state: dict) -> None:
        if self.client is not None:
            raise LoaderError("LoaderDataset: load the state before iterating")
        self._resume = dict(state)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    # Trainer ---------------------------------------------------------------
    @staticmethod
    def collate(items: list) -> Any:
        """The Trainer's batch of one item: the loader's batch itself."""
        if len(items) != 1:
            raise LoaderError(f"LoaderDataset: per_device_train_batch_size must be 1 (got {len(items)} items): "
                              "each item is already a batch of the loader's token budget")
        return items[0]

    def callback(self) -> LoaderCallback:
        """A ``transformers.TrainerCallback`` that saves this rank's loader state with each checkpoint and resumes
        from it, and refuses settings that would cut or skip the stream."""
        from loader.trainer_callback import LoaderCallback  # transformers, only when a Trainer asks

        return LoaderCallback(self)


__all__ = ["LoaderDataset", "TRAINER_ARGUMENTS", "distributed_rank", "save_state", "load_state"]
