"""Token-budget batches as trainers take them (``--batch-layout``).  Pure logic.

The server sends a batch's samples end to end (one row per token: its
``input_ids``, and ``labels`` when it masks) with each sample's length; the
client lays them out here, so padding never crosses the wire and the
server's CPU goes to packing and masking:

* ``flat``: one row of the concatenated samples, ``position_ids`` restarting
  at 0 at each sample, ``cu_seq_lens_q``/``cu_seq_lens_k`` (int32, samples +
  1: each sample's start, then the total) and ``max_length_q``/``max_length_k``:
  what Hugging Face's ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)``
  emits and its flash-attention models take as keyword arguments.  Only a
  flash-attention model keeps samples apart from these; an SDPA or eager
  model given the row attends across samples (loader/model_inputs.py lays
  the batch out for the model at hand);
* ``padded``: one row per sample, padded with ``pad_id`` to the longest of
  the batch, ``attention_mask`` 1 on tokens (labels -100 on padding).
"""

from __future__ import annotations

import numpy as np

LAYOUTS = ("flat", "padded")


def flat(tokens: dict[str, np.ndarray], lengths: np.ndarray) -> dict[str, np.ndarray]:
    lengths = np.asarray(lengths, dtype=np.int64)
    cu_seqlens = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    total = int(cu_seqlens[-1])
    position_ids = np.arange(total, dtype=np.int64) - np.repeat(cu_seqlens[:-1].astype(np.int64), lengths)
    out = {"input_ids": np.array(tokens["input_ids"]).reshape(1, total)}  # a copy: never a view of a wire buffer
    if "labels" in tokens:
        out["labels"] = np.asarray(tokens["labels"], dtype=np.int64).reshape(1, total)
    out["position_ids"] = position_ids.reshape(1, total)
    out["cu_seq_lens_q"] = cu_seqlens
    out["cu_seq_lens_k"] = cu_seqlens.copy()
    longest = np.asarray(int(lengths.max()) if len(lengths) else 0, dtype=np.int32)
    out["max_length_q"], out["max_length_k"] = longest, longest.copy()
    return out


#: the flat layout's sample boundaries, in Hugging Face's names (a flash-attention model's keyword arguments)
FLAT_BOUNDARIES = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


def is_flat(features: dict) -> bool:
    return "cu_seq_lens_q" in features


def padded(tokens: dict[str, np.ndarray], lengths: np.ndarray, pad_id: int = 0) -> dict[str, np.ndarray]:
    lengths = np.asarray(lengths, dtype=np.int64)
    rows, width = len(lengths), int(lengths.max()) if len(lengths) else 0
    inside = np.arange(width)[None, :] < lengths[:, None]
    ids = np.asarray(tokens["input_ids"])
    input_ids = np.full((rows, width), pad_id, dtype=ids.dtype)
    input_ids[inside] = ids
    out = {"input_ids": input_ids, "attention_mask": inside.astype(np.int64)}
    if "labels" in tokens:
        labels = np.full((rows, width), -100, dtype=np.int64)
        labels[inside] = tokens["labels"]
        out["labels"] = labels
    return out


def lay_out(layout: str, tokens: dict[str, np.ndarray], lengths: np.ndarray, pad_id: int = 0) -> dict[str, np.ndarray]:
    if layout == "flat":
        return flat(tokens, lengths)
    if layout == "padded":
        return padded(tokens, lengths, pad_id)
    raise ValueError(f"batch layout {layout!r}: choose one of {', '.join(LAYOUTS)}")
