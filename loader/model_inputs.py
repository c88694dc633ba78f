"""A batch as a given model can take it safely (``Batch.to_model_inputs``).

A flat batch (loader/token_layout.py) is one row of samples end to end.
Only flash-attention's varlen kernels keep its samples apart, from
``cu_seq_lens_q/k`` and ``max_length_q/k``: Hugging Face's flash-attention
models read those keyword arguments.  An SDPA or eager model ignores them
(and ModernBERT does not derive boundaries from ``position_ids``), so given
the row as it is, every token attends to every sample of the batch, with no
error.  For such a model the row is cut back into one padded row per sample
with an ``attention_mask``: the same logits as each sample alone, at the
cost of the padding a padded batch has.

torch is imported when a batch is converted, never at import.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from loader.token_layout import FLAT_BOUNDARIES, is_flat, padded

#: what a Hugging Face model's forward takes from a batch of any layout, besides the flat layout's boundaries
_MODEL_KEYS = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "labels")
#: int64 on the way in: embeddings, the loss and position embeddings want LongTensors
_LONG = {"input_ids", "labels", "position_ids", "token_type_ids", "attention_mask"}


def attention_implementation(model_or_attn_impl: Any) -> str:
    """The attention a model runs: its config's ``_attn_implementation`` (a model or a config), or the name given."""
    if isinstance(model_or_attn_impl, str):
        return model_or_attn_impl
    config = getattr(model_or_attn_impl, "config", model_or_attn_impl)
    name = getattr(config, "_attn_implementation", None)
    if not isinstance(name, str):
        raise TypeError(f"to_model_inputs: {type(model_or_attn_impl).__name__} says no attention implementation: "
                        "pass a Hugging Face model, its config, or a name such as 'sdpa' or 'flash_attention_2'")
    return name


def runs_flash_attention(attn_impl: str) -> bool:
    """Any flavour of flash attention (flash_attention_2/3, a hub kernel): what Hugging Face itself tests."""
    return "flash" in attn_impl


def _accepts(model: Any) -> set[str] | None:
    """The batch keys a model's forward names (None: unknown, keep them all)."""
    forward = getattr(model, "forward", None)
    if forward is None:
        return None
    return set(inspect.signature(forward).parameters)


def model_arrays(features: dict[str, np.ndarray], attn_impl: str, pad_id: int = 0) -> dict[str, np.ndarray | int]:
    """The numpy side of :func:`to_model_inputs` (pure): a flat batch's varlen kwargs for flash attention, else its
    samples as padded rows with ``attention_mask``; any other batch's model keys as they are."""
    if is_flat(features):
        if runs_flash_attention(attn_impl):
            out: dict[str, np.ndarray | int] = {key: features[key] for key in _MODEL_KEYS if key in features}
            for key in FLAT_BOUNDARIES:
                value = features[key]
                out[key] = int(value) if np.ndim(value) == 0 else value
            return out
        cu = np.asarray(features["cu_seq_lens_q"], dtype=np.int64)
        tokens: dict[str, np.ndarray] = {key: np.asarray(features[key]).reshape(-1)
                                         for key in ("input_ids", "labels") if key in features}
        return dict(padded(tokens, np.diff(cu), pad_id))
    out = {key: features[key] for key in _MODEL_KEYS if key in features}
    if "token_type_ids" not in out and "segment_ids" in features:
        out["token_type_ids"] = features["segment_ids"]
    return out


def to_model_inputs(features: dict[str, np.ndarray], model_or_attn_impl: Any, device: Any = "cpu",
                    pad_id: int = 0) -> dict[str, Any]:
    """Tensors on ``device`` (``max_length_q/k`` as Python ints) for ``model(**inputs)``.  Given a model, keys its
    forward does not name (BERT's ``token_type_ids`` for ModernBERT) are left out."""
    import torch

    arrays = model_arrays(features, attention_implementation(model_or_attn_impl), pad_id)
    accepts = None if isinstance(model_or_attn_impl, str) else _accepts(model_or_attn_impl)
    out: dict[str, Any] = {}
    for key, value in arrays.items():
        if accepts is not None and key in ("token_type_ids",) and key not in accepts:
            continue
        if isinstance(value, int):
            out[key] = value
            continue
        tensor = torch.as_tensor(np.ascontiguousarray(value))
        if key in _LONG:
            tensor = tensor.long()
        out[key] = tensor.to(device)
    return out


__all__ = ["attention_implementation", "runs_flash_attention", "model_arrays", "to_model_inputs"]
