"""Token-budget batches (``mlm-loader --batch-tokens``): padding waste and serving speed.

Padding waste is computed, not timed: a web-like length distribution
(log-normal token counts, median ~400, mean ~830: FineWeb-like documents;
``web_lengths``), documents longer than the context cut into pieces of at
most the context (what ``--objective tokens --max-seq-length N`` writes), then
packed exactly as the server packs them (loader/packing.py over seeded
windows of ``--pack-window`` samples) and compared with padding every piece
to the fixed context.

Serving speed is timed: ``measure`` starts ``python -m loader --batch-tokens``
on a real ``--objective tokens`` output and one client process
(``python -m bench.token_batches_bench ADDRESS PID RANKS BATCHES``) that
drives RANKS LoaderClients in turn, as RANKS trainer ranks would.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.procs import free_ports, start_module, stop

#: log-normal parameters of document lengths in tokens (median e^6 ~ 403, mean ~ 830)
WEB_MU, WEB_SIGMA = 6.0, 1.2


def web_lengths(documents: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.maximum(1, np.round(rng.lognormal(WEB_MU, WEB_SIGMA, documents))).astype(np.int64)


def web_like_corpus(sources: list[tuple[str, bytes]], path: Path, copies: int, seed: int = 0,
                    max_words: int = 5000) -> Path:
    """A text corpus (blank lines between documents) of the sources' paragraphs, ``copies`` times over, grouped
    into documents of log-normally many words (median ~300), none over ``max_words`` (~6,500 BERT tokens: every
    document fits a batch of 8,192 without the tokens objective's chunking)."""
    paragraphs = [line.strip() for _, data in sources for line in data.decode("utf-8", "replace").splitlines()
                  if line.strip() and not line.startswith("<") and len(line.split()) > 3]
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for _ in range(copies):
            words: list[str] = []
            target = 0
            for paragraph in paragraphs:
                if not target:
                    target = int(min(max_words, max(5, rng.lognormal(np.log(300), 1.2))))
                words += paragraph.split()
                if len(words) >= target:
                    out.write(" ".join(words[:target]) + "\n\n")
                    words, target = [], 0
    return path


def chunked(lengths: np.ndarray, context: int) -> np.ndarray:
    """Each document cut into consecutive pieces of at most ``context`` tokens."""
    full, rest = np.divmod(lengths, context)
    return np.concatenate([np.full(int(full.sum()), context, dtype=np.int64), rest[rest > 0]])


def packed_waste(lengths: np.ndarray, budget: int, layout: str, window: int = 4096, seed: int = 0) -> float:
    """1 - tokens / slots of the server's packing: the samples shuffled, packed window by window."""
    from loader.packing import PACKERS, slots

    order = np.random.default_rng(seed).permutation(len(lengths))
    tokens = used = 0
    for start in range(0, len(order), window):
        here = lengths[order[start:start + window]]
        bins = PACKERS[layout](here, budget)
        tokens += int(here.sum())
        used += slots(here, bins, layout, budget)
    return 1 - tokens / used


def output_lengths(output: Path) -> np.ndarray:
    """Every sample's token count in an ``--output-format parquet`` output, read with pyarrow."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from loader.shards import open_dataset

    _, shards = open_dataset(str(output))
    return np.concatenate([pc.list_value_length(pq.read_table(output / name, columns=["input_ids"])
                                                .column("input_ids")).to_numpy() for name in shards.names])


def fixed_waste(lengths: np.ndarray, context: int) -> float:
    """1 - tokens / slots when every piece is padded to ``context``."""
    return 1 - int(lengths.sum()) / (len(lengths) * context)


def make_output(corpus: Path, work: Path, vocab: str, *extra: str, timeout: float = 900) -> Path:
    """``--objective tokens --output-format parquet`` of ``corpus`` with 2 workers (and ``extra`` flags, e.g.
    ``--max-seq-length``): the loader's input."""
    import subprocess

    work.mkdir(parents=True, exist_ok=True)
    vport, sink_port = free_ports(2)
    result = subprocess.run([sys.executable, "-m", "ventilator", "--data", str(corpus), "--output", str(work / "out"),
                             "--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1",
                             "--state-dir", str(work / "state"), "--vocab-file", vocab, "--objective", "tokens",
                             "--output-format", "parquet", "--task-size", "1M", "--workers", "2", *extra],
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"tokens output: exit status {result.returncode}\n{result.stderr[-3000:]}")
    return work / "out"


@dataclass
class TokenRun:
    wall: float
    batches: int
    tokens: int
    samples: int
    server_cpu: float
    client_cpu: float


def measure(data: Path, work: Path, ranks: int, batches_per_rank: int, vocab: str, budget: int = 8192,
            layout: str = "flat", masked: bool = True, timeout: float = 900) -> TokenRun:
    import subprocess

    work.mkdir(parents=True, exist_ok=True)
    port = free_ports(1)[0]
    args = ["--data", data, "--port", port, "--bind-host", "127.0.0.1", "--batch-tokens", budget, "--batch-layout",
            layout]
    if masked:
        args += ["--dynamic-masking", "--masked-lm-prob", 0.3, "--vocab-file", vocab]
    server = start_module("loader", *args, log=work / "loader.log")
    try:
        result = subprocess.run([sys.executable, "-m", "bench.token_batches_bench", f"127.0.0.1:{port}",
                                 str(server.pid), str(ranks), str(batches_per_rank)], capture_output=True, text=True,
                                timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"token batches bench client failed:\n{result.stderr[-3000:]}")
        return TokenRun(**json.loads(result.stdout.strip().splitlines()[-1]))
    finally:
        stop([server], timeout=0)


def _client(address: str, server_pid: int, ranks: int, batches_per_rank: int) -> None:
    import psutil

    from loader.client import LoaderClient

    clients = [LoaderClient(address, rank=rank, world_size=ranks, prefetch=8, timeout_seconds=600)
               for rank in range(ranks)]
    for client in clients:  # warm-up: the epoch packed, the shards decoded once
        for _ in range(max(1, batches_per_rank // 4)):
            client.next_batch()
    server = psutil.Process(server_pid)

    def server_cpu() -> float:
        times = server.cpu_times()
        return times.user + times.system

    started, cpu, server_started = time.monotonic(), time.process_time(), server_cpu()
    batches = tokens = samples = 0
    for _ in range(batches_per_rank):
        for client in clients:
            batch = client.next_batch()
            batches += 1
            tokens += int(batch.features["input_ids"].size if "cu_seq_lens_q" in batch.features
                          else batch.features["attention_mask"].sum())
            samples += len(batch.record_ids)
    wall, client_cpu, served = time.monotonic() - started, time.process_time() - cpu, server_cpu() - server_started
    for client in clients:
        client.close()
    print(json.dumps({"wall": wall, "batches": batches, "tokens": tokens, "samples": samples, "server_cpu": served,
                      "client_cpu": client_cpu}))


if __name__ == "__main__":
    _client(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
