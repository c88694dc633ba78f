"""transformers.Trainer under ``torchrun --nproc-per-node 2`` (gloo, CPU) trains a tiny ModernBERT from a real loader
server's flat token-budget batches through loader.torch_data.LoaderDataset (tests/support/trainer_run.py): each rank's model is given its
own batches of the stream in order (the ranks' samples disjoint), and a run stopped after a checkpoint and resumed
from it trains on exactly the batches that plain clients read uninterrupted."""

import json
import subprocess
import sys

import numpy as np
import pytest

from bench.procs import free_ports
from loader.client import LoaderClient
from tests.support.helpers import REPO
from tests.support.loader_helpers import LoaderProcess, make_token_dataset, vocab_args

pytestmark = pytest.mark.e2e

BUDGET, STEPS = 512, 6


def torchrun(tmp_path, address: str, name: str, *args) -> list[dict]:
    """Two ranks of tests/support/trainer_run.py; each rank's report."""
    port = free_ports(1)[0]
    report = tmp_path / name
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(port), "tests/support/trainer_run.py",
               "--loader", address, "--output", str(tmp_path / f"{name}-out"), "--report", str(report),
               "--max-steps", str(STEPS), "--save-steps", "3", *map(str, args)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=400,
                            env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((tmp_path / f"{name}.{rank}.json").read_text()) for rank in range(2)]


def expected_stream(address: str, batches: int) -> list[tuple[list[list[int]], list[list[int]]]]:
    """Each rank's first batches read by plain clients, uninterrupted: (the real tokens an SDPA model is given,
    record ids) per batch."""
    out = []
    for rank in range(2):
        with LoaderClient(address, rank=rank, world_size=2, timeout_seconds=60) as client:
            taken = [client.next_batch() for _ in range(batches)]
        inputs = [batch.to_model_inputs("sdpa") for batch in taken]
        out.append(([i["input_ids"][i["attention_mask"].bool()].tolist() for i in inputs],
                    [batch.record_ids.tolist() for batch in taken]))
    return out


def test_trainer_on_two_ranks_trains_on_disjoint_batches_and_resumes_the_same_stream(tmp_path):
    pytest.importorskip("torch", reason="torch is in the test extras (the CPU wheel)")
    pytest.importorskip("accelerate", reason="accelerate (the Trainer's) is in the trainer extra")
    data = make_token_dataset(tmp_path / "data")
    with LoaderProcess(data, "--batch-tokens", BUDGET, "--batch-layout", "flat", "--dynamic-masking",
                       "--masked-lm-prob", 0.3, *vocab_args()) as server:
        first = torchrun(tmp_path, server.address, "run", "--stop-at", 3)
        rest = torchrun(tmp_path, server.address, "run", "--resume")
        expected = expected_stream(server.address, STEPS)

    for rank in range(2):
        assert (first[rank]["rank"], first[rank]["world_size"]) == (rank, 2)  # from torch.distributed
        assert (first[rank]["global_step"], rest[rank]["start_step"], rest[rank]["global_step"]) == (3, 3, STEPS)
        tokens, records = expected[rank]
        # the model was given this rank's batches in the stream's order, none dropped or repeated by accelerate's
        # re-sharding, and the resumed run went on from the checkpoint's batch
        assert first[rank]["inputs"] == tokens[:3], f"rank {rank}: the first run's batches"
        assert rest[rank]["inputs"] == tokens[3:], f"rank {rank}: the resumed run continues the same stream"
        assert first[rank]["records"] + rest[rank]["records"] == records
        assert all(np.isfinite(first[rank]["losses"] + rest[rank]["losses"]))
    seen = [{r for batch in expected[rank][1] for r in batch} for rank in range(2)]
    assert seen[0] and seen[1] and not seen[0] & seen[1], "the ranks' samples are disjoint"
    # the checkpoint holds each rank's loader position beside the Trainer's own state
    checkpoint = tmp_path / "run-out" / "checkpoint-3"
    states = [json.loads((checkpoint / f"loader_state_{rank}.json").read_text()) for rank in range(2)]
    assert [(s["rank"], s["world_size"], s["batch"], s["batch_tokens"], s["layout"]) for s in states] == [
        (0, 2, 3, BUDGET, "flat"), (1, 2, 3, BUDGET, "flat")]
    assert (checkpoint / "trainer_state.json").exists() and (checkpoint / "rng_state_1.pth").exists()
