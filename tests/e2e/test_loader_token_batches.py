"""Token-budget batches (--batch-tokens) from real loader processes to real clients, on a real
``--objective tokens --output-format parquet`` output whose stored samples pyarrow reads independently."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from loader.client import LoaderClient, LoaderError
from loader.shards import open_dataset
from tests.support.helpers import free_ports, scrape
from tests.support.loader_helpers import LoaderProcess, make_token_dataset, vocab_args, wait_for

pytestmark = pytest.mark.e2e

BUDGET = 512


@pytest.fixture(scope="module")
def token_dataset(tmp_path_factory):
    return make_token_dataset(tmp_path_factory.mktemp("token-batches"))


@pytest.fixture(scope="module")
def stored(token_dataset) -> list[np.ndarray]:
    """Every sample's tokens by record index (the manifest's shard order), read by pyarrow."""
    _, shards = open_dataset(str(token_dataset))
    return [np.asarray(ids, dtype=np.int32) for name in shards.names
            for ids in pq.read_table(token_dataset / name).column("input_ids").to_pylist()]


def epochs(address: str, world: int, count: int, **kwargs) -> list[list[list]]:
    """[epoch][rank] -> that rank's batches of the epoch."""
    clients = [LoaderClient(address, rank=rank, world_size=world, timeout_seconds=60, **kwargs)
               for rank in range(world)]
    out = []
    for epoch in range(count):
        per_rank = []
        for client in clients:
            batches = []
            while True:
                batch = client.next_batch()
                assert batch.epoch == epoch
                batches.append(batch)
                if batch.last_in_epoch:
                    break
            per_rank.append(batches)
        out.append(per_rank)
    for client in clients:
        client.close()
    return out


def originals(features: dict, row: int = 0) -> np.ndarray:
    """The unmasked tokens of a row: the label where a token was masked, the input id elsewhere."""
    labels = features["labels"][row]
    return np.where(labels != -100, labels, features["input_ids"][row])


@pytest.fixture(scope="module")
def flat_run(token_dataset):
    """Two epochs of flat batches for 3 ranks, masked 30%, with the server's metrics afterwards."""
    metrics_port = free_ports(1)[0]
    with LoaderProcess(token_dataset, "--batch-tokens", BUDGET, "--dynamic-masking", "--masked-lm-prob", 0.3,
                       *vocab_args(), "--pack-window", 700, "--metrics-port", metrics_port) as server:
        run = epochs(server.address, 3, 2)
        metrics = wait_for(lambda: scrape(metrics_port))
    return run, metrics


def test_flat_batches_hold_every_sample_once_per_epoch_within_the_budget(flat_run, stored):
    run, metrics = flat_run
    orders, tokens, batches = [], 0, 0
    for per_rank in run:
        assert max(map(len, per_rank)) - min(map(len, per_rank)) <= 1
        seen = []
        for batch in (b for rank in per_rank for b in rank):
            f = batch.features
            cu = f["cu_seq_lens_q"]
            assert f["input_ids"].shape == f["labels"].shape == f["position_ids"].shape == (1, int(cu[-1]))
            assert cu.dtype == np.int32 and cu[0] == 0 and cu[-1] <= BUDGET
            lengths = np.diff(cu)
            assert int(f["max_length_q"]) == lengths.max()
            assert lengths.tolist() == [len(stored[r]) for r in batch.record_ids]
            assert f["position_ids"][0].tolist() == [p for n in lengths.tolist() for p in range(n)]
            assert np.array_equal(originals(f), np.concatenate([stored[r] for r in batch.record_ids]))
            masked = np.add.reduceat(f["labels"][0] != -100, cu[:-1])
            assert masked.tolist() == [max(1, round(0.3 * n)) for n in lengths.tolist()]
            seen.append(batch.record_ids)
            tokens, batches = tokens + int(cu[-1]), batches + 1
        order = np.concatenate(seen)
        assert sorted(order.tolist()) == list(range(len(stored)))
        orders.append(order)
    assert (orders[0] != orders[1]).mean() > 0.9, "each epoch is a new order"
    waste = 1 - tokens / (batches * BUDGET)
    assert waste <= 0.02, waste
    sent, slots = metrics[("mlm_loader_tokens_sent_total", ())], metrics[("mlm_loader_token_slots_total", ())]
    assert sent >= tokens and slots % BUDGET == 0 and slots >= batches * BUDGET
    assert metrics[("mlm_loader_padding_waste", ())] == pytest.approx(1 - sent / slots) and 1 - sent / slots <= 0.02


def test_padded_batches_group_similar_lengths_with_the_same_masks_as_flat(token_dataset, flat_run, stored):
    """The padded layout: every sample once, rows x longest within the budget, attention_mask on the tokens;
    each sample masked exactly as in the flat layout (masks are keyed by seed, epoch and record only)."""
    flat_masks = {}
    for batch in (b for rank in flat_run[0][0] for b in rank):
        cu = batch.features["cu_seq_lens_q"]
        for row, record in enumerate(batch.record_ids.tolist()):
            flat_masks[record] = batch.features["input_ids"][0, cu[row]:cu[row + 1]]
    with LoaderProcess(token_dataset, "--batch-tokens", BUDGET, "--batch-layout", "padded", "--dynamic-masking",
                       "--masked-lm-prob", 0.3, *vocab_args(), "--pack-window", 700) as server:
        (per_rank,), = epochs(server.address, 2, 1),
    seen, real, slots = [], 0, 0
    for batch in (b for rank in per_rank for b in rank):
        f = batch.features
        rows, width = f["input_ids"].shape
        assert rows * width <= BUDGET and f["attention_mask"].shape == f["labels"].shape == (rows, width)
        lengths = f["attention_mask"].sum(axis=1)
        assert lengths.tolist() == [len(stored[r]) for r in batch.record_ids] and lengths.max() == width
        for row, record in enumerate(batch.record_ids.tolist()):
            n = len(stored[record])
            assert np.array_equal(originals(f, row)[:n], stored[record])
            assert np.array_equal(f["input_ids"][row, :n], flat_masks[record])
            assert (f["labels"][row, n:] == -100).all() and (f["input_ids"][row, n:] == 0).all()
        seen.append(batch.record_ids)
        real, slots = real + int(lengths.sum()), slots + rows * width
    assert sorted(np.concatenate(seen).tolist()) == list(range(len(stored)))
    assert 1 - real / slots < 0.25, "similar lengths together: far less padding than one fixed length"


def test_resumed_killed_and_restarted_servers_give_the_same_batches(token_dataset):
    args = ("--batch-tokens", BUDGET, "--dynamic-masking", *vocab_args(), "--pack-window", 500)
    with LoaderProcess(token_dataset, *args) as server:
        with LoaderClient(server.address, rank=1, world_size=2, timeout_seconds=60) as client:
            whole = [client.next_batch() for _ in range(12)]
        with LoaderClient(server.address, rank=1, world_size=2, timeout_seconds=60) as client:
            [client.next_batch() for _ in range(5)]
            state = client.state()
        assert state["batch"] == 5 and state["batch_tokens"] == BUDGET and state["layout"] == "flat"
        # kill -9 under a live client: it attaches again from its own state, nothing lost or repeated
        with LoaderClient(server.address, rank=1, world_size=2, patience_seconds=0.3,
                          timeout_seconds=60) as client:
            survived = [client.next_batch() for _ in range(4)]
            server.kill()
            server.start()
            survived += [client.next_batch() for _ in range(8)]
            assert client.reattaches >= 1
        assert [b.record_ids.tolist() for b in survived] == [b.record_ids.tolist() for b in whole]
        assert all(np.array_equal(a.features["input_ids"], b.features["input_ids"]) for a, b in zip(survived, whole))
    with LoaderProcess(token_dataset, *args) as restarted:
        with LoaderClient(restarted.address, rank=1, world_size=2, state=json.loads(json.dumps(state)),
                          timeout_seconds=60) as client:
            rest = [client.next_batch() for _ in range(7)]
    for ours, theirs in zip(whole[5:], rest, strict=True):
        assert (ours.epoch, ours.index) == (theirs.epoch, theirs.index)
        assert np.array_equal(ours.record_ids, theirs.record_ids)
        for name in ("input_ids", "labels", "position_ids", "cu_seq_lens_q"):
            assert np.array_equal(ours.features[name], theirs.features[name])
    with LoaderProcess(token_dataset, "--batch-tokens", BUDGET, "--batch-layout", "padded", "--dynamic-masking",
                       *vocab_args(), "--pack-window", 500) as other:
        with pytest.raises(LoaderError, match="another batch layout"):
            LoaderClient(other.address, rank=1, world_size=2, state=state, timeout_seconds=60).next_batch()
    # Another packing window is another order (samples twice, others never, in the resumed epoch): refused too.
    with LoaderProcess(token_dataset, *args[:-1], 300) as other:
        with pytest.raises(LoaderError, match=r"another order \(shuffle window 65536, pack window 500; this "
                                              r"server's: shuffle window 65536, pack window 300\)"):
            LoaderClient(other.address, rank=1, world_size=2, state=state, timeout_seconds=60).next_batch()


def test_a_sample_over_the_budget_is_refused_in_one_line(token_dataset, stored):
    longest = max(map(len, stored))
    server = LoaderProcess(token_dataset, "--batch-tokens", 128)
    output = server.wait(timeout=60)
    assert server.process.returncode != 0 and "Traceback" not in output
    assert "--batch-tokens 128:" in output and f"the longest {longest} tokens" in output
    assert "--max-seq-length 128 or less" in output


def tiny_modernbert(torch):
    """2 layers, hidden 64, random init; layer 0 attends globally, layer 1 in a local window of 32 (±16)."""
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=30522, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, global_attn_every_n_layers=2, local_attention=32,
                              max_position_embeddings=BUDGET, pad_token_id=0, cls_token_id=101, sep_token_id=102,
                              bos_token_id=101, eos_token_id=102, sparse_prediction=True, embedding_dropout=0.0,
                              attention_dropout=0.0, mlp_dropout=0.0, attn_implementation="sdpa")
    return ModernBertForMaskedLM(config)


def flat_loss(model, batch, torch, boundaries: bool = True):
    """A flat batch without flash-attention: one row, position_ids restarting at each sample, and a
    block-diagonal mask built from cu_seq_lens_q (a token attends to its own sample only; in the local layer,
    within the window as well), passed to ModernBERT per attention type."""
    cu = batch["cu_seq_lens_q"].long()
    sample = torch.repeat_interleave(torch.arange(len(cu) - 1), cu.diff())
    position = batch["position_ids"][0]
    same = sample[:, None] == sample[None, :] if boundaries else torch.ones(len(sample), len(sample), dtype=bool)
    near = (position[:, None] - position[None, :]).abs() <= model.config.sliding_window
    if not boundaries:
        near = (torch.arange(len(sample))[:, None] - torch.arange(len(sample))[None, :]).abs() <= \
            model.config.sliding_window
    masks = {"full_attention": same[None, None], "sliding_attention": (same & near)[None, None]}
    return model(input_ids=batch["input_ids"].long(), position_ids=batch["position_ids"], attention_mask=masks,
                 labels=batch["labels"]).loss


def hidden(model, batch, torch, boundaries: bool = True):
    """The encoder's last hidden states at the real tokens, in sample order (either layout)."""
    if "cu_seq_lens_q" in batch:
        captured = {}
        handle = model.model.register_forward_hook(lambda module, args, out: captured.update(out=out[0]))
        flat_loss(model, batch, torch, boundaries)
        handle.remove()
        return captured["out"][0]
    out = model.model(input_ids=batch["input_ids"].long(), attention_mask=batch["attention_mask"])[0]
    return out[batch["attention_mask"].bool()]


def padded_loss(model, batch):
    return model(input_ids=batch["input_ids"].long(), attention_mask=batch["attention_mask"],
                 labels=batch["labels"]).loss


def test_tiny_modernbert_learns_from_flat_and_padded_batches(token_dataset):
    """transformers' ModernBertForMaskedLM (CPU, random init) trains 20 steps on each layout, fed by the
    PyTorch adapter through a DataLoader; its loss falls from ~ln(30522).  On the same samples, a flat batch
    (block-diagonal mask from cu_seq_lens_q) and its padded form give the same loss; without the mask they do not."""
    torch = pytest.importorskip("torch", reason="torch is in the test extras (the CPU wheel)")
    pytest.importorskip("transformers", reason="transformers (with ModernBERT) is in the test extras")
    from torch.utils.data import DataLoader

    from loader.model_inputs import to_model_inputs
    from loader.token_layout import padded

    torch.set_num_threads(1)
    curves = {}
    for layout in ("padded", "flat"):
        model = tiny_modernbert(torch)
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
        with LoaderProcess(token_dataset, "--batch-tokens", BUDGET, "--batch-layout", layout, "--dynamic-masking",
                           "--masked-lm-prob", 0.3, *vocab_args()) as server:
            with LoaderClient(server.address, timeout_seconds=60) as client:
                batches = iter(DataLoader(client.torch_dataset(), batch_size=None, num_workers=0))
                losses = []
                for step in range(20):
                    if layout == "flat" and step % 2:  # the client's own batch, laid out for this (SDPA) model
                        loss = model(**client.next_batch().to_model_inputs(model)).loss
                    else:
                        batch = next(batches)
                        assert all(isinstance(v, torch.Tensor) for k, v in batch.items()
                                   if not k.startswith("max_length"))
                        loss = flat_loss(model, batch, torch) if layout == "flat" else padded_loss(model, batch)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    losses.append(loss.item())
                held = next(batches)
        curves[layout] = losses
        assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 1.0, (layout, losses)

    model.eval()  # the flat-trained model; `held` is a flat batch
    lengths = held["cu_seq_lens_q"].diff().numpy()
    same = {name: torch.from_numpy(array) for name, array in padded(
        {"input_ids": held["input_ids"][0].numpy(), "labels": held["labels"][0].numpy()}, lengths).items()}
    with torch.no_grad():
        as_flat, as_padded = flat_loss(model, held, torch).item(), padded_loss(model, same).item()
        safe = model(**to_model_inputs(held, model))  # sparse prediction: logits at the masked tokens, in order
        raw = model(**{k: v.long() if k in ("input_ids", "labels", "position_ids") else v for k, v in held.items()})
        as_inputs = safe.loss.item()
        states = {name: hidden(model, batch, torch, **kw) for name, batch, kw in (
            ("flat", held, {}), ("padded", same, {}), ("unbounded", held, {"boundaries": False}))}
    assert as_flat == pytest.approx(as_padded, rel=1e-5, abs=1e-5)
    assert as_inputs == pytest.approx(as_padded, rel=1e-5, abs=1e-5)
    assert (raw.logits - safe.logits).abs().max() > 1e-2, "the raw flat batch given to an SDPA model attends across"
    torch.testing.assert_close(states["flat"], states["padded"], rtol=1e-4, atol=1e-4)
    assert (states["unbounded"] - states["padded"]).abs().max() > 1e-2, "attending across samples changes the output"


def test_whole_word_masks_follow_the_tokenizers_words(token_dataset, stored):
    """--whole-word-mask on samples without word_starts: words from the tokenizer's pieces (WordPiece's ##),
    so a masked piece's whole word is masked, and a word is never masked across a sample boundary."""
    from common.tokenization import load_vocabulary
    from tests.support.helpers import VOCAB

    continues = ~load_vocabulary(str(VOCAB), None).starts_word
    with LoaderProcess(token_dataset, "--batch-tokens", BUDGET, "--dynamic-masking", "--whole-word-mask",
                       "--masked-lm-prob", 0.3, *vocab_args()) as server:
        with LoaderClient(server.address, timeout_seconds=60) as client:
            batches = [client.next_batch() for _ in range(6)]
    words = 0
    for batch in batches:
        cu = batch.features["cu_seq_lens_q"]
        for row, record in enumerate(batch.record_ids.tolist()):
            original = stored[record]
            masked = batch.features["labels"][0, cu[row]:cu[row + 1]] != -100
            starts = np.flatnonzero(~continues[original])
            starts = np.union1d(starts, [0])  # a sample's first token begins a word
            for start, stop in zip(starts, np.append(starts[1:], len(original))):
                assert len(set(masked[start:stop].tolist())) == 1, (record, start, stop)
                words += stop - start > 1 and bool(masked[start])
            assert masked.sum() <= max(1, round(0.3 * len(original)))
    assert words > 20, "multi-piece words were masked whole"


def test_token_batch_flags_without_batch_tokens_are_refused(token_dataset):
    server = LoaderProcess(token_dataset, "--batch-layout", "padded")
    output = server.wait(timeout=60)
    assert server.process.returncode == 2 and "--batch-layout is for --batch-tokens" in output
    assert "Traceback" not in output
