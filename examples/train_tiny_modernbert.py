"""Train a tiny ModernBERT (transformers' ModernBertForMaskedLM, 2 layers, hidden 64) from the loader's
token-budget batches.

    python -m loader --data /tmp/mb/out --batch-tokens 8192 --batch-layout flat --dynamic-masking \\
        --masked-lm-prob 0.3 --tokenizer /tmp/mb/tokenizer.json &
    python examples/train_tiny_modernbert.py --loader 127.0.0.1:5560 --tokenizer /tmp/mb/tokenizer.json --steps 20

Flat batches are one row of samples end to end with ``position_ids``
restarting at each sample and ``cu_seq_lens_q/k``, ``max_length_q/k``: what
a flash-attention model takes.  ``batch.to_model_inputs(model)`` gives the
model what it can take safely: those kwargs under flash attention; under
SDPA or eager (this CPU example) one padded row per sample with an
``attention_mask``, so no token attends across a sample boundary (the raw
flat row would, silently).  Padded batches (``--batch-layout padded``) go
in as they come.  The masked-LM loss
falls from ~ln(vocabulary size).  ``--state-file`` keeps the loader's
position; each rank of a multi-GPU job runs the same with its own
``--rank`` and the job's ``--world-size``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

import numpy as np
import torch
from transformers import ModernBertConfig, ModernBertForMaskedLM

from loader.client import LoaderClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loader", default="127.0.0.1:5560")
    parser.add_argument("--tokenizer", required=True, help="The tokenizer the output was made with (its roles).")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--state-file", default=None)
    args = parser.parse_args()

    from common.tokenization import load_vocabulary

    vocabulary = load_vocabulary(None, args.tokenizer)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # small model: more threads only contend
    pad = vocabulary.pad_id if vocabulary.pad_id is not None else 0
    config = ModernBertConfig(vocab_size=vocabulary.size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, global_attn_every_n_layers=2, local_attention=128,
                              max_position_embeddings=8192, pad_token_id=pad,
                              cls_token_id=vocabulary.cls_id if vocabulary.cls_id is not None else pad,
                              sep_token_id=vocabulary.sep_id if vocabulary.sep_id is not None else pad,
                              bos_token_id=None, eos_token_id=None, sparse_prediction=True,
                              attn_implementation="sdpa")
    model = ModernBertForMaskedLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    state_path = Path(args.state_file) if args.state_file else None
    state = json.loads(state_path.read_text()) if state_path and state_path.exists() else None
    losses = []
    with LoaderClient(args.loader, rank=args.rank, world_size=args.world_size, state=state,
                      timeout_seconds=120) as client:
        for step in range(args.steps):
            loss = model(**client.next_batch().to_model_inputs(model)).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if step % 10 == 0:
                print(f"step {step}: loss {loss.item():.3f}", file=sys.stderr)
        if state_path:
            state_path.write_text(json.dumps(client.state()))
    print(json.dumps({"steps": len(losses), "first_loss": float(np.mean(losses[:5])),
                      "last_loss": float(np.mean(losses[-5:]))}))


if __name__ == "__main__":
    main()
