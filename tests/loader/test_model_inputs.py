"""A flat batch as a model takes it safely (loader/model_inputs.py): Hugging Face's own flattening collator is the
oracle for the flash-attention kwargs, and transformers' ModernBertForMaskedLM (tiny, random init, CPU) for the
rest: each sample's logits from ``to_model_inputs`` equal the sample run alone, while the raw flat row does not."""

import numpy as np
import pytest

from loader.client import Batch
from loader.model_inputs import attention_implementation, model_arrays
from loader.token_layout import flat, padded

torch = pytest.importorskip("torch", reason="torch is in the test extras (the CPU wheel)")
transformers = pytest.importorskip("transformers", reason="transformers (with ModernBERT) is in the test extras")

LENGTHS = (37, 5, 90, 1, 64)


def samples(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(5, 500, n).astype(np.int32) for n in LENGTHS]


def flat_batch(masked: bool = True) -> Batch:
    ids = samples()
    tokens = {"input_ids": np.concatenate(ids)}
    if masked:
        labels = np.full(len(tokens["input_ids"]), -100, dtype=np.int64)
        labels[::7] = tokens["input_ids"][::7]
        tokens["labels"] = labels
    features = flat(tokens, np.array(LENGTHS))
    return Batch(features, 0, 0, np.arange(len(LENGTHS)), False, pad_id=0)


def tiny_modernbert(attn: str):
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, global_attn_every_n_layers=2, local_attention=16,
                              max_position_embeddings=256, pad_token_id=0, cls_token_id=1, sep_token_id=2,
                              bos_token_id=None, eos_token_id=None, sparse_prediction=False, initializer_range=0.2,
                              attn_implementation=attn)
    return ModernBertForMaskedLM(config).eval()


def test_flat_batches_carry_hugging_faces_flattening_names_and_values():
    """The flash-attention kwargs are DataCollatorWithFlattening(return_flash_attn_kwargs=True)'s, value for value."""
    from transformers import DataCollatorWithFlattening

    batch = flat_batch(masked=False)
    theirs = DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": s.tolist()} for s in samples()])
    ours = batch.to_model_inputs("flash_attention_2")
    for key in ("input_ids", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k"):
        assert ours[key].dtype == theirs[key].dtype, key
        assert torch.equal(ours[key], theirs[key]), key
    for key in ("max_length_q", "max_length_k"):
        assert type(ours[key]) is int and ours[key] == theirs[key] == max(LENGTHS)
    assert "attention_mask" not in ours
    assert set(batch.features) >= {"cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "position_ids"}


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_each_samples_logits_equal_the_sample_alone_and_the_raw_flat_row_attends_across(attn):
    torch.set_num_threads(1)
    model = tiny_modernbert(attn)
    batch = flat_batch()
    inputs = batch.to_model_inputs(model)
    assert set(inputs) == {"input_ids", "attention_mask", "labels"}
    assert inputs["input_ids"].shape == (len(LENGTHS), max(LENGTHS))
    with torch.no_grad():
        logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
        raw = {k: torch.as_tensor(v) for k, v in batch.features.items() if k in ("input_ids", "position_ids")}
        raw_logits = model(input_ids=raw["input_ids"].long(), position_ids=raw["position_ids"].long(),
                           cu_seq_lens_q=torch.as_tensor(batch.features["cu_seq_lens_q"]),
                           max_length_q=int(batch.features["max_length_q"])).logits[0]
        start, kept, crossed = 0, 0.0, 0.0
        for row, sample in enumerate(samples()):
            alone = model(input_ids=torch.from_numpy(sample).long()[None]).logits[0]
            kept = max(kept, (logits[row, :len(sample)] - alone).abs().max().item())
            crossed = max(crossed, (raw_logits[start:start + len(sample)] - alone).abs().max().item())
            start += len(sample)
    assert kept < 1e-5, kept
    assert crossed > 100 * max(kept, 1e-6), ("a raw flat row given to an SDPA/eager ModernBERT attends across "
                                             f"samples: {crossed}")
    # the loss sees the same labels: each token's label where it was
    labels = batch.features["labels"][0]
    assert torch.equal(inputs["labels"][inputs["attention_mask"].bool()], torch.from_numpy(labels))


def test_padded_and_fixed_batches_pass_through_with_the_keys_the_model_names():
    model = tiny_modernbert("sdpa")
    rows = padded({"input_ids": np.concatenate(samples())}, np.array(LENGTHS), pad_id=0)
    inputs = Batch(rows, 0, 0, np.arange(5), False).to_model_inputs(model)
    assert set(inputs) == {"input_ids", "attention_mask"}
    assert torch.equal(inputs["input_ids"], torch.from_numpy(rows["input_ids"]).long())
    fixed = {"input_ids": np.ones((2, 8), np.int32), "input_mask": np.ones((2, 8), np.int32),
             "attention_mask": np.ones((2, 8), np.int32), "segment_ids": np.zeros((2, 8), np.int32)}
    assert "token_type_ids" not in Batch(fixed, 0, 0, np.arange(2), False).to_model_inputs(model)  # ModernBERT's
    assert "token_type_ids" in Batch(fixed, 0, 0, np.arange(2), False).to_model_inputs("sdpa")


def test_the_attention_implementation_is_read_from_the_model_or_refused_in_one_line():
    assert attention_implementation(tiny_modernbert("eager")) == "eager"
    assert attention_implementation(tiny_modernbert("eager").config) == "eager"
    with pytest.raises(TypeError, match="no attention implementation"):
        attention_implementation(object())
    assert "cu_seq_lens_q" in model_arrays(flat_batch().features, "kernels-community/flash-attn3")
