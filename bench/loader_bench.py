"""The loader service over loopback: one server process, N ranks pulling.

``measure`` starts ``python -m loader`` and one client process
(``python -m bench.loader_bench ADDRESS PID RANKS BATCHES``) that drives
RANKS LoaderClients in turn, as RANKS trainer ranks would, and reports after
a warm-up (every shard decoded once): wall time, batches and bytes received,
its own CPU and the server's CPU over the same interval.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.procs import free_ports, start_module, stop, vm_hwm


@dataclass
class LoaderRun:
    wall: float
    batches: int
    sequences: int
    bytes: int  # feature arrays received (what the trainer gets; record ids and headers not counted)
    server_cpu: float
    client_cpu: float
    server_peak_rss: int = 0  # bytes (VmHWM) at the end


def measure(data: Path, work: Path, ranks: int, batches_per_rank: int, dynamic: bool, vocab: str,
            batch_size: int = 256, timeout: float = 600, server_args: tuple = ()) -> LoaderRun:
    import subprocess

    work.mkdir(parents=True, exist_ok=True)
    port = free_ports(1)[0]
    args = ["--data", data, "--port", port, "--bind-host", "127.0.0.1", "--batch-size", batch_size, *server_args]
    if dynamic:
        args += ["--dynamic-masking", "--vocab-file", vocab]
    log = work / "loader.log"
    server = start_module("loader", *args, log=log)
    client = subprocess.Popen([sys.executable, "-m", "bench.loader_bench", f"127.0.0.1:{port}", str(server.pid),
                               str(ranks), str(batches_per_rank)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        # A server that exits (a refused flag, a crash) leaves the client waiting for ever: watch both.
        deadline = time.monotonic() + timeout
        while client.poll() is None:
            if server.poll() is not None:
                raise RuntimeError(f"the loader server exited ({server.returncode}) before the client was done:\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the loader bench client did not finish in {timeout:.0f} s")
            time.sleep(0.1)
        stdout, stderr = client.communicate()
        if client.returncode != 0:
            raise RuntimeError(f"loader bench client failed:\n{stderr[-3000:]}")
        return LoaderRun(**json.loads(stdout.strip().splitlines()[-1]), server_peak_rss=vm_hwm(server.pid))
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
        stop([server], timeout=0)


def split_output(output: Path, target: Path, parts: int = 3) -> list[Path]:
    """The output as ``parts`` outputs of ~1, 2, 3... sixths of its tasks (manifest lines, files linked, the
    same summary and description): a mixture of the same records as the output, for comparing the loader's
    cost per token with one source and with several on the same data.  Each part holds its own tasks: the
    loader refuses one output given twice."""
    import os
    import shutil

    lines = [line for line in (output / "manifest.jsonl").read_text().splitlines()
             if line.strip() and json.loads(line).get("records")]  # a task that held no text wrote no shard
    if len(lines) < parts:
        raise ValueError(f"{output} has {len(lines)} task(s): too few to split into {parts} outputs")
    weights = list(range(1, parts + 1))
    bounds = [min(max(round(len(lines) * sum(weights[:i]) / sum(weights)), i), len(lines) - parts + i)
              for i in range(parts + 1)]  # every part at least one task
    outputs = []
    for part in range(parts):
        where = target / f"part-{part}"
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        mine = lines[bounds[part]:bounds[part + 1]]
        (where / "manifest.jsonl").write_text("".join(line + "\n" for line in mine))
        for name in ("summary.json", "dataset_info.json", "tokenizer.json"):
            if (output / name).exists():
                shutil.copy(output / name, where / name)
        for line in mine:
            for shard in json.loads(line).get("shards") or []:
                os.link(output / shard["name"], where / shard["name"])
        outputs.append(where)
    return outputs


def _client(address: str, server_pid: int, ranks: int, batches_per_rank: int) -> None:
    import psutil

    from loader.client import LoaderClient

    clients = [LoaderClient(address, rank=rank, world_size=ranks, prefetch=4) for rank in range(ranks)]
    warm_up = max(1, -(-clients[0].info.records // (clients[0].info.batch_size * ranks)))  # one epoch
    for client in clients:
        for _ in range(warm_up):
            client.next_batch()
    server = psutil.Process(server_pid)

    def server_cpu() -> float:
        times = server.cpu_times()
        return times.user + times.system

    started, cpu, server_started = time.monotonic(), time.process_time(), server_cpu()
    batches = sequences = received = 0
    for _ in range(batches_per_rank):
        for client in clients:
            batch = client.next_batch()
            batches += 1
            sequences += len(batch.record_ids)
            received += sum(batch.features[name].nbytes for name in (spec.name for spec in client.info.features))
    wall, client_cpu, served = time.monotonic() - started, time.process_time() - cpu, server_cpu() - server_started
    for client in clients:
        client.close()
    print(json.dumps({"wall": wall, "batches": batches, "sequences": sequences, "bytes": received,
                      "server_cpu": served, "client_cpu": client_cpu}))


if __name__ == "__main__":
    _client(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
