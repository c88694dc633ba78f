"""The runnable example: a tiny BERT trained from the loader service; its masked-LM loss must fall."""

import json
import subprocess
import sys

import numpy as np
import pytest

from loader.client import LoaderClient, LoaderError
from tests.support.helpers import REPO
from tests.support.loader_helpers import LoaderProcess, vocab_args

pytestmark = pytest.mark.e2e


#: Steps of the example, at a learning rate 3x its default: each step costs ~1 CPU-s (the tied 30,522-word output
#: layer), and the loss falls about as far in 20 steps as in 40 at the default (the first and the last windows'
#: means: 9.9 -> 7.9 in 20 steps at 3e-3, 9.9 -> 7.7 in 40 at 1e-3; 10.1 -> 8.6 in 20 at 1e-3).
STEPS, LEARNING_RATE = 20, "3e-3"


def test_tiny_bert_learns_from_the_service(loader_dataset, tmp_path):
    state_file = tmp_path / "loader-state.json"
    with LoaderProcess(loader_dataset, "--batch-size", 16, "--dynamic-masking", *vocab_args()) as server:
        result = subprocess.run([sys.executable, "examples/train_tiny_bert.py", "--loader", server.address,
                                 "--steps", str(STEPS), "--learning-rate", LEARNING_RATE, "--log-every", "5",
                                 "--state-file", str(state_file)],
                                cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["steps"] == STEPS
    assert summary["last_loss"] < summary["first_loss"] - 1.0, summary  # from ~ln(30522) = 10.3
    assert json.loads(state_file.read_text())["batch"] == STEPS


def test_tf_dataset_adapter_yields_the_clients_batches(loader_dataset):
    with LoaderProcess(loader_dataset, "--batch-size", 8) as server:
        with LoaderClient(server.address, rank=0, world_size=2) as client:
            expected = [client.next_batch().features for _ in range(3)]
        with LoaderClient(server.address, rank=0, world_size=2) as client:
            got = list(client.tf_dataset().take(3))
    for ours, theirs in zip(expected, got):
        assert set(theirs) == set(ours)
        for name, array in ours.items():
            np.testing.assert_array_equal(theirs[name].numpy(), array)


def test_torch_adapter_feeds_a_dataloader_and_resumes_from_the_state(loader_dataset):
    """PyTorch's DataLoader over the adapter: the same batches as the client's
    own iterator, as tensors with Hugging Face's names; a DataLoader started
    from a checkpointed state continues with the batch that came next."""
    torch = pytest.importorskip("torch", reason="torch is in the test extras (the CPU wheel)")
    from torch.utils.data import DataLoader

    with LoaderProcess(loader_dataset, "--batch-size", 8) as server:
        with LoaderClient(server.address, rank=1, world_size=2) as client:
            expected = [client.next_batch().features for _ in range(5)]

        with LoaderClient(server.address, rank=1, world_size=2) as client:
            loader = iter(DataLoader(client.torch_dataset(), batch_size=None, num_workers=0))
            got = [next(loader) for _ in range(2)]
            state = client.state()
        with LoaderClient(server.address, rank=1, world_size=2, state=state) as client:
            loader = iter(DataLoader(client.torch_dataset(), batch_size=None, num_workers=0))
            got += [next(loader) for _ in range(3)]

        with LoaderClient(server.address, rank=1, world_size=2) as client:
            with pytest.raises(LoaderError, match="num_workers"):
                next(iter(DataLoader(client.torch_dataset(), batch_size=None, num_workers=2)))

    assert state["batch"] == 2
    for ours, theirs in zip(expected, got, strict=True):
        assert set(theirs) == set(ours) and {"input_ids", "attention_mask", "labels"} <= set(theirs)
        for name, array in ours.items():
            assert isinstance(theirs[name], torch.Tensor)
            np.testing.assert_array_equal(theirs[name].numpy(), array)
    labels = got[0]["labels"]
    assert ((labels == -100) | (labels >= 0)).all() and (labels >= 0).any(), "masked positions carry their token ids"
