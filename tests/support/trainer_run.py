"""One rank of ``torchrun --nproc-per-node N tests/support/trainer_run.py``: transformers.Trainer (defaults but for
what loader.torch_data.TRAINER_ARGUMENTS sets) trains a tiny ModernBertForMaskedLM (CPU, gloo) on a loader server's
batches through LoaderDataset, and writes what this rank trained on to REPORT.rank.json (the tokens the model was given, seen by a forward
hook, and the loader's record ids of those batches).

    --stop-at K: stop after step K (a checkpoint is saved there), as a job killed after its checkpoint would be;
    --resume: continue from the last checkpoint in --output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout under test

import torch
from transformers import ModernBertConfig, ModernBertForMaskedLM, Trainer, TrainerCallback, TrainingArguments

from loader.torch_data import TRAINER_ARGUMENTS, LoaderDataset


class StopAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True
            control.should_save = True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loader", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--save-steps", type=int, default=3)
    parser.add_argument("--stop-at", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(1)
    training = TrainingArguments(output_dir=args.output, max_steps=args.max_steps, save_steps=args.save_steps,
                                 learning_rate=5e-3, logging_steps=1, use_cpu=True, ddp_backend="gloo",
                                 report_to="none", seed=0, dataloader_pin_memory=False, **TRAINER_ARGUMENTS)
    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=30522, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, global_attn_every_n_layers=2, local_attention=32,
                              max_position_embeddings=512, pad_token_id=0, cls_token_id=101, sep_token_id=102,
                              bos_token_id=None, eos_token_id=None, sparse_prediction=True,
                              attn_implementation="sdpa")
    model = ModernBertForMaskedLM(config)
    seen: list[list[int]] = []  # the real tokens of every batch the model was given, in order
    model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["input_ids"][kwargs["attention_mask"].bool()].tolist()),
        with_kwargs=True)
    dataset = LoaderDataset(args.loader, model, keep_record_ids=True, timeout_seconds=120)
    callbacks = [dataset.callback()] + ([StopAt(args.stop_at)] if args.stop_at else [])
    trainer = Trainer(model=model, args=training, train_dataset=dataset, data_collator=dataset.collate,
                      callbacks=callbacks)
    start = 0
    if args.resume:
        start = int(json.loads((Path(args.output) / sorted(
            Path(args.output).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))[-1].name /
            "trainer_state.json").read_text())["global_step"])
    trainer.train(resume_from_checkpoint=True if args.resume else None)
    consumed = (trainer.state.global_step - start) * training.gradient_accumulation_steps
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    report = {"rank": dataset.rank, "world_size": dataset.world_size, "start_step": start,
              "global_step": trainer.state.global_step, "records": dataset.record_ids[:consumed], "losses": losses,
              "fetched": dataset.batches, "inputs": seen}
    Path(f"{args.report}.{dataset.rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
